//! Tests of the builtin profiles, user-supplied TOML, validation, FBLayout Eq. 1 and the
//! `fbc targets` summary table.

use fbc_target::{
    builtin, builtin_for_device, builtin_names, builtin_text, builtins, from_toml, is_path,
    resolve, summary_table, ContractionParams, SkinnyParams, StreamingParams, TargetError,
    SKINNY_WIDE_MIN_K,
};

/// A valid profile, as a user would measure and write one.
const MEASURED: &str = r#"
name = "my-phone"
description = "a measured phone"
devices = ["Example GPU"]

[compute]
subgroup_size = 64
simd_width = 64
compute_units = 2
max_work_group_size = 1024
preferred_work_groups = [[64, 4]]
local_mem_bytes = 32768
fp16 = true
peak_f32_gflops = 1000.0

[texture_cache]
line_bytes = 64
block_h = 4
block_w = 16
l1_bytes = 16384
l2_bytes = 1048576

[image]
supported = true
max_width = 16384
max_height = 16384
channels = 4

[memory]
dram_bandwidth_gbps = 50.0
"#;

#[test]
fn every_builtin_loads_and_validates() {
    assert_eq!(builtin_names(), ["adreno", "cpu", "generic", "mali", "nvidia"]);
    for &name in builtin_names() {
        let p = builtin(name).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.name, name);
        assert_eq!(p.validate(), Ok(()));
        assert!(!p.devices.is_empty(), "{name} lists no devices");
        assert_eq!(p.image.channels, 4);
        assert!(p.image.supported);
    }
    assert_eq!(builtins().unwrap().len(), builtin_names().len());
}

#[test]
fn builtin_numbers_from_the_paper_and_drivers() {
    let mali = builtin("mali").unwrap();
    assert_eq!((mali.compute.subgroup_size, mali.compute.simd_width), (32, 16));
    assert_eq!(mali.texture_cache.line_bytes, 64);
    assert_eq!((mali.image.max_width, mali.image.max_height), (65536, 65536));

    let adreno = builtin("adreno").unwrap();
    assert_eq!(adreno.compute.subgroup_size, 64);
    assert_eq!(adreno.texture_cache.line_bytes, 64);
    assert_eq!(adreno.image.max_width, 16384);

    let nvidia = builtin("nvidia").unwrap();
    assert_eq!((nvidia.image.max_width, nvidia.image.max_height), (32768, 32768));
    assert_eq!(nvidia.compute.local_mem_bytes, 48 * 1024);

    let cpu = builtin("cpu").unwrap();
    assert_eq!((cpu.image.max_width, cpu.image.max_height), (8192, 8192));
}

#[test]
fn a_device_finds_the_builtin_profile_that_lists_it() {
    assert_eq!(builtin_for_device("NVIDIA H200"), Some("nvidia"));
    assert_eq!(builtin_for_device("nvidia h100 80gb hbm3"), Some("nvidia"));
    assert_eq!(builtin_for_device("Mali-G715 r0p0"), Some("mali"));
    assert_eq!(builtin_for_device("pthread-skylake-avx512-AMD EPYC"), None);
    assert_eq!(builtin_for_device(""), None);
    assert_eq!(builtin_for_device("  "), None);
    for name in builtin_names() {
        let text = builtin_text(name).expect("embedded");
        assert_eq!(from_toml(text).expect("valid"), builtin(name).expect("valid"));
    }
    assert_eq!(builtin_text("phone"), None);
}

#[test]
fn unknown_target_lists_known_names() {
    let err = builtin("foo").unwrap_err();
    assert!(matches!(err, TargetError::UnknownTarget { ref name } if name == "foo"));
    assert_eq!(
        err.to_string(),
        "unknown target `foo`; known targets: adreno, cpu, generic, mali, nvidia"
    );
}

#[test]
fn user_profile_round_trips() {
    let p = from_toml(MEASURED).unwrap();
    assert_eq!(p.name, "my-phone");
    assert_eq!(p.compute.preferred_work_groups, vec![[64, 4]]);
    assert_eq!(p.texture_cache.l2_bytes, 1 << 20);
}

#[test]
fn broken_toml_is_rejected_with_its_location() {
    let err = from_toml("name = \"x\"\n[compute\nsubgroup_size = 32\n").unwrap_err();
    let TargetError::Parse { line, column, .. } = err else { panic!("{err:?}") };
    assert_eq!((line, column), (2, 9));
    let msg = err.to_string();
    assert!(
        msg.starts_with("cannot parse hardware profile (<string>): line 2, column 9: "),
        "{msg}"
    );
    // A mistyped value deep in the file is placed at the value.
    let text = MEASURED.replace("fp16 = true", "fp16 = 3");
    let err = from_toml(&text).unwrap_err();
    let TargetError::Parse { line, column, .. } = err else { panic!("{err:?}") };
    assert_eq!((line, column), (13, 8), "{err}");
}

#[test]
fn contraction_parameters_default_and_are_validated() {
    // A profile without `[contraction]` gets the defaults; the builtins set theirs.
    let p = from_toml(MEASURED).unwrap();
    assert_eq!(
        p.contraction,
        ContractionParams {
            per_item: [4, 4],
            tile_k: 16,
            stage_along_k: true,
            local_vector: 4,
            prefetch: false,
            vector_loads: true,
            resident_work_items: None
        }
    );
    let set = format!(
        "{MEASURED}\n[contraction]\nper_item = [8, 2]\ntile_k = 32\nstage_along_k = false\n\
         local_vector = 1\nprefetch = true\nvector_loads = false\nresident_work_items = 512\n"
    );
    assert_eq!(
        from_toml(&set).unwrap().contraction,
        ContractionParams {
            per_item: [8, 2],
            tile_k: 32,
            stage_along_k: false,
            local_vector: 1,
            prefetch: true,
            vector_loads: false,
            resident_work_items: Some(512)
        }
    );
    let bad = format!(
        "{MEASURED}\n[contraction]\nper_item = [3, 16]\ntile_k = 128\nlocal_vector = 2\nresident_work_items = 4096\n"
    );
    let TargetError::Invalid { problems, .. } = from_toml(&bad).unwrap_err() else { panic!() };
    let fields: Vec<&str> = problems.iter().map(|p| p.field).collect();
    assert_eq!(
        fields,
        [
            "contraction.per_item",
            "contraction.tile_k",
            "contraction.local_vector",
            "contraction.resident_work_items"
        ]
    );
    assert_eq!(problems[0].message, "[3, 16] must have extents of 1, 2, 4 or 8");
    assert!(problems[3].message.starts_with("4096 must be positive and at most"), "{problems:?}");
    let unknown =
        format!("{MEASURED}\n[contraction]\nper_item = [8, 8]\ntile_k = 16\nvector = 4\n");
    assert!(matches!(from_toml(&unknown).unwrap_err(), TargetError::Parse { .. }));
}

#[test]
fn skinny_parameters_default_and_are_validated() {
    let p = from_toml(MEASURED).unwrap();
    assert_eq!(
        p.skinny,
        SkinnyParams {
            wide_lanes: 32,
            wide_rows: 8,
            groups_per_cu: 2,
            matvec_groups_per_cu: None,
            matvec_min_k: SKINNY_WIDE_MIN_K as u32,
            one_launch_split: false,
            packed_values: 4,
            merge_launches: false,
            norm_prologue: false,
            norm_prologue_pairs: false,
            tail_launches: false,
            chain_launches: false,
            prefetch_trips: 1
        }
    );
    assert_eq!((p.skinny.wide_min_k(1), p.skinny.wide_min_k(8)), (256, SKINNY_WIDE_MIN_K));
    // One field set, the others default; the matrix-vector bound applies to a narrow side of 1.
    let set = format!(
        "{MEASURED}\n[skinny]\nwide_rows = 32\nmatvec_groups_per_cu = 16\nmatvec_min_k = 64\none_launch_split = true\npacked_values = 16\nmerge_launches = true\nnorm_prologue = true\nnorm_prologue_pairs = true\ntail_launches = true\nchain_launches = true\nprefetch_trips = 8\n"
    );
    let s = from_toml(&set).unwrap().skinny;
    assert_eq!(
        s,
        SkinnyParams {
            wide_lanes: 32,
            wide_rows: 32,
            groups_per_cu: 2,
            matvec_groups_per_cu: Some(16),
            matvec_min_k: 64,
            one_launch_split: true,
            packed_values: 16,
            merge_launches: true,
            norm_prologue: true,
            norm_prologue_pairs: true,
            tail_launches: true,
            chain_launches: true,
            prefetch_trips: 8
        }
    );
    assert_eq!((s.wide_min_k(1), s.wide_min_k(2)), (64, SKINNY_WIDE_MIN_K));
    // Matrix-vector products aim at their own work-groups per compute unit, the others at
    // `groups_per_cu`; unset, every product at `groups_per_cu`.
    assert_eq!((s.groups_per_cu(1), s.groups_per_cu(2), p.skinny.groups_per_cu(1)), (16, 2, 2));
    let bad =
        format!("{MEASURED}\n[skinny]\nwide_lanes = 2\nwide_rows = 48\ngroups_per_cu = 0\nmatvec_groups_per_cu = 0\nmatvec_min_k = 0\npacked_values = 2\nprefetch_trips = 17\n");
    let TargetError::Invalid { problems, .. } = from_toml(&bad).unwrap_err() else { panic!() };
    let fields: Vec<&str> = problems.iter().map(|p| p.field).collect();
    assert_eq!(
        fields,
        [
            "skinny.wide_lanes",
            "skinny.wide_rows",
            "skinny.groups_per_cu",
            "skinny.matvec_groups_per_cu",
            "skinny.matvec_min_k",
            "skinny.prefetch_trips",
            "skinny.packed_values"
        ]
    );
    assert_eq!(problems[5].message, "17 must be from 1 to 16");
    assert_eq!(problems[6].message, "2 must be 4, 8 or 16");
    assert_eq!(problems[3].message, "must be at least 1");
    assert_eq!(problems[0].message, "2 must be a power of two from 4 to 32");
    assert_eq!(
        problems[1].message,
        "48 must be a power of two with wide_lanes × wide_rows at most 1024"
    );
    // 8 lanes of 128 rows are a group of 1024; 16 of 128 are too many.
    let rows =
        |l: u32, r: u32| format!("{MEASURED}\n[skinny]\nwide_lanes = {l}\nwide_rows = {r}\n");
    assert_eq!(from_toml(&rows(8, 128)).unwrap().skinny.wide_rows, 128);
    assert!(matches!(from_toml(&rows(16, 128)), Err(TargetError::Invalid { .. })));
}

/// `[streaming]`: every field optional (the transfer rate a quarter of the DRAM bandwidth), left
/// out of a written profile at its defaults, each factor in [0, 1].
#[test]
fn streaming_parameters_default_and_are_validated() {
    let p = from_toml(MEASURED).unwrap();
    assert_eq!(p.streaming, StreamingParams::default());
    assert_eq!(p.transfer_gbps(), 12.5);
    assert!(!p.to_toml().contains("[streaming]"));
    let set = format!("{MEASURED}\n[streaming]\ntransfer_gbps = 8.0\nmixed = 0.0\n");
    let q = from_toml(&set).unwrap();
    assert_eq!((q.transfer_gbps(), q.streaming.mixed, q.streaming.compute_bound), (8.0, 0.0, 0.75));
    assert_eq!(from_toml(&q.to_toml()).unwrap(), q);
    assert_eq!(builtin("nvidia").unwrap().transfer_gbps(), 50.0);
    let bad = format!(
        "{MEASURED}\n[streaming]\ntransfer_gbps = 0.0\ncompute_bound = 1.5\nmemory_bound = -0.25\nmixed = nan\n"
    );
    let TargetError::Invalid { problems, .. } = from_toml(&bad).unwrap_err() else { panic!() };
    let fields: Vec<&str> = problems.iter().map(|p| p.field).collect();
    assert_eq!(
        fields,
        [
            "streaming.transfer_gbps",
            "streaming.compute_bound",
            "streaming.memory_bound",
            "streaming.mixed"
        ]
    );
    assert_eq!(problems[1].message, "1.5 must be in [0, 1]");
}

#[test]
fn a_profile_is_named_by_builtin_name_or_by_path() {
    assert!(!is_path("nvidia") && is_path("my.toml") && is_path("./p/nvidia"));
    assert_eq!(resolve("mali").unwrap(), builtin("mali").unwrap());
    let dir = std::env::temp_dir().join(format!("fbc-target-resolve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("phone.toml");
    std::fs::write(&path, MEASURED).unwrap();
    assert_eq!(resolve(path.to_str().unwrap()).unwrap(), from_toml(MEASURED).unwrap());
    let missing = dir.join("missing.toml");
    assert!(matches!(resolve(missing.to_str().unwrap()), Err(TargetError::Io { .. })));
    assert!(matches!(resolve("phone"), Err(TargetError::UnknownTarget { .. })));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn misspelt_field_is_rejected() {
    let text = MEASURED.replace("subgroup_size", "subgrup_size");
    let msg = from_toml(&text).unwrap_err().to_string();
    assert!(msg.contains("unknown field `subgrup_size`"), "{msg}");
}

#[test]
fn missing_field_is_rejected() {
    let text = MEASURED.replace("l2_bytes = 1048576\n", "");
    let msg = from_toml(&text).unwrap_err().to_string();
    assert!(msg.contains("missing field `l2_bytes`"), "{msg}");
}

#[test]
fn validation_reports_every_problem() {
    let text = MEASURED
        .replace("subgroup_size = 64", "subgroup_size = 48")
        .replace("block_w = 16", "block_w = 12")
        .replace("l2_bytes = 1048576", "l2_bytes = 1024")
        .replace("channels = 4", "channels = 3");
    let err = from_toml(&text).unwrap_err();
    let TargetError::Invalid { name, problems } = &err else { panic!("{err:?}") };
    assert_eq!(name, "my-phone");
    let fields: Vec<&str> = problems.iter().map(|p| p.field).collect();
    assert_eq!(
        fields,
        [
            "compute.subgroup_size",
            "compute.subgroup_size",
            "compute.preferred_work_groups",
            "texture_cache.block_w",
            "texture_cache.l2_bytes",
            "image.channels",
        ]
    );
    assert_eq!(
        err.to_string(),
        "hardware profile `my-phone` is invalid:\n  \
         - compute.subgroup_size: 48 is not a power of two\n  \
         - compute.subgroup_size: 48 is not a multiple of simd_width 64\n  \
         - compute.preferred_work_groups: [64, 4] has 256 work-items, not a multiple of \
         subgroup_size 48\n  \
         - texture_cache.block_w: 12 is not a power of two\n  \
         - texture_cache.l2_bytes: 1024 is smaller than l1_bytes 16384\n  \
         - image.channels: 3 must be 4 (RGBA texels)"
    );
}

#[test]
fn block_must_fit_in_l1() {
    let text = MEASURED.replace("l1_bytes = 16384", "l1_bytes = 512");
    let TargetError::Invalid { problems, .. } = from_toml(&text).unwrap_err() else { panic!() };
    assert_eq!(problems.len(), 1);
    assert_eq!(
        problems[0].to_string(),
        "texture_cache.block_w: a 4x16 block of RGBA float texels (1024 bytes) does not fit in \
         l1_bytes 512"
    );
}

#[test]
fn texel_and_line_geometry() {
    let mali = builtin("mali").unwrap();
    assert_eq!(mali.texel_bytes(4), 16);
    assert_eq!(mali.texel_bytes(2), 8);
    assert_eq!(mali.cache_line_texels(4), 4); // 64 B / 16 B
    assert_eq!(mali.cache_line_texels(2), 8); // 64 B / 8 B
    assert_eq!(mali.cache_line_texels(0), 0);
    let nvidia = builtin("nvidia").unwrap();
    assert_eq!(nvidia.cache_line_texels(4), 8); // 128 B / 16 B
    assert_eq!(mali.width_in_texels(64), 16);
    assert_eq!(mali.width_in_texels(65), 17);
    assert!(mali.is_subgroup_aligned(64));
    assert!(!mali.is_subgroup_aligned(48));
}

#[test]
fn eq1_hand_worked() {
    // 4 x 16-texel blocks (C_h = 4, C_w = 16).
    let p = from_toml(MEASURED).unwrap();
    // A 64 x 64-texel tile: ceil(64/4) * ceil(64/16) = 16 * 4 = 64 blocks.
    assert_eq!(p.n_cache_tiles(64, 64), 64);
    // A 64 x 64-element tile, RGBA along the width, is 64 x 16 texels: 16 * 1 = 16 blocks.
    assert_eq!(p.n_cache_tiles_elems(64, 64), 16);
    // Partial blocks round up: 5 x 17 texels -> 2 * 2 = 4 blocks.
    assert_eq!(p.n_cache_tiles(5, 17), 4);
    // 1 x 1 texel touches one block; an empty tile none.
    assert_eq!(p.n_cache_tiles(1, 1), 1);
    assert_eq!(p.n_cache_tiles(0, 64), 0);
    // A 32 x 128-element tile is 32 x 32 texels: 8 * 2 = 16 blocks.
    assert_eq!(p.n_cache_tiles_elems(32, 128), 16);
    // Same tile on Mali's 4 x 8 blocks: 8 * 4 = 32 blocks.
    assert_eq!(builtin("mali").unwrap().n_cache_tiles_elems(32, 128), 32);
}

#[test]
fn summary_table_snapshot() {
    let table = summary_table(&builtins().unwrap());
    assert_eq!(
        table,
        "\
target   subgroup  max image2d  local mem  L1 tex   line
-------  --------  -----------  ---------  ------  -----
adreno         64  16384x16384     32 KiB  16 KiB   64 B
cpu             8    8192x8192      2 MiB  32 KiB   64 B
generic        32    8192x8192     32 KiB  16 KiB   64 B
mali           32  65536x65536     32 KiB  16 KiB   64 B
nvidia         32  32768x32768     48 KiB  32 KiB  128 B
"
    );
}

#[test]
fn prompt_splits_read_from_a_profile_and_written_back() {
    let p = from_toml(&format!("{MEASURED}\n[attention]\nprompt_splits = 4\n")).unwrap();
    assert_eq!((p.attention.prompt_splits, p.attention.decode_chunk), (4, 64));
    assert!(!p.attention.is_default());
    let back = from_toml(&toml::to_string(&p).unwrap()).unwrap();
    assert_eq!(back.attention, p.attention);
    // Unset: one work-group a query block's keys.
    assert_eq!(from_toml(MEASURED).unwrap().attention.prompt_splits, 1);
    let TargetError::Invalid { problems, .. } =
        from_toml(&format!("{MEASURED}\n[attention]\nprompt_splits = 17\n")).unwrap_err()
    else {
        panic!()
    };
    assert_eq!(problems[0].field, "attention.prompt_splits");
    assert_eq!(problems[0].message, "17 must be from 1 to 16");
}

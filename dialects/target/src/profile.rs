//! The `HardwareProfile` data model and the geometry helpers the layout passes use.
//!
//! A profile mirrors the TOML files in `profiles/`: top-level `name`, `description`, `devices`,
//! then the `[compute]`, `[texture_cache]`, `[image]` and `[memory]` tables, and the optional
//! `[contraction]`, `[skinny]`, `[streaming]` and `[measured]` ones. Unknown fields are rejected
//! so a typo in a measured profile is an error, not a silently ignored default.
//!
//! Units. Sizes are bytes; image and cache-block extents are texels, one texel being one
//! `image2d` element of `channels` (4, RGBA) values; work-group extents are work-items.
//! Tensor tiles are usually given in elements: with RGBA packed along the width, a tile of
//! `tile_w` elements is `ceil(tile_w / 4)` texels wide and its height is unchanged.

use serde::{Deserialize, Serialize};

use crate::measured::Measured;

/// Everything the compiler knows about one target device.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HardwareProfile {
    /// Short lowercase identifier, the name `fbc --target` accepts (`mali`, `adreno`, ...).
    pub name: String,
    /// One-line human description.
    pub description: String,
    /// Example devices this profile stands for.
    pub devices: Vec<String>,
    /// Execution resources.
    pub compute: Compute,
    /// Texture cache geometry (FBLayout Sec. 4.2, C2 and Eq. 1).
    pub texture_cache: TextureCache,
    /// `image2d` limits.
    pub image: ImageLimits,
    /// Off-chip memory.
    pub memory: Memory,
    /// Parameters of the tiled contraction kernel (optional in a profile file: the defaults of
    /// [`ContractionParams`] apply).
    #[serde(default)]
    pub contraction: ContractionParams,
    /// Parameters of the skinny contraction kernel and of split-K's choice for it (optional in
    /// a profile file: the defaults of [`SkinnyParams`] apply).
    #[serde(default)]
    pub skinny: SkinnyParams,
    /// How much weight data a launch can stream in while it runs (`plan-weight-streaming`;
    /// optional in a profile file, and left out when written while at its defaults: the
    /// defaults of [`StreamingParams`] apply).
    #[serde(default, skip_serializing_if = "StreamingParams::is_default")]
    pub streaming: StreamingParams,
    /// Which attention `fuse-attention` fuses where its `max-queries` is not given (optional in
    /// a profile file, and left out when written while at its defaults: the defaults of
    /// [`AttentionParams`] apply).
    #[serde(default, skip_serializing_if = "AttentionParams::is_default")]
    pub attention: AttentionParams,
    /// What `fbc calibrate` measured on a device beyond the numbers above (optional; the
    /// builtin profiles have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<Measured>,
}

fn default_resident_work_items() -> u32 {
    2048
}

/// The narrowest side, in outputs, of a contraction that takes the skinny kernel instead of the
/// tiled one (`fbc_kernels::Skinny`): a product with at most this many rows or columns (LoRA's
/// rank side) is bound by reading its wide operand, and split-K chooses its chunks for that
/// kernel.
pub const SKINNY_SIDE: u64 = 16;

/// The most work-items of a one-work-item-per-point launch that `[skinny] tail_launches` runs
/// at the end of the product before it: sixteen points a work-item in a group of 256.
pub const TAIL_MAX_ITEMS: u64 = 4096;

/// The most floating-point operations of a launch that `[skinny] tail_launches` runs at the
/// end of the product before it, in one work-group (256 work-items of 256 operations): a row's
/// normalisation or a cache update, not a product of its own.
pub const TAIL_MAX_FLOPS: u64 = 1 << 16;

/// The longest reduction (per launch: a split-K chunk's) of a tiled contraction whose buffer
/// output is stored four columns at a time (`fbc_kernels::Contraction::vector_store`). Below it
/// the stores are a large share of the kernel. Measured on an H100 (two alternated rounds of
/// `fbc bench`, this rule's binary against one storing scalars): float4 stores took the SD 1.5
/// attention scores (K = 40, 1 GB written) from 1.241 to 0.677 ms and its GEGLU projection
/// (K = 320) from 0.406 to 0.299 ms; with chunks of K = 512, split-K partials of the Llama
/// step and matmul-fb ran 5-12% slower with them (one, matmul-fb's `reuse` output product,
/// 28% faster).
pub const VECTOR_STORE_MAX_K: u64 = 384;

/// The shortest reduction the skinny kernel takes with its lanes along the wide side (8 rows of
/// lanes striding the reduction, their partials added at the end): a shorter one, a split-K
/// chunk, runs in the tiled kernel. On the H200 (`tests/bench/h200.sh`, part lora, one call,
/// split-k 4, 8 and 16) the weight gradients 2048×512 · 512×8 and 8192×512 · 512×8 took
/// 0.0078-0.0106 and 0.0121-0.0213 ms per partial launch in the tiled kernel against
/// 0.0109-0.0145 and 0.0154-0.0231 ms in the skinny one; unsplit (k = 512) the skinny kernel
/// took 0.0219 and 0.0235 ms against the tiled kernel's 0.0272 and 0.0364.
pub const SKINNY_WIDE_MIN_K: u64 = 256;

/// The tiled contraction kernel's parameters that a profile sets for its device: the analytic
/// defaults the OpenCL writer uses where no tuning says otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ContractionParams {
    /// Register block: the most outputs one work-item computes, `[columns, rows]`, each 1, 2, 4
    /// or 8 (a product narrower than the block along a side takes fewer).
    pub per_item: [u32; 2],
    /// Reduction steps staged in local memory per iteration, a power of two from 1 to 64 (halved
    /// until the stage fits `compute.local_mem_bytes`).
    pub tile_k: u32,
    /// Stage a buffer operand that is contiguous along the reduction (and not along its rows or
    /// columns) with the reduction index fastest over the work-items: coalesced global loads,
    /// into a local tile padded by one element against bank conflicts. Optional: `true`.
    #[serde(default = "yes")]
    pub stage_along_k: bool,
    /// Width of the inner loop's local-memory reads, 1 or 4: with 4, a side whose `per_item` is
    /// a multiple of 4 is read as `float4` (a work-item's outputs then come in groups of 4
    /// consecutive rows or columns). Optional: 4.
    #[serde(default = "four")]
    pub local_vector: u32,
    /// Register prefetch: the next k step's operands are loaded into registers while the
    /// current step computes (see `fbc_kernels::Contraction::prefetch`). Optional: `false`.
    #[serde(default)]
    pub prefetch: bool,
    /// Global loads of a buffer operand four values at a time (one aligned `float4`, as an
    /// image operand reads one RGBA texel) where its offset steps by one along the reduction or
    /// along its rows (columns) over aligned runs of four: a quarter of the load instructions
    /// and their index arithmetic. Optional: `true`.
    #[serde(default = "yes")]
    pub vector_loads: bool,
    /// Work-items of the tiled kernel one compute unit keeps in flight, where its register block
    /// holds it below `compute.resident_work_items`: split-K (`lower-to-memory`) cuts a tiled
    /// product's reduction into the most chunks that keep its work-items within
    /// `compute_units ×` this (at least two, where it splits at all), so that the partial sums
    /// the chunks write and their sum reads stay no more than the device can use. Optional:
    /// `compute.resident_work_items`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resident_work_items: Option<u32>,
}

fn four() -> u32 {
    4
}

/// The skinny contraction kernel's parameters (`fbc_kernels::Skinny`: a product with a side of
/// at most [`SKINNY_SIDE`] outputs) and how far split-K cuts its reduction. Every field is
/// optional in a profile file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SkinnyParams {
    /// Lanes of a row of the kernel whose lanes run along the wide side (neighbouring wide
    /// indices, a texel or a value each): a power of two from 4 to 32. Optional: 32.
    #[serde(default = "thirty_two")]
    pub wide_lanes: u32,
    /// Rows of lanes in a work-group of that kernel (each row striding the reduction): a power
    /// of two, at most 1024 work-items with `wide_lanes`, fewer where the group would pass
    /// `compute.max_work_group_size` or local memory. Optional: 8.
    #[serde(default = "eight")]
    pub wide_rows: u32,
    /// Work-groups per compute unit that split-K aims at for a skinny product: it splits the
    /// reduction into the most chunks (a power of two) that stay within
    /// `groups_per_cu × compute_units` work-groups. Optional: 2.
    #[serde(default = "two")]
    pub groups_per_cu: u32,
    /// [`SkinnyParams::groups_per_cu`] for a matrix-vector product (one output along its
    /// narrow side: a decode step's projections), where a device reading one long weight
    /// wants more work-groups in flight than a LoRA product's few. Optional: `groups_per_cu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matvec_groups_per_cu: Option<u32>,
    /// The shortest reduction (or split-K chunk) a matrix-vector product (one output along its
    /// narrow side: a decode step's projections) runs in the skinny kernel with its lanes along
    /// the wide side; a shorter one takes the tiled kernel, and split-K cuts no shorter chunks.
    /// Optional: [`SKINNY_WIDE_MIN_K`]: on the H200 the tiled kernel read a decode step's
    /// 128-long chunks at 350 GB/s where the skinny kernel read the MLP's at 1.5-2.3 TB/s
    /// (`h200.sh` part decode).
    #[serde(default = "wide_min_k")]
    pub matvec_min_k: u32,
    /// Split-K of a product the skinny kernel computes runs in one launch: the chunks' work-groups
    /// write partial sums, and the last of a block's groups to finish (an `atomic_inc` on a
    /// count, after a global `mem_fence`) adds them in chunk order and stores, instead of a
    /// second launch adding them. It relies on a device making one work-group's fenced global
    /// writes visible to another's later reads within a launch, which OpenCL 1.2 does not
    /// promise: on for devices it was checked on. Optional: false.
    #[serde(default)]
    pub one_launch_split: bool,
    /// Values of a packed (INT8/INT4) weight each lane of a matrix-vector product decodes per
    /// trip, along the wide side: 4, 8 or 16 (one vector read of 4 to 16 bytes). Split-K counts
    /// its work-groups with it. Optional: 4.
    #[serde(default = "four")]
    pub packed_values: u32,
    /// Neighbouring launches of the kernel whose lanes run along the wide side, of one shape, run
    /// as one launch (`fbc_kernels::merge`): independent ones (a decode step's Q, K and V
    /// projections of one row) in work-groups of their own, one whose epilogue reads the
    /// previous one's output at its own point (gate after up) in the same work-groups, after
    /// it. A launch fewer each, for a device where a decode step of small products is bound by
    /// the host's enqueue and the start of every launch. Off where it was not measured to help:
    /// on PoCL (2 cores) a layer's merged launches were up to 10% slower than their parts
    /// (`docs/backends.md`). Optional: false.
    #[serde(default)]
    pub merge_launches: bool,
    /// A normalisation whose every reader is a product with at most
    /// [`SKINNY_SIDE`](crate::SKINNY_SIDE) rows over its normalised axis (a decode step's RMSNorm
    /// before the Q, K and V projections) is computed in those products: each work-group of the
    /// skinny kernel sums the squares of the row itself, and the product's epilogue scales by
    /// the statistic (`lower`'s prologue fusion). A launch fewer per normalisation, for a
    /// device where a small launch costs more than re-reading a row from the cache (on in the
    /// shipped `nvidia` profile, measured there); the CPU back ends would compute the
    /// statistic at every output. Optional: false.
    #[serde(default)]
    pub norm_prologue: bool,
    /// With `norm_prologue`, a normalisation read by a pair of products of which one reads the
    /// other's output (a decode step's up and gate, `SiLU(gate) · up`) moves into both too:
    /// the merged launch runs them in the same work-groups one after the other, each summing
    /// the statistic (split in one launch: in the group that adds a block's chunks). Off, the
    /// normalisation stays a launch of its own. Optional: false.
    #[serde(default)]
    pub norm_prologue_pairs: bool,
    /// A small launch right after a skinny product that splits its reduction in one launch
    /// (`one_launch_split`) runs at that launch's end, in the work-group that finishes it
    /// last (an `atomic_inc` on one more count): one work-group's kernel of the product's
    /// work-group size (a decode step's RMSNorm of the row after the attention's output
    /// projection), or a kernel of one work-item per point of at most
    /// [`TAIL_MAX_ITEMS`](crate::TAIL_MAX_ITEMS) items (the K and V cache updates after the
    /// Q, K and V projections), the group's work-items striding its points; either of at most
    /// [`TAIL_MAX_FLOPS`](crate::TAIL_MAX_FLOPS) operations. A launch fewer each, for the cost
    /// of running it in one work-group after the product's slowest block.
    /// Optional: false.
    #[serde(default)]
    pub tail_launches: bool,
    /// Neighbouring launches of the skinny kernel with one work-group shape run as one
    /// launch, in turn (a decode step's attention output projection, up-gate, down and the
    /// next layer's Q, K and V projections): each work-group takes a ticket as it starts (an
    /// `atomic_inc`), the first tickets run the first launch's work-groups, the next the
    /// second's after every work-group of the first has counted itself done, and so on. A
    /// work-group waits only for work-groups that took a ticket before it, so for ones that
    /// have started (the order in which work-groups start is not the one of their indices,
    /// and need not be). A launch fewer per member after the first, its work-groups
    /// starting while the one before drains, for a device where a small launch costs more
    /// than its work. Off in the shipped `nvidia` profile: on a lent H100 the 16-layer
    /// decode step took 2.552-2.556 ms with it against 2.475-2.489 ms without (see the
    /// profile's comment). Optional: false.
    #[serde(default)]
    pub chain_launches: bool,
    /// The kernel whose lanes run along the reduction (a LoRA `x · A`, `dY · Bᵀ`) issues the
    /// reads of up to this many trips together, before the first of their barriers (the wide
    /// operand's values into registers, and the narrow values each work-item stages), so that
    /// a group keeps several trips' bytes in flight instead of waiting on one trip's reads
    /// between barriers (`fbc_kernels::Skinny::prefetch`; at most 16). 1 reads each trip at
    /// that trip. Optional: 1.
    #[serde(default = "one")]
    pub prefetch_trips: u32,
}

fn one() -> u32 {
    1
}

fn eight() -> u32 {
    8
}

fn thirty_two() -> u32 {
    32
}

fn two() -> u32 {
    2
}

fn wide_min_k() -> u32 {
    SKINNY_WIDE_MIN_K as u32
}

impl Default for SkinnyParams {
    fn default() -> SkinnyParams {
        SkinnyParams {
            wide_lanes: thirty_two(),
            wide_rows: eight(),
            groups_per_cu: two(),
            matvec_groups_per_cu: None,
            matvec_min_k: wide_min_k(),
            one_launch_split: false,
            packed_values: four(),
            merge_launches: false,
            norm_prologue: false,
            norm_prologue_pairs: false,
            tail_launches: false,
            chain_launches: false,
            prefetch_trips: one(),
        }
    }
}

impl SkinnyParams {
    /// The work-groups per compute unit split-K aims at for a product whose narrow side has
    /// `narrow` outputs.
    pub fn groups_per_cu(&self, narrow: u64) -> u64 {
        match self.matvec_groups_per_cu {
            Some(g) if narrow == 1 => u64::from(g),
            _ => u64::from(self.groups_per_cu),
        }
    }

    /// The shortest reduction the lanes-along-the-wide-side kernel takes for a product whose
    /// narrow side has `narrow` outputs.
    pub fn wide_min_k(&self, narrow: u64) -> u64 {
        if narrow == 1 {
            u64::from(self.matvec_min_k)
        } else {
            SKINNY_WIDE_MIN_K
        }
    }
}

fn yes() -> bool {
    true
}

/// The load capacity of a launch (the seed FlashMem's `C_ℓ`: bytes a launch can take in while it
/// runs without slowing down) for `plan-weight-streaming`: a launch of estimated duration `T`
/// (the longer of its FLOPs at `compute.peak_f32_gflops` and its operands' bytes at
/// `memory.dram_bandwidth_gbps`) of class `c` takes `T × transfer_gbps × factor(c)` bytes.
/// The class comes from the launch's arithmetic intensity against the device's ridge point
/// (FlashMem's Table 5): compute-bound (reusable operators: matmul, high tolerance),
/// memory-bound (elemental operators: moderate), mixed (hierarchical operators, softmax and
/// norms, and launches near the ridge: little room). Every field is optional in a profile file;
/// the factors are assumed, not measured, until a calibration measures them.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StreamingParams {
    /// Bandwidth of the copy that brings a weight onto the device while kernels run, in GB/s
    /// (10^9 bytes per second): host to device over PCIe for a discrete GPU, unified memory to
    /// texture memory on a mobile one. Optional: a quarter of `memory.dram_bandwidth_gbps`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_gbps: Option<f64>,
    /// Fraction of `T × transfer_gbps` a compute-bound launch takes. Optional: 0.75.
    #[serde(default = "compute_bound_factor")]
    pub compute_bound: f64,
    /// Fraction of `T × transfer_gbps` a memory-bound launch takes. Optional: 0.25.
    #[serde(default = "memory_bound_factor")]
    pub memory_bound: f64,
    /// Fraction of `T × transfer_gbps` a mixed launch takes. Optional: 0.1.
    #[serde(default = "mixed_factor")]
    pub mixed: f64,
}

fn compute_bound_factor() -> f64 {
    0.75
}

fn memory_bound_factor() -> f64 {
    0.25
}

fn mixed_factor() -> f64 {
    0.1
}

impl Default for StreamingParams {
    fn default() -> StreamingParams {
        StreamingParams {
            transfer_gbps: None,
            compute_bound: compute_bound_factor(),
            memory_bound: memory_bound_factor(),
            mixed: mixed_factor(),
        }
    }
}

impl StreamingParams {
    /// Whether every field has its default (the table is then left out of a written profile).
    pub fn is_default(&self) -> bool {
        *self == StreamingParams::default()
    }
}

/// The `[attention]` table: how far `fuse-attention` fuses by default, and how the OpenCL
/// flash-decoding kernel cuts a few queries' keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionParams {
    /// Fuse causal attention of any length (a decoder's prompt, not only a decode step's few
    /// queries) into the OpenCL query-block kernel where `fuse-attention` is not given
    /// `max-queries`. Optional: false.
    #[serde(default)]
    pub fuse_prompts: bool,
    /// Keys of a chunk of the flash-decoding kernel (a decode step's attention): one
    /// work-group per query point and chunk, so shorter chunks give a decode step more
    /// work-groups and each fewer keys, and the last group of a query point more partials to
    /// combine. A power of two from 8 to 128. Optional: 64 (on the H200, chunks of 128 took
    /// 25 µs a launch where only one chunk per head had keys).
    #[serde(default = "sixty_four")]
    pub decode_chunk: u32,
    /// The query-block kernel (a prompt's attention) gives each query block this many
    /// work-groups (runs of whole key tiles), each run at most this fraction of the tiles of
    /// the longest block (the keys the last query sees, causal without a window; else all
    /// the keys): a block with fewer tiles (a causal prompt's first blocks) uses fewer
    /// runs, one where they fit, and the last of a block's runs to finish combines their
    /// partial outputs, maxima and sums (in run order) in the same launch. The causal
    /// prompt's last blocks, which see every key, then take no longer than its first. At
    /// most 16. Optional: 1 (a block's keys in one work-group).
    #[serde(default = "one")]
    pub prompt_splits: u32,
}

fn sixty_four() -> u32 {
    64
}

impl Default for AttentionParams {
    fn default() -> AttentionParams {
        AttentionParams { fuse_prompts: false, decode_chunk: sixty_four(), prompt_splits: one() }
    }
}

impl AttentionParams {
    /// Whether every field has its default (the table is then left out of a written profile).
    pub fn is_default(&self) -> bool {
        *self == AttentionParams::default()
    }
}

impl Default for ContractionParams {
    fn default() -> ContractionParams {
        ContractionParams {
            per_item: [4, 4],
            tile_k: 16,
            stage_along_k: true,
            local_vector: 4,
            prefetch: false,
            vector_loads: true,
            resident_work_items: None,
        }
    }
}

/// Execution resources of a device.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Compute {
    /// Work-items per subgroup (warp / wave), the granularity FBLayout's C1 aligns tile
    /// dimensions to. May be a multiple of `simd_width` (the FBLayout paper profiles Mali at 32
    /// while its hardware warps are 16 wide).
    pub subgroup_size: u32,
    /// Work-items the hardware executes in lock-step (hardware warp width), in work-items.
    pub simd_width: u32,
    /// Compute units (shader cores, SMs, slices) of a typical part.
    pub compute_units: u32,
    /// Work-items one compute unit keeps in flight (its occupancy limit): a launch with fewer
    /// than `compute_units × resident_work_items` leaves the device partly idle (split-K fills it).
    /// Optional in a profile file: 2048 (an NVIDIA Hopper SM's resident threads) when absent.
    #[serde(default = "default_resident_work_items")]
    pub resident_work_items: u32,
    /// Largest work-group, in work-items (`CL_DEVICE_MAX_WORK_GROUP_SIZE`).
    pub max_work_group_size: u32,
    /// Preferred 2D work-group shapes, best first, each `[x, y]` in work-items.
    pub preferred_work_groups: Vec<[u32; 2]>,
    /// Local (work-group shared) memory, in bytes (`CL_DEVICE_LOCAL_MEM_SIZE`).
    pub local_mem_bytes: u64,
    /// Whether `half` arithmetic is available to kernels (`cl_khr_fp16`).
    pub fp16: bool,
    /// Peak single-precision throughput, in GFLOP/s (an FMA counts 2), for the analytic model.
    pub peak_f32_gflops: f64,
    /// Plain kernels (a work-item per point) compute four consecutive values of their last
    /// dimension a work-item where the output and every input reading it run along aligned
    /// quads: one `vload4` an input, one `vstore4` (split-K sums, elementwise launches into
    /// buffers). For a device whose work-items are SIMT lanes, where one four-byte load a lane
    /// leaves memory idle; off where the OpenCL compiler packs work-items into vectors itself
    /// (PoCL on this project's CPU: a Llama step's eleven such launches took 9.7-9.8 ms
    /// four-wide against 5.1-5.2 ms, `fbc bench --profile generic -O2`, alternated twice).
    /// Optional: false.
    #[serde(default)]
    pub four_wide_items: bool,
}

/// Texture cache geometry: FBLayout fetches texture data in `block_h x block_w` texel blocks
/// (the paper's `C_h x C_w`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TextureCache {
    /// Cache line, in bytes.
    pub line_bytes: u32,
    /// Height `C_h` of a cache block, in texels (rows).
    pub block_h: u32,
    /// Width `C_w` of a cache block, in texels.
    pub block_w: u32,
    /// L1 texture cache per compute unit, in bytes.
    pub l1_bytes: u64,
    /// L2 cache shared by all compute units, in bytes.
    pub l2_bytes: u64,
}

impl TextureCache {
    /// FBLayout Eq. 1: the number of `block_h x block_w` cache blocks a tile of
    /// `tile_h x tile_w` **texels** spans, `ceil(tile_h / C_h) * ceil(tile_w / C_w)`, for a tile
    /// aligned to the block grid. An empty tile spans none.
    pub fn n_cache_tiles(&self, tile_h: u64, tile_w: u64) -> u64 {
        tile_h.div_ceil(u64::from(self.block_h).max(1))
            * tile_w.div_ceil(u64::from(self.block_w).max(1))
    }
}

/// `image2d` limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ImageLimits {
    /// Whether the device supports images at all (`CL_DEVICE_IMAGE_SUPPORT`).
    pub supported: bool,
    /// Largest `image2d` width, in texels (`CL_DEVICE_IMAGE2D_MAX_WIDTH`).
    pub max_width: u32,
    /// Largest `image2d` height, in texels (`CL_DEVICE_IMAGE2D_MAX_HEIGHT`).
    pub max_height: u32,
    /// Values per texel; fbc uses `CL_RGBA`, so always 4.
    pub channels: u32,
}

/// Off-chip memory.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    /// Peak DRAM bandwidth, in GB/s (10^9 bytes per second).
    pub dram_bandwidth_gbps: f64,
}

impl HardwareProfile {
    /// Bytes of one texel holding `channels` elements of `elem_bytes` bytes each
    /// (16 for RGBA `float`, 8 for RGBA `half`).
    pub fn texel_bytes(&self, elem_bytes: u32) -> u32 {
        self.image.channels * elem_bytes
    }

    /// Whole texels of `elem_bytes`-byte elements in one cache line (4 for RGBA `float` in a
    /// 64-byte line). Zero when `elem_bytes` is zero.
    pub fn cache_line_texels(&self, elem_bytes: u32) -> u32 {
        self.texture_cache.line_bytes.checked_div(self.texel_bytes(elem_bytes)).unwrap_or(0)
    }

    /// Texels spanned by `width_elems` elements packed `channels` to a texel along the width.
    pub fn width_in_texels(&self, width_elems: u64) -> u64 {
        width_elems.div_ceil(u64::from(self.image.channels).max(1))
    }

    /// FBLayout Eq. 1 for a tile of `tile_h x tile_w` **texels**; see
    /// [`TextureCache::n_cache_tiles`].
    pub fn n_cache_tiles(&self, tile_h: u64, tile_w: u64) -> u64 {
        self.texture_cache.n_cache_tiles(tile_h, tile_w)
    }

    /// FBLayout Eq. 1 for a tile of `tile_h x tile_w` **elements**, RGBA packed along the width:
    /// the tile is `tile_h` texels high and `ceil(tile_w / 4)` texels wide.
    pub fn n_cache_tiles_elems(&self, tile_h: u64, tile_w: u64) -> u64 {
        self.n_cache_tiles(tile_h, self.width_in_texels(tile_w))
    }

    /// The transfer bandwidth weight streaming assumes, in GB/s: `streaming.transfer_gbps`, else a
    /// quarter of the DRAM bandwidth.
    pub fn transfer_gbps(&self) -> f64 {
        self.streaming.transfer_gbps.unwrap_or(self.memory.dram_bandwidth_gbps / 4.0)
    }

    /// FBLayout C1: whether `n` work-items (or a tile dimension) is a whole number of subgroups.
    pub fn is_subgroup_aligned(&self, n: u64) -> bool {
        let sg = u64::from(self.compute.subgroup_size);
        sg != 0 && n % sg == 0
    }
}

//! The launch manifest: what the OpenCL runtime does to run one function of a lowered module.
//!
//! One JSON document per module (`NAME.manifest.json` next to `NAME.cl`). Per function: the
//! storage table (every buffer and image with its size and the `plan-memory` slot) and the ordered
//! steps — `alloc`, `fill` (zeros, only where an allocation may be read before it is fully
//! written), `upload` (a tensor argument packed into storage by its layout), `copy` (the snapshot
//! of an output that its launch also reads), `launch` (kernel, storage arguments, global and local
//! sizes), `download` (storage unpacked into a result tensor), `dealloc` — in the order of the
//! function's memory ops, which is the schedule.

use fbc_dialects::layout::{Intra, Layout, Pack, RTile, Storage as TexStorage};
use serde::{Deserialize, Serialize};

/// Version of the manifest format; the runtime refuses other versions. Version 1 was the
/// tensor-level manifest (one buffer per tensor value); version 2 had no `fault_id` on launches
/// (kernels did not check accesses when they ran); version 3 had no `fill` and `copy` steps;
/// version 4 had no `constants` (uploads read arguments only); version 5 had no `parts` on
/// launches (a launch recorded at most one fault id).
pub const MANIFEST_VERSION: u32 = 6;

/// Element type of storage and tensors: `f32`, `i32` or `i8` (packed weights, one byte an
/// element); storage may also be `f16` (an image of `CL_HALF_FLOAT` texels holding an `f32`
/// tensor rounded to `f16`: the runtime converts at upload and download).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    F32,
    I32,
    F16,
    I8,
}

/// Buffer or image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum StorageKind {
    /// `elems` elements, linear.
    Buffer,
    /// `width × height` RGBA texels of `dtype` (`4·width·height` elements).
    Image2d { width: u64, height: u64 },
}

/// One storage object of a function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageDesc {
    pub id: usize,
    /// The IR value's name (`q` for `%q`), or `sN`.
    pub name: String,
    #[serde(flatten)]
    pub kind: StorageKind,
    pub dtype: Dtype,
    /// Elements (`4·W·H` for an image).
    pub elems: u64,
    pub bytes: u64,
    /// The `plan-memory` slot of its `memory.alloc` or `memory.upload`; `None` for storage
    /// outside any slot (unplanned, or an upload the plan keeps on its own).
    pub slot: Option<u64>,
}

/// How a tensor is placed in storage: the layout attribute, as data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutDesc {
    /// The attribute as it prints (`#layout.linear`, `#layout.rtile<...>`).
    pub text: String,
    /// `"linear"` or `"rtile"`.
    pub kind: String,
    /// R-Tile parameters (absent for linear).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tile: Option<[u64; 2]>,
    /// `[bh, bw]` for `intra = "block"`, absent for `"rows"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<[u64; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub horizontal: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pad: Option<[u64; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<[u64; 2]>,
    /// `"image2d"` or `"buffer"` (R-Tile texel storage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
    /// `"c"` for an R-Tile whose texels pack axis rank-3 (NC4HW4); absent for `"w"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pack: Option<String>,
}

impl LayoutDesc {
    /// The description of a layout.
    pub fn of(layout: &Layout) -> LayoutDesc {
        let text = layout.to_attr().to_string();
        match layout {
            Layout::Linear => LayoutDesc {
                text,
                kind: "linear".into(),
                tile: None,
                block: None,
                horizontal: None,
                pad: None,
                image: None,
                storage: None,
                pack: None,
            },
            Layout::RTile(r) => LayoutDesc {
                text,
                kind: "rtile".into(),
                tile: Some(r.tile),
                block: match r.intra {
                    Intra::Rows => None,
                    Intra::Block { bh, bw } => Some([bh, bw]),
                },
                horizontal: Some(r.horizontal),
                pad: Some(r.pad),
                image: r.image,
                storage: Some(r.storage.name().into()),
                pack: r.pack.recorded(),
            },
        }
    }

    /// The layout it describes.
    pub fn layout(&self) -> Result<Layout, String> {
        match self.kind.as_str() {
            "linear" => Ok(Layout::Linear),
            "rtile" => {
                let tile = self.tile.ok_or("rtile layout without `tile`")?;
                let storage = match self.storage.as_deref() {
                    None | Some("image2d") => TexStorage::Image2d,
                    Some("buffer") => TexStorage::Buffer,
                    Some(o) => return Err(format!("unknown rtile storage `{o}`")),
                };
                Ok(Layout::RTile(RTile {
                    tile,
                    intra: match self.block {
                        None => Intra::Rows,
                        Some([bh, bw]) => Intra::Block { bh, bw },
                    },
                    horizontal: self.horizontal.ok_or("rtile layout without `horizontal`")?,
                    pack: Pack::from_record(self.pack.as_deref()).ok_or_else(|| {
                        format!("unknown rtile packing `{}`", self.pack.as_deref().unwrap_or(""))
                    })?,
                    pad: self.pad.unwrap_or([0, 0]),
                    image: self.image,
                    storage,
                }))
            }
            o => Err(format!("unknown layout kind `{o}`")),
        }
    }
}

/// One step of a function, in execution order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Step {
    /// Create storage `storage` (its contents are undefined until written: a `fill` follows
    /// where they may be read before every element is written).
    Alloc { storage: usize },
    /// Set every element of `storage` to 0: a fresh `memory.alloc` is zero-filled, and this
    /// allocation may be read before it is fully written (`fbc_dialects::memory::init`).
    Fill { storage: usize },
    /// Copy storage `from` into `to` (same type): the snapshot of a launch's output that its
    /// reads of that output see (the contents before the launch).
    Copy { from: usize, to: usize },
    /// Pack argument `arg` (a tensor of `shape`) by `layout` into `storage` (padding zero). From
    /// `args.len()` on, `arg` names constant `arg - args.len()` of the function (`constants`):
    /// the runtime passes a function's constants after its arguments.
    ///
    /// `stream_from`: the weight-streaming plan (`plan-weight-streaming`'s `stream_from` on the
    /// `memory.upload`): the upload is made while launch `stream_from` (counting the function's
    /// launches from 0) runs, on a second queue, rather than here; absent, it is made here.
    ///
    /// `rows = [start, count]` (the `memory.upload`'s `rows`): only rows `start..start+count`
    /// of the argument (axis 0) are packed; `shape` is then that row tile's.
    Upload {
        arg: usize,
        storage: usize,
        shape: Vec<u64>,
        dtype: Dtype,
        layout: LayoutDesc,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream_from: Option<usize>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rows: Option<[u64; 2]>,
    },
    /// Run kernel `kernel` on the storage `args` (inputs, then the output).
    Launch(Launch),
    /// Unpack `storage` by `layout` into result `result`, a tensor of `shape`.
    Download { storage: usize, result: usize, shape: Vec<u64>, dtype: Dtype, layout: LayoutDesc },
    /// Release `storage`.
    Dealloc { storage: usize },
}

/// One kernel launch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    pub kernel: String,
    /// The tensor-level op(s) it computes (`tensor.matmul+tensor.add`; `layout.convert` marks a
    /// conversion kernel).
    pub source: String,
    /// `file:line:col` of the `memory.launch` op (or `unknown`).
    pub location: String,
    /// Storage ids in the kernel's parameter order (inputs, then the output).
    pub args: Vec<usize>,
    pub global: Vec<u64>,
    /// `None` lets the OpenCL implementation choose.
    pub local: Option<Vec<u64>>,
    /// Floating-point operations of one run (domain points × scalar ops).
    pub flops: u64,
    /// Bytes of the distinct storage objects it reads and writes.
    pub bytes: u64,
    /// Whether the kernel is the tiled contraction (else the plain one).
    pub tiled: bool,
    /// Whether the kernel is the skinny contraction (a product with a narrow side).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skinny: bool,
    /// A tiled contraction's shape class (`tuning::shape_key`), the key of `fbc tune`'s
    /// database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<String>,
    /// Present when the kernel checks accesses the compiler could not prove in range (a
    /// data-dependent `xK[e]` load): it then takes the run's error buffer
    /// (`FAULT_INTS` ints, zero-filled once per run) as one more, last, argument, and a failed
    /// check records this id (non-zero, unique in the module) there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_id: Option<u32>,
    /// The kernels merged into this launch (`[skinny] merge_launches`, `tail_launches`), in order; empty
    /// for a launch of one kernel. A part's failed check records its own fault id (the launch's
    /// `fault_id` is then the first checked part's, and says the launch takes the error
    /// buffer), and its operands are `args[first_arg..]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<LaunchPart>,
}

impl Launch {
    /// The storage the launch writes as its output: its last operand, or the last of each
    /// merged part's.
    pub fn outputs(&self) -> Vec<usize> {
        if self.parts.is_empty() {
            return self.args.last().copied().into_iter().collect();
        }
        let ends = self.parts.iter().skip(1).map(|p| p.first_arg).chain([self.args.len()]);
        self.parts
            .iter()
            .zip(ends)
            .filter(|(p, end)| *end > p.first_arg)
            .filter_map(|(_, end)| self.args.get(end - 1).copied())
            .collect()
    }
}

/// One kernel of a merged launch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchPart {
    /// The kernel it was (its name before the merge).
    pub kernel: String,
    /// The fault id its checks record, where it checks accesses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_id: Option<u32>,
    /// Where its operands start in the launch's `args`.
    pub first_arg: usize,
    /// The op it runs (`FILE:LINE:COL`), where that is not the launch's `location` (a tail
    /// run after a product: `[skinny] tail_launches`); a fault it records is reported there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
}

/// A tensor argument or result of a function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorDesc {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
}

/// A dense constant a function uploads: its elements, little-endian `dtype` values, row-major.
/// The JSON manifest names it; the elements travel beside it (`fbc -o DIR` writes them to
/// `DIR/NAME.constants.safetensors` under `FUNCTION/NAME`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConstantDesc {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    /// The elements' bytes (not in the JSON document).
    #[serde(skip)]
    pub data: std::sync::Arc<[u8]>,
}

/// What the runtime needs to run one function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionManifest {
    pub name: String,
    pub args: Vec<TensorDesc>,
    /// Dense `tensor.constant`s the function uploads, in order of their upload.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constants: Vec<ConstantDesc>,
    pub results: Vec<TensorDesc>,
    pub storage: Vec<StorageDesc>,
    pub steps: Vec<Step>,
    /// Peak bytes of live storage over the schedule (allocs and uploads until their dealloc or
    /// the end).
    pub peak_bytes: u64,
}

/// One upload of an argument (a [`Step::Upload`] of [`FunctionManifest::uploads_of`]).
#[derive(Debug, Clone, Copy)]
pub struct ArgUpload<'a> {
    pub storage: usize,
    pub shape: &'a [u64],
    pub layout: &'a LayoutDesc,
    /// The launch the weight-streaming plan starts it at (`None`: before the first launch).
    pub stream_from: Option<usize>,
    /// The row tile it holds (`[start, count]` of axis 0; `None`: the whole argument).
    pub rows: Option<[u64; 2]>,
}

impl FunctionManifest {
    /// The uploads of argument `arg`, in step order (one for each form the function reads it
    /// in).
    pub fn uploads_of(&self, arg: usize) -> impl Iterator<Item = ArgUpload<'_>> {
        self.steps.iter().filter_map(move |s| match s {
            Step::Upload { arg: a, storage, shape, layout, stream_from, rows, .. } if *a == arg => {
                Some(ArgUpload {
                    storage: *storage,
                    shape,
                    layout,
                    stream_from: *stream_from,
                    rows: *rows,
                })
            }
            _ => None,
        })
    }

    /// Bytes of storage a runtime holds that gives each `plan-memory` slot one object at the
    /// largest size its tenants (allocations and uploads) take, and all other storage its own:
    /// the figure `plan-memory` plans for, next to [`FunctionManifest::peak_bytes`], the lower
    /// bound of any plan (what is live at once).
    pub fn planned_bytes(&self) -> u64 {
        let mut slots: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
        let mut own = 0u64;
        for s in &self.steps {
            let (Step::Alloc { storage } | Step::Upload { storage, .. }) = s else { continue };
            let Some(d) = self.storage.get(*storage) else { continue };
            match d.slot {
                Some(k) => {
                    let b = slots.entry(k).or_default();
                    *b = (*b).max(d.bytes);
                }
                None => own = own.saturating_add(d.bytes),
            }
        }
        slots.values().fold(own, |a, &b| a.saturating_add(b))
    }

    /// The launches, in order.
    pub fn launches(&self) -> impl Iterator<Item = &Launch> {
        self.steps.iter().filter_map(|s| match s {
            Step::Launch(l) => Some(l),
            _ => None,
        })
    }
}

/// The launch manifest of one module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub version: u32,
    pub module: String,
    /// The `.fbir` file the module was parsed from, if known.
    pub source: Option<String>,
    pub functions: Vec<FunctionManifest>,
}

impl Manifest {
    /// The manifest of function `name` (with or without `@`).
    pub fn function(&self, name: &str) -> Option<&FunctionManifest> {
        let name = name.strip_prefix('@').unwrap_or(name);
        self.functions.iter().find(|f| f.name == name)
    }

    /// Pretty JSON, newline-terminated.
    pub fn to_json(&self) -> String {
        // Serialising plain structs of strings and integers cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// Reads a manifest, checking its version.
    pub fn from_json(text: &str) -> Result<Manifest, String> {
        let m: Manifest = serde_json::from_str(text).map_err(|e| format!("manifest: {e}"))?;
        if m.version != MANIFEST_VERSION {
            return Err(format!(
                "manifest version {} (this fbc reads version {MANIFEST_VERSION})",
                m.version
            ));
        }
        Ok(m)
    }
}

//! Typed op kinds: one enum per dialect with a variant per op, and [`OpKind`] over all of them.
//!
//! Passes, the lowering, the interpreter and the cost model match on these instead of comparing
//! op names, and they match exhaustively: a new op is a new variant, and every consumer that has
//! to say what the op means stops compiling until it does. The name of each variant's op is
//! written once, here; the unit tests check that the enums and the op tables (`OPS` of every
//! dialect and of the IR core's `func` ops) list the same ops.
//!
//! ```
//! use fbc_dialects::kind::{OpKind, TensorOp};
//! assert_eq!(TensorOp::from_name("tensor.silu"), Some(TensorOp::Silu));
//! assert_eq!(TensorOp::Silu.name(), "tensor.silu");
//! assert_eq!(OpKind::from_name("layout.remap").map(OpKind::name), Some("layout.remap"));
//! ```

use fbc_ir::{OpData, OpDef};

macro_rules! op_kinds {
    ($(#[$meta:meta])* $ty:ident in $kind:ident { $($variant:ident = $name:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $ty {
            $(#[doc = concat!("`", $name, "`")] $variant,)*
        }

        impl $ty {
            /// Every op of the dialect, in declaration order.
            pub const ALL: &'static [$ty] = &[$($ty::$variant,)*];

            /// The op's name (`dialect.op`).
            pub const fn name(self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)*
                }
            }

            /// The kind of the op called `name`, if it is one of this dialect's.
            pub fn from_name(name: &str) -> Option<$ty> {
                match name {
                    $($name => Some($ty::$variant),)*
                    _ => None,
                }
            }

            /// The kind of an op definition.
            pub fn of(def: &OpDef) -> Option<$ty> {
                match OpKind::of(def)? {
                    OpKind::$kind(k) => Some(k),
                    _ => None,
                }
            }

            /// The kind of an op.
            pub fn of_op(op: &OpData) -> Option<$ty> {
                $ty::of(op.def)
            }

            /// Whether `op` is this kind of op.
            pub fn is(self, op: &OpData) -> bool {
                op.name() == self.name()
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

op_kinds! {
    /// The IR core's `func` ops.
    FuncOp in Func {
        Return = "func.return",
        Call = "func.call",
    }
}

op_kinds! {
    /// The `tensor` dialect's ops ([`crate::tensor`]).
    TensorOp in Tensor {
        Constant = "tensor.constant",
        Add = "tensor.add",
        Sub = "tensor.sub",
        Mul = "tensor.mul",
        Div = "tensor.div",
        Max = "tensor.max",
        Min = "tensor.min",
        Pow = "tensor.pow",
        Select = "tensor.select",
        Cast = "tensor.cast",
        Neg = "tensor.neg",
        Exp = "tensor.exp",
        Log = "tensor.log",
        Sqrt = "tensor.sqrt",
        Rsqrt = "tensor.rsqrt",
        Tanh = "tensor.tanh",
        Sigmoid = "tensor.sigmoid",
        Erf = "tensor.erf",
        Relu = "tensor.relu",
        Silu = "tensor.silu",
        Gelu = "tensor.gelu",
        Scale = "tensor.scale",
        Matmul = "tensor.matmul",
        ReduceSum = "tensor.reduce_sum",
        ReduceMean = "tensor.reduce_mean",
        ReduceMax = "tensor.reduce_max",
        Softmax = "tensor.softmax",
        Layernorm = "tensor.layernorm",
        Rmsnorm = "tensor.rmsnorm",
        Rope = "tensor.rope",
        Embedding = "tensor.embedding",
        CrossEntropy = "tensor.cross_entropy",
        CausalMask = "tensor.causal_mask",
        Attention = "tensor.attention",
        Conv2d = "tensor.conv2d",
        Conv2dGradInput = "tensor.conv2d_grad_input",
        Conv2dGradWeight = "tensor.conv2d_grad_weight",
        GroupNorm = "tensor.group_norm",
        GroupNormGrad = "tensor.group_norm_grad",
        Upsample = "tensor.upsample",
        Dequantize = "tensor.dequantize",
        Reshape = "tensor.reshape",
        Transpose = "tensor.transpose",
        Broadcast = "tensor.broadcast",
        Slice = "tensor.slice",
        Concat = "tensor.concat",
        UpdateSlice = "tensor.update_slice",
        SoftmaxGrad = "tensor.softmax_grad",
        LayernormGrad = "tensor.layernorm_grad",
        RmsnormGrad = "tensor.rmsnorm_grad",
        GeluGrad = "tensor.gelu_grad",
        SiluGrad = "tensor.silu_grad",
        SigmoidGrad = "tensor.sigmoid_grad",
        TanhGrad = "tensor.tanh_grad",
        ReluGrad = "tensor.relu_grad",
        RopeGrad = "tensor.rope_grad",
        CrossEntropyGrad = "tensor.cross_entropy_grad",
        EmbeddingGrad = "tensor.embedding_grad",
        Unbroadcast = "tensor.unbroadcast",
        SliceGrad = "tensor.slice_grad",
        Ge = "tensor.ge",
    }
}

/// Groups of tensor ops, as patterns: `match t { fbc_dialects::tensor_reductions!() => ... }`.
/// A consumer that matches exhaustively names every op once, by group or alone; an op added to a
/// group is then handled as its group is, and an op in no group makes every such match fail to
/// compile until it is named.
#[macro_export]
macro_rules! tensor_elementwise_binary {
    () => {
        $crate::kind::TensorOp::Add
            | $crate::kind::TensorOp::Sub
            | $crate::kind::TensorOp::Mul
            | $crate::kind::TensorOp::Div
            | $crate::kind::TensorOp::Max
            | $crate::kind::TensorOp::Min
            | $crate::kind::TensorOp::Pow
    };
}

/// The unary math ops (`scale`, which has a factor, is not one of them).
#[macro_export]
macro_rules! tensor_elementwise_unary {
    () => {
        $crate::kind::TensorOp::Neg
            | $crate::kind::TensorOp::Exp
            | $crate::kind::TensorOp::Log
            | $crate::kind::TensorOp::Sqrt
            | $crate::kind::TensorOp::Rsqrt
            | $crate::kind::TensorOp::Tanh
            | $crate::kind::TensorOp::Sigmoid
            | $crate::kind::TensorOp::Relu
            | $crate::kind::TensorOp::Silu
            | $crate::kind::TensorOp::Gelu
            | $crate::kind::TensorOp::Erf
    };
}

/// `reduce_sum`, `reduce_mean`, `reduce_max`.
#[macro_export]
macro_rules! tensor_reductions {
    () => {
        $crate::kind::TensorOp::ReduceSum
            | $crate::kind::TensorOp::ReduceMean
            | $crate::kind::TensorOp::ReduceMax
    };
}

/// Pure data movement: `reshape`, `transpose`, `broadcast`, `slice`, `concat`.
#[macro_export]
macro_rules! tensor_data_movement {
    () => {
        $crate::kind::TensorOp::Reshape
            | $crate::kind::TensorOp::Transpose
            | $crate::kind::TensorOp::Broadcast
            | $crate::kind::TensorOp::Slice
            | $crate::kind::TensorOp::Concat
    };
}

/// The vector-Jacobian products of elementwise ops (`f'(x) · dy`, pointwise).
#[macro_export]
macro_rules! tensor_elementwise_vjps {
    () => {
        $crate::kind::TensorOp::GeluGrad
            | $crate::kind::TensorOp::SiluGrad
            | $crate::kind::TensorOp::SigmoidGrad
            | $crate::kind::TensorOp::TanhGrad
            | $crate::kind::TensorOp::ReluGrad
    };
}

/// Every vector-Jacobian product autodiff builds (the `*_grad` kernels but `slice_grad`, which
/// is data movement with an adjoint of its own).
#[macro_export]
macro_rules! tensor_vjps {
    () => {
        $crate::tensor_elementwise_vjps!()
            | $crate::kind::TensorOp::SoftmaxGrad
            | $crate::kind::TensorOp::LayernormGrad
            | $crate::kind::TensorOp::RmsnormGrad
            | $crate::kind::TensorOp::RopeGrad
            | $crate::kind::TensorOp::CrossEntropyGrad
            | $crate::kind::TensorOp::EmbeddingGrad
            | $crate::kind::TensorOp::Conv2dGradInput
            | $crate::kind::TensorOp::Conv2dGradWeight
            | $crate::kind::TensorOp::GroupNormGrad
    };
}

op_kinds! {
    /// The `layout` dialect's ops ([`crate::layout`]).
    LayoutOp in Layout {
        Assign = "layout.assign",
        Convert = "layout.convert",
        Remap = "layout.remap",
    }
}

op_kinds! {
    /// The `memory` dialect's ops ([`crate::memory`]).
    MemoryOp in Memory {
        Alloc = "memory.alloc",
        Dealloc = "memory.dealloc",
        Upload = "memory.upload",
        Download = "memory.download",
        Launch = "memory.launch",
    }
}

/// The kind of any op fbc defines, by dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    Func(FuncOp),
    Tensor(TensorOp),
    Layout(LayoutOp),
    Memory(MemoryOp),
}

/// The kinds of the op definitions of [`crate::registry`], by address: every op of a module
/// points at one of these statics, so its kind is one hash lookup rather than a comparison
/// with each name.
fn by_address() -> &'static rustc_hash::FxHashMap<usize, OpKind> {
    static TABLE: std::sync::OnceLock<rustc_hash::FxHashMap<usize, OpKind>> =
        std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        crate::registry()
            .iter()
            .filter_map(|d| Some((d as *const OpDef as usize, OpKind::from_name(d.name)?)))
            .collect()
    })
}

impl OpKind {
    /// The kind of the op called `name`; `None` for an op no dialect of fbc defines (one a
    /// plugin registered).
    pub fn from_name(name: &str) -> Option<OpKind> {
        let (dialect, _) = name.split_once('.')?;
        match dialect {
            "func" => FuncOp::from_name(name).map(OpKind::Func),
            "tensor" => TensorOp::from_name(name).map(OpKind::Tensor),
            "layout" => LayoutOp::from_name(name).map(OpKind::Layout),
            "memory" => MemoryOp::from_name(name).map(OpKind::Memory),
            _ => None,
        }
    }

    /// The kind of an op definition: by its address for fbc's own definitions, else by its
    /// name (a definition a plugin built).
    pub fn of(def: &OpDef) -> Option<OpKind> {
        match by_address().get(&(def as *const OpDef as usize)) {
            Some(&k) => Some(k),
            None => OpKind::from_name(def.name),
        }
    }

    /// The kind of an op.
    pub fn of_op(op: &OpData) -> Option<OpKind> {
        OpKind::from_name(op.name())
    }

    /// The op's name.
    pub const fn name(self) -> &'static str {
        match self {
            OpKind::Func(k) => k.name(),
            OpKind::Tensor(k) => k.name(),
            OpKind::Layout(k) => k.name(),
            OpKind::Memory(k) => k.name(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each op table and its enum list the same ops.
    fn same(defs: impl Iterator<Item = &'static OpDef>, kinds: impl Iterator<Item = &'static str>) {
        let mut a: Vec<&str> = defs.map(|d| d.name).collect();
        let mut b: Vec<&str> = kinds.collect();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b, "the op table and the kind enum differ");
    }

    #[test]
    fn every_op_table_has_exactly_its_kinds() {
        same(fbc_ir::func::OPS.iter(), FuncOp::ALL.iter().map(|k| k.name()));
        same(crate::tensor::ops(), TensorOp::ALL.iter().map(|k| k.name()));
        same(crate::layout::ops(), LayoutOp::ALL.iter().map(|k| k.name()));
        same(crate::memory::ops(), MemoryOp::ALL.iter().map(|k| k.name()));
    }

    /// Which group an op is in (each op in at most one of the leaf groups).
    fn group(t: TensorOp) -> &'static str {
        match t {
            crate::tensor_elementwise_binary!() => "binary",
            crate::tensor_elementwise_unary!() => "unary",
            crate::tensor_reductions!() => "reduction",
            crate::tensor_data_movement!() => "movement",
            crate::tensor_vjps!() => "vjp",
            _ => "",
        }
    }

    #[test]
    fn groups_hold_the_ops_their_names_say() {
        let of = |g: &str| TensorOp::ALL.iter().filter(|&&t| group(t) == g).count();
        assert_eq!(
            [of("binary"), of("unary"), of("reduction"), of("movement"), of("vjp")],
            [7, 11, 3, 5, 14]
        );
        assert!(matches!(TensorOp::GeluGrad, crate::tensor_elementwise_vjps!()));
        assert_eq!(group(TensorOp::SliceGrad), "");
        assert_eq!(group(TensorOp::Scale), "");
    }

    #[test]
    fn names_round_trip_and_unknown_names_have_no_kind() {
        for d in crate::registry().iter() {
            let k = OpKind::of(d).unwrap_or_else(|| panic!("{} has no kind", d.name));
            assert_eq!(k.name(), d.name);
        }
        for k in TensorOp::ALL {
            assert_eq!(TensorOp::from_name(k.name()), Some(*k));
        }
        assert_eq!(OpKind::from_name("tensor.nope"), None);
        assert_eq!(OpKind::from_name("plugin.scale"), None);
        assert_eq!(OpKind::from_name("tensor"), None);
        assert_eq!(TensorOp::from_name("layout.remap"), None);
    }
}

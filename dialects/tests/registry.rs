//! The registry holds every op of the spec's table plus the backward helpers, each documented,
//! pure, and with the FBLayout class the paper (or its two criteria) gives.

use fbc_ir::FbClass::{self, FtdC, FtdD, FtiC, FtiD};

/// Every tensor op and its expected class (`None`: no class).
const EXPECTED: &[(&str, Option<FbClass>)] = &[
    ("tensor.constant", None),
    ("tensor.add", Some(FtiC)),
    ("tensor.sub", Some(FtiC)),
    ("tensor.mul", Some(FtdC)),
    ("tensor.div", Some(FtdC)),
    ("tensor.max", Some(FtdC)),
    ("tensor.min", Some(FtdC)),
    ("tensor.neg", Some(FtiC)),
    ("tensor.exp", Some(FtdC)),
    ("tensor.log", Some(FtdC)),
    ("tensor.sqrt", Some(FtdC)),
    ("tensor.rsqrt", Some(FtdC)),
    ("tensor.tanh", Some(FtdC)),
    ("tensor.sigmoid", Some(FtdC)),
    ("tensor.relu", Some(FtdC)),
    ("tensor.silu", Some(FtdC)),
    ("tensor.gelu", Some(FtdC)),
    ("tensor.scale", Some(FtiC)),
    ("tensor.matmul", Some(FtdD)),
    ("tensor.reduce_sum", Some(FtiD)),
    ("tensor.reduce_max", Some(FtdD)),
    ("tensor.reduce_mean", Some(FtiD)),
    ("tensor.softmax", Some(FtdC)),
    ("tensor.layernorm", Some(FtdD)),
    ("tensor.rmsnorm", Some(FtdD)),
    ("tensor.rope", Some(FtiC)),
    ("tensor.reshape", Some(FtiD)),
    ("tensor.transpose", Some(FtiD)),
    ("tensor.broadcast", Some(FtiD)),
    ("tensor.slice", Some(FtiD)),
    ("tensor.concat", Some(FtiD)),
    ("tensor.update_slice", Some(FtiD)),
    ("tensor.embedding", Some(FtdD)),
    ("tensor.cross_entropy", Some(FtdC)),
    ("tensor.causal_mask", Some(FtiC)),
    ("tensor.attention", Some(FtdD)),
    // Paper Table 1 lists Conv2D, BatchNorm and LayerNorm as FTD-D; group norm is a norm like them.
    ("tensor.conv2d", Some(FtdD)),
    ("tensor.conv2d_grad_input", Some(FtdD)),
    ("tensor.conv2d_grad_weight", Some(FtdD)),
    ("tensor.group_norm", Some(FtdD)),
    ("tensor.group_norm_grad", Some(FtdD)),
    ("tensor.upsample", Some(FtiD)),
    ("tensor.dequantize", Some(FtiC)),
    ("tensor.softmax_grad", Some(FtdC)),
    ("tensor.layernorm_grad", Some(FtdD)),
    ("tensor.rmsnorm_grad", Some(FtdD)),
    ("tensor.gelu_grad", Some(FtdC)),
    ("tensor.silu_grad", Some(FtdC)),
    ("tensor.sigmoid_grad", Some(FtdC)),
    ("tensor.tanh_grad", Some(FtdC)),
    ("tensor.relu_grad", Some(FtdC)),
    ("tensor.rope_grad", Some(FtiC)),
    ("tensor.cross_entropy_grad", Some(FtdC)),
    ("tensor.embedding_grad", Some(FtdD)),
    ("tensor.unbroadcast", Some(FtiD)),
    ("tensor.slice_grad", Some(FtiD)),
    ("tensor.ge", Some(FtdC)),
    ("tensor.pow", Some(FtdC)),
    ("tensor.select", Some(FtdC)),
    ("tensor.erf", Some(FtdC)),
    ("tensor.cast", Some(FtiC)),
];

#[test]
fn every_op_is_registered_with_its_class() {
    let reg = fbc_dialects::registry();
    for &(name, class) in EXPECTED {
        let def = reg.get(name).unwrap_or_else(|| panic!("{name} is not registered"));
        assert_eq!(def.class, class, "class of {name}");
        assert!(def.traits.pure, "{name} is pure");
        assert!(!def.traits.terminator);
    }
    let tensor_ops: Vec<&str> =
        reg.iter().filter(|d| d.dialect() == "tensor").map(|d| d.name).collect();
    assert_eq!(tensor_ops.len(), EXPECTED.len(), "{tensor_ops:?}");
    assert_eq!(fbc_dialects::tensor::ops().count(), EXPECTED.len());
    // The IR core's ops are still there.
    for name in ["func.return", "func.call"] {
        assert!(reg.get(name).is_some());
    }
    assert_eq!(reg.dialects(), ["func", "layout", "memory", "tensor"]);
}

#[test]
fn every_op_is_documented() {
    for def in fbc_dialects::tensor::ops() {
        assert!(!def.summary.is_empty() && !def.summary.contains('\n'), "summary of {}", def.name);
        assert!(def.doc.contains("**Verifier:**"), "doc of {} lists its rules", def.name);
        assert!(def.doc.contains("**FBLayout class:**"), "doc of {} justifies its class", def.name);
        if let Some(c) = def.class {
            assert!(def.doc.contains(c.name()), "doc of {} names {c}", def.name);
        }
        for a in def.attrs {
            assert!(!a.doc.is_empty(), "attribute {} of {}", a.name, def.name);
            assert!(
                def.doc.contains(&format!("`{}`", a.name)),
                "doc of {} mentions `{}`",
                def.name,
                a.name
            );
        }
    }
}

#[test]
fn traits() {
    let reg = fbc_dialects::registry();
    for name in ["tensor.add", "tensor.mul", "tensor.max", "tensor.min"] {
        assert!(reg.expect(name).traits.commutative, "{name}");
    }
    for name in ["tensor.sub", "tensor.div", "tensor.ge", "tensor.matmul"] {
        assert!(!reg.expect(name).traits.commutative, "{name}");
    }
    for name in ["tensor.exp", "tensor.scale", "tensor.gelu", "tensor.relu_grad", "tensor.ge"] {
        assert!(reg.expect(name).traits.elementwise, "{name}");
    }
    for name in
        ["tensor.matmul", "tensor.softmax", "tensor.rope", "tensor.reshape", "tensor.constant"]
    {
        assert!(!reg.expect(name).traits.elementwise, "{name}");
    }
}

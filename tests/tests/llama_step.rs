//! A generated one-layer Llama training graph, checked end to end: the gradients `autodiff`
//! builds for the LoRA parameters of the whole layer (embedding, RMSNorm, RoPE, GQA attention with
//! a causal mask, gated MLP, tied head, cross-entropy) agree with central finite differences of
//! the loss, computed by the interpreter in f64.

use fbc_ir::Module;
use fbc_runtime::interp::{random_inputs, Interpreter, Mode, Value};

/// `fbc gen llama3.2-1b --layers 1 --seq 4 --vocab 32 --lora-rank 2 --training`.
fn generate() -> Module {
    let opts = fbc_models::Options {
        layers: Some(1),
        seq: Some(4),
        vocab: Some(32),
        lora_rank: Some(2),
        training: true,
        ..Default::default()
    };
    fbc_models::build("llama3.2-1b", &opts).unwrap_or_else(|e| panic!("{e}"))
}

fn to_f64(v: &Value) -> Value {
    match v {
        Value::F32(t) => Value::F64(t.cast::<f64>()),
        other => other.clone(),
    }
}

fn scalar(v: &Value) -> f64 {
    v.as_f64().expect("f64 mode").data()[0]
}

#[test]
fn lora_gradients_of_a_llama_layer_match_finite_differences() {
    let m = generate();
    let grad = m.find_func("loss_grad").expect("autodiff added @loss_grad");
    let loss = m.find_func("loss").unwrap();
    // `@loss_grad` returns the loss, then `%d_<argument>` for each trainable argument.
    let ret = *m.func(grad).body.last().unwrap();
    let grads: Vec<String> = m
        .op(ret)
        .operands
        .iter()
        .skip(1)
        .map(|&v| m.value(v).name.as_deref().unwrap().to_string())
        .collect();
    let arg_names: Vec<String> = m
        .func(loss)
        .args
        .iter()
        .map(|&a| m.value(a).name.as_deref().unwrap().to_string())
        .collect();
    assert!(grads.len() >= 6, "LoRA on Q, K, V and the MLP: {grads:?}");

    let inputs: Vec<Value> = random_inputs(&m, "loss", 11).unwrap().iter().map(to_f64).collect();
    let interp = Interpreter::new(&m).mode(Mode::F64);
    let out = interp.run("loss_grad", inputs.clone()).unwrap();
    let l0 = scalar(&interp.run("loss", inputs.clone()).unwrap()[0]);
    assert!((scalar(&out[0]) - l0).abs() <= 1e-9 * l0.abs(), "loss_grad's loss is the loss");

    // First, middle and last trainable parameter; in each, the entry with the largest gradient.
    for k in [0, grads.len() / 2, grads.len() - 1] {
        let arg = grads[k].strip_prefix("d_").expect("gradients are named d_<argument>");
        let i = arg_names.iter().position(|n| n == arg).expect("a trainable argument");
        let g = out[1 + k].as_f64().unwrap();
        let (j, &gj) =
            g.data().iter().enumerate().max_by(|a, b| a.1.abs().total_cmp(&b.1.abs())).unwrap();
        assert!(gj != 0.0, "{arg}: all-zero gradient");
        // Random weights make the loss strongly curved: a small step keeps the O(h²) error of
        // central differences below the tolerance; f64 keeps the rounding error far below it.
        let h = 1e-6;
        let at = |delta: f64| {
            let mut x = inputs.clone();
            if let Value::F64(t) = &mut x[i] {
                t.data_mut()[j] += delta;
            }
            scalar(&interp.run("loss", x).unwrap()[0])
        };
        let fd = (at(h) - at(-h)) / (2.0 * h);
        let err = (fd - gj).abs() / gj.abs().max(1e-12);
        assert!(
            err < 1e-4,
            "{arg}[{j}]: autodiff {gj:e}, finite differences {fd:e}, rel err {err:e}"
        );
    }
}

//! Property tests: broadcasting and matmul inference agree with naive reference implementations,
//! and no op's verifier panics on any operand types or attribute values.

use fbc_ir::{Attr, ElemType, FuncId, Module, Op, OpError, OpView, Type};
use proptest::prelude::*;

fn registry() -> &'static fbc_ir::OpRegistry {
    static R: std::sync::OnceLock<fbc_ir::OpRegistry> = std::sync::OnceLock::new();
    R.get_or_init(fbc_dialects::registry)
}

/// Runs `name`'s infer function as the builder does (no op in the module yet).
fn infer(name: &str, operands: &[Type], attrs: &[(String, Attr)]) -> Result<Vec<Type>, OpError> {
    let m = Module::new(None);
    let view =
        OpView { module: &m, op: Op(u32::MAX), operand_types: operands, attrs, func: FuncId(0) };
    (registry().expect(name).infer)(&view)
}

fn f32(shape: &[u64]) -> Type {
    Type::tensor(shape.to_vec(), ElemType::F32)
}

/// NumPy broadcasting, written the textbook way: reverse, pad with ones, compare, reverse.
fn reference_broadcast(a: &[u64], b: &[u64]) -> Option<Vec<u64>> {
    let n = a.len().max(b.len());
    let mut out = Vec::new();
    for i in 0..n {
        let x = if i < a.len() { a[a.len() - 1 - i] } else { 1 };
        let y = if i < b.len() { b[b.len() - 1 - i] } else { 1 };
        out.push(match (x, y) {
            _ if x == y => x,
            (1, _) => y,
            (_, 1) => x,
            _ => return None,
        });
    }
    out.reverse();
    Some(out)
}

/// A shape derived from `base`: some leading dimensions dropped, some dimensions set to 1, and
/// occasionally one dimension replaced by an arbitrary size.
fn derived(base: Vec<u64>) -> impl Strategy<Value = Vec<u64>> {
    let n = base.len();
    (0..=n, proptest::collection::vec(0u8..8, n), 0..n.max(1) * 4, 0u64..5).prop_map(
        move |(drop, ones, which, size)| {
            let mut s: Vec<u64> =
                base.iter().zip(&ones).map(|(&d, &o)| if o == 0 { 1 } else { d }).collect();
            if which < n {
                s[which] = size;
            }
            s.split_off(drop.min(n))
        },
    )
}

fn shape_pair() -> impl Strategy<Value = (Vec<u64>, Vec<u64>)> {
    proptest::collection::vec(0u64..5, 0..5)
        .prop_flat_map(|base| (derived(base.clone()), derived(base)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn binary_broadcast_matches_reference((a, b) in shape_pair()) {
        let got = infer("tensor.add", &[f32(&a), f32(&b)], &[]);
        match reference_broadcast(&a, &b) {
            Some(want) => prop_assert_eq!(got.unwrap(), vec![f32(&want)]),
            None => {
                let e = got.unwrap_err();
                prop_assert!(e.message.starts_with(&format!(
                    "cannot broadcast {} with {}: dimension ", f32(&a), f32(&b)
                )), "{}", e.message);
            }
        }
        // Commutative in shape.
        let ab = infer("tensor.mul", &[f32(&a), f32(&b)], &[]).ok();
        let ba = infer("tensor.mul", &[f32(&b), f32(&a)], &[]).ok();
        prop_assert_eq!(ab, ba);
    }

    #[test]
    fn broadcast_op_matches_reference((x, target) in shape_pair()) {
        let attrs = vec![("shape".to_string(), Attr::ints(target.iter().map(|&d| d as i64)))];
        let got = infer("tensor.broadcast", &[f32(&x)], &attrs);
        let ok = x.len() <= target.len() && reference_broadcast(&x, &target).as_deref() == Some(&target[..]);
        if ok {
            prop_assert_eq!(got.unwrap(), vec![f32(&target)]);
        } else {
            prop_assert!(got.is_err());
        }
        // unbroadcast is its inverse on shapes.
        let attrs = vec![("shape".to_string(), Attr::ints(x.iter().map(|&d| d as i64)))];
        let back = infer("tensor.unbroadcast", &[f32(&target)], &attrs);
        prop_assert_eq!(back.ok(), ok.then(|| vec![f32(&x)]));
    }

    #[test]
    fn matmul_matches_reference(
        (ba, bb) in shape_pair(),
        m in 0u64..4, n in 0u64..4, ka in 0u64..4, kb in 0u64..4,
        same_k in any::<bool>(), ta in any::<bool>(), tb in any::<bool>(),
    ) {
        let kb = if same_k { ka } else { kb };
        let mut a = ba.clone();
        a.extend(if ta { [ka, m] } else { [m, ka] });
        let mut b = bb.clone();
        b.extend(if tb { [n, kb] } else { [kb, n] });
        let attrs = vec![
            ("transpose_a".to_string(), Attr::Bool(ta)),
            ("transpose_b".to_string(), Attr::Bool(tb)),
        ];
        let got = infer("tensor.matmul", &[f32(&a), f32(&b)], &attrs);
        let want = if ka == kb {
            reference_broadcast(&ba, &bb).map(|mut s| { s.extend([m, n]); s })
        } else {
            None
        };
        match want {
            Some(w) => prop_assert_eq!(got.unwrap(), vec![f32(&w)]),
            None => {
                let e = got.unwrap_err();
                if ka != kb {
                    prop_assert_eq!(e.message, format!(
                        "expected {ka}, found {kb} — the contraction dimension of tensor.matmul"
                    ));
                } else {
                    prop_assert!(e.message.starts_with("cannot broadcast the batch dimensions"));
                }
            }
        }
    }
}

// ----- robustness: no verifier panics -----

fn any_int() -> impl Strategy<Value = i64> {
    prop_oneof![
        -3i64..6,
        Just(i64::MIN),
        Just(i64::MAX),
        Just(i64::MIN + 1),
        Just(1i64 << 32),
        any::<i64>(),
    ]
}

fn any_attr() -> impl Strategy<Value = Attr> {
    prop_oneof![
        4 => any_int().prop_map(Attr::Int),
        4 => proptest::collection::vec(any_int(), 0..6).prop_map(Attr::ints),
        1 => prop_oneof![Just(f64::NAN), Just(f64::INFINITY), Just(-1.0), Just(1e-5), any::<f64>()]
            .prop_map(Attr::Float),
        1 => any::<bool>().prop_map(Attr::Bool),
        1 => prop_oneof![Just("none"), Just("tanh"), Just("f16"), Just("i32"), Just("")]
            .prop_map(|s| Attr::Str(s.to_string())),
        1 => Just(Attr::Array(vec![Attr::Float(1.0)])),
        1 => Just(Attr::Unit),
    ]
}

fn any_dim() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 0u64..5, 1 => Just(1u64 << 32), 1 => Just(u64::MAX), 1 => any::<u64>()]
}

fn any_type() -> impl Strategy<Value = Type> {
    let elem = prop_oneof![
        Just(ElemType::F32),
        Just(ElemType::F16),
        Just(ElemType::I32),
        Just(ElemType::I64),
    ];
    prop_oneof![
        8 => (proptest::collection::vec(any_dim(), 0..5), elem.clone())
            .prop_map(|(s, e)| Type::tensor(s, e)),
        1 => elem.prop_map(Type::Scalar),
    ]
}

const ATTR_NAMES: [&str; 15] = [
    "axis",
    "axes",
    "keepdim",
    "eps",
    "shape",
    "perm",
    "start",
    "end",
    "value",
    "dtype",
    "factor",
    "approximate",
    "transpose_a",
    "vocab",
    "bogus",
];

fn any_attrs() -> impl Strategy<Value = Vec<(String, Attr)>> {
    proptest::collection::vec((proptest::sample::select(&ATTR_NAMES[..]), any_attr()), 0..5)
        .prop_map(|v| {
            let mut out: Vec<(String, Attr)> = Vec::new();
            for (k, a) in v {
                if !out.iter().any(|(n, _)| n == k) {
                    out.push((k.to_string(), a));
                }
            }
            out.sort_by(|a, b| a.0.cmp(&b.0));
            out
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn no_verifier_panics(
        operands in proptest::collection::vec(any_type(), 0..4),
        attrs in any_attrs(),
        results in proptest::collection::vec(any_type(), 0..4),
    ) {
        for def in fbc_dialects::tensor::ops() {
            // Building: the infer function alone.
            let inferred = infer(def.name, &operands, &attrs);
            // Verifying: an op in a module, with its result types either inferred or arbitrary.
            let mut m = Module::new(None);
            let f = m.add_func("f", operands.clone(), vec![]);
            let args = m.func(f).args.clone();
            let result_types = match inferred {
                Ok(t) if results.is_empty() => t,
                _ => results.clone(),
            };
            m.append_op(f, def, &args, attrs.clone(), result_types, Default::default());
            m.append_op(f, registry().expect("func.return"), &[], vec![], vec![], Default::default());
            let _ = fbc_ir::verify_module(&m);
        }
    }
}

#[test]
fn extreme_values_do_not_panic() {
    let big = Attr::ints([i64::MIN, i64::MAX, -1, 0]);
    let types = [
        f32(&[u64::MAX, 2]),
        f32(&[]),
        f32(&[0, 3]),
        Type::tensor(vec![1u64 << 40, 1 << 40], ElemType::I32),
    ];
    for def in fbc_dialects::tensor::ops() {
        for n in 0..4 {
            for attr in ["axis", "axes", "shape", "perm", "start", "end", "vocab"] {
                for v in [big.clone(), Attr::Int(i64::MIN), Attr::ints([]), Attr::Int(i64::MAX)] {
                    let ops: Vec<Type> = types.iter().cycle().take(n).cloned().collect();
                    let _ = infer(def.name, &ops, &[(attr.to_string(), v)]);
                }
            }
        }
    }
}

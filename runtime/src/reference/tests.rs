//! Cross-kernel tests: every backward helper against central finite differences of its forward
//! kernel in `f64` (random seeded data over proptest-chosen shapes), matmul identities, and
//! no-panic fuzzing of the forward kernels on arbitrary shapes, axes and ids.

use proptest::prelude::*;

use super::testing::{check_grad, dot, Rng};
use super::*;

/// Small random shapes: rank 1 to 3, extents 1 to 4.
fn small_shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..5, 1..4)
}

/// An axis of `rank` from a selector, negative for half of the selectors.
fn pick_axis(sel: usize, rank: usize) -> i64 {
    let a = (sel % rank) as i64;
    if sel / rank % 2 == 1 {
        a - rank as i64
    } else {
        a
    }
}

/// Which axes of `rank` a bit mask selects, as a mix of positive and negative axes.
fn pick_axes(bits: u8, rank: usize) -> Vec<i64> {
    (0..rank)
        .filter(|k| bits >> k & 1 == 1)
        .map(|k| if k % 2 == 0 { k as i64 } else { k as i64 - rank as i64 })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn softmax_grad_matches_finite_differences(
        shape in small_shape(), sel in 0usize..8, seed: u64,
    ) {
        let mut rng = Rng::new(seed);
        let axis = pick_axis(sel, shape.len());
        let x = rng.tensor(&shape, -2.0, 2.0);
        let w = rng.tensor(&shape, -1.0, 1.0);
        let dx = softmax_grad(&softmax(&x, axis).unwrap(), &w, axis).unwrap();
        check_grad("softmax", &x, &dx, |x| dot(&softmax(x, axis).unwrap(), &w));
    }

    #[test]
    fn layernorm_grad_matches_finite_differences(
        shape in small_shape(), sel in 0usize..8, seed: u64,
    ) {
        let mut rng = Rng::new(seed);
        let axis = pick_axis(sel, shape.len());
        let len = shape[normalize_axis("t", axis, shape.len()).unwrap()];
        let x = rng.tensor(&shape, -2.0, 2.0);
        let gamma = rng.tensor(&[len], 0.5, 1.5);
        let beta = rng.tensor(&[len], -1.0, 1.0);
        let w = rng.tensor(&shape, -1.0, 1.0);
        let eps = 1e-5;
        let (dx, dgamma, dbeta) = layernorm_grad(&x, &gamma, &w, axis, eps).unwrap();
        let loss = |x: &Tensor<f64>, g: &Tensor<f64>, b: &Tensor<f64>| {
            dot(&layernorm(x, g, b, axis, eps).unwrap(), &w)
        };
        check_grad("layernorm dx", &x, &dx, |x| loss(x, &gamma, &beta));
        check_grad("layernorm dgamma", &gamma, &dgamma, |g| loss(&x, g, &beta));
        check_grad("layernorm dbeta", &beta, &dbeta, |b| loss(&x, &gamma, b));
    }

    #[test]
    fn rmsnorm_grad_matches_finite_differences(shape in small_shape(), seed: u64) {
        let mut rng = Rng::new(seed);
        let len = *shape.last().unwrap();
        let x = rng.tensor(&shape, -2.0, 2.0);
        let gamma = rng.tensor(&[len], 0.5, 1.5);
        let w = rng.tensor(&shape, -1.0, 1.0);
        let eps = 1e-6;
        let (dx, dgamma) = rmsnorm_grad(&x, &gamma, &w, eps).unwrap();
        check_grad("rmsnorm dx", &x, &dx, |x| dot(&rmsnorm(x, &gamma, eps).unwrap(), &w));
        check_grad("rmsnorm dgamma", &gamma, &dgamma, |g| dot(&rmsnorm(&x, g, eps).unwrap(), &w));
    }

    #[test]
    fn activation_grads_match_finite_differences(shape in small_shape(), seed: u64) {
        let mut rng = Rng::new(seed);
        let x = rng.tensor(&shape, -3.0, 3.0);
        let w = rng.tensor(&shape, -1.0, 1.0);
        for approx in [GeluApproximation::None, GeluApproximation::Tanh] {
            let dx = gelu_grad(&x, &w, approx).unwrap();
            check_grad("gelu", &x, &dx, |x| dot(&gelu(x, approx), &w));
        }
        check_grad("silu", &x, &silu_grad(&x, &w).unwrap(), |x| dot(&silu(x), &w));
        let dx = sigmoid_grad(&sigmoid(&x), &w).unwrap();
        check_grad("sigmoid", &x, &dx, |x| dot(&sigmoid(x), &w));
        let dx = tanh_grad(&tanh(&x), &w).unwrap();
        check_grad("tanh", &x, &dx, |x| dot(&tanh(x), &w));
        // Uniform samples land within h of relu's kink with probability ~1e-6.
        check_grad("relu", &x, &relu_grad(&x, &w).unwrap(), |x| dot(&relu(x), &w));
    }

    #[test]
    fn rope_grad_is_the_adjoint(
        batch in prop::collection::vec(1usize..3, 0..3), s in 1usize..4, half in 1usize..4,
        seed: u64,
    ) {
        let mut rng = Rng::new(seed);
        let d = 2 * half;
        let mut shape = batch;
        shape.extend([s, d]);
        let x = rng.tensor(&shape, -2.0, 2.0);
        let cos = rng.tensor(&[s, d], -1.0, 1.0);
        let sin = rng.tensor(&[s, d], -1.0, 1.0);
        let w = rng.tensor(&shape, -1.0, 1.0);
        let dx = rope_grad(&w, &cos, &sin).unwrap();
        check_grad("rope", &x, &dx, |x| dot(&rope(x, &cos, &sin).unwrap(), &w));
    }

    #[test]
    fn cross_entropy_grad_matches_finite_differences(n in 1usize..5, c in 1usize..6, seed: u64) {
        let mut rng = Rng::new(seed);
        let logits = rng.tensor(&[n, c], -3.0, 3.0);
        let labels = rng.ids(&[n], c);
        let dloss = rng.uniform(0.5, 2.0);
        let dx = cross_entropy_grad(&logits, &labels, &Tensor::scalar(dloss)).unwrap();
        check_grad("cross_entropy", &logits, &dx, |x| {
            cross_entropy(x, &labels).unwrap().data()[0] * dloss
        });
    }

    #[test]
    fn embedding_grad_scatter_adds(
        ids_shape in prop::collection::vec(1usize..4, 0..3), v in 1usize..5, d in 1usize..4,
        seed: u64,
    ) {
        let mut rng = Rng::new(seed);
        let table = rng.tensor(&[v, d], -1.0, 1.0);
        let ids = rng.ids(&ids_shape, v);
        let mut out_shape = ids_shape.clone();
        out_shape.push(d);
        let w = rng.tensor(&out_shape, -1.0, 1.0);
        let dtable = embedding_grad(&ids, &w, v).unwrap();
        check_grad("embedding", &table, &dtable, |t| dot(&embedding(t, &ids).unwrap(), &w));
    }

    /// `reduce_to_shape` is the gradient of broadcasting a tensor of shape `small` up to `big`.
    #[test]
    fn reduce_to_shape_is_the_gradient_of_broadcasting(
        small in prop::collection::vec(1usize..4, 0..4),
        stretch in prop::collection::vec(1usize..4, 4),
        lead in prop::collection::vec(1usize..4, 0..3),
        seed: u64,
    ) {
        let mut rng = Rng::new(seed);
        let mut big = lead;
        big.extend(small.iter().zip(&stretch).map(|(&d, &s)| if d == 1 { s } else { d }));
        let x = rng.tensor(&small, -1.0, 1.0);
        let w = rng.tensor(&big, -1.0, 1.0);
        let dx = reduce_to_shape(&w, &small).unwrap();
        check_grad("broadcast", &x, &dx, |x| dot(&broadcast(x, &big).unwrap(), &w));
        // And `add` with a broadcast operand routes its gradient the same way.
        let y = rng.tensor(&big, -1.0, 1.0);
        check_grad("add broadcast", &x, &dx, |x| dot(&add(x, &y).unwrap(), &w));
    }

    #[test]
    fn matmul_grad_matches_finite_differences(
        m in 1usize..4, k in 1usize..4, n in 1usize..4, case in 0usize..4,
        ta: bool, tb: bool, seed: u64,
    ) {
        let mut rng = Rng::new(seed);
        let (batch_a, batch_b): (Vec<usize>, Vec<usize>) = match case {
            0 => (vec![], vec![]),
            1 => (vec![2], vec![]),
            2 => (vec![2, 1], vec![3]),
            _ => (vec![1], vec![2, 2]),
        };
        let mut sa = batch_a;
        sa.extend(if ta { [k, m] } else { [m, k] });
        let mut sb = batch_b;
        sb.extend(if tb { [n, k] } else { [k, n] });
        let a = rng.tensor(&sa, -1.0, 1.0);
        let b = rng.tensor(&sb, -1.0, 1.0);
        let c = matmul(&a, &b, ta, tb).unwrap();
        let w = rng.tensor(c.shape(), -1.0, 1.0);
        let (da, db) = matmul_grad(&a, &b, &w, ta, tb).unwrap();
        check_grad("matmul da", &a, &da, |a| dot(&matmul(a, &b, ta, tb).unwrap(), &w));
        check_grad("matmul db", &b, &db, |b| dot(&matmul(&a, b, ta, tb).unwrap(), &w));
    }

    #[test]
    fn selection_and_reduction_grads_match_finite_differences(
        shape in small_shape(), bits: u8, keepdim: bool, seed: u64,
    ) {
        let mut rng = Rng::new(seed);
        let axes = pick_axes(bits, shape.len());
        let x = rng.tensor(&shape, -2.0, 2.0);
        let red = reduce_sum(&x, &axes, keepdim).unwrap();
        let w = rng.tensor(red.shape(), -1.0, 1.0);
        let dx = reduce_sum_grad(&w, &shape, &axes, keepdim).unwrap();
        check_grad("reduce_sum", &x, &dx, |x| dot(&reduce_sum(x, &axes, keepdim).unwrap(), &w));
        let dx = reduce_mean_grad(&w, &shape, &axes, keepdim).unwrap();
        check_grad("reduce_mean", &x, &dx, |x| dot(&reduce_mean(x, &axes, keepdim).unwrap(), &w));
        let dx = reduce_max_grad(&x, &w, &axes, keepdim).unwrap();
        check_grad("reduce_max", &x, &dx, |x| dot(&reduce_max(x, &axes, keepdim).unwrap(), &w));

        // max/min against an operand broadcast along the reduced axes.
        let other = rng.tensor(red.shape(), -2.0, 2.0);
        let other = if keepdim {
            other
        } else {
            reshape(&other, reduce_sum(&x, &axes, true).unwrap().shape()).unwrap()
        };
        let y = max(&x, &other).unwrap();
        let w = rng.tensor(y.shape(), -1.0, 1.0);
        let (da, db) = max_grad(&x, &other, &w).unwrap();
        check_grad("max a", &x, &da, |x| dot(&max(x, &other).unwrap(), &w));
        check_grad("max b", &other, &db, |o| dot(&max(&x, o).unwrap(), &w));
        let (da, db) = min_grad(&x, &other, &w).unwrap();
        check_grad("min a", &x, &da, |x| dot(&min(x, &other).unwrap(), &w));
        check_grad("min b", &other, &db, |o| dot(&min(&x, o).unwrap(), &w));
    }

    #[test]
    fn data_movement_grads_match_finite_differences(shape in small_shape(), seed: u64) {
        let mut rng = Rng::new(seed);
        let rank = shape.len();
        let x = rng.tensor(&shape, -1.0, 1.0);
        // A rotation of the axes as the permutation.
        let perm: Vec<usize> = (0..rank).map(|k| (k + 1) % rank).collect();
        let w = rng.tensor(transpose(&x, &perm).unwrap().shape(), -1.0, 1.0);
        let dx = transpose_grad(&w, &perm).unwrap();
        check_grad("transpose", &x, &dx, |x| dot(&transpose(x, &perm).unwrap(), &w));

        let start: Vec<usize> = shape.iter().map(|&d| (rng.next_u64() as usize) % d).collect();
        let end: Vec<usize> = shape
            .iter()
            .zip(&start)
            .map(|(&d, &s)| s + 1 + (rng.next_u64() as usize) % (d - s))
            .collect();
        let w = rng.tensor(slice(&x, &start, &end).unwrap().shape(), -1.0, 1.0);
        let dx = slice_grad(&w, &shape, &start).unwrap();
        check_grad("slice", &x, &dx, |x| dot(&slice(x, &start, &end).unwrap(), &w));

        let axis = (rank - 1) as i64;
        let mut other_shape = shape.clone();
        other_shape[rank - 1] = 2;
        let y = rng.tensor(&other_shape, -1.0, 1.0);
        let w = rng.tensor(concat(&[&x, &y], axis).unwrap().shape(), -1.0, 1.0);
        let parts = concat_grad(&w, &[shape[rank - 1], 2], axis).unwrap();
        check_grad("concat a", &x, &parts[0], |x| dot(&concat(&[x, &y], axis).unwrap(), &w));
        check_grad("concat b", &y, &parts[1], |y| dot(&concat(&[&x, y], axis).unwrap(), &w));
    }
}

/// The checker itself must be able to fail: a deliberately wrong gradient is caught.
#[test]
#[should_panic(expected = "finite difference")]
fn gradient_checker_rejects_a_wrong_gradient() {
    let mut rng = Rng::new(7);
    let x = rng.tensor(&[2, 3], -1.0, 1.0);
    let w = rng.tensor(&[2, 3], -1.0, 1.0);
    // tanh_grad applied to x instead of tanh(x).
    let wrong = tanh_grad(&x, &w).unwrap();
    check_grad("tanh", &x, &wrong, |x| dot(&tanh(x), &w));
}

#[test]
fn matmul_transpose_identities() {
    let mut rng = Rng::new(11);
    let a = rng.tensor(&[2, 3, 4], -1.0, 1.0);
    let b = rng.tensor(&[4, 5], -1.0, 1.0);
    let c = matmul(&a, &b, false, false).unwrap();
    // (A·B)ᵀ = Bᵀ·Aᵀ, with the transposes taken by the flags and not by copies.
    let ct = matmul(&b, &a, true, true).unwrap();
    assert_eq!(transpose(&c, &[0, 2, 1]).unwrap(), ct);
    // Transposing an operand explicitly and flagging it are the same product.
    let at = transpose(&a, &[0, 2, 1]).unwrap();
    assert_eq!(matmul(&at, &b, true, false).unwrap(), c);
    // A broadcast batch operand equals explicitly repeating it.
    let b3 = broadcast(&b, &[2, 4, 5]).unwrap();
    assert_eq!(matmul(&a, &b3, false, false).unwrap(), c);
    // The gradient with respect to a shared (broadcast) b sums over the batch.
    let w = rng.tensor(c.shape(), -1.0, 1.0);
    let (_, db) = matmul_grad(&a, &b, &w, false, false).unwrap();
    let (_, db3) = matmul_grad(&a, &b3, &w, false, false).unwrap();
    let summed = reduce_sum(&db3, &[0], false).unwrap();
    for (x, y) in db.data().iter().zip(summed.data()) {
        assert!((x - y).abs() < 1e-12);
    }
    assert!(matmul_grad(&a, &b, &Tensor::zeros(&[2, 3, 4]).unwrap(), false, false).is_err());
}

#[test]
fn ties_split_the_gradient() {
    let a = Tensor::from_vec(vec![1.0f64, 2.0, 3.0]);
    let b = Tensor::scalar(2.0f64);
    let dy = Tensor::from_vec(vec![1.0, 1.0, 1.0]);
    let (da, db) = max_grad(&a, &b, &dy).unwrap();
    assert_eq!(da.data(), &[0.0, 0.5, 1.0]);
    assert_eq!(db.data(), &[1.5]);
    let (da, db) = min_grad(&a, &b, &dy).unwrap();
    assert_eq!(da.data(), &[1.0, 0.5, 0.0]);
    assert_eq!(db.data(), &[1.5]);
    let x = Tensor::new(vec![2, 3], vec![4.0f64, 1.0, 4.0, 0.0, 5.0, 2.0]).unwrap();
    let g = reduce_max_grad(&x, &Tensor::from_vec(vec![6.0, 1.0]), &[1], false).unwrap();
    assert_eq!(g.data(), &[3.0, 0.0, 3.0, 0.0, 1.0, 0.0]);
    let r = relu_grad(&Tensor::from_vec(vec![-1.0f32, 0.0, 2.0]), &Tensor::from_vec(vec![5.0; 3]));
    assert_eq!(r.unwrap().data(), &[0.0, 0.0, 5.0]);
}

#[test]
fn grad_helpers_reject_mismatched_shapes() {
    let x = Tensor::<f32>::zeros(&[2, 3]).unwrap();
    let bad = Tensor::<f32>::zeros(&[3, 2]).unwrap();
    let g3 = Tensor::<f32>::zeros(&[3]).unwrap();
    assert!(softmax_grad(&x, &bad, -1).is_err());
    assert!(softmax_grad(&x, &x, 2).is_err());
    assert!(layernorm_grad(&x, &g3, &bad, -1, 1e-5).is_err());
    assert!(layernorm_grad(&x, &bad, &x, -1, 1e-5).is_err());
    assert!(rmsnorm_grad(&x, &Tensor::zeros(&[2]).unwrap(), &x, 1e-5).is_err());
    assert!(gelu_grad(&x, &bad, GeluApproximation::None).is_err());
    assert!(silu_grad(&x, &g3).is_err());
    assert!(sigmoid_grad(&x, &g3).is_err());
    assert!(tanh_grad(&x, &g3).is_err());
    assert!(relu_grad(&x, &g3).is_err());
    assert!(rope_grad(&Tensor::zeros(&[2, 4]).unwrap(), &x, &x).is_err());
    let logits = Tensor::<f32>::zeros(&[2, 3]).unwrap();
    let labels = Tensor::from_vec(vec![0, 2]);
    assert!(cross_entropy_grad(&logits, &labels, &Tensor::from_vec(vec![1.0])).is_err());
    assert!(
        cross_entropy_grad(&logits, &Tensor::from_vec(vec![0, 5]), &Tensor::scalar(1.0)).is_err()
    );
    assert!(embedding_grad(&labels, &x, 2).is_err()); // id 2 out of range 0..2
    assert!(embedding_grad(&labels, &g3, 3).is_err()); // dy is not [2, D]
    assert!(max_grad(&x, &g3, &bad).is_err());
    assert!(min_grad(&x, &bad, &x).is_err());
    assert!(reduce_sum_grad(&x, &[2, 3], &[0], false).is_err());
    assert!(reduce_mean_grad(&g3, &[2, 3], &[0, 0], false).is_err());
    assert!(reduce_max_grad(&x, &g3, &[1], true).is_err());
    assert!(transpose_grad(&x, &[0, 0]).is_err());
    assert!(concat_grad(&x, &[1, 1], 1).is_err());
    assert!(slice_grad(&x, &[2, 2], &[0, 0]).is_err());
    assert!(reduce_to_shape(&x, &[3, 3]).is_err());
}

/// `f16` tensors: computed in `f32`, rounded after each op.
#[test]
fn f16_rounds_after_each_op() {
    let ulp = 2f32.powi(-10);
    let one = Tensor::from_vec(vec![1.0f32]);
    let tiny = Tensor::from_vec(vec![ulp / 2.0]);
    // (1 + ulp/2) rounds back to 1 in f16 after each add, so the sum never moves ...
    let mut acc = one.clone();
    for _ in 0..4 {
        acc = Precision::F16.round(add(&acc, &tiny).unwrap());
    }
    assert_eq!(acc.data(), &[1.0]);
    // ... while one f32 sum of the four increments does.
    let four = Precision::F16.round(add(&one, &scale(&tiny, 4.0)).unwrap());
    assert_eq!(four.data(), &[1.0 + 2.0 * ulp]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Arbitrary small shapes (zero extents included), axes, permutations, windows and ids:
    /// every kernel returns a value or a `KernelError`, never a panic.
    #[test]
    fn forward_kernels_never_panic(
        sa in prop::collection::vec(0usize..4, 0..4),
        sb in prop::collection::vec(0usize..4, 0..4),
        axis in -5i64..5,
        axes in prop::collection::vec(-5i64..5, 0..3),
        perm in prop::collection::vec(0usize..4, 0..4),
        window in prop::collection::vec(0usize..5, 0..8),
        ids in prop::collection::vec(-2i32..5, 0..4),
        flags: (bool, bool, bool),
    ) {
        let a = Tensor::<f32>::full(&sa, 0.5).unwrap();
        let b = Tensor::<f32>::full(&sb, -1.5).unwrap();
        let _ = add(&a, &b);
        let _ = max(&a, &b);
        let _ = matmul(&a, &b, flags.0, flags.1);
        let _ = reduce_sum(&a, &axes, flags.2);
        let _ = reduce_max(&a, &axes, flags.2);
        let _ = reduce_mean(&a, &axes, flags.2);
        let _ = reduce_to_shape(&a, &sb);
        let _ = softmax(&a, axis);
        let _ = log_softmax(&a, axis);
        let _ = layernorm(&a, &b, &b, axis, 1e-5);
        let _ = rmsnorm(&a, &b, 1e-5);
        let _ = rope(&a, &b, &b);
        let _ = reshape(&a, &sb);
        let _ = transpose(&a, &perm);
        let _ = broadcast(&a, &sb);
        let (start, end) = window.split_at(window.len() / 2);
        let _ = slice(&a, start, end);
        let _ = slice_grad(&a, &sb, start);
        let _ = concat(&[&a, &b], axis);
        let idt = Tensor::new(vec![ids.len()], ids.clone()).unwrap();
        let _ = embedding(&a, &idt);
        let _ = embedding_grad(&idt, &a, sb.len());
        let _ = cross_entropy(&a, &idt);
        let _ = cross_entropy_grad(&a, &idt, &b);
        let _ = softmax_grad(&a, &b, axis);
        let _ = layernorm_grad(&a, &b, &a, axis, 1e-5);
        let _ = rmsnorm_grad(&a, &b, &a, 1e-5);
        let _ = rope_grad(&a, &b, &b);
        let _ = matmul_grad(&a, &b, &a, flags.0, flags.1);
        let _ = max_grad(&a, &b, &a);
        let _ = reduce_max_grad(&a, &b, &axes, flags.2);
        let _ = reduce_sum_grad(&b, &sa, &axes, flags.2);
        let _ = concat_grad(&a, &sb, axis);
        let _ = transpose_grad(&a, &perm);
    }
}

/// `update_slice` writes `update` at the offset along the axis (negative axes count from the
/// end) and leaves the rest of `dest`; an offset from which it does not fit is an error.
#[test]
fn update_slice_writes_the_window_and_refuses_offsets_that_do_not_fit() {
    let dest = Tensor::new(vec![2, 4], (0..8).map(|v| v as f32).collect()).unwrap();
    let update = Tensor::new(vec![2, 2], vec![-1.0, -2.0, -3.0, -4.0]).unwrap();
    let out = update_slice(&dest, &update, -1, 1).unwrap();
    assert_eq!(out.data(), &[0.0, -1.0, -2.0, 3.0, 4.0, -3.0, -4.0, 7.0]);
    assert_eq!(update_slice(&dest, &update, 1, 2).unwrap().data()[2..4], [-1.0, -2.0]);
    // Along the first axis, an i32 tensor.
    let ids = Tensor::new(vec![3, 2], vec![1, 2, 3, 4, 5, 6]).unwrap();
    let row = Tensor::new(vec![1, 2], vec![9, 9]).unwrap();
    assert_eq!(update_slice(&ids, &row, 0, 2).unwrap().data(), &[1, 2, 3, 4, 9, 9]);
    for bad in [-1, 3] {
        let e = update_slice(&dest, &update, 1, bad).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("update_slice: offset {bad} is out of range: 2 slices from it must fit in 4 along axis 1, so it must be from 0 to 2")
        );
    }
    assert!(update_slice(&dest, &Tensor::<f32>::zeros(&[1, 2]).unwrap(), 1, 0).is_err());
}

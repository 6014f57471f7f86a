//! `plan-memory` on memory-dialect functions written out: a hand-worked schedule whose figures
//! are computed exactly (and on which the first, in-schedule-order planner needed 804 bytes
//! where 480 suffice), smaller images in a larger one's object, and a property test over random
//! schedules of buffers and images: storage sharing a slot is of one class (images: the larger
//! containing the smaller) and never live at once (by the planned IR's own deallocs),
//! `peak-bytes ≥ slot-bound-bytes ≥ live-peak-bytes`, the plan is never larger than the first
//! planner's, the interpreter computes the same numbers, and planning again changes nothing.

mod common;

use std::collections::HashMap;
use std::fmt::Write;

use fbc_dialects::memory::{MemType, StorageKind};
use fbc_ir::{Attr, Module};
use fbc_transforms::plan_memory::{assign_in_order, Lifetime};
use proptest::prelude::*;

use common::*;

/// Storage of a planned function: (name, type, slot, first op, last op), the last op being its
/// `memory.dealloc` (or the end of the body).
fn storage(m: &Module) -> Vec<(String, MemType, Option<i64>, usize, usize, bool)> {
    let f = m.func_ids().next().expect("a function");
    let body = &m.func(f).body;
    let mut out = Vec::new();
    for (i, &op) in body.iter().enumerate() {
        let d = m.op(op);
        let upload = d.def.is("memory.upload");
        if !(upload || d.def.is("memory.alloc")) {
            continue;
        }
        let v = d.results[0];
        let ty = MemType::from_type(m.value_type(v)).expect("memory type");
        let end = body
            .iter()
            .position(|&o| m.op(o).def.is("memory.dealloc") && m.op(o).operands[0] == v)
            .unwrap_or(body.len());
        let slot = d.attr("slot").and_then(Attr::as_int);
        let name = m.value(v).name.as_deref().unwrap_or_default().to_string();
        out.push((name, ty, slot, i, end, upload));
    }
    out
}

fn same_class(a: &MemType, b: &MemType) -> bool {
    match (a.storage, b.storage) {
        (StorageKind::Image { .. }, StorageKind::Image { .. }) => a == b,
        (StorageKind::Buffer { .. }, StorageKind::Buffer { .. }) => a.elem == b.elem,
        _ => false,
    }
}

/// Whether storage of types `a` and `b` may share a slot: buffers of one element type, or
/// images of one texel format (each within the slot's largest: [`contains`]).
fn may_share(a: &MemType, b: &MemType) -> bool {
    match (a.storage, b.storage) {
        (StorageKind::Image { .. }, StorageKind::Image { .. }) => a.elem == b.elem,
        _ => same_class(a, b),
    }
}

/// Whether image `outer` contains image `inner` in both extents (buffers: always).
fn contains(outer: &MemType, inner: &MemType) -> bool {
    match (outer.storage, inner.storage) {
        (StorageKind::Image { width: wo, height: ho }, StorageKind::Image { width, height }) => {
            width <= wo && height <= ho
        }
        _ => true,
    }
}

/// Checks the plan of `m`'s function against its own IR; returns (peak, live peak) recomputed
/// from the IR.
fn check_plan(m: &Module, st: &fbc_ir::pass::Statistics) -> (u64, u64) {
    let s = storage(m);
    for (i, a) in s.iter().enumerate() {
        for b in &s[i + 1..] {
            if a.2.is_some() && a.2 == b.2 {
                assert!(
                    may_share(&a.1, &b.1),
                    "%{} and %{} share slot {:?}: {} / {}",
                    a.0,
                    b.0,
                    a.2,
                    a.1,
                    b.1
                );
                let disjoint = a.4 < b.3 || b.4 < a.3;
                assert!(
                    disjoint,
                    "%{} [{}, {}] and %{} [{}, {}] share slot {:?}",
                    a.0, a.3, a.4, b.0, b.3, b.4, a.2
                );
            }
        }
    }
    // An image slot's object is its largest tenant's image, which every tenant fits in.
    for a in &s {
        let Some(k) = a.2 else { continue };
        let tenants = s.iter().filter(|b| b.2 == Some(k));
        let largest = tenants.clone().max_by_key(|b| b.1.bytes()).expect("a tenant");
        for b in tenants {
            assert!(
                contains(&largest.1, &b.1),
                "slot {k}: %{} does not fit in %{}",
                b.0,
                largest.0
            );
        }
    }
    let mut slots: HashMap<i64, u64> = HashMap::new();
    let mut own = 0;
    for (_, t, slot, ..) in &s {
        match slot {
            Some(k) => {
                let b = slots.entry(*k).or_default();
                *b = (*b).max(t.bytes());
            }
            None => own += t.bytes(),
        }
    }
    let peak = own + slots.values().sum::<u64>();
    let n = m.func(m.func_ids().next().expect("f")).body.len();
    let live = (0..=n)
        .map(|p| s.iter().filter(|x| x.3 <= p && p <= x.4).map(|x| x.1.bytes()).sum::<u64>())
        .max()
        .unwrap_or(0);
    let get = |k: &str| u64::try_from(st.get("plan-memory", k)).expect("counter");
    assert_eq!(get("peak-bytes"), peak, "peak-bytes against the slots of the IR");
    assert_eq!(get("live-peak-bytes"), live, "live-peak-bytes against the IR's deallocs");
    assert_eq!(get("slots"), slots.len() as u64);
    assert!(get("slot-bound-bytes") >= live, "slot bound below the live peak");
    assert!(peak >= get("slot-bound-bytes"), "peak below the slot bound");
    (peak, live)
}

/// The first planner's peak on the lifetimes of planned `m`: uploads on their own, allocations
/// in schedule order per class.
fn first_planner_peak(m: &Module) -> u64 {
    let s = storage(m);
    let mut peak = s.iter().filter(|x| x.5).map(|x| x.1.bytes()).sum::<u64>();
    let mut classes: Vec<(MemType, Vec<Lifetime>)> = Vec::new();
    for (_, t, _, start, end, upload) in &s {
        if *upload {
            continue;
        }
        let l = Lifetime { start: *start, end: *end, bytes: t.bytes() };
        match classes.iter_mut().find(|(c, _)| same_class(c, t)) {
            Some((_, ls)) => ls.push(l),
            None => classes.push((*t, vec![l])),
        }
    }
    for (c, ls) in &classes {
        peak += assign_in_order(ls, !c.is_image()).bytes();
    }
    peak
}

/// Two buffers of 100 floats live one after the other ([1, 4] and [7, end]), two of 10 floats
/// overlap both them and each other, and the 1-float upload dies first. In schedule order, each
/// 10-float buffer took the slot its predecessor of 100 had left, and the second 100-float
/// buffer then grew a 10-float slot: 4 + 400 + 400 = 804 bytes (uploads had no slot). By size,
/// the two large ones share one slot of 400, the small ones get 40 each and the upload fits in
/// one of them: 480 bytes, against 440 live at once (%a and %b, or %c and %d) — what a slot plan
/// can reach, since %b and %c overlap each other and the large ones.
const STRANDED: &str = r#"func.func @f(%x: tensor<1xf32>) -> tensor<100xf32> {
  %x_m = memory.upload %x {layout = #layout.linear} : (tensor<1xf32>) -> !memory.buffer<1, f32>
  %a_m = memory.alloc : () -> !memory.buffer<100, f32>
  memory.launch %x_m, %a_m {body = "x0", domain = [100], iterators = ["parallel"], kernel = "a", maps = [(d0) -> (0), (d0) -> (d0)]} : (!memory.buffer<1, f32>, !memory.buffer<100, f32>) -> ()
  %b_m = memory.alloc : () -> !memory.buffer<10, f32>
  memory.launch %a_m, %b_m {body = "x0", domain = [10], iterators = ["parallel"], kernel = "b", maps = [(d0) -> (d0), (d0) -> (d0)]} : (!memory.buffer<100, f32>, !memory.buffer<10, f32>) -> ()
  %c_m = memory.alloc : () -> !memory.buffer<10, f32>
  memory.launch %b_m, %c_m {body = "x0 + 1.0", domain = [10], iterators = ["parallel"], kernel = "c", maps = [(d0) -> (d0), (d0) -> (d0)]} : (!memory.buffer<10, f32>, !memory.buffer<10, f32>) -> ()
  %d_m = memory.alloc : () -> !memory.buffer<100, f32>
  memory.launch %c_m, %d_m {body = "x0", domain = [100], iterators = ["parallel"], kernel = "d", maps = [(d0) -> (d0 mod 10), (d0) -> (d0)]} : (!memory.buffer<10, f32>, !memory.buffer<100, f32>) -> ()
  %d = memory.download %d_m {layout = #layout.linear} : (!memory.buffer<100, f32>) -> tensor<100xf32>
  func.return %d : tensor<100xf32>
}
"#;

#[test]
fn greedy_by_size_packs_what_schedule_order_stranded() {
    let m = parse(STRANDED);
    let (after, st) = lowered(&m, "plan-memory", "generic");
    assert_eq!(first_planner_peak(&after), 4 + 400 + 400);
    let (peak, live) = check_plan(&after, &st);
    assert_eq!((peak, live), (480, 440));
    assert_eq!(st.get("plan-memory", "slot-bound-bytes"), 440);
    assert_eq!(st.get("plan-memory", "slots"), 3);
    let slot = |name: &str| {
        storage(&after).into_iter().find(|s| s.0 == name).and_then(|s| s.2).expect(name)
    };
    assert_eq!(slot("a_m"), slot("d_m"));
    assert_ne!(slot("b_m"), slot("c_m"));
    assert!(slot("x_m") == slot("b_m") || slot("x_m") == slot("c_m"));
    same_numbers(&m, &after, "planned");
}

/// Images share only with their exact type: two [2, 2] images live one after the other share a
/// slot, a [4, 1] image of the same bytes does not join them, and the buffer gets its own.
#[test]
fn images_share_only_with_their_own_type() {
    let src = r#"func.func @f(%x: tensor<16xf32>) -> tensor<16xf32> {
  %x_m = memory.upload %x {layout = #layout.linear} : (tensor<16xf32>) -> !memory.buffer<16, f32>
  %p_m = memory.alloc : () -> !memory.image2d<[2, 2], f32>
  memory.launch %x_m, %p_m {body = "x0", domain = [2, 2, 4], iterators = ["parallel", "parallel", "parallel"], kernel = "p", maps = [(d0, d1, d2) -> (d0 * 8 + d1 * 4 + d2), (d0, d1, d2) -> (d1, d0, d2)]} : (!memory.buffer<16, f32>, !memory.image2d<[2, 2], f32>) -> ()
  %q_m = memory.alloc : () -> !memory.image2d<[4, 1], f32>
  memory.launch %p_m, %q_m {body = "x0", domain = [1, 4, 4], iterators = ["parallel", "parallel", "parallel"], kernel = "q", maps = [(d0, d1, d2) -> (d1 mod 2, d1 floordiv 2, d2), (d0, d1, d2) -> (d1, d0, d2)]} : (!memory.image2d<[2, 2], f32>, !memory.image2d<[4, 1], f32>) -> ()
  %r_m = memory.alloc : () -> !memory.image2d<[2, 2], f32>
  memory.launch %q_m, %r_m {body = "x0 * 2.0", domain = [2, 2, 4], iterators = ["parallel", "parallel", "parallel"], kernel = "r", maps = [(d0, d1, d2) -> (d0 * 2 + d1, 0, d2), (d0, d1, d2) -> (d1, d0, d2)]} : (!memory.image2d<[4, 1], f32>, !memory.image2d<[2, 2], f32>) -> ()
  %y_m = memory.alloc : () -> !memory.buffer<16, f32>
  memory.launch %r_m, %y_m {body = "x0", domain = [16], iterators = ["parallel"], kernel = "y", maps = [(d0) -> ((d0 floordiv 4) mod 2, d0 floordiv 8, d0 mod 4), (d0) -> (d0)]} : (!memory.image2d<[2, 2], f32>, !memory.buffer<16, f32>) -> ()
  %y = memory.download %y_m {layout = #layout.linear} : (!memory.buffer<16, f32>) -> tensor<16xf32>
  func.return %y : tensor<16xf32>
}
"#;
    let m = parse(src);
    let (after, st) = lowered(&m, "plan-memory", "generic");
    let (peak, live) = check_plan(&after, &st);
    // Slots: {%x, %y} (64 bytes), {%p, %r} (64), {%q} (64); live at once at most two of them.
    assert_eq!((peak, live), (192, 128));
    assert_eq!(st.get("plan-memory", "slot-bound-bytes"), 192);
    let slot = |name: &str| {
        storage(&after).into_iter().find(|s| s.0 == name).and_then(|s| s.2).expect(name)
    };
    assert_eq!(slot("p_m"), slot("r_m"));
    assert_eq!(slot("x_m"), slot("y_m"));
    assert_ne!(slot("q_m"), slot("p_m"));
    same_numbers(&m, &after, "planned");
}

/// A smaller image lives in a larger one's object once that one is dead: %c ([2, 2]) takes the
/// slot of %a ([4, 2]), which contains it, not that of %b ([2, 4], live with %c). Each type on
/// its own needed 128 + 128 + 64 bytes of images; nested, 256, the images' live peak.
const NESTED: &str = r#"func.func @f(%x: tensor<32xf32>) -> tensor<16xf32> {
  %x_m = memory.upload %x {layout = #layout.linear} : (tensor<32xf32>) -> !memory.buffer<32, f32>
  %a_m = memory.alloc : () -> !memory.image2d<[4, 2], f32>
  memory.launch %x_m, %a_m {body = "x0", domain = [2, 4, 4], iterators = ["parallel", "parallel", "parallel"], kernel = "a", maps = [(d0, d1, d2) -> (d0 * 16 + d1 * 4 + d2), (d0, d1, d2) -> (d1, d0, d2)]} : (!memory.buffer<32, f32>, !memory.image2d<[4, 2], f32>) -> ()
  %b_m = memory.alloc : () -> !memory.image2d<[2, 4], f32>
  memory.launch %a_m, %b_m {body = "x0 + 1.0", domain = [4, 2, 4], iterators = ["parallel", "parallel", "parallel"], kernel = "b", maps = [(d0, d1, d2) -> (d1 + (d0 mod 2) * 2, d0 floordiv 2, d2), (d0, d1, d2) -> (d1, d0, d2)]} : (!memory.image2d<[4, 2], f32>, !memory.image2d<[2, 4], f32>) -> ()
  %c_m = memory.alloc : () -> !memory.image2d<[2, 2], f32>
  memory.launch %b_m, %c_m {body = "x0 * 2.0", domain = [2, 2, 4], iterators = ["parallel", "parallel", "parallel"], kernel = "c", maps = [(d0, d1, d2) -> (d1, d0 * 2 + 1, d2), (d0, d1, d2) -> (d1, d0, d2)]} : (!memory.image2d<[2, 4], f32>, !memory.image2d<[2, 2], f32>) -> ()
  %y_m = memory.alloc : () -> !memory.buffer<16, f32>
  memory.launch %c_m, %y_m {body = "x0", domain = [16], iterators = ["parallel"], kernel = "y", maps = [(d0) -> ((d0 floordiv 4) mod 2, d0 floordiv 8, d0 mod 4), (d0) -> (d0)]} : (!memory.image2d<[2, 2], f32>, !memory.buffer<16, f32>) -> ()
  %y = memory.download %y_m {layout = #layout.linear} : (!memory.buffer<16, f32>) -> tensor<16xf32>
  func.return %y : tensor<16xf32>
}
"#;

#[test]
fn a_smaller_image_lives_in_a_larger_ones_object() {
    let m = parse(NESTED);
    let (after, st) = lowered(&m, "plan-memory", "generic");
    let (peak, live) = check_plan(&after, &st);
    // Slots: {%x, %y} (128 bytes), {%a, %c} (128), {%b} (128); %a and %b live at once.
    assert_eq!((peak, live), (384, 256));
    assert_eq!(first_planner_peak(&after), 128 + 128 + 128 + 64 + 64);
    assert_eq!(st.get("plan-memory", "slot-bound-bytes"), 384);
    let slot = |name: &str| {
        storage(&after).into_iter().find(|s| s.0 == name).and_then(|s| s.2).expect(name)
    };
    assert_eq!(slot("a_m"), slot("c_m"));
    assert_ne!(slot("b_m"), slot("c_m"));
    assert_eq!(slot("x_m"), slot("y_m"));
    same_numbers(&m, &after, "nested");
}

/// Buffer sizes (elements) and image shapes of the random schedules.
const BUFFERS: [u64; 4] = [4, 8, 12, 64];
const IMAGES: [(u64, u64); 3] = [(1, 2), (2, 1), (2, 2)];

/// The map of an input of `ty` read at a point of an output's domain: `flat` is the output
/// element the point writes, `(y, x, c)` its texel for an image output.
fn input_map(ty: (bool, u64, u64), out: (bool, u64, u64)) -> String {
    let (img, a, b) = ty;
    let (oimg, ow, _) = out;
    let flat = if oimg { format!("d0 * {} + d1 * 4 + d2", ow * 4) } else { "d0".to_string() };
    let pt = if oimg { "(d0, d1, d2)" } else { "(d0)" };
    if img {
        if oimg {
            format!("{pt} -> (d1 mod {a}, d0 mod {b}, d2)")
        } else {
            format!(
                "{pt} -> (({flat}) floordiv 4 mod {a}, ({flat}) floordiv {} mod {b}, d0 mod 4)",
                a * 4
            )
        }
    } else {
        format!("{pt} -> (({flat}) mod {a})")
    }
}

fn type_text((img, a, b): (bool, u64, u64)) -> String {
    if img {
        format!("!memory.image2d<[{a}, {b}], f32>")
    } else {
        format!("!memory.buffer<{a}, f32>")
    }
}

/// A function of `uploads` linear buffer arguments and one launch per step: step `(kind, reads)`
/// allocates storage of `kind` (a buffer size or an image shape) and writes it from one or two
/// earlier values (`reads`, indices modulo what exists); the last buffer is returned.
fn schedule(uploads: &[usize], steps: &[(usize, Vec<usize>)]) -> String {
    let mut vals: Vec<(String, (bool, u64, u64))> = Vec::new();
    let mut s = String::new();
    let args: Vec<String> = uploads
        .iter()
        .enumerate()
        .map(|(i, &k)| format!("%u{i}: tensor<{}xf32>", BUFFERS[k]))
        .collect();
    let mut body = String::new();
    for (i, &k) in uploads.iter().enumerate() {
        let n = BUFFERS[k];
        let _ = writeln!(body, "  %u{i}_m = memory.upload %u{i} {{layout = #layout.linear}} : (tensor<{n}xf32>) -> !memory.buffer<{n}, f32>");
        vals.push((format!("u{i}_m"), (false, n, 0)));
    }
    for (j, (kind, reads)) in steps.iter().enumerate() {
        let ty = if *kind < BUFFERS.len() {
            (false, BUFFERS[*kind], 0)
        } else {
            let (w, h) = IMAGES[(*kind - BUFFERS.len()) % IMAGES.len()];
            (true, w, h)
        };
        let ins: Vec<usize> = reads.iter().map(|r| r % vals.len()).collect();
        let name = format!("v{j}_m");
        let _ = writeln!(body, "  %{name} = memory.alloc : () -> {}", type_text(ty));
        let (domain, iters, out_map) = if ty.0 {
            (
                format!("[{}, {}, 4]", ty.2, ty.1),
                r#"["parallel", "parallel", "parallel"]"#,
                "(d0, d1, d2) -> (d1, d0, d2)".to_string(),
            )
        } else {
            (format!("[{}]", ty.1), r#"["parallel"]"#, "(d0) -> (d0)".to_string())
        };
        let mut maps: Vec<String> = ins.iter().map(|&i| input_map(vals[i].1, ty)).collect();
        maps.push(out_map);
        let operands: Vec<String> =
            ins.iter().map(|&i| format!("%{}", vals[i].0)).chain([format!("%{name}")]).collect();
        let types: Vec<String> =
            ins.iter().map(|&i| type_text(vals[i].1)).chain([type_text(ty)]).collect();
        let body_expr = (0..ins.len()).map(|i| format!("x{i}")).collect::<Vec<_>>().join(" + ");
        let _ = writeln!(
            body,
            "  memory.launch {} {{body = \"{body_expr} + 1.0\", domain = {domain}, iterators = {iters}, kernel = \"k{j}\", maps = [{}]}} : ({}) -> ()",
            operands.join(", "),
            maps.join(", "),
            types.join(", ")
        );
        vals.push((name, ty));
    }
    let (out, ty) = vals.iter().rev().find(|v| !v.1 .0).cloned().expect("a buffer");
    let n = ty.1;
    let _ = writeln!(body, "  %out = memory.download %{out} {{layout = #layout.linear}} : (!memory.buffer<{n}, f32>) -> tensor<{n}xf32>");
    let _ = writeln!(body, "  func.return %out : tensor<{n}xf32>");
    let _ = write!(s, "func.func @f({}) -> tensor<{n}xf32> {{\n{body}}}\n", args.join(", "));
    s
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn prop_slots_never_overlap_and_peak_is_bounded(
        uploads in prop::collection::vec(0usize..BUFFERS.len(), 1..4),
        steps in prop::collection::vec(
            (0usize..BUFFERS.len() + IMAGES.len(), prop::collection::vec(0usize..64, 1..3)),
            1..14,
        ),
    ) {
        let text = schedule(&uploads, &steps);
        let m = parse(&text);
        let (after, st) = lowered(&m, "plan-memory", "generic");
        let (peak, _) = check_plan(&after, &st);
        prop_assert!(peak <= first_planner_peak(&after), "{peak} > the first planner's\n{text}");
        same_numbers(&m, &after, "planned");
        let mut again = after.clone();
        run(&mut again, "plan-memory", "generic");
        prop_assert_eq!(fbc_ir::print_module(&again), fbc_ir::print_module(&after));
    }
}

//! The layered drawing: crossings counted exactly and reduced, long edges routed through one
//! point per layer, nodes of a layer never overlapping.

use fbc_viz::graph::{crossings, layout, NODE_W};
use petgraph::graph::DiGraph;

fn graph(n: usize, edges: &[(u32, u32)]) -> DiGraph<(), ()> {
    let mut g = DiGraph::new();
    for _ in 0..n {
        g.add_node(());
    }
    for &(a, b) in edges {
        g.add_edge(a.into(), b.into(), ());
    }
    g
}

#[test]
fn crossings_are_inversions_between_adjacent_layers() {
    // Layer 0: 0, 1; layer 1: 2, 3. 0→3 and 1→2 cross once; 0→2, 1→3 do not.
    let layer = [0, 0, 1, 1];
    let pos = [0, 1, 0, 1];
    assert_eq!(crossings(&[(0, 3), (1, 2)], &layer, &pos), 1);
    assert_eq!(crossings(&[(0, 2), (1, 3)], &layer, &pos), 0);
    // Three edges pairwise crossing: 3.
    let layer = [0, 0, 0, 1, 1, 1];
    let pos = [0, 1, 2, 0, 1, 2];
    assert_eq!(crossings(&[(0, 5), (1, 4), (2, 3)], &layer, &pos), 3);
    // Edges sharing an end do not cross.
    assert_eq!(crossings(&[(0, 3), (0, 4)], &layer, &pos), 0);
}

#[test]
fn barycentre_ordering_removes_a_crossing_that_program_order_has() {
    let g = graph(4, &[(0, 3), (1, 2)]);
    let d = layout(&g);
    assert_eq!(d.initial_crossings, 1);
    assert_eq!(d.crossings, 0);
    // 3 now sits under 0, 2 under 1.
    assert!(d.node_pos[3].0 < d.node_pos[2].0, "{:?}", d.node_pos);
}

#[test]
fn long_edges_pass_through_every_layer_they_span() {
    // 0 → 1 → 2 → 3 and 0 → 3: the long edge gets two dummy points.
    let g = graph(4, &[(0, 1), (1, 2), (2, 3), (0, 3)]);
    let d = layout(&g);
    let long = &d.edge_routes[3];
    assert_eq!(long.len(), 4);
    let ys: Vec<f64> = long.iter().map(|p| p.1).collect();
    assert!(ys.windows(2).all(|w| w[1] > w[0]), "{ys:?}");
    // The dummy points are beside the chain's nodes, not on them.
    for (k, p) in long.iter().enumerate().skip(1).take(2) {
        assert!((p.0 - d.node_pos[k].0).abs() >= NODE_W / 2.0, "{p:?} vs {:?}", d.node_pos[k]);
    }
}

#[test]
fn nodes_of_a_layer_do_not_overlap() {
    // A fan: 0 feeds 1..=6, which all feed 7.
    let mut edges = Vec::new();
    for k in 1..=6 {
        edges.push((0, k));
        edges.push((k, 7));
    }
    let g = graph(8, &edges);
    let d = layout(&g);
    let mut xs: Vec<f64> = (1..=6).map(|k| d.node_pos[k].0).collect();
    xs.sort_by(f64::total_cmp);
    assert!(xs.windows(2).all(|w| w[1] - w[0] >= NODE_W), "{xs:?}");
    assert!((1..=6).all(|k| d.node_pos[k].1 == d.node_pos[1].1));
    // The fan's ends sit centred over and under it.
    let mid = (xs[0] + xs[5]) / 2.0;
    assert!((d.node_pos[0].0 - mid).abs() < 1.0 && (d.node_pos[7].0 - mid).abs() < 1.0);
    assert_eq!(d.crossings, 0);
}

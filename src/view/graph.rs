//! The layered layout of a dependsOn graph (Sugiyama's method, simplified: cycles broken,
//! longest-path layers, dummy nodes on long edges, barycenter sweeps against crossings, then
//! coordinates). Pure and deterministic: the same graph always draws the same picture. Never
//! panics: an edge naming a node that does not exist, or a node itself, is left out.
//!
//! Its cost is bounded whatever the graph: at most [`MAX_NODES`] nodes and [`MAX_EDGES`]
//! edges are drawn (the others counted), at most [`MAX_DUMMIES`] bends are made (a longer
//! edge beyond is drawn straight), crossings are counted as inversions (O(S log S) for S
//! segments) and each sweep reorders a layer from adjacency lists.

use std::collections::{BTreeSet, HashSet};

/// Width and height of a node box, and the gaps between layers and within one.
pub const NODE_WIDTH: u32 = 200;
pub const NODE_HEIGHT: u32 = 36;
/// The horizontal gap between two layers (where edges run).
pub const LAYER_GAP: u32 = 80;
/// The vertical gap between two nodes of a layer.
pub const ROW_GAP: u32 = 24;
/// The empty border around the drawing.
pub const MARGIN: u32 = 16;

/// Sets a graph draws at most: a set page's graph and its live neighbourhood alike.
pub const MAX_NODES: usize = 200;
/// Edges drawn at most (those nearest each node first); the others are counted.
pub const MAX_EDGES: usize = 600;
/// Dummy nodes (an edge's bends, one per layer it crosses) made at most; the edges beyond
/// (longest last) are drawn straight.
pub const MAX_DUMMIES: usize = 2_000;

/// Barycenter sweeps (alternating down and up); the ordering with the fewest crossings seen
/// is kept.
const SWEEPS: usize = 8;

/// A node placed: its index in the input, its layer and its box's top-left corner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    pub index: usize,
    pub layer: usize,
    pub x: u32,
    pub y: u32,
}

/// An edge routed from `from` (the dependency) to `to` (the dependent), through `points`
/// in drawing order (the first on `from`'s box, the last on `to`'s, bends through the layers
/// it crosses). Normally it runs left to right, from the right side of `from` to the left
/// side of `to`; `reversed` when it closes a cycle and so runs right to left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub from: usize,
    pub to: usize,
    pub points: Vec<(u32, u32)>,
    pub reversed: bool,
}

/// A graph laid out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    pub nodes: Vec<Placed>,
    pub edges: Vec<Route>,
    pub width: u32,
    pub height: u32,
    /// Valid edges not drawn (past [`MAX_EDGES`]).
    pub edges_left_out: usize,
}

/// Lays out the first [`MAX_NODES`] of `names.len()` nodes (their names order ties) and
/// `edges` (`(dependency, dependent)`: dependencies left of dependents). Edges naming a node
/// out of range, self edges and repeated edges are left out; past [`MAX_EDGES`], the others
/// are counted in `edges_left_out`.
pub fn layout(names: &[String], edges: &[(usize, usize)]) -> Layout {
    let names = names.get(..MAX_NODES).unwrap_or(names);
    let n = names.len();
    if n == 0 {
        return Layout::default();
    }
    let (edges, edges_left_out) = bounded(n, valid_edges(n, edges));
    let rank = name_ranks(names);
    let reversed = back_edges(n, &edges, &rank);
    // The acyclic graph: each back edge turned round.
    let dag: Vec<(usize, usize)> = edges
        .iter()
        .map(|&(a, b)| match reversed.contains(&(a, b)) {
            true => (b, a),
            false => (a, b),
        })
        .collect();
    let layer = layers(n, &dag, &rank);
    let mut g = Virtual::new(&layer, &rank, &dag);
    g.order();
    Layout {
        edges_left_out,
        ..g.place(edges, &reversed)
    }
}

/// The first [`MAX_EDGES`] of `edges` (their order kept), and how many others there were:
/// an edge's priority is the lower of its rank among its dependency's edges and among its
/// dependent's (so every node keeps its first edges), then how near the start of the node
/// list its ends are.
fn bounded(n: usize, edges: Vec<(usize, usize)>) -> (Vec<(usize, usize)>, usize) {
    if edges.len() <= MAX_EDGES {
        return (edges, 0);
    }
    let (mut outs, mut ins) = (vec![0usize; n], vec![0usize; n]);
    let mut by_priority: Vec<(usize, usize, usize)> = edges
        .iter()
        .enumerate()
        .map(|(i, &(a, b))| {
            let (out, into) = (outs[a], ins[b]);
            outs[a] += 1;
            ins[b] += 1;
            (out.min(into), a.max(b), i)
        })
        .collect();
    by_priority.sort_unstable();
    let mut kept = vec![false; edges.len()];
    for &(_, _, i) in by_priority.iter().take(MAX_EDGES) {
        kept[i] = true;
    }
    let left_out = edges.len() - MAX_EDGES;
    let edges = edges
        .into_iter()
        .zip(kept)
        .filter_map(|(e, keep)| keep.then_some(e))
        .collect();
    (edges, left_out)
}

/// The edges in range, without self edges and repeats, in their first order.
fn valid_edges(n: usize, edges: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut seen = HashSet::new();
    edges
        .iter()
        .copied()
        .filter(|&(a, b)| a < n && b < n && a != b && seen.insert((a, b)))
        .collect()
}

/// Each node's rank in name order (ties by index).
fn name_ranks(names: &[String]) -> Vec<usize> {
    let mut by_name: Vec<usize> = (0..names.len()).collect();
    by_name.sort_by(|&a, &b| names[a].cmp(&names[b]).then(a.cmp(&b)));
    let mut rank = vec![0; names.len()];
    for (r, &i) in by_name.iter().enumerate() {
        rank[i] = r;
    }
    rank
}

/// The successors of each node, in name order.
fn successors(n: usize, edges: &[(usize, usize)], rank: &[usize]) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); n];
    for &(a, b) in edges {
        out[a].push(b);
    }
    for s in &mut out {
        s.sort_by_key(|&v| rank[v]);
    }
    out
}

/// The edges that close a cycle: those a depth-first search, started from every unvisited
/// node in name order and following successors in name order, finds going back to a node on
/// its path.
fn back_edges(n: usize, edges: &[(usize, usize)], rank: &[usize]) -> BTreeSet<(usize, usize)> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let succ = successors(n, edges, rank);
    let mut mark = vec![Mark::New; n];
    let mut back = BTreeSet::new();
    let mut starts: Vec<usize> = (0..n).collect();
    starts.sort_by_key(|&v| rank[v]);
    for start in starts {
        if mark[start] != Mark::New {
            continue;
        }
        // (node, index of its next successor to follow)
        let mut stack = vec![(start, 0usize)];
        mark[start] = Mark::OnPath;
        while let Some(top) = stack.last_mut() {
            let (v, next) = *top;
            match succ[v].get(next) {
                Some(&w) => {
                    top.1 += 1;
                    match mark[w] {
                        Mark::New => {
                            mark[w] = Mark::OnPath;
                            stack.push((w, 0));
                        }
                        Mark::OnPath => {
                            back.insert((v, w));
                        }
                        Mark::Done => {}
                    }
                }
                None => {
                    mark[v] = Mark::Done;
                    stack.pop();
                }
            }
        }
    }
    back
}

/// Longest-path layers of an acyclic graph: a source is in layer 0, every other node one
/// right of its rightmost predecessor.
fn layers(n: usize, dag: &[(usize, usize)], rank: &[usize]) -> Vec<usize> {
    let succ = successors(n, dag, rank);
    let mut indegree = vec![0usize; n];
    for &(_, b) in dag {
        indegree[b] += 1;
    }
    let mut ready: BTreeSet<(usize, usize)> = (0..n)
        .filter(|&v| indegree[v] == 0)
        .map(|v| (rank[v], v))
        .collect();
    let mut layer = vec![0usize; n];
    while let Some((r, v)) = ready.iter().next().copied() {
        ready.remove(&(r, v));
        for &w in &succ[v] {
            layer[w] = layer[w].max(layer[v] + 1);
            indegree[w] -= 1;
            if indegree[w] == 0 {
                ready.insert((rank[w], w));
            }
        }
    }
    layer
}

/// The graph with a dummy node wherever an edge crosses a layer (within [`MAX_DUMMIES`]; an
/// edge beyond joins its ends straight): nodes `0..real` are the input's, the others
/// dummies; the segments joining adjacent layers are what the ordering weighs.
struct Virtual {
    real: usize,
    layer_of: Vec<usize>,
    /// Each layer's nodes, top to bottom.
    rows: Vec<Vec<usize>>,
    /// Each node's position within its layer.
    pos: Vec<usize>,
    /// `(left, right)` segments between layer `l` and `l + 1`, by `l`.
    between: Vec<Vec<(usize, usize)>>,
    /// Each node's neighbours by a segment, in the layer before it and after it.
    before: Vec<Vec<usize>>,
    after: Vec<Vec<usize>>,
    /// The chain of nodes of each acyclic edge, left to right.
    chains: Vec<Vec<usize>>,
}

impl Virtual {
    fn new(layer: &[usize], rank: &[usize], dag: &[(usize, usize)]) -> Virtual {
        let real = layer.len();
        let bends = bent(layer, dag);
        let mut layer_of = layer.to_vec();
        let mut chains = Vec::new();
        for (&(a, b), bend) in dag.iter().zip(bends) {
            let mut chain = vec![a];
            if bend {
                for l in layer[a] + 1..layer[b] {
                    layer_of.push(l);
                    chain.push(layer_of.len() - 1);
                }
            }
            chain.push(b);
            chains.push(chain);
        }
        let depth = layer_of.iter().max().map_or(0, |m| m + 1);
        let mut rows = vec![Vec::new(); depth];
        let mut real_nodes: Vec<usize> = (0..real).collect();
        real_nodes.sort_by_key(|&v| rank[v]);
        for v in real_nodes.into_iter().chain(real..layer_of.len()) {
            rows[layer_of[v]].push(v);
        }
        let nodes = layer_of.len();
        let mut g = Virtual {
            real,
            layer_of,
            rows,
            pos: vec![0; nodes],
            between: vec![Vec::new(); depth],
            before: vec![Vec::new(); nodes],
            after: vec![Vec::new(); nodes],
            chains: Vec::new(),
        };
        for chain in &chains {
            for w in chain.windows(2) {
                let (a, b) = (w[0], w[1]);
                if g.layer_of[a] + 1 == g.layer_of[b] {
                    g.between[g.layer_of[a]].push((a, b));
                    g.after[a].push(b);
                    g.before[b].push(a);
                }
            }
        }
        g.chains = chains;
        for l in 0..g.rows.len() {
            g.index(l);
        }
        g
    }

    /// Records the positions of layer `l`'s nodes.
    fn index(&mut self, l: usize) {
        if let Some(row) = self.rows.get(l) {
            for (i, &v) in row.iter().enumerate() {
                self.pos[v] = i;
            }
        }
    }

    /// Orders each layer against crossings: barycenter sweeps, keeping the best ordering.
    fn order(&mut self) {
        let mut best = self.rows.clone();
        let mut fewest = self.crossings();
        for sweep in 0..SWEEPS {
            let down = sweep % 2 == 0;
            let layers: Vec<usize> = match down {
                true => (1..self.rows.len()).collect(),
                false => (0..self.rows.len().saturating_sub(1)).rev().collect(),
            };
            for l in layers {
                self.reorder(l, down);
            }
            let c = self.crossings();
            if c < fewest {
                fewest = c;
                best = self.rows.clone();
            }
        }
        self.rows = best;
        for l in 0..self.rows.len() {
            self.index(l);
        }
    }

    /// Sorts layer `l` by the mean position of each node's neighbours in the layer before it
    /// (`down`) or after it; a node without such neighbours keeps its position.
    fn reorder(&mut self, l: usize, down: bool) {
        let Some(row) = self.rows.get(l) else {
            return;
        };
        let pos = &self.pos;
        let mut keyed: Vec<(f64, usize, usize)> = row
            .iter()
            .map(|&v| {
                let neighbours = match down {
                    true => &self.before[v],
                    false => &self.after[v],
                };
                let center = match neighbours.len() {
                    0 => pos[v] as f64,
                    k => neighbours.iter().map(|&u| pos[u] as f64).sum::<f64>() / k as f64,
                };
                (center, pos[v], v)
            })
            .collect();
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        self.rows[l] = keyed.into_iter().map(|(_, _, v)| v).collect();
        self.index(l);
    }

    /// How many pairs of segments cross: per pair of adjacent layers, the segments sorted
    /// by their left ends, the inversions among their right ends.
    fn crossings(&self) -> usize {
        self.between
            .iter()
            .map(|segments| {
                let mut ends: Vec<(usize, usize)> = segments
                    .iter()
                    .map(|&(a, b)| (self.pos[a], self.pos[b]))
                    .collect();
                ends.sort_unstable();
                let mut right: Vec<usize> = ends.into_iter().map(|(_, b)| b).collect();
                inversions(&mut right)
            })
            .sum()
    }

    /// Coordinates of the nodes and routes of the edges (`edges` as given, each acyclic
    /// chain in the same order).
    fn place(&self, edges: Vec<(usize, usize)>, reversed: &BTreeSet<(usize, usize)>) -> Layout {
        let corner = |v: usize| (x_of(self.layer_of[v]), y_of(self.pos[v]));
        let nodes = (0..self.real)
            .map(|v| {
                let (x, y) = corner(v);
                Placed {
                    index: v,
                    layer: self.layer_of[v],
                    x,
                    y,
                }
            })
            .collect();
        let half = NODE_HEIGHT / 2;
        let routes = edges
            .into_iter()
            .zip(&self.chains)
            .map(|((from, to), chain)| {
                let mut points = Vec::new();
                for (i, &v) in chain.iter().enumerate() {
                    let (x, y) = corner(v);
                    let mid = y.saturating_add(half);
                    let right = x.saturating_add(NODE_WIDTH);
                    if i > 0 {
                        points.push((x, mid));
                    }
                    if i + 1 < chain.len() {
                        points.push((right, mid));
                    }
                }
                let reversed = reversed.contains(&(from, to));
                if reversed {
                    points.reverse();
                }
                Route {
                    from,
                    to,
                    points,
                    reversed,
                }
            })
            .collect();
        let widest = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        Layout {
            nodes,
            edges: routes,
            width: x_of(self.rows.len())
                .saturating_sub(LAYER_GAP)
                .saturating_add(MARGIN),
            height: y_of(widest).saturating_sub(ROW_GAP).saturating_add(MARGIN),
            edges_left_out: 0,
        }
    }
}

/// Which edges of `dag` bend through the layers they cross: the shortest first, as long as
/// their dummy nodes stay within [`MAX_DUMMIES`].
fn bent(layer: &[usize], dag: &[(usize, usize)]) -> Vec<bool> {
    let dummies = |&(a, b): &(usize, usize)| (layer[b] - layer[a]).saturating_sub(1);
    let mut by_span: Vec<usize> = (0..dag.len()).collect();
    by_span.sort_by_key(|&i| (dummies(&dag[i]), i));
    let mut bends = vec![false; dag.len()];
    let mut left = MAX_DUMMIES;
    for i in by_span {
        let d = dummies(&dag[i]);
        if d > left {
            break;
        }
        left -= d;
        bends[i] = true;
    }
    bends
}

/// The pairs `i < j` with `xs[i] > xs[j]`, counted by merge sort (`xs` ends sorted).
fn inversions(xs: &mut [usize]) -> usize {
    let n = xs.len();
    if n < 2 {
        return 0;
    }
    let mid = n / 2;
    let mut count = inversions(&mut xs[..mid]) + inversions(&mut xs[mid..]);
    let mut merged = Vec::with_capacity(n);
    let (mut i, mut j) = (0, mid);
    while i < mid && j < n {
        if xs[i] <= xs[j] {
            merged.push(xs[i]);
            i += 1;
        } else {
            merged.push(xs[j]);
            count += mid - i;
            j += 1;
        }
    }
    merged.extend_from_slice(&xs[i..mid]);
    merged.extend_from_slice(&xs[j..]);
    xs.copy_from_slice(&merged);
    count
}

fn x_of(layer: usize) -> u32 {
    let layer = u32::try_from(layer).unwrap_or(u32::MAX);
    layer
        .saturating_mul(NODE_WIDTH + LAYER_GAP)
        .saturating_add(MARGIN)
}

fn y_of(row: usize) -> u32 {
    let row = u32::try_from(row).unwrap_or(u32::MAX);
    row.saturating_mul(NODE_HEIGHT + ROW_GAP)
        .saturating_add(MARGIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("set-{i:03}")).collect()
    }

    fn node(l: &Layout, i: usize) -> &Placed {
        l.nodes.iter().find(|p| p.index == i).expect("placed")
    }

    /// Every node placed once, inside the drawing, no two boxes overlapping.
    fn assert_sound(l: &Layout, n: usize) {
        assert_eq!(l.nodes.len(), n);
        for (i, a) in l.nodes.iter().enumerate() {
            assert!(a.x + NODE_WIDTH <= l.width && a.y + NODE_HEIGHT <= l.height);
            for b in &l.nodes[i + 1..] {
                let apart_x = a.x + NODE_WIDTH <= b.x || b.x + NODE_WIDTH <= a.x;
                let apart_y = a.y + NODE_HEIGHT <= b.y || b.y + NODE_HEIGHT <= a.y;
                assert!(apart_x || apart_y, "{a:?} overlaps {b:?}");
            }
        }
    }

    /// Each edge not reversed runs from a layer left of its dependent, through a point per
    /// layer boundary it crosses.
    fn assert_edges(l: &Layout) {
        for e in &l.edges {
            let (from, to) = (node(l, e.from), node(l, e.to));
            let (left, right) = match e.reversed {
                false => (from, to),
                true => (to, from),
            };
            assert!(left.layer < right.layer, "{e:?}");
            assert_eq!(e.points.len(), 2 * (right.layer - left.layer), "{e:?}");
            let first = e.points.first().expect("a point");
            let last = e.points.last().expect("a point");
            let (start, end) = match e.reversed {
                false => (first, last),
                true => (last, first),
            };
            assert_eq!(start.0, left.x + NODE_WIDTH);
            assert_eq!(end.0, right.x);
        }
    }

    #[test]
    fn layers_respect_edges_and_coordinates_follow_them() {
        // a -> b -> c, a -> c (long edge: a dummy in b's layer), d alone.
        let l = layout(&names(4), &[(0, 1), (1, 2), (0, 2)]);
        assert_eq!(
            (node(&l, 0).layer, node(&l, 1).layer, node(&l, 2).layer),
            (0, 1, 2)
        );
        assert_eq!(node(&l, 3).layer, 0);
        assert_eq!(node(&l, 0).x, MARGIN);
        assert_eq!(node(&l, 2).x, MARGIN + 2 * (NODE_WIDTH + LAYER_GAP));
        let long = l
            .edges
            .iter()
            .find(|e| (e.from, e.to) == (0, 2))
            .expect("routed");
        assert_eq!(long.points.len(), 4, "bends through the middle layer");
        assert_sound(&l, 4);
        assert_edges(&l);
        assert_eq!(l.width, 2 * MARGIN + 3 * NODE_WIDTH + 2 * LAYER_GAP);
    }

    #[test]
    fn a_cycle_is_drawn_with_one_edge_reversed() {
        let l = layout(&names(3), &[(0, 1), (1, 2), (2, 0)]);
        let reversed: Vec<_> = l.edges.iter().filter(|e| e.reversed).collect();
        assert_eq!(reversed.len(), 1, "{l:?}");
        assert_eq!((reversed[0].from, reversed[0].to), (2, 0));
        assert_sound(&l, 3);
        assert_edges(&l);
        // Two sets depending on each other.
        let l = layout(&names(2), &[(0, 1), (1, 0)]);
        assert_eq!(l.edges.iter().filter(|e| e.reversed).count(), 1);
        assert_edges(&l);
    }

    #[test]
    fn edges_out_of_range_self_edges_and_repeats_are_left_out() {
        let l = layout(
            &names(2),
            &[(0, 1), (0, 2), (7, 0), (usize::MAX, 1), (1, 1), (0, 1)],
        );
        assert_eq!(l.edges.len(), 1);
        assert_eq!((l.edges[0].from, l.edges[0].to), (0, 1));
        assert_sound(&l, 2);
        assert_eq!(layout(&[], &[(0, 1)]), Layout::default());
    }

    #[test]
    fn crossings_are_removed_where_an_ordering_has_none() {
        // Name order puts a0's and a1's dependents crosswise.
        let names: Vec<String> = ["a0", "a1", "b0", "b1"].map(String::from).to_vec();
        let l = layout(&names, &[(0, 3), (1, 2)]);
        let (b0, b1) = (node(&l, 2), node(&l, 3));
        let (a0, a1) = (node(&l, 0), node(&l, 1));
        assert_eq!(a0.y < a1.y, b1.y < b0.y, "{l:?}");
    }

    #[test]
    fn the_same_graph_draws_the_same_picture() {
        let edges = [(0, 3), (1, 3), (2, 4), (3, 5), (4, 5), (0, 5), (5, 1)];
        let a = layout(&names(6), &edges);
        let b = layout(&names(6), &edges);
        assert_eq!(a, b);
    }

    /// A pseudo-random number generator (xorshift), seeded: the same graphs every run.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self, below: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % below as u64) as usize
        }
    }

    #[test]
    fn random_graphs_of_sixty_nodes_are_laid_out_soundly() {
        for seed in 1..=40u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let n = 60;
            let count = rng.next(120);
            // Mostly acyclic (low to high index), some back edges and some out of range.
            let edges: Vec<(usize, usize)> = (0..count)
                .map(|_| {
                    let (a, b) = (rng.next(n + 2), rng.next(n + 2));
                    match rng.next(10) {
                        0 => (a, b),
                        _ => (a.min(b), a.max(b)),
                    }
                })
                .collect();
            let l = layout(&names(n), &edges);
            assert_sound(&l, n);
            assert_edges(&l);
            let expected = valid_edges(n, &edges).len();
            assert_eq!(l.edges.len(), expected, "seed {seed}");
            assert_eq!(l, layout(&names(n), &edges), "deterministic, seed {seed}");
            // Without a back edge among them, no edge is reversed.
            let acyclic: Vec<_> = edges.iter().map(|&(a, b)| (a.min(b), a.max(b))).collect();
            let l = layout(&names(n), &acyclic);
            assert!(l.edges.iter().all(|e| !e.reversed), "seed {seed}");
            assert_edges(&l);
        }
    }

    #[test]
    fn inversions_count_the_crossing_pairs() {
        let mut rng = Rng(7);
        for len in 0..60 {
            let xs: Vec<usize> = (0..len).map(|_| rng.next(8)).collect();
            let brute = (0..len)
                .flat_map(|i| (i + 1..len).map(move |j| (i, j)))
                .filter(|&(i, j)| xs[i] > xs[j])
                .count();
            let mut sorted = xs.clone();
            assert_eq!(inversions(&mut sorted), brute, "{xs:?}");
            assert!(sorted.windows(2).all(|w| w[0] <= w[1]));
        }
    }

    /// The worst a tenant can make: 200 sets each depending on its 64 predecessors. Drawn
    /// within the caps, each edge either bent through every layer it crosses or straight,
    /// in well under a second even unoptimized.
    #[test]
    fn the_worst_graph_is_bounded() {
        let n = MAX_NODES + 20;
        let edges: Vec<(usize, usize)> = (0..n)
            .flat_map(|i| (i.saturating_sub(64)..i).map(move |j| (j, i)))
            .collect();
        let started = std::time::Instant::now();
        let l = layout(&names(n), &edges);
        let took = started.elapsed();
        eprintln!("the worst graph laid out in {took:?}");
        assert!(took < std::time::Duration::from_secs(1), "{took:?}");
        assert_sound(&l, MAX_NODES);
        let valid = edges
            .iter()
            .filter(|&&(a, b)| b < MAX_NODES && a < b)
            .count();
        assert_eq!(l.edges.len(), MAX_EDGES);
        assert_eq!(l.edges_left_out, valid - MAX_EDGES);
        // Every node keeps an edge to a dependency.
        assert!((1..MAX_NODES).all(|i| l.edges.iter().any(|e| e.to == i)));
        for e in &l.edges {
            let span = node(&l, e.to).layer - node(&l, e.from).layer;
            assert!(span > 0 && !e.reversed, "{e:?}");
            assert!([2, 2 * span].contains(&e.points.len()), "{e:?}");
        }
        // Long edges past the bends' budget are drawn straight.
        let star: Vec<(usize, usize)> = (1..MAX_NODES).map(|i| (i - 1, i)).collect();
        let mut long = star.clone();
        long.extend((0..40).map(|i| (i, MAX_NODES - 1 - i)));
        let l = layout(&names(MAX_NODES), &long);
        assert_eq!((l.edges.len(), l.edges_left_out), (long.len(), 0));
        let straight = l.edges.iter().filter(|e| e.points.len() == 2).count();
        assert!(straight > MAX_NODES - 1, "{straight}");
        assert_sound(&l, MAX_NODES);
    }
}

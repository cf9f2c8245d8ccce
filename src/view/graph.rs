//! The layered layout of a dependsOn graph (Sugiyama's method, simplified: cycles broken,
//! longest-path layers, dummy nodes on long edges, barycenter sweeps against crossings, then
//! coordinates). Pure and deterministic: the same graph always draws the same picture.

/// Width and height of a node box, and the gaps between layers and within one.
pub const NODE_WIDTH: u32 = 200;
pub const NODE_HEIGHT: u32 = 36;

/// A node placed: its index in the input, its layer and its box's top-left corner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    pub index: usize,
    pub layer: usize,
    pub x: u32,
    pub y: u32,
}

/// An edge routed: from the right side of `from` to the left side of `to`, through `points`
/// (bends around the layers it crosses); `reversed` when drawn against a cycle.
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
}

/// Lays out `names.len()` nodes (their names order ties) and `edges` (`(dependency,
/// dependent)`: dependencies left of dependents).
pub fn layout(names: &[String], edges: &[(usize, usize)]) -> Layout {
    let _ = (names, edges);
    todo!("view::graph::layout")
}

//! The dependsOn graph of a set's page: the set's neighbourhood in the view's dependsOn index
//! (upstream and downstream, bounded), laid out by the library
//! ([`applyset_operator::view::graph::layout`]) and turned into what `graph.svg` draws: nodes
//! coloured by their state's CSS class, a dependency the view does not know as
//! `state-missing`, edges as polylines (a reversed one, closing a cycle, marked). At most
//! [`MAX_NODES`] sets (the live stream's neighbourhood too) and the layout's bounded edges;
//! what is left out is counted. [`drawn`] lays it out off the async workers and keeps the
//! last few graphs, by snapshot version and focus, for the page's reloads.

use std::{collections::VecDeque, sync::Arc};

use applyset_operator::{
    applyset::ParentRef,
    view::{
        Snapshot,
        graph::{self, MAX_NODES, NODE_HEIGHT, NODE_WIDTH},
    },
};
use parking_lot::{Mutex, const_mutex};

use super::{href, key};

/// Graphs kept, the newest last.
const KEPT: usize = 16;

/// The last graphs drawn: snapshot version, focus and graph.
static DRAWN: Mutex<VecDeque<(u64, ParentRef, Arc<GraphView>)>> = const_mutex(VecDeque::new());

/// Characters of a label drawn (the whole name is in the node's title).
const LABEL_CHARS: usize = 26;

/// One node drawn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphNode {
    pub href: String,
    pub key: String,
    /// `state-ready`, …, `state-missing`; plus ` focus` for the page's own set.
    pub class: String,
    /// The name, shortened to fit its box.
    pub label: String,
    /// The namespace (or `cluster`), shortened.
    pub scope: String,
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
    /// Where the two lines of text start.
    pub text_x: u32,
    pub scope_y: u32,
    pub label_y: u32,
}

/// One edge drawn: its SVG path and class (`edge`, `edge reversed`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphEdge {
    pub d: String,
    pub class: &'static str,
    /// `dependency → dependent`, for the edge's title.
    pub title: String,
}

/// The graph of one set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphView {
    pub nodes: Vec<GraphNode>,
    pub edges: Vec<GraphEdge>,
    pub width: u32,
    pub height: u32,
    /// Sets of the neighbourhood not drawn.
    pub left_out: usize,
    /// Edges among the sets drawn that are not drawn.
    pub edges_left_out: usize,
}

/// The graph around `focus` in `snapshot`: kept from an earlier request on the same
/// snapshot, or laid out on the blocking pool (no graph if the layout panicked).
pub async fn drawn(snapshot: Arc<Snapshot>, focus: ParentRef) -> GraphView {
    let version = snapshot.version;
    let kept = DRAWN
        .lock()
        .iter()
        .find(|(v, f, _)| *v == version && *f == focus)
        .map(|(_, _, g)| g.clone());
    if let Some(g) = kept {
        return GraphView::clone(&g);
    }
    let at = focus.clone();
    let Ok(g) = tokio::task::spawn_blocking(move || view(&snapshot, &at)).await else {
        return GraphView::default();
    };
    let g = Arc::new(g);
    let mut kept = DRAWN.lock();
    if kept.len() >= KEPT {
        kept.pop_front();
    }
    kept.push_back((version, focus, g.clone()));
    GraphView::clone(&g)
}

/// The graph around `focus` in `snapshot`.
pub fn view(snapshot: &Snapshot, focus: &ParentRef) -> GraphView {
    let hood = snapshot.deps.neighbourhood(focus, MAX_NODES);
    let keys: Vec<String> = hood.sets.iter().map(key).collect();
    let laid = graph::layout(&keys, &hood.edges);
    let nodes = laid
        .nodes
        .iter()
        .filter_map(|p| {
            let set = hood.sets.get(p.index)?;
            let state = match snapshot.get(set) {
                Some(s) => s.state.as_str(),
                None => "missing",
            };
            let focus = match set == focus {
                true => " focus",
                false => "",
            };
            let scope = set.namespace.as_deref().unwrap_or("cluster");
            Some(GraphNode {
                href: href(set),
                key: key(set),
                class: format!("state-{state}{focus}"),
                label: shorten(&set.name),
                scope: shorten(scope),
                x: p.x,
                y: p.y,
                width: NODE_WIDTH,
                height: NODE_HEIGHT,
                text_x: p.x.saturating_add(8),
                scope_y: p.y.saturating_add(13),
                label_y: p.y.saturating_add(29),
            })
        })
        .collect();
    let edges = laid
        .edges
        .iter()
        .map(|e| GraphEdge {
            d: path(&e.points),
            class: match e.reversed {
                true => "edge reversed",
                false => "edge",
            },
            title: format!(
                "{} → {}",
                keys.get(e.from).map_or("", String::as_str),
                keys.get(e.to).map_or("", String::as_str)
            ),
        })
        .collect();
    GraphView {
        nodes,
        edges,
        width: laid.width,
        height: laid.height,
        left_out: hood.left_out,
        edges_left_out: laid.edges_left_out,
    }
}

/// `M x,y L x,y …`.
fn path(points: &[(u32, u32)]) -> String {
    points
        .iter()
        .enumerate()
        .map(|(i, (x, y))| match i {
            0 => format!("M{x},{y}"),
            _ => format!(" L{x},{y}"),
        })
        .collect()
}

/// `text` cut to [`LABEL_CHARS`] characters, `…` marking a cut.
fn shorten(text: &str) -> String {
    match text.chars().count() > LABEL_CHARS {
        true => {
            let mut s: String = text.chars().take(LABEL_CHARS - 1).collect();
            s.push('…');
            s
        }
        false => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_labels() {
        assert_eq!(path(&[(1, 2), (3, 4), (5, 6)]), "M1,2 L3,4 L5,6");
        assert_eq!(path(&[]), "");
        assert_eq!(shorten("web"), "web");
        let long = "a".repeat(40);
        let cut = shorten(&long);
        assert_eq!(cut.chars().count(), LABEL_CHARS);
        assert!(cut.ends_with('…'));
        // Multi-byte characters are cut on a character boundary.
        assert_eq!(shorten(&"é".repeat(30)).chars().count(), LABEL_CHARS);
    }
}

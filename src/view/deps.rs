//! The dependsOn index over the cached sets, both ways, and the part of it a set's graph
//! draws. Pure.

use std::collections::BTreeMap;

use crate::applyset::ParentRef;

/// Edges `dependency -> dependents` and back, by set.
#[derive(Debug, Default)]
pub struct DepIndex {
    pub upstream: BTreeMap<String, Vec<ParentRef>>,
    pub downstream: BTreeMap<String, Vec<ParentRef>>,
}

/// The sets around one set: every set it depends on, transitively, and every set that
/// depends on it, at most `limit` of them (the focus first), with the edges among them
/// (`(dependency, dependent)` indexes into `sets`) and how many were left out.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Neighbourhood {
    pub sets: Vec<ParentRef>,
    pub edges: Vec<(usize, usize)>,
    pub left_out: usize,
}

impl DepIndex {
    /// The upstream and downstream closure of `focus`, bounded by `limit` sets.
    pub fn neighbourhood(&self, focus: &ParentRef, limit: usize) -> Neighbourhood {
        let _ = (focus, limit);
        todo!("view::DepIndex::neighbourhood")
    }
}

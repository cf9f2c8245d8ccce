//! The per-set engine: a library of verbs over one set's [`SetScope`] — learn what is live
//! ([`live::observe`], [`live::list`]), apply staged ([`apply::apply_staged`]), decide and
//! carry out a prune ([`prune::decide`], [`prune::prune`]), tell which members would be
//! adopted ([`adopt::unlabelled`]) — that the controller
//! orchestrates. Every verb acts with the scope's client, under the scope's field manager,
//! within the scope's write bound, and reports per member in one vocabulary
//! ([`outcome::Outcome`]). The reconcile's extent ([`Extent`]) is pure.

pub mod adopt;
pub mod apply;
pub mod create;
pub mod extent;
pub mod live;
pub mod outcome;
pub mod plan;
pub mod prune;
pub mod scope;

pub use extent::Extent;
pub use scope::SetScope;

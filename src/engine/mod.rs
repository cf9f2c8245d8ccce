//! The per-set engine: one API for one set, [`SetEngine`], built from a [`SetScope`], whose
//! methods are the reconcile's verbs in order — observe, plan (a dry run), apply, prune — and
//! the paged listing views read; each answers in one vocabulary ([`outcome::Outcome`],
//! classified once by [`class::Class`]) that the status, the events and every view read.
//! Below it, the modules of each verb: what is live ([`live`]), apply staged ([`apply`]),
//! decide and carry out a prune ([`prune`]), which members would be adopted ([`adopt`]).
//! Every verb acts with the scope's client, under the scope's field manager, within the
//! scope's write bound. The reconcile's extent ([`Extent`]) is pure.

pub mod adopt;
pub mod apply;
pub mod class;
pub mod create;
pub mod extent;
pub mod live;
pub mod outcome;
pub mod plan;
pub mod prune;
pub mod scope;
pub mod set;
pub mod shown;

pub use extent::Extent;
pub use scope::SetScope;
pub use set::{SetEngine, SetView};

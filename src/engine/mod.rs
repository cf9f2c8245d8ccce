//! The per-set engine: one API for one set, [`SetEngine`], built from a [`SetScope`], whose
//! methods are the reconcile's verbs in order — observe, plan (a dry run), apply, prune — and
//! the paged listing views read; each answers in one vocabulary ([`outcome::Outcome`],
//! classified once by [`class::Class`]) that the status, the events and every view read.
//! Below it, the modules of each verb: what is live ([`live`]), apply staged ([`apply`]),
//! decide and carry out a prune ([`prune`]), which members would be adopted ([`adopt`]).
//! Every verb acts with the scope's client, under the scope's field manager, within the
//! scope's write bound. The reconcile's extent ([`Extent`]) is pure.

// The engine's surface is what is re-exported here, and the lower verbs `live` and `prune`
// (which the safety tests probe one by one) and `shown`; the other modules are the engine's
// own.
pub(crate) mod adopt;
pub(crate) mod apply;
pub(crate) mod class;
pub(crate) mod create;
pub(crate) mod extent;
pub mod live;
pub(crate) mod outcome;
pub(crate) mod plan;
pub mod prune;
pub(crate) mod scope;
pub(crate) mod set;
pub mod shown;

pub use apply::body;
pub use class::{Class, ConflictKind, Refusal};
pub use extent::Extent;
pub use outcome::{MemberResult, Outcome, Preview, Retained};
pub use plan::{Before, Desired, Plan, Pruning};
pub use scope::{DEFAULT_PAGE_SIZE, SetScope};
pub use set::{SetEngine, SetView};

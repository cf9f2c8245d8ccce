//! What a view of many sets reads (`kubectl applyset ui`): a cache of every set the viewer may
//! list, kept by one watch per kind and projected into small summaries, with a feed of their
//! changes; the dependsOn index over them; a set's recent events; which namespaces the viewer
//! may watch; and the layered layout of a dependsOn graph. No HTML here: the plugin presents.
//!
//! The plugin lists and watches nothing itself (its reads go through the library, as
//! `xtask check` enforces), so the watches and the event listing live here.

pub mod access;
pub mod cache;
pub mod deps;
pub mod events;
pub mod graph;
pub mod summary;

pub use access::Watched;
pub use cache::{Change, SetCache, Snapshot};
pub use deps::DepIndex;
pub use events::EventRow;
pub use summary::{SetSummary, SourceView, State};

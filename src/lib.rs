//! applyset-operator: reconciles `ApplySet` and `ClusterApplySet` custom resources.
//!
//! The crate is a library with a thin binary (`src/main.rs`). Modules, one concept each:
//! - [`api`]: the `ApplySet` and `ClusterApplySet` custom resources.
//! - [`applyset`]: the KEP-3659 conventions (IDs, keys, annotation encoding, field managers)
//!   as pure functions.
//! - [`manifest`]: parsing and validating declared objects (the render step's building blocks).

pub mod api;
pub mod applyset;
pub mod manifest;

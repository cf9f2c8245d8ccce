//! applyset-operator: reconciles `ApplySet` and `ClusterApplySet` custom resources.
//!
//! The crate is a library; the binary (`src/main.rs`) holds the command line and the wiring
//! (client, servers, leader election, controllers), no reconcile logic. Modules, one concept
//! each (docs/design.md §10 has the repository's layout):
//! - [`api`]: the `ApplySet` and `ClusterApplySet` custom resources.
//! - [`applyset`]: the KEP-3659 conventions (IDs, keys, annotation encoding, field managers)
//!   as pure functions.
//! - [`manifest`]: parsing and validating declared objects (the render step's building blocks).
//! - [`discovery`]: API discovery, cached and refreshed on a miss.
//! - [`sources`]: manifest sources (ConfigMaps, Secrets, HTTP(S), Git, OCI artifacts).
//! - [`substitute`]: `spec.postBuild`, variables substituted in members.
//! - [`set_reads`]: reads whose content lands in a set's objects, made as the set's identity.
//! - [`stage`]: what a render stage (substitution, decryption) may spend for one set: bytes
//!   counted as they are written, against the set's bound and the operator-wide memory
//!   budget, and time, on the blocking pool.
//! - [`kind_order`]: the order of kinds: CRDs and Namespaces apply first and prune last (the
//!   stages of apply, the order of prune).
//! - [`tenancy`]: which identity a set acts with, and what a set may declare (pure).
//! - [`render`]: the desired set of a parent: manifests resolved to API resources and scopes.
//! - [`parent`]: the parent's ApplySet labels and annotations (ownership, superset, shrink),
//!   and either parent kind as one value (`AnyParent`).
//! - [`engine`]: the per-set engine — `SetEngine`, one API for one set, built from a scope
//!   computed once per reconcile (ID, field manager, selector, client, write bound), whose
//!   methods are the verbs in order: observe, plan (a dry run), apply, prune, and the paged
//!   listing views read; every verb reports per member in one vocabulary, classified once.
//! - [`members`]: member watches (no write when nothing changed; prompt drift correction;
//!   health between reconciles); which sets hold which member kinds (`members::watch_refs`).
//! - [`health`]: the health of an object (kstatus's rules: Current, InProgress, Failed, ...)
//!   and of many, as pure functions.
//! - [`ignore`]: drift-ignore rules (`spec.ignore`): which fields of which members the set
//!   neither corrects nor reports, and what an apply sends of them (pure).
//! - [`terminating`]: namespaces being terminated (no apply is sent into one).
//! - [`backoff`]: how the operator's watches retry after an error.
//! - [`status`]: conditions without timestamp churn.
//! - [`metrics`]: Prometheus metrics.
//! - [`dependencies`]: the rules of `spec.dependsOn` (readiness, cycles, deletion order)
//!   and the index from dependencies to dependents.
//! - [`fair`]: the reconcile workers shared round robin between namespaces (a wait on the
//!   network holds none).
//! - [`controller`]: the controllers and the reconcile, docs/design.md §4 as a line of named
//!   steps that orchestrate the engine.
//! - [`server`]: `/metrics`, `/healthz`, `/readyz`.
//! - [`leader`]: leader election on a Lease.
//! - [`shard`]: automatic sharding: buckets, their owners among the live replicas, the fence
//!   before a prune or delete (pure).

pub mod api;
pub mod applyset;
pub mod backoff;
pub mod controller;
pub mod convert;
pub mod decryption;
pub mod dependencies;
pub mod discovery;
pub mod engine;
pub mod fair;
pub mod health;
pub mod ignore;
pub mod kind_order;
pub mod leader;
pub mod manifest;
pub mod members;
pub mod metrics;
pub mod parent;
pub mod render;
pub mod server;
pub mod set_reads;
pub mod shard;
pub mod sops;
pub mod sources;
pub mod stage;
pub mod status;
pub mod substitute;
pub mod tenancy;
pub mod terminating;
pub mod view;

/// Errors of the operator's I/O. Problems with what the user declared are not errors of this
/// type: they are reported in status (see [`render::RenderError`], [`applyset::OwnershipError`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("API discovery failed: {0}")]
    Discovery(#[source] kube::Error),
    #[error("serializing {what}: {source}")]
    Serialize {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    #[error("{who} may not {what}: {message}; grant {who} this permission")]
    Forbidden {
        who: String,
        what: String,
        message: String,
    },
    #[error("reconcile panicked: {0}")]
    Panic(String),
    #[error("prune: {0}")]
    Prune(PruneError),
    #[error("{0} has no name")]
    Unnamed(&'static str),
    /// Under `--shards auto`: another replica claimed the set since this one did; this
    /// replica deletes and writes nothing more for it (see [`shard::fence`]).
    #[error(
        "{parent}: claimed by another replica since {holder} claimed it (epoch {epoch}); nothing more is deleted or written by {holder}"
    )]
    Fenced {
        parent: String,
        holder: String,
        epoch: u64,
    },
    /// The parent turned out not to be ours when a refused write of it read it again (another
    /// tool's tooling, another parent's ID): nothing is written (see
    /// [`shard::fence::AfterRefusal`]).
    #[error("{parent}: {cause}")]
    NotOurs {
        parent: String,
        cause: applyset::OwnershipError,
    },
}

impl Error {
    /// A short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Discovery(_) => "discovery",
            Error::Serialize { .. } => "serialize",
            Error::Finalizer(_) => "finalizer",
            Error::Forbidden { .. } => "forbidden",
            Error::Panic(_) => "panic",
            Error::Prune(_) => "prune",
            Error::Unnamed(_) => "unnamed",
            Error::Fenced { .. } => "fenced",
            Error::NotOurs { .. } => "not_ours",
        }
    }
}

/// Why a prune could not be decided or did not complete (nothing, or not everything, was
/// pruned; the parent keeps recording every kind).
#[derive(Debug, thiserror::Error)]
pub enum PruneError {
    /// A kind the parent records answers 404 to a LIST although discovery serves it.
    #[error(
        "listing {kind} answers 404 although discovery serves it as {api_version}; nothing is pruned and the parent keeps recording the kind"
    )]
    NotListed {
        kind: applyset::GroupKind,
        api_version: String,
    },
    /// A namespaced kind recorded without any namespace to look for its members in.
    #[error(
        "{0} is namespaced but the parent records no namespace to look for its members in; nothing is pruned and the parent keeps recording the kind. List the namespaces of its members in the parent's annotation applyset.kubernetes.io/additional-namespaces"
    )]
    NoNamespaces(applyset::GroupKind),
    /// The parent's ApplySet annotations do not parse.
    #[error("its ApplySet annotations are malformed ({0})")]
    MalformedRecord(String),
    /// Members that could not be deleted, or changed while being deleted (one message each).
    #[error("{}", .0.join("; "))]
    Incomplete(Vec<String>),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

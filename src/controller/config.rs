//! How the operator runs: the controllers' configuration (from the command line, see
//! `src/main.rs` and docs/operations.md's flags table) and its defaults.

use std::time::Duration;

use super::impersonate;
use crate::{sources, tenancy};

/// Default of `--min-interval`.
pub const DEFAULT_MIN_INTERVAL: Duration = Duration::from_secs(10);

/// How the operator runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Workers of each controller: reconciles doing their work at once (a reconcile reading
    /// its sources gives its worker back meanwhile), shared round robin between namespaces
    /// (see [`crate::fair`]); also how many reconciles of one namespace are in progress at
    /// once (their source reads included).
    pub concurrency: u16,
    /// Member writes (applies and deletes) in flight, across all parents at once: one large
    /// set may use them all, many small ones share them.
    pub apply_concurrency: usize,
    /// Only ApplySets in this namespace (ClusterApplySets are always watched).
    pub watch_namespace: Option<String>,
    /// Only parents (both kinds) whose labels match this selector.
    pub label_selector: Option<String>,
    /// `--shards auto`: this replica reconciles only the sets it owns now.
    pub shards: Option<crate::shard::Shards>,
    /// Bounds on what sources may download and unpack.
    pub source_limits: sources::Limits,
    /// Scratch directory of the sources (default: the system's temporary directory).
    pub source_dir: Option<std::path::PathBuf>,
    /// Which hosts and addresses sources may reach (`--source-deny-cidrs`,
    /// `--source-allowed-hosts`, `--source-insecure`).
    pub source_policy: sources::egress::Policy,
    /// Lock-down defaults: which ServiceAccount sets that name none act as, and whether a
    /// set acting as the operator may reach beyond its namespace.
    pub tenancy: tenancy::Defaults,
    /// What one set may declare: members, parsed YAML/JSON.
    pub set_limits: crate::render::SetLimits,
    /// `--max-impersonation-clients`: impersonating clients kept (least recently used out).
    pub max_impersonation_clients: usize,
    /// `--max-health-watches`: objects of health checks watched at once, for all sets.
    pub max_health_watches: usize,
    /// `--min-interval`: shorter `spec.interval`s are raised to it (and status says so).
    pub min_interval: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            concurrency: 8,
            apply_concurrency: 64,
            watch_namespace: None,
            label_selector: None,
            shards: None,
            source_limits: sources::Limits::default(),
            source_dir: None,
            source_policy: sources::egress::Policy::default(),
            tenancy: tenancy::Defaults::default(),
            set_limits: crate::render::SetLimits::default(),
            max_impersonation_clients: impersonate::DEFAULT_MAX_CLIENTS,
            max_health_watches: crate::members::MAX_CHECKED_OBJECTS,
            min_interval: DEFAULT_MIN_INTERVAL,
        }
    }
}

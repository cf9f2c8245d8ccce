//! `applyset-operator`, the operator's binary over the library: the command line and its
//! flags (about half of this file), logging, the API client, the `/metrics` and health
//! servers, leader election and the start and shutdown of the controllers. No reconcile logic
//! lives here.

use std::{process::ExitCode, sync::Arc};

use applyset_operator::{
    controller::{Config, Operator},
    leader::{Election, LeaseConfig},
    metrics::Metrics,
    server::{self, Health, Phase},
    shard::membership,
};
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "applyset-operator",
    version,
    about = "Reconciles ApplySet and ClusterApplySet resources"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the operator against the cluster of the current kubeconfig or service account.
    Run(Box<RunArgs>),
    /// Print both CRDs as YAML.
    Crd,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Workers per controller: reconciles doing their work at once, shared round robin
    /// between namespaces (a reconcile reading its sources gives its worker back meanwhile);
    /// also the reconciles of one namespace in progress at once.
    #[arg(long, env = "APPLYSET_CONCURRENCY", default_value_t = 8)]
    concurrency: u16,
    /// Member writes (applies, deletes) in flight across all ApplySets; one large set may
    /// use them all. Also the number of concurrent member LISTs of one reconcile.
    #[arg(long, env = "APPLYSET_APPLY_CONCURRENCY", default_value_t = 64)]
    apply_concurrency: usize,
    /// Only reconcile ApplySets in this namespace (ClusterApplySets are always reconciled).
    #[arg(long, env = "APPLYSET_WATCH_NAMESPACE")]
    watch_namespace: Option<String>,
    /// Only reconcile parents whose labels match this selector (for sharding).
    #[arg(long, env = "APPLYSET_LABEL_SELECTOR")]
    label_selector: Option<String>,
    /// Log format.
    #[arg(long, env = "APPLYSET_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Address of /metrics (Prometheus text format).
    #[arg(long, env = "APPLYSET_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    metrics_addr: String,
    /// Address of /healthz and /readyz.
    #[arg(long, env = "APPLYSET_HEALTH_ADDR", default_value = "0.0.0.0:8081")]
    health_addr: String,
    /// Run the controllers only while holding a coordination.k8s.io Lease (for several
    /// replicas).
    #[arg(long, env = "APPLYSET_LEADER_ELECT", default_value_t = false)]
    leader_elect: bool,
    /// Namespace of the Lease (default: $POD_NAMESPACE, else "default").
    #[arg(long, env = "APPLYSET_LEADER_ELECTION_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// Name of the Lease.
    #[arg(
        long,
        env = "APPLYSET_LEADER_ELECTION_NAME",
        default_value = "applyset-operator"
    )]
    leader_election_name: String,
    /// Seconds the Lease is valid without renewal: a failed leader is replaced within it
    /// (with `--shards auto`, a failed replica's sets move within it).
    #[arg(long, env = "APPLYSET_LEASE_DURATION", default_value_t = 15)]
    lease_duration: u64,
    /// `auto`: every replica reconciles a share of the sets (each holds a Lease named after
    /// `--leader-election-name` and `--shard-name`; a set's owner is chosen by rendezvous
    /// hashing of its ID over the live replicas). `off`: one replica does all
    /// (`--leader-elect` for a standby). Exclusive with `--leader-elect`.
    #[arg(long, env = "APPLYSET_SHARDS", value_enum, default_value_t = ShardMode::Off)]
    shards: ShardMode,
    /// This replica's name under `--shards auto`: stable for the pod (default: $POD_NAME);
    /// a label value (at most 63 characters).
    #[arg(long, env = "APPLYSET_SHARD_NAME")]
    shard_name: Option<String>,
    /// Scratch directory of the sources (Git fetches); must be writable.
    #[arg(long, env = "APPLYSET_SOURCE_DIR")]
    source_dir: Option<std::path::PathBuf>,
    /// Largest download of a source (HTTP body, OCI blob), in MiB.
    #[arg(long, env = "APPLYSET_SOURCE_MAX_DOWNLOAD_MIB", default_value_t = 64)]
    source_max_download_mib: u64,
    /// Largest unpacked size of a source's archive or manifests, in MiB.
    #[arg(long, env = "APPLYSET_SOURCE_MAX_UNPACKED_MIB", default_value_t = 256)]
    source_max_unpacked_mib: u64,
    /// Most entries of a source: of an HTTP bundle, of an OCI artifact's layers together,
    /// under a Git source's path (files and directories).
    #[arg(long, env = "APPLYSET_SOURCE_MAX_ENTRIES", default_value_t = 10_000)]
    source_max_entries: usize,
    /// Deadline for reading all the sources of one ApplySet, in seconds.
    #[arg(long, env = "APPLYSET_SOURCE_TIMEOUT", default_value_t = 120)]
    source_timeout: u64,
    /// Memory budget for source content being fetched and parsed, shared by all sets, in MiB:
    /// a fetch that cannot get its share waits (at most half of --source-timeout), then fails.
    #[arg(long, env = "APPLYSET_SOURCE_MEMORY_MIB", default_value_t = 256)]
    source_memory_mib: u64,
    /// Each set's share of --source-memory-mib, in MiB: a set's sources never hold more at
    /// once (a set over it waits, at most half of --source-timeout, then fails alone).
    #[arg(long, env = "APPLYSET_SOURCE_MEMORY_PER_SET", default_value_t = 128)]
    source_memory_per_set: u64,
    /// Address ranges sources may never connect to, besides link-local and cloud metadata
    /// addresses (always refused) and loopback (refused by default): CIDRs or addresses,
    /// comma-separated (e.g. the cluster's service and pod CIDRs).
    #[arg(long, env = "APPLYSET_SOURCE_DENY_CIDRS", value_delimiter = ',')]
    source_deny_cidrs: Vec<String>,
    /// Address ranges exempt from the default refusals (loopback), comma-separated; other
    /// hosts stay allowed. Link-local and cloud metadata addresses are never exempt.
    #[arg(long, env = "APPLYSET_SOURCE_ALLOW_CIDRS", value_delimiter = ',')]
    source_allow_cidrs: Vec<String>,
    /// When set, the only hosts sources may contact (first request, redirects, OCI token
    /// services): comma-separated patterns `host`, `host:port`, `*.domain`, an address.
    #[arg(long, env = "APPLYSET_SOURCE_ALLOWED_HOSTS", value_delimiter = ',')]
    source_allowed_hosts: Vec<String>,
    /// Whether sources may use plain http:// and OCI insecure: true (false refuses them).
    #[arg(long, env = "APPLYSET_SOURCE_INSECURE", default_value_t = true, action = clap::ArgAction::Set)]
    source_insecure: bool,
    /// The kustomize binary that builds overlays of directory sources (default: `kustomize`
    /// beside the operator's executable, else on PATH).
    #[arg(long, env = "APPLYSET_KUSTOMIZE_BINARY")]
    kustomize_binary: Option<std::path::PathBuf>,
    /// Kustomize builds at once, operator-wide.
    #[arg(long, env = "APPLYSET_KUSTOMIZE_CONCURRENCY", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    kustomize_concurrency: u16,
    /// The memory (data segment) one kustomize build may use, in MiB (at least 128: the
    /// binary needs about 100 to start).
    #[arg(long, env = "APPLYSET_KUSTOMIZE_MEMORY_MIB", default_value_t = 512, value_parser = clap::value_parser!(u64).range(128..))]
    kustomize_memory_mib: u64,
    /// Whether kustomize builds run in an empty network namespace (defence in depth behind the
    /// pre-build check): auto (when the platform allows one: root outside a pod; a pod's
    /// RuntimeDefault seccomp profile refuses it, logged once) or off.
    #[arg(long, env = "APPLYSET_KUSTOMIZE_NETWORK_SANDBOX", value_enum, default_value_t = applyset_operator::sources::kustomize::NetworkSandbox::Auto)]
    kustomize_network_sandbox: applyset_operator::sources::kustomize::NetworkSandbox,
    /// Lock-down: an ApplySet without spec.serviceAccountName acts as this ServiceAccount of
    /// its own namespace (impersonation).
    #[arg(long, env = "APPLYSET_DEFAULT_SERVICE_ACCOUNT")]
    default_service_account: Option<String>,
    /// Lock-down: a ClusterApplySet without spec.serviceAccountName acts as this
    /// ServiceAccount, given as NAMESPACE/NAME.
    #[arg(long, env = "APPLYSET_CLUSTER_DEFAULT_SERVICE_ACCOUNT", value_parser = applyset_operator::tenancy::parse_namespaced_name)]
    cluster_default_service_account: Option<(String, String)>,
    /// Let an ApplySet that acts with the operator's own identity declare members in other
    /// namespaces and cluster-scoped members (off: refused with ValidationFailed).
    #[arg(
        long,
        env = "APPLYSET_ALLOW_CROSS_NAMESPACE_SETS",
        default_value_t = false
    )]
    allow_cross_namespace_sets: bool,
    /// Most members one set may declare (more: ValidationFailed).
    #[arg(long, env = "APPLYSET_MAX_MEMBERS_PER_SET", default_value_t = applyset_operator::render::DEFAULT_MAX_MEMBERS_PER_SET)]
    max_members_per_set: usize,
    /// Most distinct kinds (group and kind) of the members of one set (more:
    /// ValidationFailed); each kind may cost the operator a watch.
    #[arg(long, env = "APPLYSET_MAX_KINDS_PER_SET", default_value_t = applyset_operator::render::DEFAULT_MAX_KINDS_PER_SET)]
    max_kinds_per_set: usize,
    /// Most impersonating clients kept (one per ServiceAccount sets act as; the least
    /// recently used is dropped beyond it and made again when needed).
    #[arg(long, env = "APPLYSET_MAX_IMPERSONATION_CLIENTS", default_value_t = applyset_operator::controller::impersonate::DEFAULT_MAX_CLIENTS)]
    max_impersonation_clients: usize,
    /// Most objects of spec.healthChecks watched at once, for all sets together (at most 64
    /// per set); a check beyond waits, Unknown, until room frees.
    #[arg(long, env = "APPLYSET_MAX_HEALTH_WATCHES", default_value_t = applyset_operator::members::MAX_CHECKED_OBJECTS)]
    max_health_watches: usize,
    /// Shortest spec.interval the operator honours (e.g. 10s, 1m): shorter ones are raised
    /// to it, and status says so.
    #[arg(long, env = "APPLYSET_MIN_INTERVAL", default_value = "10s", value_parser = parse_min_interval)]
    min_interval: std::time::Duration,
    /// Most YAML/JSON nodes (mappings, lists, scalars, keys) of one set's manifests, summed
    /// over its inline manifests and all its sources.
    #[arg(long, env = "APPLYSET_MAX_YAML_NODES_PER_SET", default_value_t = applyset_operator::manifest::DEFAULT_SET_YAML_NODES)]
    max_yaml_nodes_per_set: usize,
    /// Most YAML/JSON text of one set's manifests, summed like the nodes, in MiB.
    #[arg(long, env = "APPLYSET_MAX_YAML_MIB_PER_SET", default_value_t = 64)]
    max_yaml_mib_per_set: usize,
    /// Most JSON text of one set's inline manifests (spec.manifests, as the API server sends
    /// it), in KiB: checked before any of it is parsed. Larger sets fail with ValidationFailed.
    #[arg(long, env = "APPLYSET_MAX_INLINE_MANIFESTS_KIB", default_value_t = applyset_operator::render::DEFAULT_MAX_INLINE_MANIFESTS_KIB)]
    max_inline_manifests_kib: usize,
    /// Largest member as JSON, in KiB (the API server reads at most 3 MiB in one request):
    /// checked after substitution and decryption, before the apply. Larger members fail their
    /// set with ValidationFailed.
    #[arg(long, env = "APPLYSET_MAX_MEMBER_KIB", default_value_t = applyset_operator::render::DEFAULT_MAX_MEMBER_KIB)]
    max_member_kib: usize,
    /// Largest SOPS-encrypted file, and largest plaintext one may decrypt to, in KiB.
    #[arg(long, env = "APPLYSET_SOPS_MAX_FILE_KIB", default_value_t = applyset_operator::sops::DEFAULT_MAX_FILE_KIB)]
    sops_max_file_kib: usize,
    /// Most values (nodes) of one SOPS-encrypted file.
    #[arg(long, env = "APPLYSET_SOPS_MAX_VALUES", default_value_t = applyset_operator::sops::DEFAULT_MAX_VALUES)]
    sops_max_values: usize,
    /// Most age identities in a set's key Secret (each is tried on every recipient of every
    /// file; more: the set fails naming the Secret).
    #[arg(long, env = "APPLYSET_SOPS_MAX_AGE_IDENTITIES", default_value_t = applyset_operator::sops::DEFAULT_MAX_IDENTITIES)]
    sops_max_age_identities: usize,
    /// Most age recipient stanzas of one SOPS-encrypted file (more: refused naming the file).
    #[arg(long, env = "APPLYSET_SOPS_MAX_AGE_RECIPIENTS", default_value_t = applyset_operator::sops::DEFAULT_MAX_STANZAS)]
    sops_max_age_recipients: usize,
}

/// A duration of `--min-interval`, in the form of spec.interval (`10s`, `1m30s`).
fn parse_min_interval(s: &str) -> Result<std::time::Duration, String> {
    applyset_operator::api::parse_duration(s)
        .ok_or_else(|| format!("{s:?} is not a duration such as 10s or 1m"))
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// A shutdown signal (SIGTERM, Ctrl-C) caught once for the whole run: every phase (standing by
/// for the Lease, operating) sees it, including one that starts waiting after it arrived. (A
/// signal listener made per phase missed a SIGTERM that came between two phases: the
/// operator then ran on until killed.)
fn shutdown_requested() -> tokio::sync::watch::Receiver<bool> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = tx.send(true);
    });
    rx
}

/// Resolves once a shutdown was requested (at once if it already was).
async fn requested(shutdown: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Whether the sets are shared between replicas (`--shards`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ShardMode {
    Off,
    Auto,
}

/// This replica's identity in the Lease: the pod name, else host name and process id.
fn identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    format!("{}-{}", host.trim(), std::process::id())
}

async fn run(args: RunArgs) -> ExitCode {
    init_logging(args.log_format);
    let mut shutdown = shutdown_requested();
    let config = match operator_config(&args) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "invalid flags");
            return ExitCode::FAILURE;
        }
    };
    let shard_settings = match shard_settings(&args) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "invalid flags");
            return ExitCode::FAILURE;
        }
    };
    let metrics = Arc::new(Metrics::new());
    let client = match kube_client(metrics.clone()).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let (config, membership) = match shard_settings {
        Some(settings) => {
            let (shards, membership) = start_membership(&client, settings);
            let config = Config {
                shards: Some(shards),
                ..config
            };
            (config, Some(membership))
        }
        None => (config, None),
    };
    tracing::info!(?config, version = env!("CARGO_PKG_VERSION"), "starting");

    let health = Health::default();
    if let Err(code) = serve(&args, &health, &metrics).await {
        return code;
    }
    let election = if args.leader_elect {
        match lead(&args, &client, &health, &mut shutdown).await {
            Ok(e) => Some(e),
            Err(code) => return code,
        }
    } else {
        None
    };
    let code = operate(client, config, metrics, &health, election, &mut shutdown).await;
    // The in-flight reconciles are over: the Lease goes, the others take over at once.
    if let Some((stop, task)) = membership {
        let _ = stop.send(true);
        let _ = task.await;
    }
    code
}

/// The settings of `--shards auto` (None when off); an error names the flag at fault.
fn shard_settings(args: &RunArgs) -> Result<Option<membership::Settings>, String> {
    if args.shards == ShardMode::Off {
        return Ok(None);
    }
    if args.leader_elect {
        return Err("--shards auto and --leader-elect exclude each other: under --shards auto every replica reconciles its share".into());
    }
    let name = args
        .shard_name
        .clone()
        .or_else(|| std::env::var("POD_NAME").ok())
        .filter(|n| !n.is_empty())
        .ok_or("--shards auto needs --shard-name or $POD_NAME (this replica's stable name)")?;
    if !applyset_operator::shard::valid_replica_name(&name) {
        return Err(format!(
            "--shard-name {name:?}: not a label value (at most 63 characters: letters, digits, '-', '_', '.', starting and ending with a letter or digit)"
        ));
    }
    if args.lease_duration < 3 {
        return Err("--lease-duration must be at least 3 seconds under --shards auto".into());
    }
    let lease = lease_config(args);
    Ok(Some(membership::Settings {
        namespace: lease.namespace,
        group: lease.name,
        name,
        incarnation: incarnation(),
        duration: std::time::Duration::from_secs(args.lease_duration),
    }))
}

/// Sixteen random hex digits, new at every start: a restarted replica of the same name is
/// another holder of its sets. Without the system's random source, a hash of the time and
/// the process ID.
fn incarnation() -> String {
    let random = getrandom::u64().unwrap_or_else(|_| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let mut h = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&(nanos, std::process::id()), &mut h);
        std::hash::Hasher::finish(&h)
    });
    format!("{random:016x}")
}

/// Starts this replica's membership (its Lease, the watch of the others'); returns what the
/// controllers hold of it, and how to stop it.
fn start_membership(
    client: &kube::Client,
    settings: membership::Settings,
) -> (
    applyset_operator::shard::Shards,
    (
        tokio::sync::watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    ),
) {
    tracing::info!(replica = %settings.name, holder = %settings.holder(), group = %settings.group, "sharding: --shards auto");
    let (tx, rx) = tokio::sync::watch::channel(membership::Assignment::default());
    let shards = applyset_operator::shard::Shards {
        holder: settings.holder(),
        assignment: rx,
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(membership::run(client.clone(), settings, tx, stop_rx));
    (shards, (stop_tx, task))
}

/// A Kubernetes client from the kubeconfig or service account, counting its requests in
/// `metrics`; logs why there is none.
async fn kube_client(metrics: Arc<Metrics>) -> Result<kube::Client, ExitCode> {
    match kube::Config::infer().await {
        Ok(c) => match applyset_operator::metrics::counting_client(c, metrics) {
            Ok(c) => Ok(c),
            Err(e) => {
                tracing::error!(error = %e, "cannot build a Kubernetes client");
                Err(ExitCode::FAILURE)
            }
        },
        Err(e) => {
            tracing::error!(error = %e, "no Kubernetes configuration (set KUBECONFIG or run in a pod)");
            Err(ExitCode::FAILURE)
        }
    }
}

/// The controllers' configuration from the command line; an error names a flag whose value
/// is not valid.
fn operator_config(args: &RunArgs) -> Result<Config, String> {
    let source_policy = applyset_operator::sources::egress::Policy::new(
        &args.source_deny_cidrs,
        &args.source_allowed_hosts,
        args.source_insecure,
    )
    .and_then(|p| p.with_allowed_cidrs(&args.source_allow_cidrs))
    .map_err(|e| e.to_string())?;
    let set_limits = applyset_operator::render::SetLimits {
        max_members: args.max_members_per_set,
        max_kinds: args.max_kinds_per_set,
        yaml: applyset_operator::manifest::YamlCost {
            nodes: args.max_yaml_nodes_per_set,
            bytes: args.max_yaml_mib_per_set.saturating_mul(1 << 20),
        },
        max_inline_bytes: args.max_inline_manifests_kib.saturating_mul(1 << 10),
        max_member_bytes: args.max_member_kib.max(1).saturating_mul(1 << 10),
        sops: applyset_operator::sops::Limits {
            max_bytes: args.sops_max_file_kib.saturating_mul(1 << 10),
            max_values: args.sops_max_values,
            max_identities: args.sops_max_age_identities,
            max_stanzas: args.sops_max_age_recipients,
            ..Default::default()
        },
    };
    // Every parse of a source is bounded by the per-set budget too (see manifest.rs).
    applyset_operator::manifest::set_parse_limit(set_limits.yaml);
    Ok(Config {
        concurrency: args.concurrency,
        apply_concurrency: args.apply_concurrency,
        watch_namespace: args.watch_namespace.clone(),
        label_selector: args.label_selector.clone(),
        shards: None,
        source_limits: applyset_operator::sources::Limits {
            max_download: args.source_max_download_mib.saturating_mul(1 << 20),
            max_unpacked: args.source_max_unpacked_mib.saturating_mul(1 << 20),
            max_entries: args.source_max_entries.max(1),
            timeout: std::time::Duration::from_secs(args.source_timeout.max(1)),
            memory: args.source_memory_mib.max(1).saturating_mul(1 << 20),
            memory_per_set: args.source_memory_per_set.max(1).saturating_mul(1 << 20),
            kustomize: applyset_operator::sources::kustomize::Settings {
                binary: args.kustomize_binary.clone(),
                concurrency: usize::from(args.kustomize_concurrency),
                memory: args.kustomize_memory_mib.saturating_mul(1 << 20),
                network_sandbox: args.kustomize_network_sandbox,
            },
            ..Default::default()
        },
        source_dir: args.source_dir.clone(),
        source_policy,
        tenancy: applyset_operator::tenancy::Defaults {
            namespaced: args.default_service_account.clone(),
            cluster: args.cluster_default_service_account.clone(),
            allow_cross_namespace: args.allow_cross_namespace_sets,
        },
        set_limits,
        max_impersonation_clients: args.max_impersonation_clients,
        max_health_watches: args.max_health_watches,
        min_interval: args.min_interval,
    })
}

/// Binds the health and metrics addresses and serves them in the background; logs why it
/// cannot.
async fn serve(args: &RunArgs, health: &Health, metrics: &Arc<Metrics>) -> Result<(), ExitCode> {
    let servers = async {
        let (h_addr, h) = server::health_server(&args.health_addr, health.clone()).await?;
        let (m_addr, m) = server::metrics_server(&args.metrics_addr, metrics.clone()).await?;
        tracing::info!(health = %h_addr, metrics = %m_addr, "serving /healthz, /readyz and /metrics");
        std::io::Result::Ok((h, m))
    };
    let (health_srv, metrics_srv) = match servers.await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen on the health or metrics address");
            return Err(ExitCode::FAILURE);
        }
    };
    tokio::spawn(health_srv);
    tokio::spawn(metrics_srv);
    Ok(())
}

/// The Lease of the leader election, from the command line and the environment.
fn lease_config(args: &RunArgs) -> LeaseConfig {
    LeaseConfig {
        namespace: args
            .leader_election_namespace
            .clone()
            .or_else(|| {
                std::env::var("POD_NAMESPACE")
                    .ok()
                    .filter(|n| !n.is_empty())
            })
            .unwrap_or_else(|| "default".into()),
        name: args.leader_election_name.clone(),
        identity: identity(),
        duration_secs: args.lease_duration.max(2),
        grace_secs: (args.lease_duration / 3).max(1),
    }
}

/// Stands by until this replica holds the Lease. `Err` is the exit code when it never will:
/// success on a shutdown signal (the Lease released), failure when the election fails.
async fn lead(
    args: &RunArgs,
    client: &kube::Client,
    health: &Health,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<Election, ExitCode> {
    let lease = lease_config(args);
    health.set(Phase::Standby);
    let mut e = match Election::start(client.clone(), &lease).await {
        Ok(e) => e,
        Err(err) => {
            tracing::error!(error = %err, lease = ?lease, "leader election failed to start");
            return Err(ExitCode::FAILURE);
        }
    };
    tracing::info!(identity = %lease.identity, lease = %format!("{}/{}", lease.namespace, lease.name), "waiting for leadership");
    tokio::select! {
        _ = requested(shutdown) => {
            e.release().await;
            return Err(ExitCode::SUCCESS);
        }
        acquired = e.acquired() => {
            if !acquired {
                tracing::error!("leader election stopped before leadership was acquired");
                return Err(ExitCode::FAILURE);
            }
        }
    }
    tracing::info!(identity = %lease.identity, "leader: starting the controllers");
    Ok(e)
}

/// Runs the controllers until a shutdown signal (in-flight reconciles finish), their
/// unexpected end, or the loss of the Lease (exit at once); releases the Lease unless lost.
async fn operate(
    client: kube::Client,
    config: Config,
    metrics: Arc<Metrics>,
    health: &Health,
    mut election: Option<Election>,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> ExitCode {
    let mut operator = Operator::start_with(client, config, metrics);
    health.set(Phase::Running(operator.readiness()));
    let lost = async {
        match election.as_mut() {
            Some(e) => e.lost().await,
            None => std::future::pending().await,
        }
    };
    let code = tokio::select! {
        _ = requested(shutdown) => {
            tracing::info!("shutting down: finishing in-flight reconciles");
            operator.shutdown().await;
            ExitCode::SUCCESS
        }
        _ = operator.finished() => {
            tracing::error!("the controllers stopped unexpectedly");
            ExitCode::FAILURE
        }
        _ = lost => {
            // Another replica may already reconcile: stop at once and let the restart
            // stand by again.
            tracing::error!("lost the leader lease; exiting");
            return ExitCode::FAILURE;
        }
    };
    if let Some(e) = election {
        e.release().await;
    }
    code
}

/// With `--features dhat-heap`, every allocation is tracked (see Cargo.toml).
#[cfg(feature = "dhat-heap")]
#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

fn main() -> ExitCode {
    // Writes dhat-heap.json (the heap at its peak, by allocation site) when main returns.
    #[cfg(feature = "dhat-heap")]
    let _profiler = dhat::Profiler::builder().trim_backtraces(Some(40)).build();
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => match applyset_operator::api::crds_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Run(args) => match tokio::runtime::Runtime::new() {
            Ok(rt) => rt.block_on(run(*args)),
            Err(e) => {
                eprintln!("error: starting the runtime: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_args(args: &[&str]) -> RunArgs {
        let argv = ["applyset-operator", "run"].iter().chain(args);
        match Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(Command::Run(a)) => *a,
            Ok(Command::Crd) => panic!("not run"),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn sops_flags_set_the_decryption_bounds() {
        let config = operator_config(&run_args(&[])).expect("defaults");
        assert_eq!(
            config.set_limits.sops,
            applyset_operator::sops::Limits::default()
        );
        let config = operator_config(&run_args(&[
            "--sops-max-file-kib=16",
            "--sops-max-values=50",
            "--sops-max-age-identities=4",
            "--sops-max-age-recipients=2",
        ]))
        .expect("valid flags");
        let sops = config.set_limits.sops;
        assert_eq!(
            (
                sops.max_bytes,
                sops.max_values,
                sops.max_identities,
                sops.max_stanzas
            ),
            (16 << 10, 50, 4, 2)
        );
    }

    #[test]
    fn source_policy_and_memory_flags() {
        let config = operator_config(&run_args(&[])).expect("defaults");
        assert_eq!(config.source_limits.memory, 256 << 20);
        assert!(config.source_policy.insecure_allowed());
        let config = operator_config(&run_args(&[
            "--source-memory-mib=32",
            "--source-deny-cidrs=10.96.0.0/12,127.0.0.2",
            "--source-deny-cidrs",
            "fd00::/8",
            "--source-allowed-hosts=*.example.com,registry.local:5000",
            "--source-insecure=false",
        ]))
        .expect("valid flags");
        assert_eq!(config.source_limits.memory, 32 << 20);
        let p = &config.source_policy;
        assert!(!p.insecure_allowed());
        for denied in ["10.96.0.1", "127.0.0.2", "fd00::1", "169.254.169.254"] {
            let ip = denied.parse().expect("ip");
            assert!(p.check_ip(ip, None).is_err(), "{denied}");
        }
        assert!(p.check_url_str("https://git.example.com/r.git").is_ok());
        assert!(p.check_url_str("https://registry.local:5000/v2/").is_ok());
        assert!(p.check_url_str("https://registry.local/v2/").is_err());
        let err = operator_config(&run_args(&["--source-deny-cidrs=10.0.0.0/33"]))
            .err()
            .unwrap_or_default();
        assert!(err.starts_with("--source-deny-cidrs: "), "{err}");
        let err = operator_config(&run_args(&["--source-allowed-hosts=https://x"]))
            .err()
            .unwrap_or_default();
        assert!(err.starts_with("--source-allowed-hosts: "), "{err}");
        // Loopback: refused by default, exempt by --source-allow-cidrs (never metadata).
        let lo = "127.0.0.1".parse().expect("ip");
        let p = operator_config(&run_args(&[]))
            .expect("defaults")
            .source_policy;
        assert!(p.check_ip(lo, None).is_err());
        let config = operator_config(&run_args(&[
            "--source-allow-cidrs=127.0.0.0/8,169.254.0.0/16",
        ]))
        .expect("valid flags");
        assert!(config.source_policy.check_ip(lo, None).is_ok());
        let metadata = "169.254.169.254".parse().expect("ip");
        assert!(config.source_policy.check_ip(metadata, None).is_err());
        let err = operator_config(&run_args(&["--source-allow-cidrs=x"]))
            .err()
            .unwrap_or_default();
        assert!(err.starts_with("--source-allow-cidrs: "), "{err}");
    }
}

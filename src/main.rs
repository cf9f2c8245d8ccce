//! `applyset-operator` — the thin binary over the library.

use std::process::ExitCode;

use applyset_operator::controller::{Config, Operator};
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
    Run(RunArgs),
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
    /// ApplySets reconciled at once.
    #[arg(long, env = "APPLYSET_CONCURRENCY", default_value_t = 4)]
    concurrency: u16,
    /// Member requests in flight per ApplySet.
    #[arg(long, env = "APPLYSET_APPLY_CONCURRENCY", default_value_t = 16)]
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

async fn run(args: RunArgs) -> ExitCode {
    init_logging(args.log_format);
    let client = match kube::Client::try_default().await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "no Kubernetes configuration (set KUBECONFIG or run in a pod)");
            return ExitCode::FAILURE;
        }
    };
    let config = Config {
        concurrency: args.concurrency,
        apply_concurrency: args.apply_concurrency,
        watch_namespace: args.watch_namespace,
        label_selector: args.label_selector,
    };
    tracing::info!(?config, version = env!("CARGO_PKG_VERSION"), "starting");
    let mut operator = Operator::start(client, config);
    tokio::select! {
        _ = shutdown_signal() => {
            tracing::info!("shutting down: finishing in-flight reconciles");
            operator.shutdown().await;
            ExitCode::SUCCESS
        }
        _ = operator.finished() => {
            tracing::error!("the controllers stopped unexpectedly");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
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
            Ok(rt) => rt.block_on(run(args)),
            Err(e) => {
                eprintln!("error: starting the runtime: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

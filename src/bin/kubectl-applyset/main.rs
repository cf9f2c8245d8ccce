//! `kubectl-applyset`: the command line of applyset-operator, a kubectl plugin (`kubectl
//! applyset ...` once the binary is on the PATH). It is built on the operator's library, so
//! `build` and `diff` render, validate and decide exactly as the operator does.
//!
//! Exit codes: 0 success (for `diff`: no changes; for `reconcile`: Ready), 1 `diff` found
//! changes or `reconcile` ended not Ready, 2 an error (bad input, unreachable cluster, a
//! wait that timed out).

mod age_keys;
mod build;
mod conn;
mod convert;
mod diff;
mod error;
mod file;
mod handover;
mod known_kinds;
mod output;
mod progress;
mod render_file;
mod sets;
mod tree;
mod ui;

use std::{path::PathBuf, process::ExitCode, sync::LazyLock, time::Duration};

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

/// Exit code of an error.
pub const EXIT_ERROR: u8 = 2;

/// `--version`: the crate's version and the commit it was built from, which `make` passes
/// in `APPLYSET_COMMIT` at build time (`unknown` for a plain `cargo build`).
static VERSION: LazyLock<String> = LazyLock::new(|| {
    let commit = option_env!("APPLYSET_COMMIT").filter(|c| !c.is_empty());
    format!(
        "{} (commit {})",
        env!("CARGO_PKG_VERSION"),
        commit.unwrap_or("unknown")
    )
});

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-applyset",
    bin_name = "kubectl applyset",
    version = VERSION.as_str(),
    about = "Build, diff, inspect and reconcile ApplySets and ClusterApplySets (applyset.dev/v1alpha1)",
    long_about = None,
    after_help = "Sets are named NAME (an ApplySet in the namespace of -n or of the kubeconfig context) \
or clusterapplyset/NAME (also caset/NAME) for a ClusterApplySet; applyset/NAME and aset/NAME \
name an ApplySet.\n\nExit codes: 0 success (diff: no changes; reconcile: Ready), 1 diff found \
changes, conflicts or members the operator would refuse, or reconcile ended not Ready, 2 error."
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Flags every command takes, as kubectl spells them.
#[derive(Args, Debug, Clone, Default)]
pub struct Global {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The namespace of ApplySets (default: the context's namespace, else "default").
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Age identities for SOPS-encrypted members of sets with spec.decryption (build, diff);
    /// default: $SOPS_AGE_KEY_FILE, plus $SOPS_AGE_KEY and ~/.config/sops/age/keys.txt, as sops
    /// finds them.
    #[arg(long, global = true, value_name = "FILE")]
    pub sops_age_key_file: Option<PathBuf>,
    /// The kustomize binary that builds overlays of directory sources (default: `kustomize`
    /// beside this plugin, else on PATH).
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "APPLYSET_KUSTOMIZE_BINARY"
    )]
    pub kustomize_binary: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Render the ApplySets in FILE offline and print their members as YAML, as the operator
    /// would apply them (with the part-of label).
    #[command(
        long_about = "Render the ApplySets and ClusterApplySets in FILE and print their members as YAML, \
as the operator would apply them (normalized, namespaced, with the applyset.kubernetes.io/part-of \
label), in apply order. Validation uses the operator's own rules and messages; errors name the file \
and line.\n\nWithout --cluster nothing contacts a cluster: inline manifests, http, git and oci \
sources are read directly; configMap and secret sources (and secretRefs) need --cluster. Kinds are \
resolved from a built-in table of Kubernetes kinds and from CustomResourceDefinitions in FILE or in \
the sets; another kind is assumed namespaced, with a warning (--cluster resolves it by discovery)."
    )]
    Build {
        /// File with ApplySet and ClusterApplySet documents (other documents: CRDs are read for
        /// their kinds, the rest ignored); - reads standard input.
        #[arg(short = 'f', long = "filename", value_name = "FILE")]
        file: PathBuf,
        /// Use the kubeconfig's cluster: discovery for kinds, and configMap/secret sources.
        #[arg(long)]
        cluster: bool,
        /// Validate as an operator run with --allow-cross-namespace-sets.
        #[arg(long)]
        allow_cross_namespace_sets: bool,
    },
    /// Show what applying the sets in FILE would change in the cluster (server-side dry-run).
    #[command(
        long_about = "Show what the operator would do with the sets in FILE against the current cluster: \
a server-side dry-run apply of every member as the set's field manager (and as its ServiceAccount \
when spec.serviceAccountName names one, through impersonation), printed as a unified diff of each \
object that would be created or changed (Secret values masked), the objects that would be pruned, \
conflicts with other field managers or other sets, and members the operator would refuse (a \
`# refused` line with the reason, e.g. their namespace is being terminated). Nothing is \
written.\n\nExit code 0: no changes; 1: changes, conflicts or refusals; 2: error."
    )]
    Diff {
        /// File with ApplySet and ClusterApplySet documents; - reads standard input.
        #[arg(short = 'f', long = "filename", value_name = "FILE")]
        file: PathBuf,
        /// Members dry-run at once.
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=256))]
        concurrency: u16,
        /// Objects per page when listing the set's live members (as kubectl's --chunk-size).
        #[arg(long, default_value_t = DEFAULT_CHUNK_SIZE, value_parser = chunk_size())]
        chunk_size: u32,
        /// Validate as an operator run with --allow-cross-namespace-sets.
        #[arg(long)]
        allow_cross_namespace_sets: bool,
    },
    /// Show a set and its members from the cluster, with their health.
    Tree {
        /// The set: NAME or clusterapplyset/NAME.
        name: String,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
        /// Objects per page when listing the set's members (as kubectl's --chunk-size).
        #[arg(long, default_value_t = DEFAULT_CHUNK_SIZE, value_parser = chunk_size())]
        chunk_size: u32,
    },
    /// List sets with their Ready status, counts and message.
    Get {
        /// Only this set: NAME or clusterapplyset/NAME.
        name: Option<String>,
        /// ApplySets of every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
    },
    /// Ask the operator to reconcile a set now and wait until it has.
    Reconcile {
        /// The set: NAME or clusterapplyset/NAME.
        name: String,
        /// How long to wait for the operator (e.g. 30s, 5m).
        #[arg(long, default_value = "5m", value_parser = parse_timeout)]
        timeout: Duration,
    },
    /// Stop reconciling a set (spec.suspend: true).
    Suspend {
        /// The set: NAME or clusterapplyset/NAME.
        name: String,
    },
    /// Reconcile a suspended set again (spec.suspend: false).
    Resume {
        /// The set: NAME or clusterapplyset/NAME.
        name: String,
    },
    /// Convert Flux Kustomizations (and their GitRepository or OCIRepository) into ApplySets.
    #[command(
        long_about = "Convert Flux Kustomizations (kustomize.toolkit.fluxcd.io/v1), with the GitRepository \
or OCIRepository each points at, into ApplySets and ClusterApplySets, printed as YAML on standard \
output (a `# converted from` comment above each). Every field keeps Flux's meaning (Flux's force \
becomes the annotation applyset.dev/force: enabled; its targetNamespace, spec.kustomize.targetNamespace); \
the sets adopt what exists and take over kustomize-controller's fields. A Kustomization that writes \
outside its namespace or cluster-scoped objects becomes a ClusterApplySet (known from its \
status.inventory on the cluster, else from an offline build of the converted set, else from its \
targetNamespace).\n\nNotes go to standard error: `note:` a choice made, `warning:` a field with no \
equivalent (left out), `error:` a Kustomization that cannot be converted (Bucket or ExternalArtifact \
sources, semver refs, kubeConfig). Exit code 0; 2 on an error, or with --strict when a field was \
left out or a Kustomization refused."
    )]
    Convert {
        /// A file, a directory (read recursively: .yaml, .yml, .json) or - for standard input;
        /// documents other than Flux's are ignored.
        #[arg(
            short = 'f',
            long = "filename",
            value_name = "PATH",
            conflicts_with = "from_cluster",
            required_unless_present = "from_cluster"
        )]
        file: Option<PathBuf>,
        /// Read the Kustomizations of NAMESPACE (default: -n, else the context's), or the one
        /// NAMESPACE/NAME, with the sources they reference, from the cluster.
        #[arg(long, value_name = "NAMESPACE[/NAME]", num_args = 0..=1, default_missing_value = "")]
        from_cluster: Option<String>,
        /// The ServiceAccount of ClusterApplySets made from Kustomizations that name none
        /// (without it they act as the operator's own identity).
        #[arg(long, value_name = "NAMESPACE/NAME")]
        service_account: Option<String>,
        /// Exit 2 when a field was left out or a Kustomization refused.
        #[arg(long)]
        strict: bool,
        #[command(flatten)]
        handover: handover::HandoverArgs,
    },
    /// Serve a live, read-only web view of every set you may list, on 127.0.0.1.
    #[command(
        long_about = "Serve a live web view of every ApplySet and ClusterApplySet your kubeconfig's user may \
list, on 127.0.0.1 (a free port unless --port): the sets with their state, each set's members with \
their health, its dependsOn graph, conditions, events, source and last plan, updated from watches \
without reloading. Open the one-time URL it prints (or pass --open); the view acts as you and shows \
only what you may read. Secret values are never shown. With --allow-actions, each set's page offers \
reconcile, suspend and resume, done as you."
    )]
    Ui {
        #[command(flatten)]
        args: ui::UiArgs,
    },
    /// Print a shell completion script for kubectl-applyset.
    #[command(
        long_about = "Print a completion script for kubectl-applyset in the given shell, to be \
sourced by it: bash: `source <(kubectl-applyset completion bash)`; zsh: `kubectl-applyset \
completion zsh > \"${fpath[1]}/_kubectl-applyset\"`; fish: `kubectl-applyset completion fish | source`."
    )]
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: Shell,
    },
}

/// The shells `completion` writes scripts for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// Writes the completion script of `shell` for the binary `kubectl-applyset` to `out`.
fn completion(shell: Shell, out: &mut dyn std::io::Write) {
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    clap_complete::generate(shell, &mut Cli::command(), "kubectl-applyset", out);
}

/// Output formats of `tree`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// Objects per page of a LIST unless `--chunk-size` says otherwise (kubectl's default).
const DEFAULT_CHUNK_SIZE: u32 = applyset_operator::engine::DEFAULT_PAGE_SIZE;

/// `--chunk-size`: 1 to 10000 objects a page.
fn chunk_size() -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(1..=10_000)
}

/// A Go-style duration (`30s`, `5m`, `1h30m`).
fn parse_timeout(s: &str) -> Result<Duration, String> {
    applyset_operator::api::parse_duration(s)
        .ok_or_else(|| format!("{s:?} is not a duration such as 30s, 5m or 1h30m"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    applyset_operator::sources::install_crypto_provider();
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// Runs one command; `Ok` carries the exit code, `Err` what stopped it (exit 2).
async fn run(cli: Cli) -> Result<u8, error::CliError> {
    let g = &cli.global;
    match cli.command {
        Command::Build {
            file,
            cluster,
            allow_cross_namespace_sets,
        } => build::run(g, &file, cluster, allow_cross_namespace_sets).await,
        Command::Diff {
            file,
            concurrency,
            chunk_size,
            allow_cross_namespace_sets,
        } => {
            let opts = diff::Options {
                concurrency: usize::from(concurrency),
                page_size: chunk_size,
                allow_cross_namespace: allow_cross_namespace_sets,
            };
            diff::run(g, &file, opts).await
        }
        Command::Tree {
            name,
            output,
            chunk_size,
        } => tree::run(g, &name, output, chunk_size).await,
        Command::Get {
            name,
            all_namespaces,
        } => sets::get(g, name.as_deref(), all_namespaces).await,
        Command::Reconcile { name, timeout } => sets::reconcile(g, &name, timeout).await,
        Command::Suspend { name } => sets::suspend(g, &name, true).await,
        Command::Resume { name } => sets::suspend(g, &name, false).await,
        Command::Convert {
            file,
            from_cluster,
            service_account,
            strict,
            handover,
        } => {
            let opts = convert::Options {
                file,
                from_cluster,
                service_account,
                strict,
                handover,
            };
            convert::run(g, &opts).await
        }
        Command::Ui { args } => ui::run(g, &args).await,
        Command::Completion { shell } => {
            // Written whole: the generator panics on a write error (a closed pipe).
            let mut script = Vec::new();
            completion(shell, &mut script);
            let written = std::io::Write::write_all(&mut std::io::stdout(), &script);
            Ok(if written.is_ok() { 0 } else { EXIT_ERROR })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_scripts_complete_the_commands_of_each_shell() {
        for (shell, marker) in [
            (Shell::Bash, "complete -F"),
            (Shell::Zsh, "#compdef kubectl-applyset"),
            (Shell::Fish, "complete -c kubectl-applyset"),
        ] {
            let mut out = Vec::new();
            completion(shell, &mut out);
            let script = String::from_utf8(out).expect("UTF-8");
            assert!(script.contains(marker), "{shell:?}: {script}");
            for command in ["build", "diff", "tree", "reconcile", "completion"] {
                assert!(script.contains(command), "{shell:?} lacks {command}");
            }
        }
    }

    #[test]
    fn the_version_names_the_crate_version_and_a_commit() {
        let v = VERSION.as_str();
        assert!(
            v.starts_with(concat!(env!("CARGO_PKG_VERSION"), " (commit ")),
            "{v}"
        );
        assert!(v.ends_with(')'), "{v}");
    }
}

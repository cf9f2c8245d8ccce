//! What stops a command: printed as `error: …`, exit 2.

use applyset_operator::applyset::ParentRef;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// No usable cluster configuration, or no connection.
    #[error("{0}")]
    Cluster(String),
    /// A name on the command line that is not one.
    #[error("{0}")]
    Usage(String),
    /// The file of `build` or `diff`: `FILE:LINE: message`.
    #[error("{0}")]
    File(String),
    /// A request to the API server: what it was doing, and the error.
    #[error("{doing}: {error}")]
    Api {
        doing: String,
        #[source]
        error: kube::Error,
    },
    /// The set does not exist.
    #[error("{0} not found")]
    NotFound(ParentRef),
    /// The operator did not answer a reconcile request in time, or the set went away.
    #[error("{0}")]
    Reconcile(String),
    /// A set could not be diffed or shown: its message.
    #[error("{0}")]
    Set(String),
    /// A local SOPS age key (`--sops-age-key-file`, `$SOPS_AGE_KEY_FILE`, `$SOPS_AGE_KEY`,
    /// keys.txt) could not be read or parsed: where it came from, and why.
    #[error(transparent)]
    AgeKey(#[from] crate::age_keys::AgeKeyError),
    /// `convert --handover` stopped: at which step, and how to go on or back.
    #[error(transparent)]
    Handover(Box<crate::handover::HandoverError>),
    /// `ui` could not listen, make its token or serve.
    #[error(transparent)]
    Ui(#[from] crate::ui::UiError),
    /// Output could not be written.
    #[error("writing YAML: {0}")]
    Yaml(String),
}

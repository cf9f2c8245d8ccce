//! Why a kustomize build of a source was refused or failed: by the checks of its
//! kustomizations (the `kustomization` module) or in the build itself (`kustomize`).

use std::time::Duration;

use super::memory;

/// Why a build was refused or failed. Each names the file (relative to the source's root).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KustomizeError {
    #[error(
        "{file}: {field} entry {entry:?} is remote; remote bases and resources are not fetched (the build sends nothing to the network): vendor it into the source"
    )]
    Remote {
        file: String,
        field: String,
        entry: String,
    },
    #[error(
        "{file}: {field} entry {entry:?} is outside the source's root; a build may read only files of its source"
    )]
    OutsideRoot {
        file: String,
        field: String,
        entry: String,
    },
    #[error(
        "{file}: {field} is not supported: helm charts are not inflated by the build (render the chart into the source, or use a helm tool)"
    )]
    Helm { file: String, field: String },
    #[error(
        "{file}: {field} entry {entry:?} is a kustomize plugin ({what}); plugins and KRM functions are not run, only kustomize's built-in generators and transformers"
    )]
    Plugin {
        file: String,
        field: String,
        entry: String,
        what: String,
    },
    #[error(
        "{file}: {at} is not a field of kustomize v5.7.1 as spelled{}; spell field names exactly (kustomize matches them ignoring case, so the check refuses any other spelling)",
        reads_as.as_ref().map(|r| format!(" (kustomize would read it as {r:?})")).unwrap_or_default()
    )]
    Field {
        file: String,
        at: String,
        reads_as: Option<String>,
    },
    #[error("{file}: {at} must be {expected}")]
    Shape {
        file: String,
        at: String,
        expected: String,
    },
    #[error(
        "{file}: {at} is not allowed here: this kustomization is named by generators, transformers or validators, and may only list resources (its output is plugin configuration, checked before the build as it is written)"
    )]
    PluginDirectory { file: String, at: String },
    #[error(
        "{file}: it is SOPS-encrypted, and kustomizations and plugin configurations are checked before the build: keep them unencrypted"
    )]
    Encrypted { file: String },
    #[error("{file}: not a valid kustomization: {cause}")]
    Invalid { file: String, cause: String },
    #[error(
        "spec.kustomize.components entry {entry:?} must be a local path relative to the source's path"
    )]
    Component { entry: String },
    #[error("kustomize build of {dir} failed: {message}")]
    Build { dir: String, message: String },
    #[error(
        "kustomize build of {dir} did not finish within {after:?} (the build's share of --source-timeout); simplify the overlay"
    )]
    TimedOut { dir: String, after: Duration },
    #[error(
        "kustomize build of {dir} printed more than {limit} bytes (the limit, --source-max-unpacked-mib); refusing it"
    )]
    TooLarge { dir: String, limit: u64 },
    #[error("kustomize build of {dir}: its output exceeds the memory budget: {cause}")]
    Memory {
        dir: String,
        cause: memory::MemoryError,
    },
    #[error("kustomize build of {dir}: cannot run {binary}: {cause} (set --kustomize-binary)")]
    Binary {
        dir: String,
        binary: String,
        cause: String,
    },
    #[error(
        "kustomize build of {dir}: waited {} for one of the {slots} kustomize build slots (--kustomize-concurrency, shared between namespaces) and the sources' deadline (--source-timeout) passed; retried later",
        secs(.waited)
    )]
    SlotWait {
        dir: String,
        waited: Duration,
        slots: usize,
    },
    #[error(
        "kustomize build of {dir} did not finish within the {} left of the sources' deadline (--source-timeout) after it waited {} for one of the {slots} kustomize build slots (--kustomize-concurrency, shared between namespaces); retried later",
        secs(.after),
        secs(.waited)
    )]
    LateStart {
        dir: String,
        waited: Duration,
        after: Duration,
        slots: usize,
    },
    #[error("kustomize build of {dir}: preparing its private copy: {cause}")]
    Copy { dir: String, cause: String },
    #[error("{path:?} is not a clean relative path; refusing the source's tree")]
    Unclean { path: String },
}

impl KustomizeError {
    /// Whether the error may go away by itself (retried as SourceFailed), rather than being
    /// the content's (ValidationFailed).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::TimedOut { .. }
                | Self::SlotWait { .. }
                | Self::LateStart { .. }
                | Self::Memory { .. }
                | Self::Binary { .. }
                | Self::Copy { .. }
        )
    }
}

/// A wait in whole seconds (`40 s`), or in milliseconds below one (`250 ms`).
fn secs(d: &Duration) -> String {
    match d.as_secs() {
        0 => format!("{} ms", d.as_millis()),
        s => format!("{s} s"),
    }
}

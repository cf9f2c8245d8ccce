//! Errors of the sources ([`SourceError`]) and how each is reported ([`SourceErrorClass`]):
//! a spec mistake (`Invalid`, ValidationFailed), content that does not parse (`Manifest`,
//! ValidationFailed naming the source, file and line), or a source that could not be read or
//! was refused (`Failed`, SourceFailed, retried with backoff). An error of one entry of
//! `spec.sources` names the entry ([`SourceError::at`]).

use std::time::Duration;

use super::{describe, kustomize, memory, tree};
use crate::{api::Source, manifest::ManifestError};

/// Why a source could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The source's spec is wrong (only a spec change fixes it); the cause.
    #[error("{0}")]
    Invalid(String),
    /// The content is not valid YAML/JSON or not valid objects.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The source could not be read, did not verify, or its content was refused; the cause.
    #[error("{0}")]
    Failed(String),
    /// A configMap or secret source could not be read as the set's identity.
    #[error(transparent)]
    Read(#[from] crate::set_reads::ReadError),
    /// Content of the entry `spec.sources[index]` that does not parse (shown as the manifest
    /// error, which names the source and the file).
    #[error("{error}")]
    Content { index: usize, error: ManifestError },
    /// A response longer than the `limit` in bytes (`declared`: the length it announced, when
    /// that alone was too long).
    #[error("{}", too_large(*.limit, *.declared))]
    TooLarge { limit: u64, declared: Option<u64> },
    /// The operator's memory budget for sources had no room.
    #[error(transparent)]
    Memory(#[from] memory::MemoryError),
    /// A revision's files that cannot be read as plain manifests.
    #[error(transparent)]
    Tree(#[from] tree::TreeError),
    /// A kustomize build of the source `description` refused or failed (a transient failure
    /// is retried; any other is the content's).
    #[error("{description}: {error}")]
    Kustomize {
        description: String,
        error: kustomize::KustomizeError,
    },
    /// An error of the entry `spec.sources[index]`, which reads `description`.
    #[error("spec.sources[{index}] ({description}): {error}")]
    At {
        index: usize,
        description: String,
        error: Box<SourceError>,
    },
    /// The sources were not all read within `timeout`; `pending`: the entries not read yet
    /// (index and description, in spec order).
    #[error(
        "{}: not read within {timeout:?} (one deadline for all sources of the set, --source-timeout)",
        pending_entries(.pending)
    )]
    TimedOut {
        pending: Vec<(usize, String)>,
        timeout: Duration,
    },
}

/// How an error of the sources is classified for the set's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceErrorClass {
    /// A spec mistake (ValidationFailed, Stalled).
    Invalid,
    /// Content that does not parse (ValidationFailed, message from the manifest).
    Manifest,
    /// Not readable now (SourceFailed, retried).
    Failed,
}

fn too_large(limit: u64, declared: Option<u64>) -> String {
    match declared {
        Some(len) => format!("the response is {len} bytes, more than the limit of {limit}"),
        None => format!("the response is more than the limit of {limit} bytes"),
    }
}

impl SourceError {
    /// `error` as the error of the entry `spec.sources[index]` (`source`). A manifest error
    /// already names its source and file (only its entry is noted).
    pub fn at(index: usize, source: &Source, error: SourceError) -> SourceError {
        match error {
            SourceError::Manifest(error) => SourceError::Content { index, error },
            e @ (SourceError::Content { .. }
            | SourceError::At { .. }
            | SourceError::TimedOut { .. }) => e,
            e => SourceError::At {
                index,
                description: describe(source),
                error: Box::new(e),
            },
        }
    }

    /// How the error is reported.
    pub fn class(&self) -> SourceErrorClass {
        match self {
            SourceError::Invalid(_) => SourceErrorClass::Invalid,
            SourceError::Manifest(_) | SourceError::Content { .. } => SourceErrorClass::Manifest,
            SourceError::Failed(_)
            | SourceError::Read(_)
            | SourceError::TooLarge { .. }
            | SourceError::Memory(_)
            | SourceError::Tree(_)
            | SourceError::TimedOut { .. } => SourceErrorClass::Failed,
            SourceError::Kustomize { error, .. } if error.is_transient() => {
                SourceErrorClass::Failed
            }
            SourceError::Kustomize { .. } => SourceErrorClass::Invalid,
            SourceError::At { error, .. } => error.class(),
        }
    }

    /// The index of the `spec.sources` entry it is about, if one.
    pub fn source_index(&self) -> Option<usize> {
        match self {
            SourceError::At { index, .. } | SourceError::Content { index, .. } => Some(*index),
            SourceError::TimedOut { pending, .. } => pending.first().map(|(i, _)| *i),
            _ => None,
        }
    }
}

/// `spec.sources[1] (git …)`, `… and 2 more`, or `spec.sources` when none is named.
fn pending_entries(pending: &[(usize, String)]) -> String {
    let one = |(i, d): &(usize, String)| format!("spec.sources[{i}] ({d})");
    match pending {
        [] => "spec.sources".to_string(),
        [only] => one(only),
        [first, rest @ ..] => format!("{} and {} more", one(first), rest.len()),
    }
}

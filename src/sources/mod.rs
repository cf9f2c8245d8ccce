//! Manifest sources (`spec.sources`, docs/design.md §2.1; docs/sources.md): ConfigMaps, Secrets, HTTP(S) documents and
//! bundles, Git repositories and OCI artifacts. Each is one more producer of [`Manifest`]s for
//! the render step.
//!
//! [`Sources::fetch`] reads one source and returns its manifests with its revision:
//!
//! | source | revision | the cheap check per interval |
//! |---|---|---|
//! | configMap / secret | `configMap:<ns>/<name>@<resourceVersion>` | one GET |
//! | http | `http:sha256:<hex of the content>` | a conditional GET (ETag / Last-Modified); none when the cached content is the one `sha256` pins (a GET without conditions when it is not) |
//! | git | `git:<ref>@sha1:<commit>` | one ref listing (no fetch unless the commit changed); none for a `commit` |
//! | oci | `oci:<tag>@sha256:<manifest digest>` | one HEAD of the manifest; none for a `digest` |
//!
//! Content is cached by revision ([`Cache`], bounded by entries and by the estimated memory of
//! the parsed manifests): an unchanged source is not downloaded or parsed again. Untrusted
//! content goes through [`archive`] (tar.gz) with its defences; plain manifests are the
//! `.yaml`, `.yml` and `.json` files, sorted by path, parsed on blocking threads (never on the
//! async workers). A directory source whose `path` holds or contains a kustomization keeps
//! every file of its revision ([`tree`]) and is built with kustomize ([`kustomize`],
//! [`directory`]); the cache then holds the built output, keyed by the set's
//! `spec.kustomize` too.
//!
//! The sources of one parent are read concurrently (at most [`FETCH_CONCURRENCY`] at once)
//! under one deadline for all of them ([`Limits::timeout`]).
//!
//! A source that yields nothing (a `path` that does not exist, no manifest files, files
//! without objects) is a failure, never an empty source: an empty source would prune its
//! members.
//!
//! A namespaced ApplySet may only reference ConfigMaps and Secrets (sources and `secretRef`s)
//! in its own namespace: the operator can read Secrets everywhere, and must not lend that
//! right to whoever may create an ApplySet. A ClusterApplySet names the namespace.
//!
//! What http, git and oci sources may connect to is the operator's egress policy
//! ([`egress`]); a credentials Secret of type `kubernetes.io/service-account-token` is refused
//! and one annotated `applyset.dev/allowed-hosts` is used only for those hosts
//! ([`check_credentials_secret`]). The content being fetched and parsed, by all parents
//! together, takes its memory from one budget ([`memory`]).
//!
//! Errors are of three kinds ([`SourceError`]): the spec is wrong (`Invalid`, reported as
//! ValidationFailed), the content does not parse (`Manifest`, ValidationFailed naming the
//! source, file and line), or the source could not be read or was refused (`Failed`, reported
//! as SourceFailed and retried with backoff).

pub mod archive;
pub mod decrypt_scope;
pub mod directory;
pub mod egress;
pub mod git;
pub mod http;
pub mod kustomization;
pub mod kustomize;
pub mod kustomize_error;
pub mod kustomize_fields;
pub mod kustomize_sandbox;
pub mod memory;
pub mod objects;
pub mod oci;
pub mod paths;
pub mod tree;

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

use crate::{
    api::{ApplySetSpec, SecretReference, Source},
    applyset::{ParentKind, ParentRef},
    manifest::{
        Manifest, ManifestError, Origin, YamlBudget, parse_documents, parse_documents_within,
    },
};

/// Bounds on what a source may make the operator download and unpack.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest download in bytes: an HTTP body, an OCI artifact (its manifest and all its
    /// layers together), a Git pack.
    pub max_download: u64,
    /// Largest total size after decompression: of an HTTP bundle, of all layers of an OCI
    /// artifact together, of the trees and manifests read from a Git commit (and the largest
    /// single Git object).
    pub max_unpacked: u64,
    /// Most entries: of an HTTP bundle, of all layers of an OCI artifact together, under the
    /// `path` of a Git commit (files of any kind and directories).
    pub max_entries: usize,
    /// Bound on reading all sources of a parent (connect, transfer, unpack, parse); one
    /// deadline for all of them, which are read concurrently.
    pub timeout: Duration,
    /// Estimated memory of the parsed manifests the content cache may hold, in bytes.
    pub max_cached: u64,
    /// The operator-wide memory budget for source content being fetched and parsed, in bytes
    /// (`--source-memory-mib`; see [`memory`]).
    pub memory: u64,
    /// Each set's share of `memory`, in bytes (`--source-memory-per-set`).
    pub memory_per_set: u64,
    /// How kustomize builds run ([`kustomize`]).
    pub kustomize: kustomize::Settings,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_download: 64 << 20,
            max_unpacked: 256 << 20,
            max_entries: 10_000,
            timeout: Duration::from_secs(120),
            max_cached: 128 << 20,
            memory: 256 << 20,
            memory_per_set: 128 << 20,
            kustomize: kustomize::Settings::default(),
        }
    }
}

/// A manifest file read from a source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFile {
    /// Path inside the source (or the data key).
    pub path: String,
    pub text: String,
}

/// Who reads a set's sources: the set's identity for what lands in its objects (`configMap`
/// and `secret` sources, see [`crate::set_reads`]), the operator for the credentials of the
/// others (`secretRef`).
pub struct ReadAs<'a> {
    pub operator: &'a Client,
    pub set: &'a crate::set_reads::SetReader<'a>,
}

/// What one source produced.
#[derive(Clone, Debug)]
pub struct Fetched {
    pub manifests: Arc<Vec<Manifest>>,
    /// e.g. `git:main@sha1:…`; see the module documentation.
    pub revision: String,
    /// `configMap`, `secret`, `http`, `git` or `oci`.
    pub kind: &'static str,
    /// Whether content was downloaded (false: the cheap check found it cached).
    pub downloaded: bool,
    /// The share of the memory budget the manifests hold until this result is dropped (none
    /// for content served from the cache, which is bounded on its own).
    pub memory: Option<Arc<memory::Lease>>,
    /// A build that waits for the set's keys ([`directory::Deferred`]): the set builds it at
    /// render; `manifests` is then empty.
    pub deferred: Option<Arc<directory::Deferred>>,
}

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

/// Objects a parent references (ConfigMaps and Secrets), for the watches.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub kind: ObjectKind,
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    ConfigMap,
    Secret,
}

/// Which parents reference which ConfigMaps and Secrets (sources and secretRefs), so that a
/// change of one of them reconciles exactly the parents that use it.
#[derive(Default)]
pub struct Index {
    by_parent: Mutex<HashMap<ParentRef, BTreeSet<ObjectKey>>>,
}

impl Index {
    /// Records what `parent` references now (replacing what it referenced before).
    pub fn set(&self, parent: &ParentRef, refs: BTreeSet<ObjectKey>) {
        if let Ok(mut m) = self.by_parent.lock() {
            if refs.is_empty() {
                m.remove(parent);
            } else {
                m.insert(parent.clone(), refs);
            }
        }
    }

    pub fn remove(&self, parent: &ParentRef) {
        if let Ok(mut m) = self.by_parent.lock() {
            m.remove(parent);
        }
    }

    /// The parents of `kind` that reference `key`.
    pub fn parents_of(&self, key: &ObjectKey, kind: ParentKind) -> Vec<ParentRef> {
        self.by_parent
            .lock()
            .map(|m| {
                m.iter()
                    .filter(|(p, refs)| p.kind == kind && refs.contains(key))
                    .map(|(p, _)| p.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Parents that reference something.
    pub fn len(&self) -> usize {
        self.by_parent.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Whether any parent references an object of `kind` (the watch skips work otherwise).
    pub fn is_empty(&self) -> bool {
        self.by_parent.lock().map(|m| m.is_empty()).unwrap_or(true)
    }
}

/// A cached source content.
struct Entry {
    revision: String,
    manifests: Arc<Vec<Manifest>>,
    /// HTTP validators of the response the content came from.
    etag: Option<String>,
    last_modified: Option<String>,
    /// Estimated memory of `manifests` ([`estimate_bytes`]).
    bytes: u64,
    deferred: Option<Arc<directory::Deferred>>,
    used: Instant,
}

/// Content by source identity, kept while its revision is unchanged; bounded by a number of
/// entries and by the estimated memory of their manifests (least recently used entries go
/// first). Identities are sources (URL, ref, path, credentials), not parents: parents that
/// read the same source share one entry, and an entry nobody reads any more ages out.
pub struct Cache {
    inner: Mutex<CacheInner>,
    capacity: usize,
    max_bytes: u64,
}

#[derive(Default)]
struct CacheInner {
    entries: HashMap<String, Entry>,
    bytes: u64,
}

/// What the cache holds for an identity.
#[derive(Clone, Debug)]
pub struct Cached {
    pub revision: String,
    pub manifests: Arc<Vec<Manifest>>,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    /// Estimated memory of `manifests` ([`estimate_bytes`]).
    pub bytes: u64,
    /// A build that waits for the set's keys ([`directory::Deferred`]): the set builds it at
    /// render; `manifests` is then empty.
    pub deferred: Option<Arc<directory::Deferred>>,
}

impl Cache {
    pub fn new(capacity: usize, max_bytes: u64) -> Self {
        Self {
            inner: Mutex::new(CacheInner::default()),
            capacity: capacity.max(1),
            max_bytes,
        }
    }

    pub fn get(&self, identity: &str) -> Option<Cached> {
        let mut m = self.inner.lock().ok()?;
        let e = m.entries.get_mut(identity)?;
        e.used = Instant::now();
        Some(Cached {
            revision: e.revision.clone(),
            manifests: e.manifests.clone(),
            etag: e.etag.clone(),
            last_modified: e.last_modified.clone(),
            bytes: e.bytes,
            deferred: e.deferred.clone(),
        })
    }

    /// The cached content of `identity` if it has `revision`.
    pub fn get_revision(&self, identity: &str, revision: &str) -> Option<Cached> {
        self.get(identity).filter(|c| c.revision == revision)
    }

    /// Caches `c` for `identity` (replacing what was there), then evicts the least recently
    /// used other entries until both bounds hold. Content larger than the whole byte budget is
    /// not cached at all (it is read again next time).
    /// Caches freshly downloaded content and returns it as fetched, holding `lease` (the
    /// memory budget of its manifests) until the result is dropped.
    pub fn store(
        &self,
        identity: &str,
        kind: &'static str,
        c: Cached,
        lease: memory::Lease,
    ) -> Fetched {
        let fetched = Fetched {
            manifests: c.manifests.clone(),
            revision: c.revision.clone(),
            kind,
            downloaded: true,
            memory: Some(Arc::new(lease)),
            deferred: c.deferred.clone(),
        };
        self.put(identity, c);
        fetched
    }

    pub fn put(&self, identity: &str, c: Cached) {
        let Ok(mut m) = self.inner.lock() else {
            return;
        };
        let m = &mut *m;
        if let Some(old) = m.entries.remove(identity) {
            m.bytes = m.bytes.saturating_sub(old.bytes);
        }
        if c.bytes > self.max_bytes {
            return;
        }
        while !m.entries.is_empty()
            && (m.entries.len() >= self.capacity
                || m.bytes.saturating_add(c.bytes) > self.max_bytes)
        {
            let Some(oldest) = m
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(e) = m.entries.remove(&oldest) {
                m.bytes = m.bytes.saturating_sub(e.bytes);
            }
        }
        m.bytes = m.bytes.saturating_add(c.bytes);
        m.entries.insert(
            identity.to_string(),
            Entry {
                revision: c.revision,
                manifests: c.manifests,
                etag: c.etag,
                last_modified: c.last_modified,
                bytes: c.bytes,
                deferred: c.deferred,
                used: Instant::now(),
            },
        );
    }

    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .map(|m| m.entries.len())
            .unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The estimated memory of everything cached.
    pub fn bytes(&self) -> u64 {
        self.inner.lock().map(|m| m.bytes).unwrap_or_default()
    }
}

/// An estimate of the memory the parsed `manifests` take: the JSON trees (a node costs about
/// the size of a `serde_json::Value` plus map overhead; strings their length) and the
/// per-manifest fields. Cheap (one walk), and good enough to bound the cache.
pub fn estimate_bytes(manifests: &[Manifest]) -> u64 {
    fn value(v: &serde_json::Value) -> u64 {
        const NODE: u64 = std::mem::size_of::<serde_json::Value>() as u64;
        NODE + match v {
            serde_json::Value::String(s) => s.len() as u64,
            serde_json::Value::Array(a) => a.iter().map(value).sum(),
            serde_json::Value::Object(o) => map(o),
            _ => 0,
        }
    }
    fn map(o: &serde_json::Map<String, serde_json::Value>) -> u64 {
        // Key string, its header and the map's per-entry overhead.
        o.iter().map(|(k, v)| k.len() as u64 + 48 + value(v)).sum()
    }
    manifests
        .iter()
        .map(|m| {
            std::mem::size_of::<Manifest>() as u64
                + 256
                + map(&m.object)
                + (m.api_version.len() + m.kind.len() + m.name.len()) as u64 * 2
        })
        .sum()
}

/// How many sources of one parent are read at once.
pub const FETCH_CONCURRENCY: usize = 4;

/// Everything the sources share: the HTTP client, the content cache, the index of referenced
/// objects, limits and a scratch directory (Git needs a repository on disk).
pub struct Sources {
    pub limits: Limits,
    /// The memory budget of content being fetched and parsed ([`memory`]).
    pub memory: memory::MemoryBudget,
    /// Which hosts and addresses sources may reach ([`egress`]).
    pub policy: Arc<egress::Policy>,
    pub cache: Cache,
    pub index: Index,
    /// Kustomize builds of directory sources ([`kustomize`]).
    pub kustomize: kustomize::Builder,
    work_dir: WorkDir,
    default_client: Mutex<Option<reqwest::Client>>,
}

/// The scratch directory of one [`Sources`]: `run-<random>/` under the configured directory,
/// holding a locked `.lock` file while in use. It is removed when the `Sources` goes, and at
/// startup every `run-*` directory whose lock nobody holds (left by a killed process: it may
/// hold ssh keys) is removed, without touching the directories of live processes that share
/// the configured directory.
struct WorkDir {
    path: PathBuf,
    /// Held (locked) while this directory is in use; `None` when the directory could not be
    /// prepared (fetches then create what they need and report errors themselves).
    _lock: Option<std::fs::File>,
    _dir: Option<tempfile::TempDir>,
}

/// `run-*` directories without a `.lock` file are removed only when older than this (one may
/// be between its creation and its lock).
const UNLOCKED_GRACE: Duration = Duration::from_secs(600);
/// Scratch directories of earlier versions (`git-*` directly in the configured directory) are
/// removed when older than this (a fetch never takes as long).
const LEGACY_GRACE: Duration = Duration::from_secs(3600);

impl WorkDir {
    fn prepare(base: PathBuf) -> Self {
        clean_stale(&base);
        let made = std::fs::create_dir_all(&base)
            .and_then(|()| {
                tempfile::Builder::new()
                    .prefix("run-")
                    .rand_bytes(8)
                    .tempdir_in(&base)
            })
            .and_then(|dir| {
                let lock = std::fs::File::create(dir.path().join(".lock"))?;
                lock.try_lock().map_err(std::io::Error::other)?;
                Ok((dir, lock))
            });
        match made {
            Ok((dir, lock)) => Self {
                path: dir.path().to_path_buf(),
                _lock: Some(lock),
                _dir: Some(dir),
            },
            Err(e) => {
                tracing::warn!(dir = %base.display(), error = %e, "cannot prepare the sources' scratch directory; git sources will fail until it is writable");
                Self {
                    path: base.join("run-unlocked"),
                    _lock: None,
                    _dir: None,
                }
            }
        }
    }
}

fn older_than(meta: &std::fs::Metadata, age: Duration) -> bool {
    meta.modified()
        .ok()
        .and_then(|m| m.elapsed().ok())
        .is_some_and(|e| e > age)
}

/// Removes scratch directories nobody uses any more (see [`WorkDir`]).
fn clean_stale(base: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        if !meta.is_dir() {
            continue;
        }
        let path = entry.path();
        let stale = if name.starts_with("run-") {
            match std::fs::File::open(path.join(".lock")) {
                // Locked by a live process: in use. Unlocked: its process is gone.
                Ok(f) => f.try_lock().is_ok(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    older_than(&meta, UNLOCKED_GRACE)
                }
                Err(_) => false,
            }
        } else {
            name.starts_with("git-") && older_than(&meta, LEGACY_GRACE)
        };
        if stale {
            match std::fs::remove_dir_all(&path) {
                Ok(()) => {
                    tracing::info!(dir = %path.display(), "removed a stale source scratch directory")
                }
                Err(e) => {
                    tracing::warn!(dir = %path.display(), error = %e, "cannot remove a stale source scratch directory")
                }
            }
        }
    }
}

/// Installs ring as the process's rustls crypto provider (kube uses ring too; reqwest and
/// gix's HTTP transport need a default). Idempotent.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Sources {
    pub fn new(limits: Limits, policy: egress::Policy, work_dir: Option<PathBuf>) -> Self {
        install_crypto_provider();
        let base = work_dir.unwrap_or_else(|| std::env::temp_dir().join("applyset-operator"));
        Self {
            // A fetch waits for room at most half the sources' deadline, so that the budget's
            // message (naming its flag) comes before the deadline's.
            memory: memory::MemoryBudget::new(limits.memory, limits.timeout / 2),
            policy: Arc::new(policy),
            cache: Cache::new(256, limits.max_cached),
            kustomize: kustomize::Builder::new(limits.kustomize.clone()),
            limits,
            index: Index::default(),
            work_dir: WorkDir::prepare(base),
            default_client: Mutex::new(None),
        }
    }

    /// An HTTP client under the egress policy ([`egress`]: resolved addresses filtered,
    /// every connection's destination and every redirect hop checked); with `ca` (PEM), one
    /// that also trusts that CA bundle.
    fn http_client(&self, ca: Option<&[u8]>) -> Result<reqwest::Client, SourceError> {
        let build = |ca: Option<&[u8]>| -> Result<reqwest::Client, String> {
            let mut b = reqwest::Client::builder()
                .user_agent(concat!("applyset-operator/", env!("CARGO_PKG_VERSION")))
                .connect_timeout(Duration::from_secs(15))
                // The deadline of `fetch_all` bounds every request; this is only a backstop
                // (later, so that the deadline's message, naming the sources, wins).
                .timeout(self.limits.timeout.saturating_add(Duration::from_secs(5)))
                .redirect(self.policy.redirect_policy(5))
                .dns_resolver(egress::Resolver(self.policy.clone()))
                .connector_layer(egress::PolicyLayer(self.policy.clone()));
            if let Some(pem) = ca {
                let certs = reqwest::Certificate::from_pem_bundle(pem)
                    .map_err(|e| format!("ca.crt is not a PEM certificate bundle: {e}"))?;
                if certs.is_empty() {
                    return Err("ca.crt holds no PEM certificate".into());
                }
                b = b.tls_certs_merge(certs);
            }
            b.build()
                .map_err(|e| format!("building the HTTP client: {e}"))
        };
        if ca.is_some() {
            return build(ca).map_err(SourceError::Failed);
        }
        let mut slot = self
            .default_client
            .lock()
            .map_err(|_| SourceError::Failed("HTTP client lock poisoned".into()))?;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let c = build(None).map_err(SourceError::Failed)?;
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Reads every source of `spec`, at most [`FETCH_CONCURRENCY`] at once, under one
    /// deadline for all of them ([`Limits::timeout`]); the results are in spec order. A
    /// failure stops the rest (the first failing source in spec order is reported).
    pub async fn fetch_all(
        &self,
        client: &Client,
        reader: &crate::set_reads::SetReader<'_>,
        parent: &ParentRef,
        spec: &ApplySetSpec,
    ) -> Result<Vec<Fetched>, SourceError> {
        use futures::{StreamExt as _, TryStreamExt as _};
        let done = Mutex::new(vec![false; spec.sources.len()]);
        let done_ref = &done;
        let who = &ReadAs {
            operator: client,
            set: reader,
        };
        let reads: Vec<_> = spec
            .sources
            .iter()
            .enumerate()
            .map(|(i, source)| async move {
                let r = self
                    .fetch(who, parent, i, source, spec.kustomize.as_ref())
                    .await;
                if let Ok(mut d) = done_ref.lock()
                    && let Some(slot) = d.get_mut(i)
                {
                    *slot = true;
                }
                r
            })
            .collect();
        // Every lease the set's reads make is counted against its share of the budget too.
        let share = memory::SetShare::new(self.limits.memory_per_set);
        let all = memory::within_share(
            share,
            futures::stream::iter(reads)
                .buffered(FETCH_CONCURRENCY)
                .try_collect::<Vec<_>>(),
        );
        // The builds the reads run share the build slots by the set's namespace, and their
        // wait for one counts toward the same deadline.
        let deadline = tokio::time::Instant::now() + self.limits.timeout;
        let scope = kustomize::BuildScope {
            namespace: parent.namespace.as_deref().unwrap_or_default().into(),
            deadline,
        };
        match tokio::time::timeout_at(deadline, kustomize::within(scope, all)).await {
            Ok(r) => r,
            Err(_) => {
                let pending = done
                    .lock()
                    .map(|d| d.clone())
                    .unwrap_or_default()
                    .iter()
                    .enumerate()
                    .filter(|(_, done)| !**done)
                    .filter_map(|(i, _)| spec.sources.get(i).map(|s| (i, describe(s))))
                    .collect();
                Err(SourceError::TimedOut {
                    pending,
                    timeout: self.limits.timeout,
                })
            }
        }
    }

    /// Reads source `index` of `parent`: a configMap or secret source as the set's identity
    /// (`who.set`), the credentials of the others with the operator's client (`who.operator`);
    /// a directory source is built with the set's `spec.kustomize` `overrides` (see
    /// [`directory`]).
    pub async fn fetch(
        &self,
        who: &ReadAs<'_>,
        parent: &ParentRef,
        index: usize,
        source: &Source,
        overrides: Option<&crate::api::KustomizeOverrides>,
    ) -> Result<Fetched, SourceError> {
        let (client, reader) = (who.operator, who.set);
        let at = |e: SourceError| SourceError::at(index, source, e);
        let result = match kind_of(source) {
            Err(e) => Err(e),
            Ok(Kind::ConfigMap(o)) => {
                objects::fetch(
                    reader,
                    parent,
                    ObjectKind::ConfigMap,
                    o,
                    &self.limits,
                    &self.memory,
                )
                .await
            }
            Ok(Kind::Secret(o)) => {
                objects::fetch(
                    reader,
                    parent,
                    ObjectKind::Secret,
                    o,
                    &self.limits,
                    &self.memory,
                )
                .await
            }
            Ok(Kind::Http(h)) => http::fetch(self, client, parent, h, overrides).await,
            Ok(Kind::Git(g)) => git::fetch(self, client, parent, g, overrides).await,
            Ok(Kind::Oci(o)) => oci::fetch(self, client, parent, o, overrides).await,
        };
        result.map_err(at)
    }

    /// The ConfigMaps and Secrets `spec` references (sources and secretRefs), with namespaces
    /// resolved; references that do not resolve are left out (the fetch reports them).
    pub fn references(parent: &ParentRef, spec: &ApplySetSpec) -> BTreeSet<ObjectKey> {
        let mut out = BTreeSet::new();
        let mut add = |kind, name: &str, ns: Option<&str>| {
            if let Ok(namespace) = resolve_namespace(parent, ns) {
                out.insert(ObjectKey {
                    kind,
                    namespace,
                    name: name.to_string(),
                });
            }
        };
        for s in &spec.sources {
            if let Some(o) = &s.config_map {
                add(ObjectKind::ConfigMap, &o.name, o.namespace.as_deref());
            }
            if let Some(o) = &s.secret {
                add(ObjectKind::Secret, &o.name, o.namespace.as_deref());
            }
            let secret_ref = s
                .http
                .as_ref()
                .and_then(|h| h.secret_ref.as_ref())
                .or(s.git.as_ref().and_then(|g| g.secret_ref.as_ref()))
                .or(s.oci.as_ref().and_then(|o| o.secret_ref.as_ref()));
            if let Some(r) = secret_ref {
                add(ObjectKind::Secret, &r.name, r.namespace.as_deref());
            }
        }
        // The key Secret of spec.decryption: a new or changed key is applied at once.
        if let Some(r) = spec.decryption.as_ref().map(|d| &d.secret_ref) {
            add(ObjectKind::Secret, &r.name, r.namespace.as_deref());
        }
        // spec.postBuild.substituteFrom: a change is applied at once too.
        for (kind, ns, name) in crate::substitute::references(parent, spec.post_build.as_ref()) {
            let kind = match kind {
                crate::api::SubstituteKind::ConfigMap => ObjectKind::ConfigMap,
                crate::api::SubstituteKind::Secret => ObjectKind::Secret,
            };
            add(kind, &name, Some(&ns));
        }
        out
    }

    pub(crate) fn work_dir(&self) -> &std::path::Path {
        &self.work_dir.path
    }
}

/// The one kind a source entry sets.
pub enum Kind<'a> {
    ConfigMap(&'a crate::api::ObjectSource),
    Secret(&'a crate::api::ObjectSource),
    Http(&'a crate::api::HttpSource),
    Git(&'a crate::api::GitSource),
    Oci(&'a crate::api::OciSource),
}

/// The kind of a source; an error unless exactly one is set (the CRD's CEL rule says the
/// same; this also covers objects stored before the rule existed).
pub fn kind_of(source: &Source) -> Result<Kind<'_>, SourceError> {
    let mut kinds = Vec::new();
    if let Some(o) = &source.config_map {
        kinds.push(Kind::ConfigMap(o));
    }
    if let Some(o) = &source.secret {
        kinds.push(Kind::Secret(o));
    }
    if let Some(h) = &source.http {
        kinds.push(Kind::Http(h));
    }
    if let Some(g) = &source.git {
        kinds.push(Kind::Git(g));
    }
    if let Some(o) = &source.oci {
        kinds.push(Kind::Oci(o));
    }
    match kinds.len() {
        1 => Ok(kinds.remove(0)),
        0 => Err(SourceError::Invalid(
            "sets none of configMap, secret, http, git, oci; set exactly one".into(),
        )),
        _ => Err(SourceError::Invalid("sets more than one of configMap, secret, http, git, oci; set exactly one (use one list entry per source)".into())),
    }
}

/// Short description of a source for messages and origins, e.g. `git https://host/repo.git@main`.
pub fn describe(source: &Source) -> String {
    match kind_of(source) {
        Ok(Kind::ConfigMap(o)) => format!(
            "configMap {}{}",
            o.namespace
                .as_deref()
                .map(|n| format!("{n}/"))
                .unwrap_or_default(),
            o.name
        ),
        Ok(Kind::Secret(o)) => format!(
            "secret {}{}",
            o.namespace
                .as_deref()
                .map(|n| format!("{n}/"))
                .unwrap_or_default(),
            o.name
        ),
        Ok(Kind::Http(h)) => format!("http {}", redact(&h.url)),
        Ok(Kind::Git(g)) => format!("git {}@{}", redact(&g.url), git::ref_name(&g.reference)),
        Ok(Kind::Oci(o)) => match (&o.tag, &o.digest) {
            (_, Some(d)) => format!("oci {}@{d}", redact(&o.url)),
            (Some(t), None) => format!("oci {}:{t}", redact(&o.url)),
            (None, None) => format!("oci {}", redact(&o.url)),
        },
        Err(_) => "invalid source".into(),
    }
}

/// A URL as it may be shown in status, events and logs: without user info (a password in a
/// URL must never reach them), query or fragment (tokens of signed URLs: `?token=…`,
/// `X-Amz-Signature=…`); that is `scheme://host[:port]/path`. A string that is not a URL
/// (e.g. scp-like `git@host:path`) is cut at `?` or `#`.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            let has_secret = !u.username().is_empty()
                || u.password().is_some()
                || u.query().is_some()
                || u.fragment().is_some();
            if !has_secret {
                return url.to_string();
            }
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => url.split(['?', '#']).next().unwrap_or_default().to_string(),
    }
}

/// The namespace of a referenced ConfigMap / Secret: the ApplySet's own (given or not; a
/// namespaced ApplySet may not reference another namespace), or for a ClusterApplySet the one
/// given (it must give one).
pub fn resolve_namespace(parent: &ParentRef, given: Option<&str>) -> Result<String, SourceError> {
    match (given.filter(|n| !n.is_empty()), &parent.namespace) {
        (Some(n), Some(own)) if n != own => Err(SourceError::Invalid(format!(
            "namespace {n:?} is not the ApplySet's own namespace {own:?}: an ApplySet may only reference ConfigMaps and Secrets in its own namespace; remove namespace (or set it to {own:?}) and create the object there, or use a ClusterApplySet"
        ))),
        (Some(n), _) => Ok(n.to_string()),
        (None, Some(n)) => Ok(n.clone()),
        (None, None) => Err(SourceError::Invalid(
            "a ClusterApplySet must name the namespace of a ConfigMap or Secret (set namespace)"
                .into(),
        )),
    }
}

/// Validates the sources of a spec without any I/O (exactly one kind each; namespaces of
/// referenced ConfigMaps and Secrets; well-formed refs and paths). The message names the
/// source and the field.
pub fn validate(parent: &ParentRef, spec: &ApplySetSpec) -> Result<(), SourceError> {
    for (i, s) in spec.sources.iter().enumerate() {
        let at = |e: SourceError| SourceError::at(i, s, e);
        let kind = kind_of(s).map_err(at)?;
        let need_ns = |field: &str, ns: Option<&str>| {
            resolve_namespace(parent, ns)
                .map(|_| ())
                .map_err(|e| at(SourceError::Invalid(format!("{field}.namespace: {e}"))))
        };
        match kind {
            Kind::ConfigMap(o) => need_ns("configMap", o.namespace.as_deref())?,
            Kind::Secret(o) => need_ns("secret", o.namespace.as_deref())?,
            Kind::Http(h) => {
                http::validate(h).map_err(at)?;
                if let Some(r) = &h.secret_ref {
                    need_ns("http.secretRef", r.namespace.as_deref())?;
                }
            }
            Kind::Git(g) => {
                git::validate(g).map_err(at)?;
                if let Some(r) = &g.secret_ref {
                    need_ns("git.secretRef", r.namespace.as_deref())?;
                }
            }
            Kind::Oci(o) => {
                oci::validate(o).map_err(at)?;
                if let Some(r) = &o.secret_ref {
                    need_ns("oci.secretRef", r.namespace.as_deref())?;
                }
            }
        }
    }
    Ok(())
}

/// The annotation of a credentials Secret that restricts the hosts its credentials go to.
pub const ALLOWED_HOSTS_ANNOTATION: &str = "applyset.dev/allowed-hosts";

/// The Secret type whose token is never used as a source's credentials.
const SERVICE_ACCOUNT_TOKEN: &str = "kubernetes.io/service-account-token";

/// Refuses a credentials Secret (`id`, `namespace/name`) of type `type_` for a source whose
/// destination is `dest`: a ServiceAccount token Secret (`Invalid`: its token would be sent
/// to a URL the ApplySet's author chose), or a Secret whose `applyset.dev/allowed-hosts`
/// annotation (comma-separated host patterns) does not match `dest` (`Invalid`). Returns the
/// annotation's patterns (`None` without the annotation), which also bound where the
/// credentials may be sent later (an OCI token service).
pub fn check_credentials_secret(
    id: &str,
    type_: Option<&str>,
    annotations: &BTreeMap<String, String>,
    dest: &egress::Destination,
) -> Result<Option<Vec<egress::HostPattern>>, SourceError> {
    if type_ == Some(SERVICE_ACCOUNT_TOKEN) {
        return Err(SourceError::Invalid(format!(
            "its secretRef {id} is a Secret of type {SERVICE_ACCOUNT_TOKEN}: a ServiceAccount token is never sent to a source; put the source's own credentials in a Secret of type Opaque (or kubernetes.io/dockerconfigjson) and reference that"
        )));
    }
    let Some(raw) = annotations.get(ALLOWED_HOSTS_ANNOTATION) else {
        return Ok(None);
    };
    let patterns = egress::HostPattern::parse_list(&[raw]).map_err(|e| {
        SourceError::Invalid(format!(
            "its secretRef {id}: annotation {ALLOWED_HOSTS_ANNOTATION}: {e}"
        ))
    })?;
    if !patterns.iter().any(|p| p.matches(dest)) {
        return Err(SourceError::Invalid(format!(
            "its secretRef {id} may only be used for the hosts in its annotation {ALLOWED_HOSTS_ANNOTATION} ({raw:?}), and {dest} is not one of them; use the right Secret or add the host to the annotation"
        )));
    }
    Ok(Some(patterns))
}

/// A credentials Secret: its `namespace/name`, its data (decoded bytes by key) and the hosts
/// its `applyset.dev/allowed-hosts` annotation allows (`None`: any).
pub struct CredentialsSecret {
    pub id: String,
    pub data: BTreeMap<String, Vec<u8>>,
    pub allowed_hosts: Option<Vec<egress::HostPattern>>,
}

/// Reads the credentials Secret `r` of a source whose destination is `dest`, refused as
/// [`check_credentials_secret`] says.
pub async fn read_secret(
    client: &Client,
    parent: &ParentRef,
    r: &SecretReference,
    dest: &egress::Destination,
) -> Result<CredentialsSecret, SourceError> {
    let ns = resolve_namespace(parent, r.namespace.as_deref())?;
    let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let secret = api
        .get_opt(&r.name)
        .await
        .map_err(|e| SourceError::Failed(format!("reading its secretRef {ns}/{}: {e}", r.name)))?;
    let Some(secret) = secret else {
        return Err(SourceError::Failed(format!(
            "its secretRef {ns}/{} does not exist; create it",
            r.name
        )));
    };
    let id = format!("{ns}/{}", r.name);
    let allowed_hosts = check_credentials_secret(
        &id,
        secret.type_.as_deref(),
        &secret.metadata.annotations.unwrap_or_default(),
        dest,
    )?;
    let mut data: BTreeMap<String, Vec<u8>> = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    for (k, v) in secret.string_data.unwrap_or_default() {
        data.insert(k, v.into_bytes());
    }
    Ok(CredentialsSecret {
        id,
        data,
        allowed_hosts,
    })
}

/// UTF-8 value of a secret key, trimmed.
pub fn secret_text(data: &BTreeMap<String, Vec<u8>>, key: &str) -> Option<String> {
    data.get(key)
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Parses manifest files of source `desc` into manifests (errors name the source, the file
/// and the line).
pub fn parse_files(desc: &str, files: &[SourceFile]) -> Result<Vec<Manifest>, ManifestError> {
    let mut out = Vec::new();
    // One parse budget for all the files of the source.
    let mut budget = YamlBudget::for_parsing();
    for f in files {
        let origin = Origin::file(desc, &f.path);
        let parsed = parse_documents_within(&f.text, &origin, &mut budget)?;
        out.extend(keep_sops_file(parsed, &origin, f));
    }
    Ok(out)
}

/// The manifests of file `f`, each holding the file's text when it carries SOPS metadata
/// (see [`crate::manifest::SopsFile`]).
fn keep_sops_file(mut parsed: Vec<Manifest>, origin: &Origin, f: &SourceFile) -> Vec<Manifest> {
    let format = crate::sops::Format::from_path(&f.path);
    if matches!(
        format,
        crate::sops::Format::Yaml | crate::sops::Format::Json
    ) && crate::sops::carries_metadata(f.text.as_bytes(), format)
    {
        let file = Arc::new(crate::manifest::SopsFile {
            name: origin.to_string(),
            path: f.path.clone(),
            text: f.text.clone(),
        });
        for m in &mut parsed {
            m.sops_file = Some(file.clone());
        }
    }
    parsed
}

/// Like [`parse_files`] for data keys of a ConfigMap or Secret (origins say `key`).
pub fn parse_files_as_keys(
    desc: &str,
    files: &[SourceFile],
) -> Result<Vec<Manifest>, ManifestError> {
    let mut out = Vec::new();
    let mut budget = YamlBudget::for_parsing();
    for f in files {
        let origin = Origin::key(desc, &f.path);
        let parsed = parse_documents_within(&f.text, &origin, &mut budget)?;
        out.extend(keep_sops_file(parsed, &origin, f));
    }
    Ok(out)
}

/// How the files of a source are named in origins (and so in error messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    /// `… file <path>, line …`
    Files,
    /// `… key <key>, line …` (ConfigMap and Secret data keys)
    Keys,
    /// The source is one document (an HTTP document): `… line …`.
    Document,
}

/// Parsed manifests with their estimated memory (for the cache).
pub struct Parsed {
    pub manifests: Arc<Vec<Manifest>>,
    pub bytes: u64,
    /// A build that waits for the set's keys ([`directory::Deferred`]): the set builds it at
    /// render; `manifests` is then empty.
    pub deferred: Option<Arc<directory::Deferred>>,
}

/// What an empty source is told to do.
const EMPTY_HINT: &str = "a source that yields nothing is refused rather than read as empty (which would prune its members); fix the path or the content, or remove the source from spec.sources";

/// Parses `files` of source `desc` on a blocking thread (YAML of up to `max_unpacked` bytes
/// must not stall the async workers). A source without manifest files, or whose files hold no
/// object, is refused (`Failed`); `where_` says where nothing was found, e.g.
/// `under path deploy at commit 0a1b…`.
///
/// The parsed manifests take about as much memory as their text again, and that is taken from
/// `lease` before parsing; once parsed, `lease` holds the manifests' estimated memory only
/// (the text is gone).
pub async fn parse_blocking(
    desc: String,
    files: Vec<SourceFile>,
    naming: Naming,
    where_: String,
    lease: &mut memory::Lease,
) -> Result<Parsed, SourceError> {
    if files.is_empty() {
        return Err(SourceError::Failed(format!(
            "no manifest files (.yaml, .yml, .json) {where_}; {EMPTY_HINT}"
        )));
    }
    let text: u64 = files.iter().map(|f| f.text.len() as u64).sum();
    lease.grow(text).await?;
    let parsed = tokio::task::spawn_blocking(move || {
        let manifests = match naming {
            Naming::Files => parse_files(&desc, &files)?,
            Naming::Keys => parse_files_as_keys(&desc, &files)?,
            Naming::Document => {
                let mut out = Vec::new();
                for f in &files {
                    out.extend(parse_documents(&f.text, &Origin::source(&desc))?);
                }
                out
            }
        };
        if manifests.is_empty() {
            return Err(SourceError::Failed(format!(
                "the manifests {where_} hold no objects; {EMPTY_HINT}"
            )));
        }
        let bytes = estimate_bytes(&manifests);
        Ok(Parsed {
            manifests: Arc::new(manifests),
            bytes,
            deferred: None,
        })
    })
    .await
    .map_err(|e| SourceError::Failed(format!("parsing task: {e}")))??;
    lease.hold(parsed.bytes).await?;
    Ok(parsed)
}

/// ` under path <dir>` for a non-empty directory prefix (`dir/`), else "".
pub fn under_path(prefix: &str) -> String {
    match prefix.trim_end_matches('/') {
        "" => String::new(),
        dir => format!(" under path {dir}"),
    }
}

/// Lowercase hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}

/// The revision of a desired set: the digest of the rendered objects, then the revision of
/// each source in spec order, separated by `"; "`, e.g.
/// `sha256:<set>; configMap:demo/app@4711; git:main@sha1:<commit>`. Without sources it is the
/// set digest alone.
pub fn combined_revision(set_digest: &str, sources: &[Fetched]) -> String {
    let mut out = set_digest.to_string();
    for s in sources {
        out.push_str("; ");
        out.push_str(&s.revision);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{GitReference, GitSource, HttpSource, ObjectSource, OciSource};
    use crate::manifest::{Origin, parse_documents};

    fn cm(ns: Option<&str>) -> Source {
        Source {
            config_map: Some(ObjectSource {
                name: "app".into(),
                namespace: ns.map(Into::into),
                keys: vec![],
            }),
            ..Default::default()
        }
    }

    #[test]
    fn exactly_one_kind() {
        assert!(kind_of(&cm(None)).is_ok());
        assert!(
            kind_of(&Source::default())
                .err()
                .is_some_and(|e| e.to_string().contains("none"))
        );
        let mut two = cm(None);
        two.http = Some(HttpSource {
            url: "https://x/a.yaml".into(),
            ..Default::default()
        });
        assert!(
            kind_of(&two)
                .err()
                .is_some_and(|e| e.to_string().contains("more than one"))
        );
    }

    #[test]
    fn cluster_parents_must_name_namespaces() {
        let spec = ApplySetSpec {
            sources: vec![cm(None)],
            ..Default::default()
        };
        let err = validate(&ParentRef::cluster("c"), &spec)
            .expect_err("no namespace")
            .to_string();
        assert!(err.contains("spec.sources[0] (configMap app)"), "{err}");
        assert!(err.contains("must name the namespace"), "{err}");
        assert!(validate(&ParentRef::applyset("ns", "a"), &spec).is_ok());
        let spec = ApplySetSpec {
            sources: vec![cm(Some("x"))],
            ..Default::default()
        };
        assert!(validate(&ParentRef::cluster("c"), &spec).is_ok());
        let refs = Sources::references(&ParentRef::cluster("c"), &spec);
        assert_eq!(
            refs.into_iter().collect::<Vec<_>>(),
            [ObjectKey {
                kind: ObjectKind::ConfigMap,
                namespace: "x".into(),
                name: "app".into()
            }]
        );
    }

    #[test]
    fn descriptions_hide_credentials() {
        let s = Source {
            git: Some(GitSource {
                url: "https://user:secret@example.com/repo.git".into(),
                reference: GitReference {
                    branch: Some("main".into()),
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(describe(&s), "git https://example.com/repo.git@main");
        let s = Source {
            oci: Some(OciSource {
                url: "oci://r.example.com/a/b".into(),
                tag: Some("v1".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(describe(&s), "oci oci://r.example.com/a/b:v1");
    }

    fn cached(r: &str, bytes: u64) -> Cached {
        Cached {
            revision: r.into(),
            manifests: Arc::new(vec![]),
            etag: None,
            last_modified: None,
            bytes,
            deferred: None,
        }
    }

    #[test]
    fn cache_is_bounded_and_keyed_by_revision() {
        let c = Cache::new(2, 1 << 20);
        c.put("a", cached("1", 1));
        c.put("b", cached("1", 1));
        assert!(c.get_revision("a", "1").is_some());
        assert!(c.get_revision("a", "2").is_none());
        c.put("c", cached("1", 1));
        assert_eq!(c.len(), 2);
        assert!(c.get("b").is_none(), "least recently used went first");
    }

    #[test]
    fn cache_is_bounded_by_bytes() {
        let c = Cache::new(100, 1000);
        c.put("a", cached("1", 400));
        c.put("b", cached("1", 400));
        assert_eq!(c.bytes(), 800);
        assert!(c.get("a").is_some(), "a is now more recent than b");
        c.put("c", cached("1", 400));
        assert_eq!(c.len(), 2);
        assert_eq!(c.bytes(), 800);
        assert!(c.get("b").is_none(), "least recently used went first");
        assert!(c.get("a").is_some() && c.get("c").is_some());
        // Replacing an entry replaces its bytes.
        c.put("a", cached("2", 100));
        assert_eq!(c.bytes(), 500);
        // Content larger than the whole budget is not cached, and replaces nothing else.
        c.put("huge", cached("1", 1001));
        assert!(c.get("huge").is_none());
        assert_eq!(c.len(), 2);
        // ... and an identity whose new content is too large loses its old content.
        c.put("a", cached("3", 5000));
        assert!(c.get("a").is_none());
        assert_eq!(c.bytes(), 400);
    }

    #[test]
    fn estimated_bytes_grow_with_content() {
        let parse = |t: &str| parse_documents(t, &Origin::source("test")).expect("parses");
        let small = parse("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n");
        let big = parse(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  v: \"{}\"\n",
            "x".repeat(100_000)
        ));
        let (s, b) = (estimate_bytes(&small), estimate_bytes(&big));
        assert!(s > 100 && s < 10_000, "{s}");
        assert!(b > 100_000 && b < 200_000, "{b}");
    }

    #[test]
    fn namespaced_parents_reference_only_their_namespace() {
        let parent = ParentRef::applyset("team-a", "set");
        // The own namespace, given or not, is fine.
        for ns in [None, Some("team-a")] {
            let spec = ApplySetSpec {
                sources: vec![cm(ns)],
                ..Default::default()
            };
            assert!(validate(&parent, &spec).is_ok(), "{ns:?}");
        }
        let secret_ref = Some(SecretReference {
            name: "creds".into(),
            namespace: Some("team-b".into()),
        });
        let cases = [
            (cm(Some("team-b")), "configMap.namespace"),
            (
                Source {
                    secret: Some(ObjectSource {
                        name: "s".into(),
                        namespace: Some("team-b".into()),
                        keys: vec![],
                    }),
                    ..Default::default()
                },
                "secret.namespace",
            ),
            (
                Source {
                    http: Some(HttpSource {
                        url: "https://attacker.example/x".into(),
                        secret_ref: secret_ref.clone(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                "http.secretRef.namespace",
            ),
            (
                Source {
                    git: Some(GitSource {
                        url: "https://attacker.example/r.git".into(),
                        reference: GitReference {
                            branch: Some("main".into()),
                            ..Default::default()
                        },
                        secret_ref: secret_ref.clone(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                "git.secretRef.namespace",
            ),
            (
                Source {
                    oci: Some(OciSource {
                        url: "oci://attacker.example/a".into(),
                        tag: Some("v1".into()),
                        secret_ref: secret_ref.clone(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                "oci.secretRef.namespace",
            ),
        ];
        for (source, field) in cases {
            let spec = ApplySetSpec {
                sources: vec![source],
                ..Default::default()
            };
            let err = validate(&parent, &spec).expect_err(field).to_string();
            assert!(err.starts_with("spec.sources[0] ("), "{err}");
            assert!(err.contains(field), "{field}: {err}");
            assert!(
                err.contains("only reference ConfigMaps and Secrets in its own namespace"),
                "{err}"
            );
            assert!(
                Sources::references(&parent, &spec).is_empty(),
                "a refused reference is not watched"
            );
            // The fetch path refuses it too (defence in depth).
            assert!(resolve_namespace(&parent, Some("team-b")).is_err());
            // A ClusterApplySet may name any namespace.
            assert!(validate(&ParentRef::cluster("c"), &spec).is_ok(), "{field}");
        }
    }

    #[test]
    fn redaction_drops_user_info_query_and_fragment() {
        assert_eq!(
            redact("https://u:p@example.com/a/b.yaml?token=s3cret&x=1#frag"),
            "https://example.com/a/b.yaml"
        );
        assert_eq!(
            redact("https://bucket.s3.example.com/o.tgz?X-Amz-Signature=abc"),
            "https://bucket.s3.example.com/o.tgz"
        );
        assert_eq!(
            redact("https://example.com/a.yaml"),
            "https://example.com/a.yaml"
        );
        assert_eq!(
            redact("git@example.com:org/r.git"),
            "git@example.com:org/r.git"
        );
        assert_eq!(redact("not a url?token=x"), "not a url");
        let s = Source {
            http: Some(HttpSource {
                url: "https://example.com/a.yaml?token=s3cret".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(describe(&s), "http https://example.com/a.yaml");
    }

    #[tokio::test]
    async fn empty_sources_are_refused() {
        let budget = memory::MemoryBudget::new(1 << 20, Duration::from_secs(1));
        let err = parse_blocking(
            "t".into(),
            vec![],
            Naming::Files,
            "under path x".into(),
            &mut budget.lease(),
        )
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            err.contains("no manifest files (.yaml, .yml, .json) under path x"),
            "{err}"
        );
        assert!(err.contains("would prune"), "{err}");
        let only_comments = vec![SourceFile {
            path: "a.yaml".into(),
            text: "# nothing\n---\n".into(),
        }];
        let err = parse_blocking(
            "t".into(),
            only_comments,
            Naming::Files,
            "in x".into(),
            &mut budget.lease(),
        )
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(err.contains("hold no objects"), "{err}");
    }

    #[test]
    fn stale_scratch_directories_are_removed_live_ones_kept() {
        let base = tempfile::tempdir().expect("tempdir");
        let live = WorkDir::prepare(base.path().to_path_buf());
        assert!(live.path.join(".lock").exists());
        // A directory left by a dead process: its lock file exists but nobody holds it.
        let dead = base.path().join("run-dead");
        std::fs::create_dir_all(&dead).expect("mkdir");
        std::fs::write(dead.join(".lock"), b"").expect("lock file");
        std::fs::write(dead.join("identity"), b"key").expect("key");
        // A fresh directory without a lock (being created) is kept.
        let fresh = base.path().join("run-fresh");
        std::fs::create_dir_all(&fresh).expect("mkdir");
        let other = WorkDir::prepare(base.path().to_path_buf());
        assert!(!dead.exists(), "the dead process's directory is removed");
        assert!(live.path.exists(), "a live one is kept");
        assert!(fresh.exists(), "one being created is kept");
        assert_ne!(live.path, other.path);
        let (lp, op) = (live.path.clone(), other.path.clone());
        drop(live);
        drop(other);
        assert!(
            !lp.exists() && !op.exists(),
            "removed when the Sources goes"
        );
    }

    #[test]
    fn credentials_secrets_are_checked() {
        let dest = egress::Destination::of_host("git.example.com", 443);
        let none = BTreeMap::new();
        assert!(matches!(
            check_credentials_secret("ns/s", Some("Opaque"), &none, &dest),
            Ok(None)
        ));
        assert!(matches!(
            check_credentials_secret("ns/s", None, &none, &dest),
            Ok(None)
        ));
        let err = check_credentials_secret(
            "ns/token",
            Some("kubernetes.io/service-account-token"),
            &none,
            &dest,
        )
        .err()
        .map(|e| match e {
            SourceError::Invalid(m) => m,
            other => panic!("not Invalid: {other}"),
        })
        .unwrap_or_default();
        assert!(err.contains("ns/token"), "{err}");
        assert!(err.contains("kubernetes.io/service-account-token"), "{err}");
        let ann = |v: &str| BTreeMap::from([(ALLOWED_HOSTS_ANNOTATION.to_string(), v.to_string())]);
        for ok in [
            "git.example.com",
            "other.com, *.example.com",
            "git.example.com:443",
        ] {
            let got = check_credentials_secret("ns/s", Some("Opaque"), &ann(ok), &dest);
            assert!(matches!(got, Ok(Some(_))), "{ok}");
        }
        for refused in ["other.com", "git.example.com:8443", "*.git.example.com", ""] {
            let err = check_credentials_secret("ns/s", Some("Opaque"), &ann(refused), &dest)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                err.contains("ns/s may only be used for the hosts"),
                "{refused}: {err}"
            );
            assert!(
                err.contains("git.example.com:443 is not one of them"),
                "{err}"
            );
        }
        let err = check_credentials_secret("ns/s", None, &ann("https://x/"), &dest)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("annotation applyset.dev/allowed-hosts: host pattern"),
            "{err}"
        );
    }

    #[test]
    fn combined_revision_format() {
        let f = |r: &str| Fetched {
            manifests: Arc::new(vec![]),
            revision: r.into(),
            kind: "git",
            downloaded: false,
            memory: None,
            deferred: None,
        };
        assert_eq!(combined_revision("sha256:x", &[]), "sha256:x");
        assert_eq!(
            combined_revision("sha256:x", &[f("configMap:a/b@1"), f("git:main@sha1:c")]),
            "sha256:x; configMap:a/b@1; git:main@sha1:c"
        );
    }
}

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
pub mod cache;
pub mod credentials;
pub mod decrypt_scope;
pub mod directory;
pub mod egress;
pub mod error;
pub mod git;
pub mod http;
pub mod index;
pub mod kustomization;
pub mod kustomize;
pub mod kustomize_error;
pub mod kustomize_fields;
pub mod kustomize_sandbox;
pub mod memory;
pub mod objects;
pub mod oci;
pub mod parse;
pub mod paths;
mod scratch;
pub mod spec;
pub mod tree;

use std::{collections::BTreeSet, path::PathBuf, sync::Arc, time::Duration};

use kube::Client;
use parking_lot::Mutex;

pub use cache::{Cache, Cached, estimate_bytes};
pub use credentials::{
    ALLOWED_HOSTS_ANNOTATION, CredentialsSecret, check_credentials_secret, read_secret, secret_text,
};
pub use error::{SourceError, SourceErrorClass};
pub use index::{Index, ObjectKey, ObjectKind};
pub use parse::{
    Naming, Parsed, SourceFile, parse_blocking, parse_files, parse_files_as_keys, under_path,
};
pub use spec::{Kind, describe, kind_of, redact_url, resolve_namespace, validate};

use crate::{
    api::{ApplySetSpec, Source},
    applyset::ParentRef,
    manifest::Manifest,
};
use scratch::WorkDir;

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
    /// `path` of a Git commit (files of any kind and directories) (`--source-max-entries`).
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
        let mut slot = self.default_client.lock();
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
                if let Some(slot) = done_ref.lock().get_mut(i) {
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
                    .clone()
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

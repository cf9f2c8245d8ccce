//! Manifest sources (`spec.sources`, SPEC §2.1): ConfigMaps, Secrets, HTTP(S) documents and
//! bundles, Git repositories and OCI artifacts. Each is one more producer of [`Manifest`]s for
//! the render step.
//!
//! [`Sources::fetch`] reads one source and returns its manifests with its revision:
//!
//! | source | revision | the cheap check per interval |
//! |---|---|---|
//! | configMap / secret | `configMap:<ns>/<name>@<resourceVersion>` | one GET |
//! | http | `http:sha256:<hex of the content>` | a conditional GET (ETag / Last-Modified); none when `sha256` pins it |
//! | git | `git:<ref>@sha1:<commit>` | one ref listing (no fetch unless the commit changed); none for a `commit` |
//! | oci | `oci:<tag>@sha256:<manifest digest>` | one HEAD of the manifest; none for a `digest` |
//!
//! Content is cached by revision ([`Cache`]): an unchanged source is not downloaded or parsed
//! again. Untrusted content goes through [`archive`] (tar.gz) with its defences; only
//! `.yaml`, `.yml` and `.json` files are read, sorted by path.
//!
//! Errors are of three kinds ([`SourceError`]): the spec is wrong (`Invalid`, reported as
//! ValidationFailed), the content does not parse (`Manifest`, ValidationFailed naming the
//! source, file and line), or the source could not be read or was refused (`Failed`, reported
//! as SourceFailed and retried with backoff).

pub mod archive;
pub mod git;
pub mod http;
pub mod objects;
pub mod oci;

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
    manifest::{Manifest, ManifestError, Origin, parse_documents},
};

/// Bounds on what a source may make the operator download and unpack.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest download (HTTP body, OCI blob) in bytes.
    pub max_download: u64,
    /// Largest total size of an archive after decompression, and of a Git tree's manifests.
    pub max_unpacked: u64,
    /// Most entries in an archive (or manifest files in a Git tree).
    pub max_entries: usize,
    /// Bound on one fetch (connect, transfer, unpack).
    pub timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_download: 64 << 20,
            max_unpacked: 256 << 20,
            max_entries: 10_000,
            timeout: Duration::from_secs(120),
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
}

/// Why a source could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The source's spec is wrong (only a spec change fixes it).
    #[error("{0}")]
    Invalid(String),
    /// The content is not valid YAML/JSON or not valid objects.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The source could not be read, did not verify, or its content was refused.
    #[error("{0}")]
    Failed(String),
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
    used: Instant,
}

/// Content by source identity, kept while its revision is unchanged; bounded (least recently
/// used entries go first).
pub struct Cache {
    entries: Mutex<HashMap<String, Entry>>,
    capacity: usize,
}

/// What the cache holds for an identity.
#[derive(Clone, Debug)]
pub struct Cached {
    pub revision: String,
    pub manifests: Arc<Vec<Manifest>>,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
}

impl Cache {
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    pub fn get(&self, identity: &str) -> Option<Cached> {
        let mut m = self.entries.lock().ok()?;
        let e = m.get_mut(identity)?;
        e.used = Instant::now();
        Some(Cached {
            revision: e.revision.clone(),
            manifests: e.manifests.clone(),
            etag: e.etag.clone(),
            last_modified: e.last_modified.clone(),
        })
    }

    /// The cached content of `identity` if it has `revision`.
    pub fn get_revision(&self, identity: &str, revision: &str) -> Option<Arc<Vec<Manifest>>> {
        self.get(identity)
            .filter(|c| c.revision == revision)
            .map(|c| c.manifests)
    }

    pub fn put(&self, identity: &str, c: Cached) {
        let Ok(mut m) = self.entries.lock() else {
            return;
        };
        if m.len() >= self.capacity
            && !m.contains_key(identity)
            && let Some(oldest) = m.iter().min_by_key(|(_, e)| e.used).map(|(k, _)| k.clone())
        {
            m.remove(&oldest);
        }
        m.insert(
            identity.to_string(),
            Entry {
                revision: c.revision,
                manifests: c.manifests,
                etag: c.etag,
                last_modified: c.last_modified,
                used: Instant::now(),
            },
        );
    }

    pub fn len(&self) -> usize {
        self.entries.lock().map(|m| m.len()).unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Everything the sources share: the HTTP client, the content cache, the index of referenced
/// objects, limits and a scratch directory (Git needs a repository on disk).
pub struct Sources {
    pub limits: Limits,
    pub cache: Cache,
    pub index: Index,
    work_dir: PathBuf,
    default_client: Mutex<Option<reqwest::Client>>,
}

/// Installs ring as the process's rustls crypto provider (kube uses ring too; reqwest and
/// gix's HTTP transport need a default). Idempotent.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Sources {
    pub fn new(limits: Limits, work_dir: Option<PathBuf>) -> Self {
        install_crypto_provider();
        Self {
            limits,
            cache: Cache::new(256),
            index: Index::default(),
            work_dir: work_dir.unwrap_or_else(|| std::env::temp_dir().join("applyset-operator")),
            default_client: Mutex::new(None),
        }
    }

    /// An HTTP client; with `ca` (PEM), one that also trusts that CA bundle.
    fn http_client(&self, ca: Option<&[u8]>) -> Result<reqwest::Client, SourceError> {
        let build = |ca: Option<&[u8]>| -> Result<reqwest::Client, String> {
            let mut b = reqwest::Client::builder()
                .user_agent(concat!("applyset-operator/", env!("CARGO_PKG_VERSION")))
                .connect_timeout(Duration::from_secs(15))
                .timeout(self.limits.timeout)
                .redirect(reqwest::redirect::Policy::limited(5));
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

    /// Reads every source of `spec` in order. The first failure stops.
    pub async fn fetch_all(
        &self,
        client: &Client,
        parent: &ParentRef,
        spec: &ApplySetSpec,
    ) -> Result<Vec<Fetched>, SourceError> {
        let mut out = Vec::with_capacity(spec.sources.len());
        for (i, source) in spec.sources.iter().enumerate() {
            let fetched =
                tokio::time::timeout(self.limits.timeout, self.fetch(client, parent, i, source))
                    .await
                    .map_err(|_| {
                        SourceError::Failed(format!(
                            "spec.sources[{i}] ({}): not read within {:?}",
                            describe(source),
                            self.limits.timeout
                        ))
                    })??;
            out.push(fetched);
        }
        Ok(out)
    }

    /// Reads source `index` of `parent`.
    pub async fn fetch(
        &self,
        client: &Client,
        parent: &ParentRef,
        index: usize,
        source: &Source,
    ) -> Result<Fetched, SourceError> {
        let at = |e: SourceError| match e {
            SourceError::Invalid(m) => {
                SourceError::Invalid(format!("spec.sources[{index}] ({}): {m}", describe(source)))
            }
            SourceError::Failed(m) => {
                SourceError::Failed(format!("spec.sources[{index}] ({}): {m}", describe(source)))
            }
            m @ SourceError::Manifest(_) => m,
        };
        let result = match kind_of(source).map_err(SourceError::Invalid) {
            Err(e) => Err(e),
            Ok(Kind::ConfigMap(o)) => {
                objects::fetch(client, parent, ObjectKind::ConfigMap, o, &self.limits).await
            }
            Ok(Kind::Secret(o)) => {
                objects::fetch(client, parent, ObjectKind::Secret, o, &self.limits).await
            }
            Ok(Kind::Http(h)) => http::fetch(self, client, parent, h).await,
            Ok(Kind::Git(g)) => git::fetch(self, client, parent, g).await,
            Ok(Kind::Oci(o)) => oci::fetch(self, client, parent, o).await,
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
        out
    }

    fn work_dir(&self) -> &std::path::Path {
        &self.work_dir
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
pub fn kind_of(source: &Source) -> Result<Kind<'_>, String> {
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
        0 => Err("sets none of configMap, secret, http, git, oci; set exactly one".into()),
        _ => Err("sets more than one of configMap, secret, http, git, oci; set exactly one (use one list entry per source)".into()),
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

/// A URL without user info (a password in a URL must never reach status or logs).
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if !u.username().is_empty() || u.password().is_some() => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        _ => url.to_string(),
    }
}

/// The namespace of a referenced ConfigMap / Secret: as given, else the ApplySet's; a
/// ClusterApplySet must give one.
pub fn resolve_namespace(parent: &ParentRef, given: Option<&str>) -> Result<String, String> {
    match (given.filter(|n| !n.is_empty()), &parent.namespace) {
        (Some(n), _) => Ok(n.to_string()),
        (None, Some(n)) => Ok(n.clone()),
        (None, None) => Err(
            "a ClusterApplySet must name the namespace of a ConfigMap or Secret (set namespace)"
                .into(),
        ),
    }
}

/// Validates the sources of a spec without any I/O (exactly one kind each; namespaces of a
/// ClusterApplySet; well-formed refs and paths). The message names the source.
pub fn validate(parent: &ParentRef, spec: &ApplySetSpec) -> Result<(), String> {
    for (i, s) in spec.sources.iter().enumerate() {
        let at = |m: String| format!("spec.sources[{i}] ({}): {m}", describe(s));
        let kind = kind_of(s).map_err(at)?;
        let need_ns = |ns: Option<&str>| resolve_namespace(parent, ns).map(|_| ());
        match kind {
            Kind::ConfigMap(o) | Kind::Secret(o) => need_ns(o.namespace.as_deref()).map_err(at)?,
            Kind::Http(h) => {
                http::validate(h).map_err(at)?;
                if let Some(r) = &h.secret_ref {
                    need_ns(r.namespace.as_deref()).map_err(at)?;
                }
            }
            Kind::Git(g) => {
                git::validate(g).map_err(at)?;
                if let Some(r) = &g.secret_ref {
                    need_ns(r.namespace.as_deref()).map_err(at)?;
                }
            }
            Kind::Oci(o) => {
                oci::validate(o).map_err(at)?;
                if let Some(r) = &o.secret_ref {
                    need_ns(r.namespace.as_deref()).map_err(at)?;
                }
            }
        }
    }
    Ok(())
}

/// The data of a credentials Secret (decoded bytes by key).
pub async fn read_secret(
    client: &Client,
    parent: &ParentRef,
    r: &SecretReference,
) -> Result<(String, BTreeMap<String, Vec<u8>>), SourceError> {
    let ns = resolve_namespace(parent, r.namespace.as_deref()).map_err(SourceError::Invalid)?;
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
    let mut data: BTreeMap<String, Vec<u8>> = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    for (k, v) in secret.string_data.unwrap_or_default() {
        data.insert(k, v.into_bytes());
    }
    Ok((format!("{ns}/{}", r.name), data))
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
    for f in files {
        out.extend(parse_documents(&f.text, &Origin::file(desc, &f.path))?);
    }
    Ok(out)
}

/// Like [`parse_files`] for data keys of a ConfigMap or Secret (origins say `key`).
pub fn parse_files_as_keys(
    desc: &str,
    files: &[SourceFile],
) -> Result<Vec<Manifest>, ManifestError> {
    let mut out = Vec::new();
    for f in files {
        out.extend(parse_documents(&f.text, &Origin::key(desc, &f.path))?);
    }
    Ok(out)
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
                .is_some_and(|e| e.contains("none"))
        );
        let mut two = cm(None);
        two.http = Some(HttpSource {
            url: "https://x/a.yaml".into(),
            ..Default::default()
        });
        assert!(
            kind_of(&two)
                .err()
                .is_some_and(|e| e.contains("more than one"))
        );
    }

    #[test]
    fn cluster_parents_must_name_namespaces() {
        let spec = ApplySetSpec {
            sources: vec![cm(None)],
            ..Default::default()
        };
        let err = validate(&ParentRef::cluster("c"), &spec).expect_err("no namespace");
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

    #[test]
    fn cache_is_bounded_and_keyed_by_revision() {
        let c = Cache::new(2);
        let put = |k: &str, r: &str| {
            c.put(
                k,
                Cached {
                    revision: r.into(),
                    manifests: Arc::new(vec![]),
                    etag: None,
                    last_modified: None,
                },
            )
        };
        put("a", "1");
        put("b", "1");
        assert!(c.get_revision("a", "1").is_some());
        assert!(c.get_revision("a", "2").is_none());
        put("c", "1");
        assert_eq!(c.len(), 2);
        assert!(c.get("b").is_none(), "least recently used went first");
    }

    #[test]
    fn combined_revision_format() {
        let f = |r: &str| Fetched {
            manifests: Arc::new(vec![]),
            revision: r.into(),
            kind: "git",
            downloaded: false,
        };
        assert_eq!(combined_revision("sha256:x", &[]), "sha256:x");
        assert_eq!(
            combined_revision("sha256:x", &[f("configMap:a/b@1"), f("git:main@sha1:c")]),
            "sha256:x; configMap:a/b@1; git:main@sha1:c"
        );
    }
}

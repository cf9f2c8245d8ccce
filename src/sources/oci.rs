//! OCI artifact sources: a small client of the OCI distribution API over reqwest.
//!
//! `GET /v2/<repository>/manifests/<tag|digest>` (an image manifest; an index is refused),
//! then `GET /v2/<repository>/blobs/<digest>` for each layer. Every download is verified
//! against its digest (the manifest against the requested digest or the registry's
//! `Docker-Content-Digest`, each blob against its descriptor) and capped in size. A layer that
//! is a tar.gz (the layout of `flux push artifact`, and of ORAS pushing a directory) is
//! unpacked with the defences of [`super::archive`]; a plain layer whose
//! `org.opencontainers.image.title` ends in `.yaml`, `.yml` or `.json` (ORAS pushing a file)
//! is read as that file; other layers are ignored.
//!
//! Authentication: anonymous, or from the secretRef (`username`/`password`, or a
//! `.dockerconfigjson`), sent as basic auth or exchanged for a bearer token when the
//! registry's `WWW-Authenticate` challenge asks for one (the Docker token protocol).
//!
//! Bounds are per artifact, not per layer: one download budget for the manifest and all
//! layers ([`super::Limits::max_download`]), one unpacked-size and entry budget for all layers
//! ([`archive::Budget`]), and at most [`MAX_LAYERS`] layers.
//!
//! The token service of a bearer challenge must be https (http only with `insecure`), and
//! receives the basic credentials only over https or when it is the registry's own host.
//!
//! Checks per interval: with a digest (cached), none; with a tag, one `HEAD` of the manifest,
//! and nothing more while the digest stays the same.

use std::collections::BTreeMap;

use base64::Engine as _;
use kube::Client;
use reqwest::{Method, StatusCode, header};
use serde_json::Value;

use super::{
    Cached, Fetched, SourceError, Sources, archive, egress, http::read_capped, http::request_error,
    read_secret, redact, secret_text, sha256_hex, tree::Tree, under_path,
};
use crate::{api::OciSource, applyset::ParentRef};

const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json";
const TITLE: &str = "org.opencontainers.image.title";

/// `oci://host[:port]/repository` split.
#[derive(Debug, PartialEq, Eq)]
pub struct Repository {
    pub host: String,
    pub name: String,
}

/// The registry and repository of an `oci://` URL (`Invalid` when it is not one).
pub fn parse_url(url: &str) -> Result<Repository, SourceError> {
    repository(url).map_err(SourceError::Invalid)
}

fn repository(url: &str) -> Result<Repository, String> {
    let rest = url
        .strip_prefix("oci://")
        .ok_or("url must start with oci://")?;
    let (host, name) = rest
        .split_once('/')
        .ok_or("url must be oci://registry/repository")?;
    let name = name.trim_end_matches('/');
    let valid_name = !name.is_empty()
        && name.split('/').all(|c| {
            !c.is_empty()
                && c.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        });
    if host.is_empty() || host.contains(['@', '?', '#', ' ']) || !valid_name {
        return Err(format!(
            "url {url:?} is not oci://registry/repository (lowercase repository path)"
        ));
    }
    if name.contains(':') || name.contains('@') {
        return Err("put the tag or digest in tag / digest, not in the url".into());
    }
    Ok(Repository {
        host: host.to_string(),
        name: name.to_string(),
    })
}

fn is_sha256_digest(d: &str) -> bool {
    d.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Checks an oci source's spec without any I/O (`Invalid`, naming the field).
pub fn validate(o: &OciSource) -> Result<(), SourceError> {
    check(o).map_err(SourceError::Invalid)?;
    super::paths::directory_prefix(o.path.as_deref())?;
    Ok(())
}

fn check(o: &OciSource) -> Result<(), String> {
    repository(&o.url)?;
    match (&o.tag, &o.digest) {
        (Some(_), Some(_)) | (None, None) => {
            return Err("set exactly one of tag or digest".into());
        }
        (Some(t), None) => {
            let ok = !t.is_empty()
                && t.len() <= 128
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                && !t.starts_with(['.', '-']);
            if !ok {
                return Err(format!("tag {t:?} is not a valid OCI tag"));
            }
        }
        (None, Some(d)) => {
            if !is_sha256_digest(d) {
                return Err("digest must be sha256:<64 hex digits>".into());
            }
        }
    }
    Ok(())
}

/// Registry credentials from a secret: `username`/`password`, or `.dockerconfigjson`.
fn credentials(data: &BTreeMap<String, Vec<u8>>, host: &str) -> Option<(String, String)> {
    if let (Some(u), Some(p)) = (secret_text(data, "username"), secret_text(data, "password")) {
        return Some((u, p));
    }
    let cfg: Value = serde_json::from_slice(data.get(".dockerconfigjson")?).ok()?;
    let auths = cfg.get("auths")?.as_object()?;
    let entry = auths.iter().find_map(|(k, v)| {
        let k = k
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        let k = k.split('/').next().unwrap_or(k);
        (k == host).then_some(v)
    })?;
    if let (Some(u), Some(p)) = (
        entry.get("username").and_then(Value::as_str),
        entry.get("password").and_then(Value::as_str),
    ) {
        return Some((u.to_string(), p.to_string()));
    }
    let auth = entry.get("auth")?.as_str()?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth)
        .ok()?;
    let (u, p) = std::str::from_utf8(&decoded).ok()?.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

/// A session with one registry repository: remembers the auth that worked.
struct Session {
    http: reqwest::Client,
    base: String,
    /// `host[:port]` of the registry.
    host: String,
    repo: String,
    /// Plain http allowed (`insecure`), for the registry and its token service.
    insecure: bool,
    basic: Option<(String, String)>,
    /// `Authorization` header value once a challenge was answered.
    auth: Option<String>,
    /// The egress policy (the token service's URL is checked against it).
    policy: std::sync::Arc<egress::Policy>,
    /// The hosts the secretRef's `applyset.dev/allowed-hosts` annotation allows (`None`: any);
    /// the basic credentials go to no other token service.
    secret_hosts: Option<Vec<egress::HostPattern>>,
    /// The memory the downloads take, from the operator's budget.
    lease: super::memory::Lease,
}

/// The most layers an artifact may have (a Flux artifact has one, ORAS one per file pushed).
pub const MAX_LAYERS: usize = 16;

/// The largest manifest read (its own cap, taken from the download budget too).
const MAX_MANIFEST: u64 = 4 << 20;

/// Whether basic credentials may go to the token service at `realm`: over https, or to the
/// registry's own host (which gets them anyway).
fn may_send_credentials(realm: &url::Url, registry_host: &str) -> bool {
    let realm_host = match (realm.host_str(), realm.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_string(),
        (None, _) => return false,
    };
    realm.scheme() == "https" || realm_host.eq_ignore_ascii_case(registry_host)
}

/// Parses `Bearer realm="…",service="…",scope="…"` (or `Basic realm=…`).
fn parse_challenge(h: &str) -> Option<(String, BTreeMap<String, String>)> {
    let (scheme, rest) = h.trim().split_once(' ')?;
    let mut params = BTreeMap::new();
    let mut rest = rest.trim();
    while !rest.is_empty() {
        let (k, after) = rest.split_once('=')?;
        let k = k.trim().to_ascii_lowercase();
        let after = after.trim_start();
        let (v, tail) = if let Some(q) = after.strip_prefix('"') {
            let end = q.find('"')?;
            (q[..end].to_string(), &q[end + 1..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_string(), &after[end..])
        };
        params.insert(k, v);
        rest = tail.trim_start().trim_start_matches(',').trim_start();
    }
    Some((scheme.to_ascii_lowercase(), params))
}

impl Session {
    /// A session with the repository of `o` (`repo`, parsed from its URL), over https (http
    /// with `insecure`), not yet authenticated.
    fn new(
        http: reqwest::Client,
        policy: std::sync::Arc<egress::Policy>,
        o: &OciSource,
        repo: &Repository,
        secret: SecretSettings,
        lease: super::memory::Lease,
    ) -> Self {
        Self {
            http,
            base: format!(
                "{}://{}",
                if o.insecure { "http" } else { "https" },
                repo.host
            ),
            host: repo.host.clone(),
            repo: repo.name.clone(),
            insecure: o.insecure,
            basic: secret.basic,
            auth: None,
            policy,
            secret_hosts: secret.allowed_hosts,
            lease,
        }
    }

    async fn send(
        &self,
        method: &Method,
        url: &str,
        accept: Option<&str>,
    ) -> Result<reqwest::Response, String> {
        let mut rb = self.http.request(method.clone(), url);
        if let Some(a) = accept {
            rb = rb.header(header::ACCEPT, a);
        }
        if let Some(a) = &self.auth {
            rb = rb.header(header::AUTHORIZATION, a);
        }
        rb.send()
            .await
            .map_err(|e| format!("{method} {url}: {}", request_error(e)))
    }

    /// A request, answering one authentication challenge if the registry asks.
    async fn request(
        &mut self,
        method: Method,
        path: &str,
        accept: Option<&str>,
    ) -> Result<reqwest::Response, String> {
        let url = format!("{}/v2/{}/{path}", self.base, self.repo);
        let resp = self.send(&method, &url, accept).await?;
        if resp.status() != StatusCode::UNAUTHORIZED || self.auth.is_some() {
            return Ok(resp);
        }
        let challenge = resp
            .headers()
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_challenge);
        match challenge {
            Some((scheme, params)) if scheme == "bearer" => {
                self.auth = Some(self.bearer_token(&params).await?);
            }
            Some((scheme, _)) if scheme == "basic" => {
                self.auth = Some(self.basic_auth(&method, &url)?);
            }
            _ => return Ok(resp),
        }
        self.send(&method, &url, accept).await
    }

    /// Answers a bearer challenge (its `params`): gets a token from the realm (https, or http
    /// with `insecure`) for the challenge's service and scope (default: pull of this
    /// repository), sending the basic credentials only where [`may_send_credentials`] allows.
    /// Returns the `Authorization` header value.
    async fn bearer_token(&mut self, params: &BTreeMap<String, String>) -> Result<String, String> {
        let realm = params
            .get("realm")
            .ok_or("the registry's bearer challenge has no realm")?;
        let mut token_url = url::Url::parse(realm).map_err(|e| {
            format!(
                "the registry's token realm {:?} is not a URL: {e}",
                redact(realm)
            )
        })?;
        match token_url.scheme() {
            "https" => {}
            "http" if self.insecure => {}
            other => {
                return Err(format!(
                    "the registry's token realm {} is {other}://, not https:// (set insecure: true only for a registry reached over plain http)",
                    redact(realm)
                ));
            }
        }
        self.policy
            .check_url(&token_url)
            .map_err(|e| format!("the registry's token realm {}: {e}", redact(realm)))?;
        {
            let mut q = token_url.query_pairs_mut();
            if let Some(s) = params.get("service") {
                q.append_pair("service", s);
            }
            let scope = params
                .get("scope")
                .cloned()
                .unwrap_or_else(|| format!("repository:{}:pull", self.repo));
            q.append_pair("scope", &scope);
        }
        let mut rb = self.http.get(token_url.as_str());
        if let Some((u, p)) = &self.basic
            && may_send_credentials(&token_url, &self.host)
        {
            if let Some(allowed) = &self.secret_hosts {
                let dest = egress::Destination::of_url(&token_url).map_err(|e| e.to_string())?;
                if !allowed.iter().any(|p| p.matches(&dest)) {
                    return Err(format!(
                        "the registry's token realm {} is on host {dest}, which the secretRef's annotation {} does not list; its credentials are not sent there (add the host to the annotation if it is the registry's token service)",
                        redact(realm),
                        super::ALLOWED_HOSTS_ANNOTATION
                    ));
                }
            }
            rb = rb.basic_auth(u, Some(p));
        }
        let tr = rb
            .send()
            .await
            .map_err(|e| format!("getting a registry token: {}", request_error(e)))?;
        if !tr.status().is_success() {
            return Err(format!(
                "the registry's token service answered {} (check the secretRef's credentials)",
                tr.status()
            ));
        }
        let body = read_capped(tr, 1 << 20, &mut self.lease)
            .await
            .map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_slice(&body)
            .map_err(|e| format!("the registry's token answer is not JSON: {e}"))?;
        let token = v
            .get("token")
            .or_else(|| v.get("access_token"))
            .and_then(Value::as_str)
            .ok_or("the registry's token answer has no token")?;
        Ok(format!("Bearer {token}"))
    }

    /// Answers a basic challenge with the secretRef's credentials (an error without them).
    /// Returns the `Authorization` header value.
    fn basic_auth(&self, method: &Method, url: &str) -> Result<String, String> {
        let Some((u, p)) = &self.basic else {
            return Err(format!(
                "{method} {url}: the registry requires credentials; set a secretRef with username and password"
            ));
        };
        let raw = format!("{u}:{p}");
        Ok(format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        ))
    }

    /// GETs `path`, at most `max` bytes, and verifies it against `digest`.
    async fn get_verified(
        &mut self,
        path: &str,
        accept: Option<&str>,
        digest: &str,
        what: &str,
        max: u64,
    ) -> Result<Vec<u8>, SourceError> {
        let resp = self
            .request(Method::GET, path, accept)
            .await
            .map_err(SourceError::Failed)?;
        if !resp.status().is_success() {
            return Err(SourceError::Failed(format!(
                "GET {what}: the registry answered {}",
                resp.status()
            )));
        }
        let body = read_capped(resp, max, &mut self.lease)
            .await
            .map_err(|e| match e {
                e @ SourceError::TooLarge { .. } => e,
                e => SourceError::Failed(format!("GET {what}: {e}")),
            })?;
        let got = format!("sha256:{}", sha256_hex(&body));
        if got != digest {
            return Err(SourceError::Failed(format!(
                "{what}: digest mismatch: expected {digest}, downloaded content has {got}; refusing it"
            )));
        }
        Ok(body)
    }
}

pub async fn fetch(
    s: &Sources,
    client: &Client,
    parent: &ParentRef,
    o: &OciSource,
    overrides: Option<&crate::api::KustomizeOverrides>,
) -> Result<Fetched, SourceError> {
    validate(o)?;
    let repo = parse_url(&o.url)?;
    let prefix = super::paths::directory_prefix(o.path.as_deref())?;
    s.policy
        .check_insecure_flag(o.insecure)
        .map_err(|e| SourceError::Failed(e.0))?;
    let dest = egress::checked_destination(&s.policy, &registry_base(o, &repo))?;
    let secret = SecretSettings::read(client, parent, o, &repo.host, &dest).await?;
    let desc = super::describe(&crate::api::Source {
        oci: Some(o.clone()),
        ..Default::default()
    });
    let reference = o
        .digest
        .clone()
        .or_else(|| o.tag.clone())
        .unwrap_or_default();
    let identity = format!(
        "oci {} path={prefix} insecure={} secret={}{}",
        o.url,
        o.insecure,
        secret.id,
        super::directory::build_identity(overrides)
    );
    let cached = |digest: &str| {
        let revision = revision_of(o, digest);
        s.cache
            .get_revision(&identity, &revision)
            .map(|c| from_cache(c, revision))
    };
    if let Some(d) = &o.digest
        && let Some(hit) = cached(d)
    {
        return Ok(hit);
    }
    let http = s.http_client(secret.ca.as_deref())?;
    let session = Session::new(http, s.policy.clone(), o, &repo, secret, s.memory.lease());
    let mut artifact = Artifact::new(session, reference, prefix, &s.limits);
    // The cheap check for a tag: HEAD the manifest and compare its digest with the cache.
    let mut expected = o.digest.clone();
    if o.tag.is_some() {
        expected = artifact.head_digest().await?;
        if let Some(d) = &expected
            && let Some(hit) = cached(d)
        {
            return Ok(hit);
        }
    }
    let (body, digest) = artifact.get_manifest(expected.as_deref()).await?;
    let layers = artifact.layers_of(&body)?;
    artifact.read_layers(&layers).await?;
    let mut lease = std::mem::replace(&mut artifact.session.lease, s.memory.lease());
    let (tree, prefix) = artifact.into_tree(&digest)?;
    let where_ = format!("in the artifact's layers{}", under_path(&prefix));
    let dir = super::directory::Directory {
        desc,
        tree,
        prefix: &prefix,
        where_,
        overrides,
    };
    let parsed = super::directory::read(s, dir, &mut lease).await?;
    let cached = Cached {
        revision: revision_of(o, &digest),
        manifests: parsed.manifests,
        etag: None,
        last_modified: None,
        bytes: parsed.bytes,
        deferred: parsed.deferred,
    };
    Ok(s.cache.store(&identity, "oci", cached, lease))
}

/// What the secretRef provides: its id (part of the cache identity), the registry
/// credentials and an extra CA; all empty without a secretRef.
struct SecretSettings {
    id: String,
    basic: Option<(String, String)>,
    ca: Option<Vec<u8>>,
    /// The secret's `applyset.dev/allowed-hosts` (`None`: any host).
    allowed_hosts: Option<Vec<egress::HostPattern>>,
}

impl SecretSettings {
    /// Reads the secretRef of `o`, taking the credentials for registry `host`.
    async fn read(
        client: &Client,
        parent: &ParentRef,
        o: &OciSource,
        host: &str,
        dest: &egress::Destination,
    ) -> Result<Self, SourceError> {
        match &o.secret_ref {
            None => Ok(Self {
                id: String::new(),
                basic: None,
                ca: None,
                allowed_hosts: None,
            }),
            Some(r) => {
                let secret = read_secret(client, parent, r, dest).await?;
                let data = secret.data;
                let ca = data.get("ca.crt").cloned().filter(|c| !c.is_empty());
                Ok(Self {
                    id: secret.id,
                    basic: credentials(&data, host),
                    ca,
                    allowed_hosts: secret.allowed_hosts,
                })
            }
        }
    }
}

/// The registry's base URL for source `o` (repository `repo`): https, or http with
/// `insecure`.
fn registry_base(o: &OciSource, repo: &Repository) -> String {
    format!(
        "{}://{}/",
        if o.insecure { "http" } else { "https" },
        repo.host
    )
}

/// The revision of the artifact with manifest `digest`: `oci:<tag>@<digest>` for a tag,
/// else `oci:<digest>`.
fn revision_of(o: &OciSource, digest: &str) -> String {
    match &o.tag {
        Some(t) => format!("oci:{t}@{digest}"),
        None => format!("oci:{digest}"),
    }
}

/// Cached content, served without a download.
fn from_cache(c: super::Cached, revision: String) -> Fetched {
    Fetched {
        manifests: c.manifests,
        revision,
        kind: "oci",
        downloaded: false,
        memory: None,
        deferred: c.deferred,
    }
}

/// One artifact being fetched: the registry session, the tag or digest asked for, what is
/// left of its budgets (one download budget for the manifest and all layers, one unpacking
/// budget for all layers) and the manifest files found so far.
struct Artifact {
    session: Session,
    /// The tag or digest asked for.
    reference: String,
    /// The directory filter (see [`super::paths::directory_prefix`]).
    prefix: String,
    /// The download limit, for messages.
    max_download: u64,
    /// Bytes that may still be downloaded (manifest and layers together).
    download_left: u64,
    /// What may still be unpacked (all layers together).
    budget: archive::Budget,
    /// Whether anything lies at or under `prefix`.
    prefix_found: bool,
    tree: Tree,
}

impl Artifact {
    fn new(session: Session, reference: String, prefix: String, limits: &super::Limits) -> Self {
        Self {
            session,
            reference,
            prefix_found: prefix.is_empty(),
            prefix,
            max_download: limits.max_download,
            download_left: limits.max_download,
            budget: archive::Budget::new(limits),
            tree: Tree::new(),
        }
    }

    /// Every file found (the layers together) and the prefix; an error when nothing lies
    /// at or under the prefix in the artifact (whose manifest has `digest`).
    fn into_tree(self, digest: &str) -> Result<(Tree, String), SourceError> {
        if !self.prefix_found {
            return Err(SourceError::Failed(format!(
                "path {} does not exist in the artifact {} ({digest}); fix path",
                self.prefix.trim_end_matches('/'),
                self.reference
            )));
        }
        Ok((self.tree, self.prefix))
    }

    /// The error of an artifact beyond the download limit.
    fn over_budget(&self) -> SourceError {
        SourceError::Failed(format!(
            "the artifact is more than {} bytes (the download limit, for the manifest and all layers together); refusing it",
            self.max_download
        ))
    }

    /// The answer to `method` on the manifest of the reference; a 404 ("the registry has no
    /// `what` …") or another failure is an error.
    async fn manifest_response(
        &mut self,
        method: Method,
        what: &str,
    ) -> Result<reqwest::Response, SourceError> {
        let failed = SourceError::Failed;
        let reference = &self.reference;
        let resp = self
            .session
            .request(
                method.clone(),
                &format!("manifests/{reference}"),
                Some(MANIFEST_TYPES),
            )
            .await
            .map_err(failed)?;
        if resp.status() == StatusCode::NOT_FOUND {
            return Err(failed(format!(
                "the registry has no {what} {reference:?} in {}",
                self.session.repo
            )));
        }
        if !resp.status().is_success() {
            return Err(failed(format!(
                "{method} manifest {reference}: the registry answered {}",
                resp.status()
            )));
        }
        Ok(resp)
    }

    /// HEADs the manifest of the tag: the sha256 digest the registry announces for it, if any.
    async fn head_digest(&mut self) -> Result<Option<String>, SourceError> {
        let resp = self.manifest_response(Method::HEAD, "tag").await?;
        Ok(resp
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .filter(|d| is_sha256_digest(d)))
    }

    /// GETs the manifest (capped, taken from the download budget) and verifies it against
    /// the digest asked for (or announced by the HEAD) and the one the registry announces
    /// with it. Returns the manifest and its digest.
    async fn get_manifest(
        &mut self,
        expected: Option<&str>,
    ) -> Result<(Vec<u8>, String), SourceError> {
        let failed = SourceError::Failed;
        let resp = self.manifest_response(Method::GET, "manifest").await?;
        let reference = &self.reference;
        let announced = resp
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = read_capped(
            resp,
            MAX_MANIFEST.min(self.download_left),
            &mut self.session.lease,
        )
        .await
        .map_err(|e| failed(format!("GET manifest {reference}: {e}")))?;
        self.download_left = self.download_left.saturating_sub(body.len() as u64);
        let digest = format!("sha256:{}", sha256_hex(&body));
        for want in [
            expected,
            announced.as_deref().filter(|d| is_sha256_digest(d)),
        ]
        .into_iter()
        .flatten()
        {
            if want != digest {
                return Err(failed(format!(
                    "manifest {reference}: digest mismatch: expected {want}, downloaded manifest has {digest}; refusing it"
                )));
            }
        }
        Ok((body, digest))
    }

    /// The layers of manifest `body`: an image index, a manifest without layers and one with
    /// more than [`MAX_LAYERS`] are refused.
    fn layers_of(&self, body: &[u8]) -> Result<Vec<Value>, SourceError> {
        let failed = SourceError::Failed;
        let reference = &self.reference;
        let mut manifest: Value = serde_json::from_slice(body)
            .map_err(|e| failed(format!("manifest {reference} is not JSON: {e}")))?;
        let media_type = manifest
            .get("mediaType")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if media_type.contains("index") || media_type.contains("manifest.list") {
            return Err(failed(format!(
                "{reference} is an image index ({media_type}), not an artifact with manifests"
            )));
        }
        let layers = manifest
            .get_mut("layers")
            .and_then(Value::as_array_mut)
            .map(std::mem::take)
            .ok_or_else(|| failed(format!("manifest {reference} has no layers")))?;
        if layers.len() > MAX_LAYERS {
            return Err(failed(format!(
                "manifest {reference} has {} layers, more than the limit of {MAX_LAYERS}; refusing it",
                layers.len()
            )));
        }
        Ok(layers)
    }

    /// Reads every layer in order, after checking their declared sizes against the download
    /// budget (before anything is downloaded; the downloads are capped anyway).
    async fn read_layers(&mut self, layers: &[Value]) -> Result<(), SourceError> {
        let declared: u64 = layers
            .iter()
            .map(|l| l.get("size").and_then(Value::as_u64).unwrap_or(0))
            .fold(0u64, u64::saturating_add);
        if declared > self.download_left {
            return Err(self.over_budget());
        }
        // The layers, and about as much again for their files, at once; kept only while
        // they arrive quickly (see `read_capped`).
        self.session
            .lease
            .reserve_ahead(declared.saturating_mul(2))
            .await?;
        for (i, layer) in layers.iter().enumerate() {
            self.read_layer(i, layer).await?;
        }
        Ok(())
    }

    /// Downloads layer `i` (verified against its sha256 digest, within the download budget)
    /// and takes its manifest files: a tar.gz is unpacked, a plain layer is read as the file
    /// its title names, other layers are ignored.
    async fn read_layer(&mut self, i: usize, layer: &Value) -> Result<(), SourceError> {
        let failed = SourceError::Failed;
        let d = layer
            .get("digest")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !is_sha256_digest(d) {
            return Err(failed(format!(
                "layer {i} has digest {d:?}; only sha256 digests are supported"
            )));
        }
        let title = layer
            .get("annotations")
            .and_then(|a| a.get(TITLE))
            .and_then(Value::as_str)
            .map(str::to_string);
        let blob = self
            .session
            .get_verified(
                &format!("blobs/{d}"),
                None,
                d,
                &format!("layer {i} ({d})"),
                self.download_left,
            )
            .await
            .map_err(|e| match e {
                SourceError::TooLarge { .. } => self.over_budget(),
                e => e,
            })?;
        self.download_left = self.download_left.saturating_sub(blob.len() as u64);
        if archive::is_gzip(&blob) {
            self.unpack_layer(i, blob).await
        } else if let Some(t) = title {
            self.take_titled_layer(i, &t, blob)
        } else {
            Ok(())
        }
    }

    /// Unpacks tar.gz layer `i` on a blocking thread, within what is left of the unpacking
    /// budget.
    async fn unpack_layer(&mut self, i: usize, blob: Vec<u8>) -> Result<(), SourceError> {
        let failed = SourceError::Failed;
        let pfx = self.prefix.clone();
        let budget = self.budget;
        let blob_bytes = blob.capacity() as u64;
        let unpacked = super::http::unpack_reserving(&mut self.session.lease, move |reserve| {
            archive::read_tar_gz_reserving(&blob, &pfx, budget, reserve)
        })
        .await
        .map_err(|e| failed(format!("unpacking layer {i}: {e}")))?
        .map_err(|e| {
            failed(format!(
                "layer {i}: {e} (the limits count all layers of the artifact together)"
            ))
        })?;
        // The layer's download is gone (dropped after unpacking); its room serves the next.
        self.session.lease.release(blob_bytes);
        self.budget = unpacked.budget;
        self.prefix_found |= unpacked.prefix_found;
        for (path, data) in unpacked.tree.files() {
            self.tree.insert(path.to_string(), data.to_vec());
        }
        Ok(())
    }

    /// Takes plain layer `i` as the file its title `t` names, if that is a manifest file under
    /// the prefix (counted against the unpacking budget); a title that is absolute or leaves
    /// the root is refused.
    fn take_titled_layer(&mut self, i: usize, t: &str, blob: Vec<u8>) -> Result<(), SourceError> {
        let failed = SourceError::Failed;
        let Some(path) = super::paths::clean_relative(t) else {
            return Err(failed(format!(
                "layer {i}: title {t:?} is an absolute path or leaves the root; refusing it"
            )));
        };
        if path.starts_with(&self.prefix) {
            self.prefix_found = true;
        }
        self.budget.take_file(blob.len() as u64).map_err(|e| {
            failed(format!(
                "layer {i}: {e} (the limits count all layers of the artifact together)"
            ))
        })?;
        self.tree.insert(path, blob);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("oci://127.0.0.1:5000/a/b-c").expect("ok"),
            Repository {
                host: "127.0.0.1:5000".into(),
                name: "a/b-c".into()
            }
        );
        for bad in [
            "https://x/y",
            "oci://x",
            "oci://x/",
            "oci://x/Upper",
            "oci://x/a:tag",
            "oci://u@x/a",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn challenges() {
        let (s, p) = parse_challenge(
            r#"Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:a/b:pull""#,
        )
        .expect("parsed");
        assert_eq!(s, "bearer");
        assert_eq!(p["realm"], "https://auth.example.com/token");
        assert_eq!(p["service"], "registry.example.com");
        assert_eq!(p["scope"], "repository:a/b:pull");
        let (s, p) = parse_challenge(r#"Basic realm="Registry Realm""#).expect("parsed");
        assert_eq!(s, "basic");
        assert_eq!(p["realm"], "Registry Realm");
    }

    #[test]
    fn credentials_go_only_to_safe_token_services() {
        let u = |s: &str| url::Url::parse(s).expect("url");
        assert!(may_send_credentials(
            &u("https://auth.example.com/token"),
            "r.example.com"
        ));
        assert!(may_send_credentials(
            &u("http://127.0.0.1:5000/token"),
            "127.0.0.1:5000"
        ));
        assert!(!may_send_credentials(
            &u("http://auth.example.com/token"),
            "r.example.com"
        ));
        assert!(!may_send_credentials(
            &u("http://127.0.0.1:5001/token"),
            "127.0.0.1:5000"
        ));
    }

    #[test]
    fn docker_config_credentials() {
        let auth = base64::engine::general_purpose::STANDARD.encode("me:pw");
        let cfg = format!(r#"{{"auths":{{"https://r.example.com":{{"auth":"{auth}"}}}}}}"#);
        let data = BTreeMap::from([(".dockerconfigjson".to_string(), cfg.into_bytes())]);
        assert_eq!(
            credentials(&data, "r.example.com"),
            Some(("me".into(), "pw".into()))
        );
        assert_eq!(credentials(&data, "other.example.com"), None);
    }

    #[test]
    fn validation() {
        let o = |tag: Option<&str>, digest: Option<&str>| OciSource {
            url: "oci://r/a".into(),
            tag: tag.map(Into::into),
            digest: digest.map(Into::into),
            ..Default::default()
        };
        assert!(validate(&o(Some("v1.0"), None)).is_ok());
        assert!(validate(&o(None, Some(&format!("sha256:{}", "a".repeat(64))))).is_ok());
        assert!(validate(&o(None, None)).is_err());
        assert!(validate(&o(Some("v1"), Some("sha256:x"))).is_err());
        assert!(validate(&o(None, Some("md5:x"))).is_err());
    }
}

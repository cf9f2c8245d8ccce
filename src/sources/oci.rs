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

use kube::Client;
use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::{
    Cached, Fetched, SourceError, Sources, archive, egress, http::read_capped, sha256_hex,
    tree::Tree, under_path,
};
use crate::{api::OciSource, applyset::ParentRef};

mod registry;

use registry::{SecretSettings, Session};

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

/// The most layers an artifact may have (a Flux artifact has one, ORAS one per file pushed).
pub const MAX_LAYERS: usize = 16;

/// The largest manifest read (its own cap, taken from the download budget too).
const MAX_MANIFEST: u64 = 4 << 20;

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

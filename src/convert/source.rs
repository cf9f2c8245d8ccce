//! A Kustomization's `sourceRef` resolved into the set's own source (git or oci): Flux's
//! `GitRepository` (url, ref, secretRef) and `OCIRepository` (url, ref, secretRef, insecure),
//! with Flux's defaults made explicit (no ref: branch `master`, tag `latest`) and every other
//! field named; a `Bucket`, an `ExternalArtifact`, a semver ref or a missing source refuse the
//! Kustomization.

use serde::Deserialize;

use super::{
    FluxRef, Note, Scope, Severity,
    flux::{Fields, LocalRef, Object},
};
use crate::api::{GitReference, GitSource, OciSource, SecretReference, Source};

/// What a resolved source gives the set, besides the notes.
pub struct Resolved {
    pub source: Source,
    pub notes: Vec<Note>,
}

/// Where the set reads a source: the Kustomization's `path` (already cleaned), the set's scope
/// and namespace (the Kustomization's).
pub struct Target<'a> {
    pub path: Option<String>,
    pub scope: Scope,
    pub namespace: &'a str,
}

/// Resolves the source `object` (found by a Kustomization's sourceRef) for `target`; `Err`
/// is the refusal's reason (`field: why`), for a note on the Kustomization.
pub fn resolve(object: &Object, target: &Target) -> Result<Resolved, String> {
    let mut notes = Vec::new();
    let mut fields = Fields::new(&object.id, "spec", object.spec.clone());
    let source = match object.id.kind.as_str() {
        "GitRepository" => Source {
            git: Some(git(&mut fields, target, &mut notes)?),
            ..Source::default()
        },
        "OCIRepository" => Source {
            oci: Some(oci(&mut fields, target, &mut notes)?),
            ..Source::default()
        },
        "Bucket" => return Err(BUCKET.to_string()),
        "ExternalArtifact" => return Err(EXTERNAL_ARTIFACT.to_string()),
        other => {
            return Err(format!(
                "a source of kind {other} has no equivalent; use a GitRepository or an OCIRepository"
            ));
        }
    };
    common(&mut fields, &mut notes);
    fields.rest(&mut notes);
    Ok(Resolved { source, notes })
}

/// Why a Bucket is refused.
pub const BUCKET: &str = "a Bucket source (S3-compatible object storage) has no equivalent: a set reads git, oci, http(s), ConfigMap and Secret sources; publish the manifests as an OCI artifact (`flux push artifact`) or serve them over HTTPS, point an OCIRepository (or the set's spec.sources) at it, and convert again";
/// Why an ExternalArtifact is refused.
pub const EXTERNAL_ARTIFACT: &str = "an ExternalArtifact is produced by another controller and has no equivalent: publish its content as an OCI artifact or serve it over HTTPS, point an OCIRepository (or the set's spec.sources) at it, and convert again";

/// The fields GitRepository and OCIRepository share.
fn common(f: &mut Fields, notes: &mut Vec<Note>) {
    let _ = f.take::<serde_json::Value>("interval");
    if f.has("timeout") {
        let _ = f.take::<serde_json::Value>("timeout");
        notes.push(f.note(
            "timeout",
            Severity::Info,
            "a set bounds a source's fetch with its own limits, not a per-source timeout",
        ));
    }
    f.drop_field(
        "suspend",
        "a suspended source kept serving Flux's last artifact; the set reads the source at every interval (suspend the set instead)",
        notes,
    );
    f.drop_field(
        "ignore",
        "a set has no per-source ignore patterns: every file under the path is read (move excluded files out of the path)",
        notes,
    );
    f.drop_field(
        "proxySecretRef",
        "a set's sources connect directly (or through the operator's HTTPS_PROXY environment)",
        notes,
    );
    f.drop_field(
        "serviceAccountName",
        "a set's source reads credentials from its secretRef only (no workload identity)",
        notes,
    );
    let provider: Option<String> = f.take("provider").ok().flatten();
    if let Some(p) = provider.filter(|p| p != "generic") {
        notes.push(f.note(
            "provider",
            Severity::Dropped,
            format!("provider {p} (cloud workload identity) has no equivalent: put static credentials in the secretRef Secret"),
        ));
    }
}

/// Flux's `GitRepositoryRef`.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct FluxGitRef {
    branch: Option<String>,
    tag: Option<String>,
    semver: Option<String>,
    name: Option<String>,
    commit: Option<String>,
}

/// A GitRepository's url, ref and secretRef.
fn git(f: &mut Fields, t: &Target, notes: &mut Vec<Note>) -> Result<GitSource, String> {
    let url: String = taken(f, "url")?.ok_or("spec.url: missing")?;
    let r: FluxGitRef = taken(f, "ref")?.unwrap_or_default();
    let reference = git_ref(&r, &f.field("ref"), notes, &f.object)?;
    let secret_ref = secret(f, t, notes, GIT_KEYS)?;
    for (key, why) in [
        (
            "verify",
            "a set does not verify commit signatures; verify them in CI or pin a commit",
        ),
        (
            "include",
            "a set reads one repository per source; add the included repository as another source of the set",
        ),
        (
            "recurseSubmodules",
            "a set does not fetch submodules; add each one as another git source",
        ),
        (
            "sparseCheckout",
            "a set reads only the files under its path already; the sparse checkout's other directories are not read",
        ),
    ] {
        f.drop_field(key, why, notes);
    }
    Ok(GitSource {
        url,
        reference,
        path: t.path.clone(),
        secret_ref,
    })
}

/// Flux's precedence: commit, then name, then semver, then tag, then branch; none: branch
/// `master` (source-controller's default).
fn git_ref(
    r: &FluxGitRef,
    field: &str,
    notes: &mut Vec<Note>,
    object: &FluxRef,
) -> Result<GitReference, String> {
    let set = |s: &Option<String>| s.clone().filter(|v| !v.is_empty());
    if let Some(c) = set(&r.commit) {
        if c.len() != 40 || !c.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "{field}.commit: {c:?} is not a full commit SHA (40 hex digits), the only form a set pins; write the full SHA"
            ));
        }
        if set(&r.branch).is_some() || set(&r.tag).is_some() {
            notes.push(Note {
                object: object.clone(),
                field: format!("{field}.commit"),
                severity: Severity::Info,
                why: "the commit takes precedence (as in Flux): the set pins it, without the branch or tag".into(),
            });
        }
        return Ok(GitReference {
            commit: Some(c.to_ascii_lowercase()),
            ..GitReference::default()
        });
    }
    if let Some(n) = set(&r.name) {
        if let Some(b) = n.strip_prefix("refs/heads/") {
            return Ok(branch(b));
        }
        if let Some(t) = n.strip_prefix("refs/tags/") {
            return Ok(tag(t));
        }
        return Err(format!(
            "{field}.name: {n:?} is neither refs/heads/<branch> nor refs/tags/<tag>; a set reads a branch, a tag or a commit: use one of those"
        ));
    }
    if let Some(s) = set(&r.semver) {
        return Err(format!(
            "{field}.semver: a set does not select tags by a semver range ({s:?}); pin the tag it resolves to today (ref.tag) and update it when you release"
        ));
    }
    if let Some(t) = set(&r.tag) {
        return Ok(tag(&t));
    }
    if let Some(b) = set(&r.branch) {
        return Ok(branch(&b));
    }
    notes.push(Note {
        object: object.clone(),
        field: field.to_string(),
        severity: Severity::Info,
        why: "not set: Flux's default, branch master, made explicit".into(),
    });
    Ok(branch("master"))
}

fn branch(b: &str) -> GitReference {
    GitReference {
        branch: Some(b.to_string()),
        ..GitReference::default()
    }
}

fn tag(t: &str) -> GitReference {
    GitReference {
        tag: Some(t.to_string()),
        ..GitReference::default()
    }
}

/// Flux's `OCIRepositoryRef`.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct FluxOciRef {
    digest: Option<String>,
    semver: Option<String>,
    semver_filter: Option<String>,
    tag: Option<String>,
}

/// An OCIRepository's url, ref, secretRef and insecure.
fn oci(f: &mut Fields, t: &Target, notes: &mut Vec<Note>) -> Result<OciSource, String> {
    let url: String = taken(f, "url")?.ok_or("spec.url: missing")?;
    let r: FluxOciRef = taken(f, "ref")?.unwrap_or_default();
    let field = f.field("ref");
    let set = |s: &Option<String>| s.clone().filter(|v| !v.is_empty());
    let (tag, digest) = if let Some(d) = set(&r.digest) {
        (None, Some(d))
    } else if let Some(s) = set(&r.semver) {
        let _ = &r.semver_filter;
        return Err(format!(
            "{field}.semver: a set does not select tags by a semver range ({s:?}); pin the tag it resolves to today (ref.tag) or its digest"
        ));
    } else if let Some(t) = set(&r.tag) {
        (Some(t), None)
    } else {
        notes.push(f.note(
            "ref",
            Severity::Info,
            "not set: Flux's default, tag latest, made explicit",
        ));
        (Some("latest".to_string()), None)
    };
    let secret_ref = secret(f, t, notes, OCI_KEYS)?;
    let insecure: bool = taken(f, "insecure")?.unwrap_or(false);
    for (key, why) in [
        (
            "certSecretRef",
            "a set reads a registry's CA from the ca.crt entry of its secretRef Secret and sends no client certificate: copy ca.crt into the secretRef Secret",
        ),
        (
            "layerSelector",
            "a set reads the artifact's tar.gz layer (as `flux push artifact` makes); another media type or the copy operation has no equivalent",
        ),
        (
            "verify",
            "a set does not verify artifact signatures (cosign, notation); pin the digest you verified",
        ),
    ] {
        f.drop_field(key, why, notes);
    }
    Ok(OciSource {
        url,
        tag,
        digest,
        path: t.path.clone(),
        secret_ref,
        insecure,
    })
}

/// What a git source's secretRef Secret is read for, compared with Flux.
const GIT_KEYS: &str = "the set reads username and password (or token), ca.crt, identity and known_hosts from this Secret; Flux's bearerToken, caFile, tls.crt/tls.key (client certificate) and an SSH key's passphrase (password beside identity) are not read";
/// What an oci source's secretRef Secret is read for, compared with Flux.
const OCI_KEYS: &str = "the set reads .dockerconfigjson (as Flux does), or username and password, and ca.crt from this Secret";

/// The secretRef of a source, for the set's scope: a ClusterApplySet names the source's
/// namespace; an ApplySet reads Secrets of its own namespace only.
fn secret(
    f: &mut Fields,
    t: &Target,
    notes: &mut Vec<Note>,
    keys: &str,
) -> Result<Option<SecretReference>, String> {
    let Some(r): Option<LocalRef> = taken(f, "secretRef")? else {
        return Ok(None);
    };
    let ns = &f.object.namespace;
    notes.push(f.note("secretRef", Severity::Info, keys));
    let namespace = match t.scope {
        Scope::Cluster => Some(ns.clone()),
        Scope::Namespaced => {
            if ns != t.namespace {
                notes.push(f.note(
                    "secretRef",
                    Severity::Info,
                    format!(
                        "an ApplySet reads Secrets of its own namespace only: copy Secret {ns}/{} into namespace {}",
                        r.name, t.namespace
                    ),
                ));
            }
            None
        }
    };
    Ok(Some(SecretReference {
        name: r.name,
        namespace,
    }))
}

/// [`Fields::take`], its refusal as `field: why`.
fn taken<T: serde::de::DeserializeOwned>(f: &mut Fields, key: &str) -> Result<Option<T>, String> {
    f.take(key).map_err(|n| format!("{}: {}", n.field, n.why))
}

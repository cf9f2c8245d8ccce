//! The revision Flux applied, for the handover: whether the Kustomization applied the values it
//! was last asked to ([`applied`]: Ready=True for its generation, and `status.lastAppliedRevision`
//! equal to `status.lastAttemptedRevision`), what that revision pins the set's source to
//! ([`pin`]: a git commit or an OCI digest), and the set's body with its sources pinned
//! ([`pinned`]), so that the set first applies exactly what kustomize-controller applied.
//!
//! Pure: no I/O.

use serde_json::Value;

/// Why the Kustomization has not applied the values it was asked to: the handover is refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotApplied {
    #[error(
        "kustomize-controller has not handled its generation {generation} yet (status.observedGeneration is {observed}): wait for Flux, then run the command again"
    )]
    Generation { generation: i64, observed: String },
    #[error(
        "it is not Ready ({ready}): fix it so that Flux applies it (or wait for Flux), then run the command again"
    )]
    NotReady { ready: String },
    #[error(
        "status.lastAppliedRevision ({applied}) is not status.lastAttemptedRevision ({attempted}): Flux has not applied its latest revision; fix the failure (or wait for Flux), then run the command again"
    )]
    Behind { applied: String, attempted: String },
}

/// The revision kustomize-controller applied (`status.lastAppliedRevision`), when the
/// Kustomization is Ready=True for its generation (`status.observedGeneration` is
/// `metadata.generation`, as Flux's own dependency check reads it) and that revision is the
/// last one it attempted.
pub fn applied(kustomization: &Value) -> Result<String, NotApplied> {
    let generation = kustomization
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or_default();
    let observed = kustomization.pointer("/status/observedGeneration");
    if observed.and_then(Value::as_i64) != Some(generation) {
        return Err(NotApplied::Generation {
            generation,
            observed: observed.map_or_else(|| "unset".to_owned(), ToString::to_string),
        });
    }
    let conditions = kustomization
        .pointer("/status/conditions")
        .and_then(Value::as_array);
    let ready = conditions
        .into_iter()
        .flatten()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"));
    let text = |c: &Value, f: &str| c.get(f).and_then(Value::as_str).unwrap_or("").to_owned();
    match ready {
        Some(c) if text(c, "status") == "True" => {}
        Some(c) => {
            return Err(NotApplied::NotReady {
                ready: format!(
                    "Ready={} {}: {}",
                    text(c, "status"),
                    text(c, "reason"),
                    text(c, "message")
                ),
            });
        }
        None => {
            return Err(NotApplied::NotReady {
                ready: "no Ready condition".into(),
            });
        }
    }
    let revision = |f: &str| {
        kustomization
            .pointer(&format!("/status/{f}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let (applied, attempted) = (
        revision("lastAppliedRevision"),
        revision("lastAttemptedRevision"),
    );
    if applied.is_empty() || applied != attempted {
        return Err(NotApplied::Behind { applied, attempted });
    }
    Ok(applied)
}

/// What the set's source is pinned to during the handover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pin {
    /// A git commit (40 hex digits): `ref: {commit: ...}`.
    Commit(String),
    /// An OCI manifest digest (`sha256:<64 hex digits>`): `digest: ...` instead of the tag.
    Digest(String),
}

impl std::fmt::Display for Pin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pin::Commit(c) => write!(f, "commit {c}"),
            Pin::Digest(d) => write!(f, "digest {d}"),
        }
    }
}

/// Why a revision pins nothing: the handover is refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum PinError {
    #[error(
        "status.lastAppliedRevision {revision:?} of its {kind} is not {expected}: the set cannot be pinned to what Flux applied"
    )]
    Form {
        kind: String,
        revision: String,
        expected: &'static str,
    },
    #[error(
        "its source is a {kind}: only a GitRepository's or an OCIRepository's revision is pinned"
    )]
    Kind { kind: String },
    #[error("the set has no {wanted} source to pin to {pin}")]
    NoSource { wanted: &'static str, pin: Pin },
}

/// `true` when `text` is `len` lowercase hex digits.
fn hex(text: &str, len: usize) -> bool {
    text.len() == len && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// What Flux's revision `revision` of a source of kind `kind` pins: a GitRepository's
/// `<ref>@sha1:<hex>` (or `sha1:<hex>`) the commit, an OCIRepository's `<tag>@sha256:<hex>`
/// (or `sha256:<hex>`) the digest; any other form or kind pins nothing.
pub fn pin(kind: &str, revision: &str) -> Result<Pin, PinError> {
    let digest = revision.rsplit_once('@').map_or(revision, |(_, d)| d);
    let form = |expected| PinError::Form {
        kind: kind.to_owned(),
        revision: revision.to_owned(),
        expected,
    };
    match kind {
        "GitRepository" => digest
            .strip_prefix("sha1:")
            .filter(|h| hex(h, 40))
            .map(|h| Pin::Commit(h.to_owned()))
            .ok_or_else(|| form("<ref>@sha1:<40 hex digits>")),
        "OCIRepository" => digest
            .strip_prefix("sha256:")
            .filter(|h| hex(h, 64))
            .map(|_| Pin::Digest(digest.to_owned()))
            .ok_or_else(|| form("<tag>@sha256:<64 hex digits>")),
        other => Err(PinError::Kind {
            kind: other.to_owned(),
        }),
    }
}

/// Pins the git (for a commit) or oci (for a digest) sources of the set's body `set` (its
/// `spec.sources`): a git `ref` becomes `{commit}`, an oci source's `tag` becomes `digest`.
pub fn pinned(set: &mut Value, pin: &Pin) -> Result<(), PinError> {
    let (wanted, key) = match pin {
        Pin::Commit(_) => ("git", "git"),
        Pin::Digest(_) => ("oci", "oci"),
    };
    let sources = set
        .pointer_mut("/spec/sources")
        .and_then(Value::as_array_mut);
    let mut count = 0;
    for source in sources.into_iter().flatten() {
        let Some(s) = source.get_mut(key).and_then(Value::as_object_mut) else {
            continue;
        };
        match pin {
            Pin::Commit(c) => {
                s.insert("ref".into(), serde_json::json!({ "commit": c }));
            }
            Pin::Digest(d) => {
                s.remove("tag");
                s.insert("digest".into(), Value::String(d.clone()));
            }
        }
        count += 1;
    }
    if count == 0 {
        return Err(PinError::NoSource {
            wanted,
            pin: pin.clone(),
        });
    }
    Ok(())
}

/// Whether the set's `status.lastAppliedRevision` `applied` is another revision than the
/// one pinned (`pin`'s commit or digest is not in it).
pub fn moved_on(applied: &str, pin: &Pin) -> bool {
    let (Pin::Commit(hash) | Pin::Digest(hash)) = pin;
    !applied.contains(hash.as_str())
}

/// The source's part of the set's `status.lastAppliedRevision` `applied` (`<digest>;
/// git:<ref>@sha1:<commit>`): the part after `git:` (a commit pinned) or `oci:` (a digest),
/// else all of it.
pub fn source_part<'a>(applied: &'a str, pin: &Pin) -> &'a str {
    let prefix = match pin {
        Pin::Commit(_) => "git:",
        Pin::Digest(_) => "oci:",
    };
    applied
        .split("; ")
        .find_map(|part| part.strip_prefix(prefix))
        .unwrap_or(applied)
}

/// What the set's body `set` follows, for the final message: its first git source's
/// `branch`, `tag`, `semver` or `name` (`branch main`), else its first oci source's `tag` or
/// `semver`, else "its branch or tag".
pub fn followed(set: &Value) -> String {
    let sources = set.pointer("/spec/sources").and_then(Value::as_array);
    for source in sources.into_iter().flatten() {
        let git = source
            .pointer("/git/ref")
            .map(|r| (r, ["branch", "tag", "semver", "name"].as_slice()));
        let oci = source.get("oci").map(|o| (o, ["tag", "semver"].as_slice()));
        for (object, keys) in git.into_iter().chain(oci) {
            for key in keys {
                if let Some(v) = object.get(*key).and_then(Value::as_str) {
                    return format!("{key} {v}");
                }
            }
        }
    }
    "its branch or tag".into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SHA1: &str = "0123456789abcdef0123456789abcdef01234567";
    const SHA256: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn the_set_moved_on_when_its_revision_is_not_the_pinned_one() {
        let pin = Pin::Commit(SHA1.into());
        assert!(!moved_on(&format!("main@sha1:{SHA1}"), &pin));
        assert!(moved_on(
            "main@sha1:ffffffffffffffffffffffffffffffffffffffff",
            &pin
        ));
        let digest = Pin::Digest(format!("sha256:{SHA256}"));
        assert!(!moved_on(&format!("v1@sha256:{SHA256}"), &digest));
        assert!(moved_on("v1@sha256:00", &digest));
        let composite = format!("sha256:00; git:main@sha1:{SHA1}");
        assert_eq!(source_part(&composite, &pin), format!("main@sha1:{SHA1}"));
        assert_eq!(source_part("plain", &pin), "plain");
        assert_eq!(source_part("a; oci:v1@sha256:00", &digest), "v1@sha256:00");
        let git = json!({"spec": {"sources": [{"git": {"url": "u", "ref": {"branch": "main"}}}]}});
        assert_eq!(followed(&git), "branch main");
        let oci = json!({"spec": {"sources": [{"oci": {"url": "u", "tag": "v1"}}]}});
        assert_eq!(followed(&oci), "tag v1");
        assert_eq!(followed(&json!({})), "its branch or tag");
    }

    #[test]
    fn a_git_revision_pins_its_commit() {
        let commit = Ok(Pin::Commit(SHA1.into()));
        assert_eq!(pin("GitRepository", &format!("main@sha1:{SHA1}")), commit);
        assert_eq!(
            pin("GitRepository", &format!("refs/heads/main@sha1:{SHA1}")),
            commit
        );
        assert_eq!(pin("GitRepository", &format!("v1.2.3@sha1:{SHA1}")), commit);
        assert_eq!(pin("GitRepository", &format!("sha1:{SHA1}")), commit);
        for bad in [
            format!("main/{SHA1}"),
            format!("main@sha1:{}", &SHA1[..39]),
            format!("main@sha1:{}", SHA1.to_uppercase()),
            format!("main@sha256:{SHA256}"),
            SHA1.to_owned(),
            String::new(),
        ] {
            let e = pin("GitRepository", &bad).expect_err(&bad);
            assert!(e.to_string().contains("<ref>@sha1:"), "{e}");
        }
    }

    #[test]
    fn an_oci_revision_pins_its_digest() {
        let digest = Ok(Pin::Digest(format!("sha256:{SHA256}")));
        assert_eq!(pin("OCIRepository", &format!("v1@sha256:{SHA256}")), digest);
        assert_eq!(pin("OCIRepository", &format!("sha256:{SHA256}")), digest);
        assert_eq!(
            pin("OCIRepository", &format!("latest@sha1:{SHA1}"))
                .expect_err("sha1")
                .to_string(),
            format!(
                "status.lastAppliedRevision \"latest@sha1:{SHA1}\" of its OCIRepository is not <tag>@sha256:<64 hex digits>: the set cannot be pinned to what Flux applied"
            )
        );
        assert!(pin("OCIRepository", "v1@sha256:abc").is_err());
        assert_eq!(
            pin("Bucket", &format!("sha256:{SHA256}")),
            Err(PinError::Kind {
                kind: "Bucket".into()
            })
        );
    }

    #[test]
    fn the_sources_are_pinned_by_their_kind() {
        let mut set = json!({"spec": {"sources": [
            {"git": {"url": "https://g/r", "ref": {"branch": "main"}, "path": "deploy"}},
            {"configMap": {"name": "c"}},
        ]}});
        pinned(&mut set, &Pin::Commit(SHA1.into())).expect("pinned");
        assert_eq!(
            set["spec"]["sources"][0]["git"],
            json!({"url": "https://g/r", "ref": {"commit": SHA1}, "path": "deploy"})
        );
        assert_eq!(
            set["spec"]["sources"][1],
            json!({"configMap": {"name": "c"}})
        );
        let mut oci = json!({"spec": {"sources": [{"oci": {"url": "oci://r/a", "tag": "v1"}}]}});
        let digest = Pin::Digest(format!("sha256:{SHA256}"));
        pinned(&mut oci, &digest).expect("pinned");
        assert_eq!(
            oci["spec"]["sources"][0]["oci"],
            json!({"url": "oci://r/a", "digest": format!("sha256:{SHA256}")})
        );
        // A pin of the other kind, or no sources: refused.
        let mut git = json!({"spec": {"sources": [{"git": {"url": "u", "ref": {"tag": "v"}}}]}});
        assert!(matches!(
            pinned(&mut git, &digest),
            Err(PinError::NoSource { wanted: "oci", .. })
        ));
        assert!(pinned(&mut json!({}), &Pin::Commit(SHA1.into())).is_err());
    }

    fn kustomization(observed: i64, ready: &str, applied: &str, attempted: &str) -> Value {
        json!({"metadata": {"generation": 3}, "status": {
            "observedGeneration": observed,
            "conditions": [{"type": "Ready", "status": ready, "reason": "R", "message": "m"}],
            "lastAppliedRevision": applied, "lastAttemptedRevision": attempted}})
    }

    #[test]
    fn only_a_kustomization_that_applied_its_last_revision_is_handed_over() {
        let rev = format!("main@sha1:{SHA1}");
        assert_eq!(
            applied(&kustomization(3, "True", &rev, &rev)),
            Ok(rev.clone())
        );
        assert_eq!(
            applied(&kustomization(2, "True", &rev, &rev)),
            Err(NotApplied::Generation {
                generation: 3,
                observed: "2".into()
            })
        );
        let e = applied(&kustomization(3, "False", &rev, &rev)).expect_err("not ready");
        assert!(
            e.to_string()
                .starts_with("it is not Ready (Ready=False R: m)"),
            "{e}"
        );
        let e = applied(&kustomization(3, "True", &rev, "main@sha1:other")).expect_err("behind");
        assert!(matches!(e, NotApplied::Behind { .. }), "{e}");
        assert!(e.to_string().contains("wait for Flux"), "{e}");
        assert!(applied(&kustomization(3, "True", "", "")).is_err());
        let none = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1}});
        assert_eq!(
            applied(&none),
            Err(NotApplied::NotReady {
                ready: "no Ready condition".into()
            })
        );
        assert!(matches!(
            applied(&json!({})),
            Err(NotApplied::Generation { .. })
        ));
    }
}

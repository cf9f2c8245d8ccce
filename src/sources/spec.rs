//! What a `spec.sources` entry says, read without I/O: its one kind ([`kind_of`]), its
//! description for messages ([`describe`], URLs shown by [`redact_url`]), the namespace of a
//! referenced ConfigMap or Secret ([`resolve_namespace`]: an ApplySet's own only) and the
//! validation of all entries ([`validate`]), whose errors name the entry and the field.

use crate::{
    api::{ApplySetSpec, Source},
    applyset::ParentRef,
};

use super::{SourceError, git, http, oci};

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
        Ok(Kind::Http(h)) => format!("http {}", redact_url(&h.url)),
        Ok(Kind::Git(g)) => format!("git {}@{}", redact_url(&g.url), git::ref_name(&g.reference)),
        Ok(Kind::Oci(o)) => match (&o.tag, &o.digest) {
            (_, Some(d)) => format!("oci {}@{d}", redact_url(&o.url)),
            (Some(t), None) => format!("oci {}:{t}", redact_url(&o.url)),
            (None, None) => format!("oci {}", redact_url(&o.url)),
        },
        Err(_) => "invalid source".into(),
    }
}

/// A URL as it may be shown in status, events and logs: without user info (a password in a
/// URL must never reach them), query or fragment (tokens of signed URLs: `?token=…`,
/// `X-Amz-Signature=…`); that is `scheme://host[:port]/path`. A string that is not a URL
/// (e.g. scp-like `git@host:path`) is cut at `?` or `#`.
pub fn redact_url(url: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        GitReference, GitSource, HttpSource, ObjectSource, OciSource, SecretReference,
    };
    use crate::sources::{ObjectKey, ObjectKind, Sources};

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
        for (source, field) in other_namespace_references() {
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

    /// A source of each kind referencing (or whose credentials reference) the namespace
    /// `team-b`, with the field its error names.
    fn other_namespace_references() -> [(Source, &'static str); 5] {
        let secret_ref = Some(SecretReference {
            name: "creds".into(),
            namespace: Some("team-b".into()),
        });
        [
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
        ]
    }

    #[test]
    fn url_redaction_drops_user_info_query_and_fragment() {
        assert_eq!(
            redact_url("https://u:p@example.com/a/b.yaml?token=s3cret&x=1#frag"),
            "https://example.com/a/b.yaml"
        );
        assert_eq!(
            redact_url("https://bucket.s3.example.com/o.tgz?X-Amz-Signature=abc"),
            "https://bucket.s3.example.com/o.tgz"
        );
        assert_eq!(
            redact_url("https://example.com/a.yaml"),
            "https://example.com/a.yaml"
        );
        assert_eq!(
            redact_url("git@example.com:org/r.git"),
            "git@example.com:org/r.git"
        );
        assert_eq!(redact_url("not a url?token=x"), "not a url");
        let s = Source {
            http: Some(HttpSource {
                url: "https://example.com/a.yaml?token=s3cret".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(describe(&s), "http https://example.com/a.yaml");
    }
}

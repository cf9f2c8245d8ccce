//! Reads whose content lands in a set's objects, made as the set's identity: the ConfigMaps and
//! Secrets of `spec.postBuild.substituteFrom`, of `configMap` and `secret` sources, and the SOPS
//! key Secret of `spec.decryption`. Every such stage reads through one [`SetReader`], built
//! from the set's client (impersonating its ServiceAccount, or the operator's own when the set
//! acts as the operator), so a set can never put into its objects what its identity may not
//! read. A refusal is a typed [`ReadError`] naming who read, the kind, the object and the fix.
//!
//! Not read here: the credentials of `http`, `git` and `oci` sources (`secretRef`), which the
//! operator reads itself under its own rule (docs/security.md, Tenancy), and the watches that
//! reconcile a set when a referenced object changes (the operator's, metadata only).

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};

/// Why an object a set references could not be read as the set's identity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The identity may not get the object (or the ServiceAccount does not exist).
    #[error(
        "{who} may not get {kind} {namespace}/{name}; grant it get on that {kind} (a Role and a RoleBinding that names it), or remove the reference"
    )]
    Forbidden {
        who: String,
        kind: &'static str,
        namespace: String,
        name: String,
    },
    /// The object does not exist.
    #[error("{kind} {namespace}/{name} does not exist")]
    NotFound {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    /// The API server did not answer, or answered another error (`cause`: its message).
    #[error("reading {kind} {namespace}/{name} as {who}: {cause}")]
    Api {
        who: String,
        kind: &'static str,
        namespace: String,
        name: String,
        cause: String,
    },
}

impl ReadError {
    /// Whether the object does not exist (an `optional` reference is then skipped).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::NotFound { .. })
    }

    /// Whether a later attempt may succeed by itself (the API server may answer): a missing
    /// object or grant is the spec's or the administrator's to fix.
    pub fn is_transient(&self) -> bool {
        matches!(self, ReadError::Api { .. })
    }
}

/// The reader of a set's referenced ConfigMaps and Secrets (see the module documentation).
#[derive(Clone)]
pub struct SetReader<'a> {
    client: &'a Client,
    /// Who the reads are made as, for messages (`ServiceAccount ns/name`).
    who: String,
}

impl<'a> SetReader<'a> {
    /// Reads with `client`, which acts as `who` (the set's identity, or the user of the
    /// plugin's kubeconfig).
    pub fn new(client: &'a Client, who: impl std::fmt::Display) -> SetReader<'a> {
        SetReader {
            client,
            who: who.to_string(),
        }
    }

    /// Who the reads are made as.
    pub fn who(&self) -> &str {
        &self.who
    }

    /// ConfigMap `namespace/name`.
    pub async fn config_map(&self, namespace: &str, name: &str) -> Result<ConfigMap, ReadError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let found = api.get_opt(name).await;
        self.answer(found, "ConfigMap", namespace, name)
    }

    /// Secret `namespace/name`.
    pub async fn secret(&self, namespace: &str, name: &str) -> Result<Secret, ReadError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let found = api.get_opt(name).await;
        self.answer(found, "Secret", namespace, name)
    }

    /// The API server's answer to a GET as a [`ReadError`] when it is not the object.
    fn answer<K>(
        &self,
        found: Result<Option<K>, kube::Error>,
        kind: &'static str,
        namespace: &str,
        name: &str,
    ) -> Result<K, ReadError> {
        match found {
            Ok(Some(object)) => Ok(object),
            Ok(None) => Err(ReadError::NotFound {
                kind,
                namespace: namespace.into(),
                name: name.into(),
            }),
            Err(kube::Error::Api(status)) if status.code == 403 => Err(ReadError::Forbidden {
                who: self.who.clone(),
                kind,
                namespace: namespace.into(),
                name: name.into(),
            }),
            Err(e) => Err(ReadError::Api {
                who: self.who.clone(),
                kind,
                namespace: namespace.into(),
                name: name.into(),
                cause: e.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response};
    use kube::client::Body;

    /// A client whose API server answers every request with `code` and `body`.
    fn answering(code: u16, body: &'static str) -> Client {
        let svc = tower::service_fn(move |_req: Request<Body>| async move {
            let response = Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(body.as_bytes().to_vec()))
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(response)
        });
        Client::new(svc, "default")
    }

    const FORBIDDEN: &str = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"secrets \"s\" is forbidden","reason":"Forbidden","code":403}"#;
    const NOT_FOUND: &str = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"not found","reason":"NotFound","code":404}"#;
    const BROKEN: &str = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"etcdserver: request timed out","reason":"InternalError","code":500}"#;

    #[tokio::test]
    async fn a_forbidden_read_names_who_the_object_and_the_fix() {
        let client = answering(403, FORBIDDEN);
        let reader = SetReader::new(&client, "ServiceAccount team/deployer");
        let err = reader.secret("team", "db").await.expect_err("forbidden");
        assert_eq!(
            err,
            ReadError::Forbidden {
                who: "ServiceAccount team/deployer".into(),
                kind: "Secret",
                namespace: "team".into(),
                name: "db".into(),
            }
        );
        let msg = err.to_string();
        for part in [
            "ServiceAccount team/deployer may not get Secret team/db",
            "grant it get on that Secret",
            "remove the reference",
        ] {
            assert!(msg.contains(part), "{part:?} not in {msg}");
        }
        assert!(!err.is_transient() && !err.is_not_found());
    }

    #[tokio::test]
    async fn missing_and_failing_reads_are_told_apart() {
        let client = answering(404, NOT_FOUND);
        let reader = SetReader::new(&client, "the operator's service account");
        let err = reader
            .config_map("team", "vars")
            .await
            .expect_err("missing");
        assert!(err.is_not_found() && !err.is_transient(), "{err:?}");
        assert_eq!(err.to_string(), "ConfigMap team/vars does not exist");

        let client = answering(500, BROKEN);
        let reader = SetReader::new(&client, "ServiceAccount team/deployer");
        let err = reader.config_map("team", "vars").await.expect_err("broken");
        assert!(err.is_transient() && !err.is_not_found(), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.starts_with("reading ConfigMap team/vars as ServiceAccount team/deployer: "),
            "{msg}"
        );
        assert!(msg.contains("request timed out"), "{msg}");
    }

    #[tokio::test]
    async fn an_object_is_returned_as_read() {
        let client = answering(
            200,
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"vars","namespace":"team"},"data":{"a":"b"}}"#,
        );
        let reader = SetReader::new(&client, "ServiceAccount team/deployer");
        let cm = reader.config_map("team", "vars").await.expect("read");
        assert_eq!(
            cm.data.unwrap_or_default().get("a").map(String::as_str),
            Some("b")
        );
        assert_eq!(reader.who(), "ServiceAccount team/deployer");
    }
}

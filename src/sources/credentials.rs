//! Credentials Secrets of http, git and oci sources (`secretRef`): read with the operator's
//! client, refused when of type `kubernetes.io/service-account-token`, and bound to the hosts
//! of their `applyset.dev/allowed-hosts` annotation ([`check_credentials_secret`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

use super::{SourceError, egress, resolve_namespace};
use crate::{api::SecretReference, applyset::ParentRef};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}

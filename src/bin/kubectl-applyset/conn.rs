//! The connection to the cluster (kubectl's `--kubeconfig`, `--context`, `-n`) and the names
//! of sets on the command line.

use applyset_operator::{
    applyset::{ParentKind, ParentRef},
    tenancy::Identity,
};
use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};

use crate::{Global, error::CliError};

/// A client of the cluster and the namespace commands default to.
pub struct Conn {
    pub client: Client,
    /// `-n`, else the context's namespace, else `default`.
    pub namespace: String,
}

/// The kube configuration `g` selects: `--kubeconfig` (else `$KUBECONFIG`, `~/.kube/config`,
/// in-cluster) with `--context`.
pub async fn config(g: &Global) -> Result<Config, CliError> {
    let options = KubeConfigOptions {
        context: g.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &g.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|e| {
                CliError::Cluster(format!("reading the kubeconfig {}: {e}", path.display()))
            })?;
            Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| e.to_string())
        }
        None if g.context.is_some() => Config::from_kubeconfig(&options)
            .await
            .map_err(|e| e.to_string()),
        None => Config::infer().await.map_err(|e| e.to_string()),
    };
    config.map_err(|e| CliError::Cluster(format!("no usable cluster configuration: {e}")))
}

/// Connects as `g` says.
pub async fn connect(g: &Global) -> Result<Conn, CliError> {
    let config = config(g).await?;
    let namespace = g
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config)
        .map_err(|e| CliError::Cluster(format!("connecting to the cluster: {e}")))?;
    Ok(Conn { client, namespace })
}

/// The set `name` names: `NAME`, `applyset/NAME` or `aset/NAME` (an ApplySet in
/// `namespace`), `clusterapplyset/NAME` or `caset/NAME` (a ClusterApplySet). Kinds are
/// case-insensitive and may carry the group (`clusterapplyset.applyset.dev/NAME`).
pub fn parse_set(name: &str, namespace: &str) -> Result<ParentRef, CliError> {
    let (kind, name) = match name.split_once('/') {
        None => (ParentKind::ApplySet, name),
        Some((kind, name)) => {
            let kind = kind.to_ascii_lowercase();
            let kind = kind.strip_suffix(".applyset.dev").unwrap_or(&kind);
            match kind {
                "applyset" | "applysets" | "aset" => (ParentKind::ApplySet, name),
                "clusterapplyset" | "clusterapplysets" | "caset" => {
                    (ParentKind::ClusterApplySet, name)
                }
                other => {
                    return Err(CliError::Usage(format!(
                        "{other:?} is not a set kind: name a set NAME, applyset/NAME or clusterapplyset/NAME"
                    )));
                }
            }
        }
    };
    if name.is_empty() || name.contains('/') {
        return Err(CliError::Usage(format!(
            "{name:?} is not a set name: name a set NAME, applyset/NAME or clusterapplyset/NAME"
        )));
    }
    Ok(match kind {
        ParentKind::ApplySet => ParentRef::applyset(namespace, name),
        ParentKind::ClusterApplySet => ParentRef::cluster(name),
    })
}

/// `applyset/NAME` or `clusterapplyset/NAME`: how a set is named on the command line.
pub fn set_name(parent: &ParentRef) -> String {
    match parent.kind {
        ParentKind::ApplySet => format!("applyset/{}", parent.name),
        ParentKind::ClusterApplySet => format!("clusterapplyset/{}", parent.name),
    }
}

/// A client that sends every request through `base` as `user`, as the operator does for a
/// set that names a ServiceAccount (the operator's own function); `None` when `user` cannot
/// be a header value.
pub fn impersonating(base: &Client, user: &str) -> Option<Client> {
    applyset_operator::controller::impersonate::client(base, user)
}

/// An error of the library as the plugin's user reads it: a request refused to the plugin
/// acting as itself (no ServiceAccount impersonated) was refused to the kubeconfig's user,
/// not to the operator the library's message names.
pub fn said(e: applyset_operator::Error, identity: &Identity) -> String {
    match e {
        applyset_operator::Error::Forbidden { what, message, .. }
            if *identity == Identity::Operator =>
        {
            format!(
                "your kubeconfig's user may not {what}: {message}; ask for this permission, or use a context that has it"
            )
        }
        e => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forbidden() -> applyset_operator::Error {
        applyset_operator::Error::Forbidden {
            who: Identity::Operator.to_string(),
            what: "list configmaps in team".into(),
            message: "configmaps is forbidden".into(),
        }
    }

    #[test]
    fn a_refusal_to_the_plugin_itself_names_the_kubeconfigs_user() {
        let text = said(forbidden(), &Identity::Operator);
        assert!(
            text.starts_with(
                "your kubeconfig's user may not list configmaps in team: configmaps is forbidden"
            ),
            "{text}"
        );
        assert!(!text.contains("operator"), "{text}");
        // Acting as a ServiceAccount, the library's message (naming it) stands.
        let account = Identity::ServiceAccount {
            namespace: "team".into(),
            name: "deployer".into(),
        };
        let e = applyset_operator::Error::Forbidden {
            who: account.to_string(),
            what: "list configmaps in team".into(),
            message: "configmaps is forbidden".into(),
        };
        let library = e.to_string();
        assert_eq!(said(e, &account), library);
    }

    #[test]
    fn set_names() {
        assert_eq!(
            parse_set("web", "team").expect("name"),
            ParentRef::applyset("team", "web")
        );
        assert_eq!(
            parse_set("aset/web", "team").expect("name"),
            ParentRef::applyset("team", "web")
        );
        assert_eq!(
            parse_set("ClusterApplySet.applyset.dev/infra", "team").expect("name"),
            ParentRef::cluster("infra")
        );
        assert_eq!(
            parse_set("caset/infra", "team").expect("name"),
            ParentRef::cluster("infra")
        );
        assert!(parse_set("deployment/web", "team").is_err());
        assert!(parse_set("caset/", "team").is_err());
        assert_eq!(
            set_name(&ParentRef::cluster("infra")),
            "clusterapplyset/infra"
        );
    }
}

//! `tree`: a set and its members from the cluster, each with its health (kstatus rules,
//! `applyset_operator::health`), nested sets expanded, as a tree like `flux tree` or JSON.
//! Members are the objects labelled with the set's ID in the kinds and namespaces its parent
//! records, plus those its status lists that do not exist (NotFound).

use std::collections::{BTreeMap, BTreeSet};

use applyset_operator::{
    api::{ApplySet, ClusterApplySet, MemberRef},
    applyset::{self, GROUP, LABEL_PART_OF, ParentKind, ParentRef},
    discovery::Resolver,
    engine::plan,
    health,
    parent::Parent,
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::jiff::Timestamp;
use kube::{
    Api, Client,
    api::{DynamicObject, ListParams},
};
use serde::Serialize;

use crate::{Global, Output, conn, error::CliError, sets};

/// How deep nested sets are expanded.
const MAX_DEPTH: usize = 8;

/// One node of the tree.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    pub group: String,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    /// The set's Ready condition (sets only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<Ready>,
    /// The member's health (members only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<Health>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<Node>,
}

#[derive(Serialize, Debug)]
pub struct Ready {
    pub status: String,
    pub reason: String,
    pub message: String,
}

#[derive(Serialize, Debug)]
pub struct Health {
    pub status: String,
    pub message: String,
}

pub async fn run(g: &Global, name: &str, output: Output) -> Result<u8, CliError> {
    let c = conn::connect(g).await?;
    let parent = conn::parse_set(name, &c.namespace)?;
    let resolver = Resolver::new(c.client.clone());
    let mut seen = BTreeSet::new();
    let root = set_node(&c.client, &resolver, &parent, 0, &mut seen)
        .await
        .map_err(CliError::Set)?
        .ok_or(CliError::NotFound(parent))?;
    match output {
        Output::Json => {
            let text =
                serde_json::to_string_pretty(&root).map_err(|e| CliError::Set(e.to_string()))?;
            println!("{text}");
        }
        Output::Text => print!("{}", render(&root)),
    }
    Ok(0)
}

/// The node of set `parent` with its members, or `None` when it does not exist.
async fn set_node(
    client: &Client,
    resolver: &Resolver,
    parent: &ParentRef,
    depth: usize,
    seen: &mut BTreeSet<String>,
) -> Result<Option<Node>, String> {
    match parent.kind {
        ParentKind::ApplySet => {
            let fetched = sets::fetch::<ApplySet>(client, parent).await;
            let Some(p) = fetched.map_err(|e| e.to_string())? else {
                return Ok(None);
            };
            node_of(client, resolver, &p, depth, seen).await.map(Some)
        }
        ParentKind::ClusterApplySet => {
            let fetched = sets::fetch::<ClusterApplySet>(client, parent).await;
            let Some(p) = fetched.map_err(|e| e.to_string())? else {
                return Ok(None);
            };
            node_of(client, resolver, &p, depth, seen).await.map(Some)
        }
    }
}

async fn node_of<P: Parent>(
    client: &Client,
    resolver: &Resolver,
    p: &P,
    depth: usize,
    seen: &mut BTreeSet<String>,
) -> Result<Node, String> {
    let parent = p.parent_ref();
    seen.insert(parent.id());
    let ready = sets::ready(p.status()).map(|c| Ready {
        status: c.status.clone(),
        reason: c.reason.clone(),
        message: c.message.clone(),
    });
    let objects = members(client, resolver, p).await?;
    let now = Timestamp::now();
    let mut nodes = Vec::new();
    for (reference, object) in objects {
        let nested = reference.group == GROUP
            && matches!(reference.kind.as_str(), "ApplySet" | "ClusterApplySet");
        if nested && depth < MAX_DEPTH && object.is_some() {
            let child = match reference.kind.as_str() {
                "ApplySet" => ParentRef::applyset(
                    reference.namespace.clone().unwrap_or_default(),
                    &reference.name,
                ),
                _ => ParentRef::cluster(&reference.name),
            };
            if !seen.contains(&child.id())
                && let Some(node) =
                    Box::pin(set_node(client, resolver, &child, depth + 1, seen)).await?
            {
                nodes.push(node);
                continue;
            }
        }
        let h = match &object {
            Some(o) => health::assess(&serde_json::to_value(o).unwrap_or_default(), now),
            None => health::Health::not_found(),
        };
        nodes.push(Node {
            group: reference.group.clone(),
            kind: reference.kind.clone(),
            namespace: reference.namespace.clone(),
            name: reference.name.clone(),
            ready: None,
            health: Some(Health {
                status: h.status.to_string(),
                message: h.message,
            }),
            members: Vec::new(),
        });
    }
    Ok(Node {
        group: GROUP.into(),
        kind: parent.kind.kind().into(),
        namespace: parent.namespace.clone(),
        name: parent.name.clone(),
        ready,
        health: None,
        members: nodes,
    })
}

/// The set's members: live objects labelled with its ID (full objects, for their health), and
/// the members its status lists that were not found; sorted by reference.
async fn members<P: Parent>(
    client: &Client,
    resolver: &Resolver,
    p: &P,
) -> Result<BTreeMap<MemberRef, Option<DynamicObject>>, String> {
    let parent = p.parent_ref();
    // The parent's record, completed with what its status lists (as the operator reads it).
    let recorded = plan::before(p.meta(), p.status(), resolver)
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("{parent}: its ApplySet annotations are malformed ({e})"))?
        .recorded;
    let listed = p.status().map(|s| s.members.clone()).unwrap_or_default();
    let kinds: Vec<_> = recorded.group_kinds.iter().cloned().collect();
    let resolved = resolver
        .resolve_group_kinds(&kinds)
        .await
        .map_err(|e| e.to_string())?;
    let namespaces = applyset::prune_namespaces(parent.effective_namespace(), &recorded.namespaces);
    let selector = format!("{LABEL_PART_OF}={}", parent.id());
    let mut lists = Vec::new();
    for r in resolved.values() {
        if r.namespaced {
            for ns in &namespaces {
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &r.resource);
                lists.push((api, r.resource.clone()));
            }
        } else {
            lists.push((
                Api::all_with(client.clone(), &r.resource),
                r.resource.clone(),
            ));
        }
    }
    let params = ListParams::default().labels(&selector);
    let found: Vec<Vec<(MemberRef, DynamicObject)>> = futures::stream::iter(lists)
        .map(|(api, resource)| {
            let params = params.clone();
            async move {
                let list = match api.list(&params).await {
                    Ok(l) => l.items,
                    // A kind whose CRD is gone has no members left.
                    Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
                    Err(e) => return Err(format!("listing members: {e}")),
                };
                // Items of a list carry no apiVersion and kind: they are the listed resource's.
                Ok(list
                    .into_iter()
                    .filter_map(|mut o| {
                        let r = MemberRef {
                            group: resource.group.clone(),
                            kind: resource.kind.clone(),
                            namespace: o.metadata.namespace.clone(),
                            name: o.metadata.name.clone()?,
                        };
                        o.types = Some(kube::api::TypeMeta {
                            api_version: resource.api_version.clone(),
                            kind: resource.kind.clone(),
                        });
                        Some((r, o))
                    })
                    .collect())
            }
        })
        .buffer_unordered(8)
        .try_collect()
        .await?;
    let mut out: BTreeMap<MemberRef, Option<DynamicObject>> = BTreeMap::new();
    for (r, o) in found.into_iter().flatten() {
        out.insert(r, Some(o));
    }
    for m in listed {
        out.entry(m).or_insert(None);
    }
    Ok(out)
}

/// The tree as text: the set, then its members with box-drawing branches.
pub fn render(root: &Node) -> String {
    let mut out = format!("{}\n", label(root));
    lines(&root.members, "", &mut out);
    out
}

fn lines(nodes: &[Node], prefix: &str, out: &mut String) {
    for (i, n) in nodes.iter().enumerate() {
        let last = i + 1 == nodes.len();
        let (branch, indent) = if last {
            ("└── ", "    ")
        } else {
            ("├── ", "│   ")
        };
        out.push_str(&format!("{prefix}{branch}{}\n", label(n)));
        lines(&n.members, &format!("{prefix}{indent}"), out);
    }
}

/// `Kind[.group]/[namespace/]name` followed by the Ready condition or the health.
fn label(n: &Node) -> String {
    let mut s = n.kind.clone();
    if !n.group.is_empty() {
        s.push('.');
        s.push_str(&n.group);
    }
    s.push('/');
    if let Some(ns) = &n.namespace {
        s.push_str(ns);
        s.push('/');
    }
    s.push_str(&n.name);
    if let Some(r) = &n.ready {
        s.push_str(&format!("  Ready={} {}", r.status, r.reason));
        if !r.message.is_empty() {
            s.push_str(&format!(": {}", r.message));
        }
    } else if let Some(h) = &n.health {
        s.push_str(&format!("  {}", h.status));
        if !h.message.is_empty() {
            s.push_str(&format!(": {}", h.message));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(kind: &str, name: &str, status: &str) -> Node {
        Node {
            group: String::new(),
            kind: kind.into(),
            namespace: Some("team".into()),
            name: name.into(),
            ready: None,
            health: Some(Health {
                status: status.into(),
                message: String::new(),
            }),
            members: Vec::new(),
        }
    }

    #[test]
    fn a_tree_with_branches() {
        let root = Node {
            group: GROUP.into(),
            kind: "ApplySet".into(),
            namespace: Some("team".into()),
            name: "web".into(),
            ready: Some(Ready {
                status: "True".into(),
                reason: "ReconciliationSucceeded".into(),
                message: String::new(),
            }),
            health: None,
            members: vec![
                leaf("ConfigMap", "a", "Current"),
                leaf("Secret", "s", "Current"),
            ],
        };
        assert_eq!(
            render(&root),
            "ApplySet.applyset.dev/team/web  Ready=True ReconciliationSucceeded\n\
             ├── ConfigMap/team/a  Current\n\
             └── Secret/team/s  Current\n"
        );
    }
}

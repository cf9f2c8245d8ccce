//! `tree`: a set and its members from the cluster, each with its health (kstatus rules,
//! `applyset_operator::health`), nested sets expanded, as a tree like `flux tree` or JSON.
//! Members are the objects labelled with the set's ID in the kinds and namespaces its parent
//! records, as the engine lists them ([`SetEngine::members`]: paged, a 404 settled by a fresh
//! discovery), plus those its status lists that do not exist (NotFound).

use std::collections::{BTreeMap, BTreeSet};

use applyset_operator::{
    api::MemberRef,
    applyset::{GROUP, ParentRef},
    discovery::Resolver,
    engine::{SetEngine, SetScope},
    health,
    parent::AnyParent,
};
use k8s_openapi::jiff::Timestamp;
use kube::{Client, api::DynamicObject};
use serde::Serialize;

use crate::{Global, Output, conn, error::CliError, sets};

/// LISTs of one set's members in flight at once.
const CONCURRENCY: usize = 8;

/// How the tree (and the ui's member tree) reads the cluster: with whom, resolving kinds how,
/// listing how many objects a page.
pub struct Reader<'a> {
    pub client: &'a Client,
    pub resolver: &'a Resolver,
    pub page_size: u32,
}

/// One member of a set with its health (of the object as listed; `not found` when it does
/// not exist).
#[derive(Clone, Debug)]
pub struct Assessed {
    pub reference: MemberRef,
    pub exists: bool,
    pub health: health::Health,
    /// A Secret's keys (of `data` and `stringData`, sorted), never its values.
    pub secret_keys: Vec<String>,
}

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

pub async fn run(g: &Global, name: &str, output: Output, page_size: u32) -> Result<u8, CliError> {
    let c = conn::connect(g).await?;
    let parent = conn::parse_set(name, &c.namespace)?;
    let resolver = Resolver::new(c.client.clone());
    let reader = Reader {
        client: &c.client,
        resolver: &resolver,
        page_size,
    };
    let mut seen = BTreeSet::new();
    let root = set_node(&reader, &parent, 0, &mut seen)
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
    reader: &Reader<'_>,
    parent: &ParentRef,
    depth: usize,
    seen: &mut BTreeSet<String>,
) -> Result<Option<Node>, String> {
    let fetched = AnyParent::get(reader.client, parent).await;
    let Some(p) = fetched.map_err(|e| format!("reading {parent}: {e}"))? else {
        return Ok(None);
    };
    node_of(reader, &p, depth, seen).await.map(Some)
}

async fn node_of(
    reader: &Reader<'_>,
    p: &AnyParent,
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
    let mut nodes = Vec::new();
    for Assessed {
        reference,
        exists,
        health: h,
        ..
    } in assessed(reader, p).await?
    {
        let nested = reference.group == GROUP
            && matches!(reference.kind.as_str(), "ApplySet" | "ClusterApplySet");
        if nested && depth < MAX_DEPTH && exists {
            let child = match reference.kind.as_str() {
                "ApplySet" => ParentRef::applyset(
                    reference.namespace.clone().unwrap_or_default(),
                    &reference.name,
                ),
                _ => ParentRef::cluster(&reference.name),
            };
            if !seen.contains(&child.id())
                && let Some(node) = Box::pin(set_node(reader, &child, depth + 1, seen)).await?
            {
                nodes.push(node);
                continue;
            }
        }
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

/// The set's members with their health, sorted by reference: each live object assessed by
/// the set's healthCheckExprs as the operator assesses it (one that does not compile is the
/// set's ValidationFailed: its members are then assessed by the built-in rules), those its
/// status lists that do not exist `not found`.
pub async fn assessed(reader: &Reader<'_>, p: &AnyParent) -> Result<Vec<Assessed>, String> {
    let objects = members(reader, p).await?;
    let now = Timestamp::now();
    let exprs = health::HealthExprs::compile(&p.spec().health_check_exprs).unwrap_or_default();
    Ok(objects
        .into_iter()
        .map(|(reference, object)| {
            let health = match &object {
                Some(o) => {
                    health::assess_with(&serde_json::to_value(o).unwrap_or_default(), now, &exprs)
                }
                None => health::Health::not_found(),
            };
            let secret = reference.group.is_empty() && reference.kind == "Secret";
            Assessed {
                secret_keys: object
                    .as_ref()
                    .filter(|_| secret)
                    .map(keys)
                    .unwrap_or_default(),
                reference,
                exists: object.is_some(),
                health,
            }
        })
        .collect())
}

/// The keys of a Secret's `data` and `stringData`, sorted.
fn keys(o: &DynamicObject) -> Vec<String> {
    let mut keys: Vec<String> = ["data", "stringData"]
        .iter()
        .filter_map(|f| o.data.get(*f).and_then(serde_json::Value::as_object))
        .flat_map(|m| m.keys().cloned())
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// The set's members: live objects labelled with its ID (whole objects, for their health,
/// listed by the engine over what the parent records, completed with what its status lists,
/// as the operator reads it), and the members its status lists that were not found; sorted by
/// reference.
async fn members(
    reader: &Reader<'_>,
    p: &AnyParent,
) -> Result<BTreeMap<MemberRef, Option<DynamicObject>>, String> {
    let parent = p.parent_ref();
    let scope = SetScope::new(parent.clone(), reader.client.clone(), CONCURRENCY)
        .with_page_size(reader.page_size);
    let engine = SetEngine::new(&scope, reader.resolver, p.spec());
    let recorded = engine
        .recorded(Some(p))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("{parent}: its ApplySet annotations are malformed ({e})"))?
        .recorded;
    let live = engine
        .members(&recorded)
        .await
        .map_err(|e| format!("listing members: {}", crate::conn::said(e, &scope.identity)))?;
    let mut out: BTreeMap<MemberRef, Option<DynamicObject>> = live
        .into_iter()
        .map(|m| (m.reference, m.object.map(|o| *o)))
        .collect();
    for m in p.status().map(|s| s.members.clone()).unwrap_or_default() {
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

//! `get`, `reconcile`, `suspend` and `resume`: reading and nudging sets in the cluster.

use std::time::Duration;

use applyset_operator::{
    api::{ApplySet, ApplySetStatus, ClusterApplySet},
    applyset::{ANNOTATION_RECONCILE_REQUESTED_AT, ParentKind, ParentRef},
    parent::{AnyParent, Parent},
};
use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Condition, jiff::Timestamp};
use kube::{
    Client,
    api::{Patch, PatchParams},
    runtime::wait::await_condition,
};
use serde_json::json;

use crate::{Global, conn, error::CliError, progress::Progress};

/// The field manager of the plugin's own writes (annotations, spec.suspend).
pub const FIELD_MANAGER: &str = applyset_operator::applyset::field_managers::PLUGIN_FIELD_MANAGER;

/// The Ready condition of a status.
pub fn ready(status: Option<&ApplySetStatus>) -> Option<&Condition> {
    status.and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
}

/// One row of `get`.
struct Row {
    namespace: String,
    name: String,
    ready: String,
    reason: String,
    members: String,
    pruned: String,
    age: String,
    message: String,
}

fn row(p: &AnyParent, now: Timestamp) -> Row {
    let status = p.status();
    let ready = ready(status);
    let summary = status.and_then(|s| s.summary.as_ref());
    let parent = p.parent_ref();
    let message = match (ready, status.and_then(|s| s.last_error.as_ref())) {
        (Some(c), _) => c.message.clone(),
        (None, Some(e)) => e.clone(),
        (None, None) => String::new(),
    };
    Row {
        namespace: parent.namespace.clone().unwrap_or_default(),
        name: conn::set_name(&parent),
        ready: ready.map_or_else(|| "Unknown".into(), |c| c.status.clone()),
        reason: ready.map(|c| c.reason.clone()).unwrap_or_default(),
        members: summary.map(|s| s.members.to_string()).unwrap_or_default(),
        pruned: summary.map(|s| s.pruned.to_string()).unwrap_or_default(),
        age: p
            .meta()
            .creation_timestamp
            .as_ref()
            .map(|t| age(now, t.0))
            .unwrap_or_default(),
        message: message.replace('\n', " "),
    }
}

/// kubectl's short age: `45s`, `12m`, `5h`, `3d`.
pub fn age(now: Timestamp, then: Timestamp) -> String {
    let s = now.as_second().saturating_sub(then.as_second()).max(0);
    match s {
        s if s < 120 => format!("{s}s"),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// `get`: the sets (ApplySets of the namespace, or of all with `-A`, and ClusterApplySets)
/// as a table with the CRDs' printer columns and the Ready message.
pub async fn get(g: &Global, name: Option<&str>, all: bool) -> Result<u8, CliError> {
    let c = conn::connect(g).await?;
    let now = Timestamp::now();
    let mut rows = Vec::new();
    match name.map(|n| conn::parse_set(n, &c.namespace)).transpose()? {
        Some(parent) => {
            let found = AnyParent::get(&c.client, &parent).await;
            let found = found.map_err(|error| CliError::Api {
                doing: format!("reading {parent}"),
                error,
            })?;
            rows.push(row(&found.ok_or(CliError::NotFound(parent))?, now));
        }
        None => {
            let namespace = (!all).then_some(c.namespace.as_str());
            for (kind, plural) in [
                (ParentKind::ApplySet, "ApplySets"),
                (ParentKind::ClusterApplySet, "ClusterApplySets"),
            ] {
                let listed = AnyParent::list(&c.client, kind, namespace).await;
                let listed = listed.map_err(|error| CliError::Api {
                    doing: format!("listing {plural}"),
                    error,
                })?;
                rows.extend(listed.iter().map(|p| row(p, now)));
            }
        }
    }
    if rows.is_empty() {
        eprintln!("No sets found.");
        return Ok(0);
    }
    print!("{}", table(&rows, all));
    Ok(0)
}

/// The rows as kubectl prints tables: upper-case headers, columns three spaces apart.
fn table(rows: &[Row], namespaces: bool) -> String {
    let mut cells: Vec<Vec<&str>> = Vec::new();
    let mut header = vec![
        "NAME", "READY", "REASON", "MEMBERS", "PRUNED", "AGE", "MESSAGE",
    ];
    if namespaces {
        header.insert(0, "NAMESPACE");
    }
    cells.push(header);
    for r in rows {
        let mut line = vec![
            r.name.as_str(),
            &r.ready,
            &r.reason,
            &r.members,
            &r.pruned,
            &r.age,
            &r.message,
        ];
        if namespaces {
            line.insert(0, &r.namespace);
        }
        cells.push(line);
    }
    let columns = cells.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            cells
                .iter()
                .map(|l| l[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for line in &cells {
        let mut text = String::new();
        for (i, cell) in line.iter().enumerate() {
            if i + 1 == columns {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<w$}   ", w = widths[i]));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

/// `suspend` / `resume`: sets spec.suspend.
pub async fn suspend(g: &Global, name: &str, suspend: bool) -> Result<u8, CliError> {
    let c = conn::connect(g).await?;
    let parent = conn::parse_set(name, &c.namespace)?;
    set_suspend(&c.client, &parent, suspend).await?;
    println!("{parent} {}", if suspend { "suspended" } else { "resumed" });
    Ok(0)
}

/// Sets `spec.suspend` of `parent` to `suspend` (a JSON merge patch as the plugin's field
/// manager), as `client`'s user; neither waits nor prints.
pub async fn set_suspend(
    client: &Client,
    parent: &ParentRef,
    suspend: bool,
) -> Result<(), CliError> {
    let patch = json!({"spec": {"suspend": suspend}});
    match parent.kind {
        ParentKind::ApplySet => drop(merge::<ApplySet>(client, parent, &patch).await?),
        ParentKind::ClusterApplySet => {
            drop(merge::<ClusterApplySet>(client, parent, &patch).await?)
        }
    }
    Ok(())
}

/// Requests a reconcile of `parent`: sets its reconcile-requested-at annotation to a new value
/// (now), as `client`'s user, and returns that value (the operator echoes it in
/// `status.lastHandledReconcileAt` once handled); neither waits nor prints.
pub async fn request_reconcile(client: &Client, parent: &ParentRef) -> Result<String, CliError> {
    let requested = Timestamp::now().to_string();
    let patch =
        json!({"metadata": {"annotations": {ANNOTATION_RECONCILE_REQUESTED_AT: requested}}});
    match parent.kind {
        ParentKind::ApplySet => drop(merge::<ApplySet>(client, parent, &patch).await?),
        ParentKind::ClusterApplySet => {
            drop(merge::<ClusterApplySet>(client, parent, &patch).await?)
        }
    }
    Ok(requested)
}

/// A JSON merge patch of the set `parent`.
async fn merge<P: Parent>(
    client: &Client,
    parent: &ParentRef,
    patch: &serde_json::Value,
) -> Result<P, CliError> {
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    P::api(client.clone(), parent.namespace.as_deref())
        .patch(&parent.name, &params, &Patch::Merge(patch))
        .await
        .map_err(|e| match e {
            kube::Error::Api(s) if s.is_not_found() => CliError::NotFound(parent.clone()),
            error => CliError::Api {
                doing: format!("updating {parent}"),
                error,
            },
        })
}

/// `reconcile`: requests a reconcile (the annotation, a new value) and waits, by watching the
/// set, until its status echoes that value in lastHandledReconcileAt; then prints the outcome.
pub async fn reconcile(g: &Global, name: &str, timeout: Duration) -> Result<u8, CliError> {
    let c = conn::connect(g).await?;
    let parent = conn::parse_set(name, &c.namespace)?;
    match parent.kind {
        ParentKind::ApplySet => reconcile_as::<ApplySet>(&c.client, &parent, timeout).await,
        ParentKind::ClusterApplySet => {
            reconcile_as::<ClusterApplySet>(&c.client, &parent, timeout).await
        }
    }
}

async fn reconcile_as<P: Parent>(
    client: &Client,
    parent: &ParentRef,
    timeout: Duration,
) -> Result<u8, CliError> {
    let requested = request_reconcile(client, parent).await?;
    let progress = Progress::new();
    progress.say(&format!(
        "waiting for the operator to reconcile {parent} ..."
    ));
    let api = P::api(client.clone(), parent.namespace.as_deref());
    let wanted = requested.clone();
    // Handled, and decided: a set waiting for its members' health (Ready=Unknown, reason
    // Progressing) is waited for until its health decides, as `flux reconcile` waits for
    // readiness.
    let handled = move |p: Option<&P>| {
        let status = p.and_then(|p| p.status());
        let echoed =
            status.and_then(|s| s.last_handled_reconcile_at.as_deref()) == Some(wanted.as_str());
        echoed && ready(status).is_none_or(|c| c.status != "Unknown")
    };
    let waited =
        tokio::time::timeout(timeout, await_condition(api.clone(), &parent.name, handled)).await;
    progress.finish();
    let set = match waited {
        Err(_) => {
            // Handled but still waiting for its health: not Ready (yet).
            let now = api.get_opt(&parent.name).await.ok().flatten();
            let status = now.as_ref().and_then(|p| p.status());
            let echoed = status.and_then(|s| s.last_handled_reconcile_at.as_deref())
                == Some(requested.as_str());
            if echoed && let Some(c) = ready(status) {
                println!("{parent}: Ready={} {}: {}", c.status, c.reason, c.message);
                return Ok(1);
            }
            return Err(CliError::Reconcile(format!(
                "{parent}: the operator did not handle the request within {timeout:?} (is it running, and does it watch this set?)"
            )));
        }
        Ok(Err(e)) => return Err(CliError::Reconcile(format!("watching {parent}: {e}"))),
        Ok(Ok(None)) => return Err(CliError::Reconcile(format!("{parent} was deleted"))),
        Ok(Ok(Some(set))) => set,
    };
    let status = set.status();
    let Some(c) = ready(status) else {
        println!("{parent}: reconciled; no Ready condition yet");
        return Ok(1);
    };
    println!("{parent}: Ready={} {}: {}", c.status, c.reason, c.message);
    let current = c.observed_generation.is_none() || c.observed_generation == set.meta().generation;
    Ok(if c.status == "True" && current { 0 } else { 1 })
}

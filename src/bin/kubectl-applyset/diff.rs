//! `diff`: what the operator would do with the sets of a file, against the current cluster.
//! Every member is dry-run with server-side apply as the set's field manager (and as its
//! ServiceAccount when it names one), concurrently within a bound; the prune candidates are
//! chosen by the operator's own prune decision (`engine::prune::decide`) over the live
//! parent's record. Output: a unified diff per object created, changed or pruned (Secret
//! values masked as `kubectl diff` masks them), and one `# conflict` line per member the
//! operator could not apply.

use std::{collections::BTreeSet, path::Path, sync::Arc};

use applyset_operator::{
    api::{ApplySet, ApplySetSpec, ClusterApplySet, MemberRef},
    applyset::{LABEL_PART_OF, ParentKind, ParentRef},
    discovery::Resolver,
    engine::{
        Extent, SetScope,
        apply::Conflict,
        live::{self, LiveMember},
        outcome::{MemberResult, Outcome},
        prune::{self, Keep},
    },
    parent::{self, Parent, Recorded},
    render::{DesiredSet, Member},
    tenancy::{Defaults, Identity},
};
use futures::StreamExt;
use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams},
    discovery::{ApiResource, Scope},
};
use serde_json::Value;

use crate::{Global, build::applied_object, conn, file, progress::Progress, render::Renderer};

/// What the operator would do with one member.
#[derive(Debug)]
enum Change {
    Unchanged,
    Create {
        after: Value,
    },
    Update {
        before: Value,
        after: Value,
    },
    Prune {
        before: Value,
    },
    /// The operator would not apply it (another manager's fields, another set's object, an
    /// object it may not adopt, an immutable field).
    Conflict(String),
    /// The dry-run failed.
    Failed(String),
}

/// The result of one set's diff.
#[derive(Default)]
struct Counts {
    create: usize,
    update: usize,
    prune: usize,
    conflicts: usize,
    unchanged: usize,
    failed: usize,
}

pub async fn run(
    g: &Global,
    path: &Path,
    concurrency: usize,
    allow_cross_namespace: bool,
) -> Result<u8, String> {
    let c = conn::connect(g).await?;
    let file = file::read_sets(path, &c.namespace)?;
    let defaults = Defaults {
        allow_cross_namespace,
        ..Defaults::default()
    };
    let renderer = Renderer::new(&file, Some(c.client.clone()), defaults)
        .with_age_keys(crate::age_keys::local_keys(g.sops_age_key_file.as_deref())?);
    let Some(resolver) = renderer.resolver().cloned() else {
        return Err("no cluster".into());
    };
    let mut code = 0;
    for doc in &file.sets {
        let rendered = match renderer.render(&file, doc).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: {e}");
                code = crate::EXIT_ERROR;
                continue;
            }
        };
        let set = Set {
            parent: &doc.parent,
            spec: &doc.spec,
            desired: &rendered.set,
            identity: &rendered.identity,
        };
        match diff_set(&c.client, &resolver, &set, concurrency).await {
            Ok((text, counts)) => {
                print!("{text}");
                if counts.failed > 0 {
                    code = crate::EXIT_ERROR;
                } else if code == 0
                    && counts.create + counts.update + counts.prune + counts.conflicts > 0
                {
                    code = 1;
                }
            }
            Err(e) => {
                eprintln!(
                    "error: {}",
                    file.at(doc.line, format!("{}: {e}", doc.parent))
                );
                code = crate::EXIT_ERROR;
            }
        }
    }
    Ok(code)
}

/// One rendered set of the file.
struct Set<'a> {
    parent: &'a ParentRef,
    spec: &'a ApplySetSpec,
    desired: &'a DesiredSet,
    identity: &'a Identity,
}

/// The diff of one set: its text and counts.
async fn diff_set(
    client: &Client,
    resolver: &Arc<Resolver>,
    set: &Set<'_>,
    concurrency: usize,
) -> Result<(String, Counts), String> {
    let parent = set.parent;
    let mut scope = SetScope::new(parent.clone(), client.clone(), concurrency);
    if let Some(user) = set.identity.user() {
        let impersonating = conn::impersonating(client, &user)
            .ok_or_else(|| format!("{} cannot be impersonated", set.identity))?;
        scope = scope.acting_as(set.identity.clone(), impersonating);
    }
    let mut notes = Vec::new();
    // What the live parent records (nothing when it does not exist yet).
    let live_parent = live_parent_meta(client, parent).await?;
    let before = match &live_parent {
        None => Recorded::default(),
        Some(meta) => {
            if let Err(e) = parent::check_ownership(meta, parent) {
                notes.push(format!("# conflict {parent}: {e}\n"));
            }
            parent::recorded(meta, resolver)
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("its ApplySet annotations are malformed ({e})"))?
        }
    };
    let progress = Progress::new(&format!("diff {parent}"), set.desired.members.len());
    let changes: Vec<(usize, Change, Option<String>)> =
        futures::stream::iter(set.desired.members.iter().enumerate())
            .map(|(i, m)| {
                let scope = &scope;
                let progress = &progress;
                async move {
                    let (change, uid) = diff_member(scope, set.spec, m).await;
                    progress.tick();
                    (i, change, uid)
                }
            })
            .buffer_unordered(concurrency)
            .collect()
            .await;
    progress.finish();
    let mut changes = changes;
    changes.sort_by_key(|(i, _, _)| *i);

    // Prune: the operator's decision over the parent's record and the declared set.
    let mut pruned = Vec::new();
    let empty_refused = set.desired.members.is_empty()
        && !set.spec.allow_empty
        && set.spec.prune
        && !before.group_kinds.is_empty();
    if empty_refused {
        notes.push(format!(
            "# conflict {parent}: the desired set is empty; the operator refuses to prune every member (EmptySetRefused) unless spec.allowEmpty is true\n"
        ));
    } else if set.spec.prune {
        let declared_now = Recorded {
            group_kinds: set.desired.group_kinds(),
            namespaces: set.desired.namespaces(),
        };
        let extent = Extent::new(parent.namespace.as_deref(), &before, declared_now);
        let known = set.desired.resolutions();
        let declared = set.desired.declared();
        let live = live::observe(&scope, resolver, &extent, &known, &declared)
            .await
            .map_err(|e| e.to_string())?;
        let applied: Vec<MemberResult> = changes
            .iter()
            .filter_map(|(i, _, uid)| {
                let m = set.desired.members.get(*i)?;
                Some(
                    MemberResult::new(m.reference.clone(), Outcome::Unchanged)
                        .with_uid(uid.clone()),
                )
            })
            .collect();
        let keep = Keep::new(&known, &declared, &applied);
        let selection = prune::decide(&scope, resolver, &extent, &keep, &live, false)
            .await
            .map_err(|e| e.to_string())?;
        for (m, why) in &selection.retained {
            notes.push(format!("# retained {}: {why:?}\n", m.reference));
        }
        pruned = futures::stream::iter(selection.delete)
            .map(|m| {
                let scope = &scope;
                async move {
                    let change = prune_change(scope, &m).await;
                    (m, change)
                }
            })
            .buffer_unordered(concurrency)
            .collect::<Vec<_>>()
            .await;
        pruned.sort_by(|a, b| a.0.reference.cmp(&b.0.reference));
    }

    let mut counts = Counts::default();
    let mut body = String::new();
    let members = changes.iter().filter_map(|(i, change, _)| {
        let m = set.desired.members.get(*i)?;
        Some((m.resource.api_version.as_str(), &m.reference, change))
    });
    let prunes = pruned
        .iter()
        .map(|(m, change)| (m.resource.api_version.as_str(), &m.reference, change));
    for (api_version, reference, change) in members.chain(prunes) {
        let name = file_name(api_version, reference);
        match change {
            Change::Unchanged => counts.unchanged += 1,
            Change::Create { after } => {
                counts.create += 1;
                body.push_str(&unified(
                    "/dev/null",
                    &format!("merged/{name}"),
                    None,
                    Some(after),
                )?);
            }
            Change::Update { before, after } => {
                counts.update += 1;
                body.push_str(&unified(
                    &format!("live/{name}"),
                    &format!("merged/{name}"),
                    Some(before),
                    Some(after),
                )?);
            }
            Change::Prune { before } => {
                counts.prune += 1;
                body.push_str(&unified(
                    &format!("live/{name}"),
                    "/dev/null",
                    Some(before),
                    None,
                )?);
            }
            Change::Conflict(message) => {
                counts.conflicts += 1;
                body.push_str(&format!("# conflict {message}\n"));
            }
            Change::Failed(message) => {
                counts.failed += 1;
                eprintln!("error: {message}");
            }
        }
    }
    counts.conflicts += notes.iter().filter(|n| n.starts_with("# conflict")).count();
    let mut mode = String::new();
    if set.spec.suspend {
        mode.push_str(" (spec.suspend: the operator applies nothing while suspended)");
    }
    if set.spec.mode == applyset_operator::api::Mode::Plan {
        mode.push_str(" (spec.mode: Plan: the operator only plans)");
    }
    let mut text = format!(
        "# {parent}: {} to create, {} to change, {} to prune, {} conflicts, {} unchanged; field manager {}, acting as {}{mode}\n",
        counts.create,
        counts.update,
        counts.prune,
        counts.conflicts,
        counts.unchanged,
        scope.manager,
        set.identity
    );
    for n in &notes {
        text.push_str(n);
    }
    text.push_str(&body);
    Ok((text, counts))
}

/// The live parent's metadata, if it exists.
async fn live_parent_meta(
    client: &Client,
    parent: &ParentRef,
) -> Result<Option<kube::api::ObjectMeta>, String> {
    let got = match parent.kind {
        ParentKind::ApplySet => ApplySet::api(client.clone(), parent.namespace.as_deref())
            .get_metadata_opt(&parent.name)
            .await
            .map(|m| m.map(|m| m.metadata)),
        ParentKind::ClusterApplySet => ClusterApplySet::api(client.clone(), None)
            .get_metadata_opt(&parent.name)
            .await
            .map(|m| m.map(|m| m.metadata)),
    };
    match got {
        Ok(meta) => Ok(meta),
        // The CRDs are not installed: the parent does not exist.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(format!("reading the live {parent}: {e}")),
    }
}

/// The API of a member's kind in its namespace.
fn api_of(
    client: &Client,
    resource: &ApiResource,
    namespaced: bool,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let scope = if namespaced {
        Scope::Namespaced
    } else {
        Scope::Cluster
    };
    let api = Api::dynamic(client.clone(), resource, &scope);
    match namespace {
        Some(ns) => api.constrain(ns),
        None => api,
    }
}

/// Dry-runs one member as the operator would apply it. Returns the change and the live
/// object's UID (kept from prune, as the operator keeps what it applied).
async fn diff_member(
    scope: &SetScope,
    spec: &ApplySetSpec,
    member: &Member,
) -> (Change, Option<String>) {
    let reference = &member.reference;
    let api = api_of(
        &scope.client,
        &member.resource,
        member.namespaced,
        reference.namespace.as_deref(),
    );
    let live = match api.get_opt(&reference.name).await {
        Ok(live) => live,
        Err(e) => {
            return (
                Change::Failed(format!("{reference}: reading it: {e}")),
                None,
            );
        }
    };
    if let Some(live) = &live {
        let label = live
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_PART_OF));
        match label {
            Some(id) if *id != scope.id => {
                let message = format!(
                    "{reference}: belongs to another ApplySet ({LABEL_PART_OF}={id}); the operator leaves it alone (OwnershipConflict)"
                );
                return (Change::Conflict(message), None);
            }
            None if !(spec.adopt_existing || member.adopt) => {
                let message = format!(
                    "{reference}: exists without the label {LABEL_PART_OF}; the operator would not adopt it (AdoptionRefused): set spec.adoptExisting: true or annotate the manifest applyset.dev/adopt: enabled"
                );
                return (Change::Conflict(message), None);
            }
            _ => {}
        }
    }
    let body = applied_object(member, &scope.id);
    let send = |force: bool| {
        let mut params = PatchParams::apply(&scope.manager).dry_run();
        params.force = force;
        let api = api.clone();
        let body = body.clone();
        let name = reference.name.clone();
        async move { api.patch(&name, &params, &Patch::Apply(&body)).await }
    };
    let mut result = send(false).await;
    if let Err(kube::Error::Api(status)) = &result
        && status.is_conflict()
    {
        let conflict = Conflict::from_status(status);
        if conflict.on_part_of {
            let message = format!(
                "{reference}: its {LABEL_PART_OF} label is managed by {}; the operator leaves it alone (OwnershipConflict)",
                conflict.managers.join(", ")
            );
            return (Change::Conflict(message), None);
        }
        if !spec.force {
            let managers: Vec<String> =
                conflict.managers.iter().map(|m| format!("{m:?}")).collect();
            let message = format!(
                "{reference}: conflict with field manager(s) {}: {}; set spec.force: true to take the fields over",
                managers.join(", "),
                conflict.fields.join(", ")
            );
            return (Change::Conflict(message), None);
        }
        result = send(true).await;
    }
    let after = match result {
        Ok(after) => after,
        // The namespace or the CRD is created by the set itself: the object would be created.
        Err(kube::Error::Api(s)) if s.code == 404 && live.is_none() => {
            return (Change::Create { after: body }, None);
        }
        Err(kube::Error::Api(s)) if s.is_invalid() && s.message.contains("immutable") => {
            let message = if member.force_recreate {
                format!(
                    "{reference}: {}; the operator would delete and re-create it (applyset.dev/force: enabled)",
                    s.message
                )
            } else {
                format!(
                    "{reference}: {}; annotate the manifest with applyset.dev/force: enabled to allow deleting and re-creating it",
                    s.message
                )
            };
            return (Change::Conflict(message), None);
        }
        Err(e) => {
            return (
                Change::Failed(format!("{reference}: dry-run apply: {e}")),
                None,
            );
        }
    };
    let uid = after.metadata.uid.clone();
    let after = shown(&after);
    let change = match live {
        None => Change::Create { after },
        Some(live) => {
            let before = shown(&live);
            if before == after {
                Change::Unchanged
            } else {
                Change::Update { before, after }
            }
        }
    };
    (change, uid)
}

/// The removal of a member the operator would prune.
async fn prune_change(scope: &SetScope, m: &LiveMember) -> Change {
    let api = api_of(
        &scope.client,
        &m.resource,
        m.namespaced,
        m.reference.namespace.as_deref(),
    );
    match api.get_opt(&m.reference.name).await {
        Ok(Some(live)) => Change::Prune {
            before: shown(&live),
        },
        Ok(None) => Change::Unchanged,
        Err(e) => Change::Failed(format!("{}: reading it: {e}", m.reference)),
    }
}

/// An object as shown in a diff: without what changes on every write or is the server's
/// bookkeeping (managedFields, resourceVersion, generation, uid, creationTimestamp).
fn shown(o: &DynamicObject) -> Value {
    let mut v = serde_json::to_value(o).unwrap_or(Value::Null);
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "managedFields",
            "resourceVersion",
            "generation",
            "uid",
            "creationTimestamp",
        ] {
            meta.remove(k);
        }
    }
    v
}

/// `v1.ConfigMap.team.a`, `apps.v1.Deployment.team.web`, `v1.Namespace.team`: how an object
/// is named in the diff's headers (as `kubectl diff` names its files).
fn file_name(api_version: &str, r: &MemberRef) -> String {
    let mut name = format!("{}.{}", api_version.replace('/', "."), r.kind);
    if let Some(ns) = &r.namespace {
        name.push('.');
        name.push_str(ns);
    }
    name.push('.');
    name.push_str(&r.name);
    name
}

/// Whether `v` is a core Secret.
fn is_secret(v: &Value) -> bool {
    v.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && v.get("kind").and_then(Value::as_str) == Some("Secret")
}

/// Masks the values of Secrets as `kubectl diff` does: `***` where both sides hold the same
/// value (or only one side has the key), `*** (before)` / `*** (after)` where it changes.
fn mask(before: Option<&mut Value>, after: Option<&mut Value>) {
    let (mut before, mut after) = (
        before.filter(|v| is_secret(v)),
        after.filter(|v| is_secret(v)),
    );
    for field in ["data", "stringData"] {
        let keys: BTreeSet<String> = [before.as_deref(), after.as_deref()]
            .into_iter()
            .flatten()
            .filter_map(|v| v.get(field).and_then(Value::as_object))
            .flat_map(|m| m.keys().cloned())
            .collect();
        for key in keys {
            let old = before
                .as_deref()
                .and_then(|v| v.get(field))
                .and_then(|m| m.get(&key))
                .cloned();
            let new = after
                .as_deref()
                .and_then(|v| v.get(field))
                .and_then(|m| m.get(&key))
                .cloned();
            let changed = old.is_some() && new.is_some() && old != new;
            let set = |side: &mut Option<&mut Value>, text: &str| {
                if let Some(slot) = side
                    .as_deref_mut()
                    .and_then(|v| v.get_mut(field))
                    .and_then(|m| m.get_mut(&key))
                {
                    *slot = Value::String(text.to_string());
                }
            };
            if changed {
                set(&mut before, "*** (before)");
                set(&mut after, "*** (after)");
            } else {
                set(&mut before, "***");
                set(&mut after, "***");
            }
        }
    }
    // A Secret's last-applied-configuration annotation (client-side `kubectl apply`) holds
    // its values in clear.
    for side in [before, after].into_iter().flatten() {
        if let Some(a) = side
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
            && let Some(v) = a.get_mut(LAST_APPLIED)
        {
            *v = Value::String("***".into());
        }
    }
}

/// The annotation client-side `kubectl apply` keeps the whole applied object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A YAML document of `v`.
pub fn to_yaml(v: &Value) -> Result<String, String> {
    serde_saphyr::to_string(v).map_err(|e| format!("writing YAML: {e}"))
}

/// The unified diff of two versions of an object (`None`: it does not exist on that side),
/// Secret values masked.
fn unified(
    old_name: &str,
    new_name: &str,
    before: Option<&Value>,
    after: Option<&Value>,
) -> Result<String, String> {
    let (mut before, mut after) = (before.cloned(), after.cloned());
    mask(before.as_mut(), after.as_mut());
    let old = before
        .as_ref()
        .map(to_yaml)
        .transpose()?
        .unwrap_or_default();
    let new = after.as_ref().map(to_yaml).transpose()?.unwrap_or_default();
    let diff = similar::TextDiff::from_lines(&old, &new);
    let mut out = diff
        .unified_diff()
        .context_radius(3)
        .header(old_name, new_name)
        .to_string();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secret(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": data})
    }

    #[test]
    fn secret_values_are_masked_and_changes_marked() {
        let mut before = secret(json!({"same": "c2FtZQ==", "changed": "b2xk", "gone": "eA=="}));
        let mut after = secret(json!({"same": "c2FtZQ==", "changed": "bmV3", "added": "eQ=="}));
        mask(Some(&mut before), Some(&mut after));
        assert_eq!(
            before["data"],
            json!({"same": "***", "changed": "*** (before)", "gone": "***"})
        );
        assert_eq!(
            after["data"],
            json!({"same": "***", "changed": "*** (after)", "added": "***"})
        );
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}});
        mask(None, Some(&mut cm));
        assert_eq!(cm["data"]["k"], "v");
        // The copy client-side `kubectl apply` left in an annotation is masked too.
        let mut applied = secret(json!({"k": "c2VjcmV0"}));
        applied["metadata"]["annotations"] =
            json!({LAST_APPLIED: "{\"data\":{\"k\":\"c2VjcmV0\"}}", "other": "kept"});
        mask(Some(&mut applied), None);
        assert_eq!(
            applied["metadata"]["annotations"],
            json!({LAST_APPLIED: "***", "other": "kept"})
        );
    }

    #[test]
    fn unified_diff_of_a_change() {
        let before = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "old"}});
        let after = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "new"}});
        let d = unified("live/x", "merged/x", Some(&before), Some(&after)).expect("diff");
        assert!(d.starts_with("--- live/x\n+++ merged/x\n@@"), "{d}");
        assert!(d.contains("-  k: old\n+  k: new\n"), "{d}");
        let same = unified("live/x", "merged/x", Some(&before), Some(&before)).expect("diff");
        assert_eq!(same, "");
    }
}

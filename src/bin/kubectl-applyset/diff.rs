//! `diff`: what the operator would do with the sets of a file, against the current cluster.
//! The set is rendered by the operator's render stage and planned by the operator's own plan
//! ([`applyset_operator::engine::plan::plan`], Plan mode's code path): every member dry-run
//! with server-side apply as the set's field manager (and as its ServiceAccount when it names
//! one), concurrently within a bound, and the prune decision over the live parent's record.
//! This command only presents the plan: a unified diff per object created, changed or pruned
//! (Secret values masked as `kubectl diff` masks them), and one `# conflict` line per member
//! the operator would not apply.

use std::{collections::HashMap, path::Path, sync::Arc};

use applyset_operator::{
    api::{ApplySet, ApplySetSpec, ApplySetStatus, ClusterApplySet, MemberRef, Mode},
    applyset::{ParentKind, ParentRef},
    discovery::{self, Resolver},
    engine::{
        Extent, SetScope,
        live::{self, LiveMember},
        outcome::{MemberResult, Outcome},
        plan::{self, Before, Clock, Desired, Plan, Pruning, SetView},
    },
    parent::{self, Parent},
    render::DesiredSet,
    tenancy::{Defaults, Identity},
};
use futures::StreamExt;
use kube::{
    Api, Client,
    api::{DynamicObject, ObjectMeta},
};
use serde_json::Value;

use crate::{
    Global, conn,
    error::CliError,
    file,
    output::{file_name, shown, unified},
    progress::Progress,
    render_file::Renderer,
};

/// How `diff` shows one member.
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
    /// object it may not adopt).
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
) -> Result<u8, CliError> {
    let c = conn::connect(g).await?;
    let file = file::read_sets(path, &c.namespace)?;
    let defaults = Defaults {
        allow_cross_namespace,
        ..Defaults::default()
    };
    let renderer = Renderer::new(
        &file,
        Some(c.client.clone()),
        defaults,
        g.kustomize_binary.clone(),
    )
    .with_age_keys(
        crate::age_keys::local_keys(g.sops_age_key_file.as_deref()).map_err(CliError::AgeKey)?,
    );
    let Some(resolver) = renderer.resolver().cloned() else {
        return Err(CliError::Cluster("no cluster".into()));
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
            identity: &rendered.identity,
            desired: rendered.set,
            concurrency,
        };
        match diff_set(&c.client, &resolver, set).await {
            Ok((text, counts)) => {
                print!("{text}");
                code = exit_code(code, &counts);
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

/// The exit code after a set's diff: an error stays an error; a failed dry-run is one;
/// otherwise 1 when anything would change or conflict.
fn exit_code(code: u8, counts: &Counts) -> u8 {
    if counts.failed > 0 {
        crate::EXIT_ERROR
    } else if code == 0 && counts.create + counts.update + counts.prune + counts.conflicts > 0 {
        1
    } else {
        code
    }
}

/// One rendered set of the file, and how many of its requests may be in flight.
struct Set<'a> {
    parent: &'a ParentRef,
    spec: &'a ApplySetSpec,
    identity: &'a Identity,
    desired: DesiredSet,
    concurrency: usize,
}

/// The diff of one set: its text and counts.
async fn diff_set(
    client: &Client,
    resolver: &Arc<Resolver>,
    set: Set<'_>,
) -> Result<(String, Counts), String> {
    let parent = set.parent;
    let mut scope = SetScope::new(parent.clone(), client.clone(), set.concurrency);
    if let Some(user) = set.identity.user() {
        let impersonating = conn::impersonating(client, &user)
            .ok_or_else(|| format!("{} cannot be impersonated", set.identity))?;
        scope = scope.acting_as(set.identity.clone(), impersonating);
    }
    let mut notes = Vec::new();
    let before = match live_parent(client, parent).await? {
        None => Before::default(),
        Some((meta, status)) => {
            if let Err(e) = parent::check_ownership(&meta, parent) {
                notes.push(format!("# conflict {parent}: {e}\n"));
            }
            plan::before(&meta, status.as_ref(), resolver)
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("its ApplySet annotations are malformed ({e})"))?
        }
    };
    let desired = Desired::new(set.desired, Vec::new());
    let progress = Progress::new();
    let members = desired.set.members.len();
    progress.say(&format!("diff {parent}: planning {members} members ..."));
    let planned = planned(&scope, resolver, set.spec, &desired, &before).await;
    progress.finish();
    let planned = planned?;
    let mut changes = member_changes(&desired.set, &planned.members);
    match planned.prune {
        Pruning::Off => {}
        Pruning::EmptySetRefused => notes.push(format!(
            "# conflict {parent}: the desired set is empty; the operator refuses to prune every member (EmptySetRefused) unless spec.allowEmpty is true\n"
        )),
        Pruning::Undecided(e) => return Err(e.to_string()),
        Pruning::Decided(selection) => {
            for (m, why) in &selection.retained {
                notes.push(format!("# retained {}: {why:?}\n", m.reference));
            }
            changes.extend(prune_changes(&scope, selection.delete).await);
        }
    }
    let presented = present(
        &changes,
        notes.iter().filter(|n| n.starts_with("# conflict")).count(),
    );
    let (body, counts) = presented.map_err(|e| e.to_string())?;
    let mut text = header(set.parent, set.spec, set.identity, &scope, &counts);
    for n in &notes {
        text.push_str(n);
    }
    text.push_str(&body);
    // The values decrypted from SOPS members are withheld (a Secret's are masked already; a
    // decrypted ConfigMap's, or a server message echoing one, would otherwise show).
    let text = desired
        .set
        .members
        .iter()
        .fold(text, |text, m| m.redact(text));
    Ok((text, counts))
}

/// The operator's plan of the set (Plan mode's code path), with what each dry-run showed.
async fn planned(
    scope: &SetScope,
    resolver: &Resolver,
    spec: &ApplySetSpec,
    desired: &Desired,
    before: &Before,
) -> Result<Plan, String> {
    let namespace = scope.parent.namespace.as_deref();
    let extent = Extent::new(namespace, &before.recorded, desired.recorded());
    let (known, declared) = (&desired.known, &desired.declared);
    let live = live::observe(scope, resolver, &extent, known, declared)
        .await
        .map_err(|e| e.to_string())?;
    let view = SetView {
        scope,
        resolver,
        desired,
        extent: &extent,
        live: &live,
    };
    let clock = Clock::start(spec);
    plan::plan(&view, spec, &before.recorded, &clock, true)
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("the plan {e}"))
}

/// `# ApplySet ns/name: 1 to create, …; field manager …, acting as …`.
fn header(
    parent: &ParentRef,
    spec: &ApplySetSpec,
    identity: &Identity,
    scope: &SetScope,
    counts: &Counts,
) -> String {
    let mut mode = String::new();
    if spec.suspend {
        mode.push_str(" (spec.suspend: the operator applies nothing while suspended)");
    }
    if spec.mode == Mode::Plan {
        mode.push_str(" (spec.mode: Plan: the operator only plans)");
    }
    format!(
        "# {}: {} to create, {} to change, {} to prune, {} conflicts, {} unchanged; field manager {}, acting as {}{mode}\n",
        parent,
        counts.create,
        counts.update,
        counts.prune,
        counts.conflicts,
        counts.unchanged,
        scope.manager,
        identity
    )
}

/// Each member's change, in the set's apply order: (api version, reference, change).
fn member_changes(set: &DesiredSet, results: &[MemberResult]) -> Vec<(String, MemberRef, Change)> {
    let by_ref: HashMap<&MemberRef, &MemberResult> =
        results.iter().map(|r| (&r.reference, r)).collect();
    set.members
        .iter()
        .filter_map(|m| {
            let r = by_ref.get(&m.reference)?;
            let api_version = m.resource.api_version.clone();
            Some((api_version, m.reference.clone(), member_change(r)))
        })
        .collect()
}

/// How a member's dry-run shows.
fn member_change(r: &MemberResult) -> Change {
    match &r.outcome {
        Outcome::Conflict { message, .. }
        | Outcome::Owned { message }
        | Outcome::AdoptionRefused { message } => Change::Conflict(message.clone()),
        Outcome::Forbidden { message } | Outcome::Failed { message } => {
            Change::Failed(message.clone())
        }
        o if o.is_applied() => match r.preview.as_deref() {
            None => Change::Unchanged,
            Some(p) => {
                let after = shown_value(&p.after);
                match &p.before {
                    None => Change::Create { after },
                    Some(before) => {
                        let before = shown_value(before);
                        if before == after {
                            Change::Unchanged
                        } else {
                            Change::Update { before, after }
                        }
                    }
                }
            }
        },
        _ => Change::Unchanged,
    }
}

/// An object (as JSON) as shown in a diff.
fn shown_value(v: &Value) -> Value {
    match serde_json::from_value::<DynamicObject>(v.clone()) {
        Ok(o) => shown(&o),
        Err(_) => v.clone(),
    }
}

/// The removals of the members the operator would prune, sorted.
async fn prune_changes(
    scope: &SetScope,
    delete: Vec<LiveMember>,
) -> Vec<(String, MemberRef, Change)> {
    let mut pruned = futures::stream::iter(delete)
        .map(|m| async move {
            let change = prune_change(scope, &m).await;
            (m.resource.api_version.clone(), m.reference, change)
        })
        .buffer_unordered(scope.concurrency)
        .collect::<Vec<_>>()
        .await;
    pruned.sort_by(|a, b| a.1.cmp(&b.1));
    pruned
}

/// The text of the changes and their counts (`conflicts`: conflicts noted already).
fn present(
    changes: &[(String, MemberRef, Change)],
    conflicts: usize,
) -> Result<(String, Counts), CliError> {
    let mut counts = Counts {
        conflicts,
        ..Counts::default()
    };
    let mut body = String::new();
    for (api_version, reference, change) in changes {
        let name = file_name(api_version, reference);
        match change {
            Change::Unchanged => counts.unchanged += 1,
            Change::Create { after } => {
                counts.create += 1;
                let new = format!("merged/{name}");
                body.push_str(&unified("/dev/null", &new, None, Some(after))?);
            }
            Change::Update { before, after } => {
                counts.update += 1;
                let (old, new) = (format!("live/{name}"), format!("merged/{name}"));
                body.push_str(&unified(&old, &new, Some(before), Some(after))?);
            }
            Change::Prune { before } => {
                counts.prune += 1;
                let old = format!("live/{name}");
                body.push_str(&unified(&old, "/dev/null", Some(before), None)?);
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
    Ok((body, counts))
}

/// The live parent's metadata and status, if it exists.
async fn live_parent(
    client: &Client,
    parent: &ParentRef,
) -> Result<Option<(ObjectMeta, Option<ApplySetStatus>)>, String> {
    let got = match parent.kind {
        ParentKind::ApplySet => ApplySet::api(client.clone(), parent.namespace.as_deref())
            .get_opt(&parent.name)
            .await
            .map(|o| o.map(|o| (o.metadata, o.status))),
        ParentKind::ClusterApplySet => ClusterApplySet::api(client.clone(), None)
            .get_opt(&parent.name)
            .await
            .map(|o| o.map(|o| (o.metadata, o.status))),
    };
    match got {
        Ok(found) => Ok(found),
        // The CRDs are not installed: the parent does not exist.
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(None),
        Err(e) => Err(format!("reading the live {parent}: {e}")),
    }
}

/// The removal of a member the operator would prune.
async fn prune_change(scope: &SetScope, m: &LiveMember) -> Change {
    let namespace = m.reference.namespace.as_deref();
    let api: Api<DynamicObject> = discovery::api_in(&scope.client, namespace, &m.resource);
    match api.get_opt(&m.reference.name).await {
        Ok(Some(live)) => Change::Prune {
            before: shown(&live),
        },
        Ok(None) => Change::Unchanged,
        Err(e) => Change::Failed(format!("{}: reading it: {e}", m.reference)),
    }
}

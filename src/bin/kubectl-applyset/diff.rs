//! `diff`: what the operator would do with the sets of a file, against the current cluster.
//! The set is rendered by the operator's render stage and planned by the operator's own plan
//! ([`applyset_operator::engine::SetEngine::plan`], Plan mode's code path): every member dry-run
//! with server-side apply as the set's field manager (and as its ServiceAccount when it names
//! one), concurrently within a bound, and the prune decision over the live parent's record.
//! This command only presents the plan, by the engine's classification of each outcome (the
//! one the operator's status reads): a unified diff per object created, changed or pruned
//! (Secret values masked as `kubectl diff` masks them; values decrypted from SOPS members and
//! values substituted from Secrets withheld), one `# conflict` line per member the
//! operator would not apply, and one `# refused` line, with the reason, per member it refuses
//! (its namespace is being terminated).

use std::{collections::HashMap, path::Path, sync::Arc};

use applyset_operator::{
    api::{ApplySetSpec, MemberRef, Mode, SubstituteKind},
    applyset::{ConventionError, ParentRef},
    discovery::Resolver,
    engine::{
        Before, Class, Desired, MemberResult, Plan, Pruning, SetEngine, SetScope, SetView,
        live::LiveMember, shown,
    },
    parent::{self, AnyParent},
    render::DesiredSet,
    tenancy::{Defaults, Identity},
    terminating::Terminating,
};
use futures::StreamExt;
use kube::Client;
use serde_json::Value;

use crate::{
    Global, conn,
    error::CliError,
    file,
    output::{file_name, mask_all, unified},
    progress::Progress,
    render_file::Renderer,
};

/// How `diff` shows one member: its class ([`Class`], the engine's, which the operator's
/// status reads too) with the objects a dry-run showed.
#[derive(Debug)]
enum Change {
    Unchanged,
    /// `after`: the object as it would be created (none when the dry-run kept none).
    Create {
        after: Option<Value>,
    },
    Update {
        before: Option<Value>,
        after: Option<Value>,
    },
    Prune {
        before: Value,
    },
    /// The operator would not apply it (another manager's fields, another set's object, an
    /// object it may not adopt).
    Conflict(String),
    /// The operator refuses to apply it: `member: reason`.
    Refused(String),
    /// The dry-run failed (`forbidden`: the API server refused it to whom the set acts as).
    Failed {
        message: String,
        forbidden: bool,
    },
    /// Not applied by its own controls: `member: reason` (not a change, not an error).
    Skipped(String),
}

/// The result of one set's diff.
#[derive(Default)]
pub struct Counts {
    pub create: usize,
    pub update: usize,
    pub prune: usize,
    pub conflicts: usize,
    pub refused: usize,
    pub unchanged: usize,
    pub failed: usize,
    pub skipped: usize,
    /// Of the failed dry-runs, the messages of those the API server refused (forbidden).
    pub forbidden: Vec<String>,
    /// The message of each failed dry-run (decrypted and Secret-substituted values withheld).
    pub failures: Vec<String>,
}

/// Why a set's diff could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error("reading the live {parent}: {error}")]
    ReadParent {
        parent: ParentRef,
        #[source]
        error: kube::Error,
    },
    #[error("{0} cannot be impersonated")]
    CannotImpersonate(Identity),
    /// Reading what the live parent records of its members.
    #[error(transparent)]
    Recorded(applyset_operator::Error),
    #[error("its ApplySet annotations are malformed ({0})")]
    Malformed(#[source] ConventionError),
    /// A request of the plan failed: the plugin's words for it ([`crate::conn::said`], which
    /// names the right the kubeconfig's user lacks when the set acts as the operator).
    #[error("{0}")]
    Api(String),
    /// The plan did not finish within spec.timeout.
    #[error("the plan {0}")]
    Unfinished(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error(transparent)]
    Present(#[from] CliError),
}

/// How `diff` runs: requests in flight, objects per page of a LIST, and whether to validate
/// as an operator run with `--allow-cross-namespace-sets`.
pub struct Options {
    pub concurrency: usize,
    pub page_size: u32,
    pub allow_cross_namespace: bool,
}

pub async fn run(g: &Global, path: &Path, opts: Options) -> Result<u8, CliError> {
    let allow_cross_namespace = opts.allow_cross_namespace;
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
            concurrency: opts.concurrency,
            page_size: opts.page_size,
            progress: true,
        };
        match diff_set(&c.client, &resolver, set).await {
            Ok((text, counts)) => {
                for message in &counts.failures {
                    eprintln!("error: {message}");
                }
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
/// otherwise 1 when anything would change, conflict or be refused.
fn exit_code(code: u8, counts: &Counts) -> u8 {
    let noted = counts.create + counts.update + counts.prune + counts.conflicts + counts.refused;
    if counts.failed > 0 {
        crate::EXIT_ERROR
    } else if code == 0 && noted > 0 {
        1
    } else {
        code
    }
}

/// One rendered set (of a file, or of a live parent for the ui), and how many of its
/// requests may be in flight.
pub struct Set<'a> {
    pub parent: &'a ParentRef,
    pub spec: &'a ApplySetSpec,
    pub identity: &'a Identity,
    pub desired: DesiredSet,
    pub concurrency: usize,
    /// Objects per page of a LIST of members.
    pub page_size: u32,
    /// Whether to show progress on a terminal's standard error.
    pub progress: bool,
}

/// The diff of one set: its text and counts. The one diff of `kubectl applyset diff` and of
/// the ui's set page.
pub async fn diff_set(
    client: &Client,
    resolver: &Arc<Resolver>,
    set: Set<'_>,
) -> Result<(String, Counts), DiffError> {
    let parent = set.parent;
    let scope = scope(client, &set)?;
    let mut engine = SetEngine::new(&scope, resolver, set.spec);
    let live = AnyParent::get(client, parent)
        .await
        .map_err(|error| DiffError::ReadParent {
            parent: parent.clone(),
            error,
        })?;
    let mut notes = Vec::new();
    if let Some(Err(e)) = live
        .as_ref()
        .map(|p| parent::check_ownership(p.meta(), parent))
    {
        notes.push(format!("# conflict {parent}: {e}\n"));
    }
    let before = engine
        .recorded(live.as_ref())
        .await
        .map_err(DiffError::Recorded)?
        .map_err(DiffError::Malformed)?;
    let desired = Desired::new(set.desired, Vec::new());
    let planned = planned_showing(&mut engine, &desired, &before, set.progress).await?;
    let mut changes = member_changes(&desired.set, &planned.members);
    match planned.prune {
        Pruning::Off => {}
        Pruning::EmptySetRefused => notes.push(format!(
            "# conflict {parent}: the desired set is empty; the operator refuses to prune every member (EmptySetRefused) unless spec.allowEmpty is true\n"
        )),
        Pruning::Undecided(e) => return Err(DiffError::Api(crate::conn::said(e, &scope.identity))),
        Pruning::Decided(selection) => {
            for (m, why) in &selection.retained {
                notes.push(format!("# retained {}: {why:?}\n", m.reference));
            }
            let pruned = prune_changes(&engine, selection.delete).await;
            let secretive = substitutes_from_secrets(set.spec);
            changes.extend(pruned.into_iter().map(|(v, r, change)| match secretive {
                true => (v, r, masked(change)),
                false => (v, r, change),
            }));
        }
    }
    let presented = present(
        &changes,
        notes.iter().filter(|n| n.starts_with("# conflict")).count(),
    );
    let (body, mut counts) = presented?;
    let mut text = header(set.parent, set.spec, set.identity, &scope, &counts);
    for n in &notes {
        text.push_str(n);
    }
    text.push_str(&body);
    // The values decrypted from SOPS members, and those substituted from Secrets, are withheld
    // (a Secret's are masked already; a decrypted or substituted ConfigMap's, or a server
    // message echoing one, would otherwise show).
    let withhold = |text: String| {
        desired
            .set
            .members
            .iter()
            .fold(text, |text, m| m.withhold_decrypted(text))
    };
    for messages in [&mut counts.failures, &mut counts.forbidden] {
        *messages = std::mem::take(messages).into_iter().map(withhold).collect();
    }
    Ok((withhold(text), counts))
}

/// [`planned`], with a status line on a terminal while it runs when `progress`.
async fn planned_showing(
    engine: &mut SetEngine<'_>,
    desired: &Desired,
    before: &Before,
    progress: bool,
) -> Result<Plan, DiffError> {
    let line = progress.then(Progress::new);
    if let Some(p) = &line {
        let (parent, members) = (&engine.scope().parent, desired.set.members.len());
        p.say(&format!("diff {parent}: planning {members} members ..."));
    }
    let planned = planned(engine, desired, before).await;
    if let Some(p) = &line {
        p.finish();
    }
    planned
}

/// The set's scope: its field manager, acting as its identity (impersonated), listing
/// `page_size` objects a page, and learning which member namespaces are being terminated
/// (with the user's own client, as the operator looks with its own).
fn scope(client: &Client, set: &Set<'_>) -> Result<SetScope, DiffError> {
    let terminating = Arc::new(Terminating::new(client.clone()));
    let mut scope = SetScope::new(set.parent.clone(), client.clone(), set.concurrency)
        .with_page_size(set.page_size)
        .with_terminating(terminating);
    if let Some(user) = set.identity.user() {
        let impersonating = conn::impersonating(client, &user)
            .ok_or_else(|| DiffError::CannotImpersonate(set.identity.clone()))?;
        scope = scope.acting_as(set.identity.clone(), impersonating);
    }
    Ok(scope)
}

/// The operator's plan of the set (Plan mode's code path), with what each dry-run showed;
/// the member namespaces being terminated are looked at first, as the operator's namespace
/// watch would have told it. `spec.timeout` counts from the plan's start, as in a reconcile
/// (the reads before it are not the plan's).
async fn planned(
    engine: &mut SetEngine<'_>,
    desired: &Desired,
    before: &Before,
) -> Result<Plan, DiffError> {
    let who = &engine.scope().identity;
    engine.look_at_namespaces(desired).await;
    let extent = engine.extent(&before.recorded, desired);
    let live = engine
        .observe(&extent, desired)
        .await
        .map_err(|e| DiffError::Api(crate::conn::said(e, who)))?;
    let view = SetView {
        desired,
        extent: &extent,
        live: &live,
    };
    engine.restart_clock();
    engine
        .plan(&view, &before.recorded, true)
        .await
        .map_err(|e| DiffError::Api(crate::conn::said(e, who)))?
        .map_err(|e| DiffError::Unfinished(Box::new(e)))
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
    let refused = match counts.refused {
        0 => String::new(),
        n => format!(", {n} refused"),
    };
    let skipped = match counts.skipped {
        0 => String::new(),
        n => format!(", {n} skipped"),
    };
    format!(
        "# {}: {} to create, {} to change, {} to prune, {} conflicts{refused}, {} unchanged{skipped}; field manager {}, acting as {}{mode}\n",
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
            let change = member_change(r);
            let change = match m.secret_substituted {
                true => masked(change),
                false => change,
            };
            Some((api_version, m.reference.clone(), change))
        })
        .collect()
}

/// `change` with every value masked on both sides ([`mask_all`]): a Secret's value was
/// substituted into it, so the live side may hold the value before the Secret rotated, and
/// any value may be (part of) one.
fn masked(change: Change) -> Change {
    match change {
        Change::Create { mut after } => {
            mask_all(None, after.as_mut());
            Change::Create { after }
        }
        Change::Update {
            mut before,
            mut after,
        } => {
            mask_all(before.as_mut(), after.as_mut());
            Change::Update { before, after }
        }
        Change::Prune { mut before } => {
            mask_all(Some(&mut before), None);
            Change::Prune { before }
        }
        other => other,
    }
}

/// Whether the set takes variables from Secrets: the objects it would prune are then masked
/// ([`masked`]; what was substituted into them when they were applied is not known).
fn substitutes_from_secrets(spec: &ApplySetSpec) -> bool {
    spec.post_build.as_ref().is_some_and(|pb| {
        pb.substitute_from
            .iter()
            .any(|r| r.kind == SubstituteKind::Secret)
    })
}

/// How a member's dry-run shows: its class, with what the dry-run showed of it (server-set
/// metadata left out, see [`shown`]).
fn member_change(r: &MemberResult) -> Change {
    let preview = r.preview.as_deref();
    let after = || preview.map(|p| shown::value(&p.after));
    match r.outcome.class() {
        Class::Create => Change::Create { after: after() },
        Class::Change => Change::Update {
            before: preview.and_then(|p| p.before.as_ref()).map(shown::value),
            after: after(),
        },
        Class::Conflict { message, .. } => Change::Conflict(message.to_string()),
        Class::Refused(reason) => Change::Refused(format!("{}: {reason}", r.reference)),
        Class::Failed { message, forbidden } => Change::Failed {
            message: message.to_string(),
            forbidden,
        },
        Class::Skipped(why) => Change::Skipped(format!("{}: {why}", r.reference)),
        // The classes of a prune candidate are not a member's.
        Class::Unchanged
        | Class::Prune
        | Class::Retained(_)
        | Class::Unfinished { .. }
        | Class::Gone => Change::Unchanged,
    }
}

/// The removals of the members the operator would prune, sorted.
async fn prune_changes(
    engine: &SetEngine<'_>,
    delete: Vec<LiveMember>,
) -> Vec<(String, MemberRef, Change)> {
    let mut pruned = futures::stream::iter(delete)
        .map(|m| async move {
            let change = prune_change(engine, &m).await;
            (m.resource.api_version.clone(), m.reference, change)
        })
        .buffer_unordered(engine.scope().concurrency)
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
                body.push_str(&unified("/dev/null", &new, None, after.as_ref())?);
            }
            Change::Update { before, after } => {
                counts.update += 1;
                let (old, new) = (format!("live/{name}"), format!("merged/{name}"));
                body.push_str(&unified(&old, &new, before.as_ref(), after.as_ref())?);
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
            Change::Refused(why) => {
                counts.refused += 1;
                body.push_str(&format!("# refused {why}\n"));
            }
            Change::Failed { message, forbidden } => {
                counts.failed += 1;
                if *forbidden {
                    counts.forbidden.push(message.clone());
                }
                counts.failures.push(message.clone());
            }
            Change::Skipped(why) => {
                counts.skipped += 1;
                body.push_str(&format!(
                    "# skipped {why}
"
                ));
            }
        }
    }
    Ok((body, counts))
}

/// The removal of a member the operator would prune.
async fn prune_change(engine: &SetEngine<'_>, m: &LiveMember) -> Change {
    match engine.live_object(m).await {
        Ok(Some(live)) => Change::Prune {
            before: shown::object(&live),
        },
        Ok(None) => Change::Unchanged,
        Err(e) => Change::Failed {
            message: format!("{}: reading it: {e}", m.reference),
            forbidden: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_secret_substituted_change_shows_no_value_and_pruned_objects_are_masked_when_secrets_feed_the_set()
     {
        let before = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c"}, "data": {"k": "old", "same": "s"}});
        let after = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c"}, "data": {"k": "new", "same": "s"}});
        let change = masked(Change::Update {
            before: Some(before.clone()),
            after: Some(after),
        });
        let Change::Update {
            before: Some(b),
            after: Some(a),
        } = change
        else {
            panic!("an update: {change:?}");
        };
        assert_eq!(b["data"], json!({"k": "*** (before)", "same": "***"}));
        assert_eq!(a["data"], json!({"k": "*** (after)", "same": "***"}));
        assert_eq!(a["metadata"]["name"], "c");
        let Change::Prune { before: pruned } = masked(Change::Prune { before }) else {
            panic!("a prune");
        };
        assert_eq!(pruned["data"], json!({"k": "***", "same": "***"}));

        let spec = |kind: SubstituteKind| -> ApplySetSpec {
            serde_json::from_value(json!({"postBuild": {"substituteFrom": [
                {"kind": "ConfigMap", "name": "a"}]}}))
            .map(|mut s: ApplySetSpec| {
                if let Some(pb) = s.post_build.as_mut() {
                    pb.substitute_from[0].kind = kind;
                }
                s
            })
            .expect("a spec")
        };
        assert!(substitutes_from_secrets(&spec(SubstituteKind::Secret)));
        assert!(!substitutes_from_secrets(&spec(SubstituteKind::ConfigMap)));
        assert!(!substitutes_from_secrets(&ApplySetSpec::default()));
    }
}

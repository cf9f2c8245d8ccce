//! `convert --from-cluster NS/NAME --handover`: hands the objects of a Flux Kustomization over
//! to its converted set without deleting or re-creating any of them, as the plugin's user
//! (field manager `kubectl-applyset`). The steps, each printed with its result on stderr:
//!
//! 1. read the Kustomization and resolve the kinds of its `status.inventory` (nothing changed
//!    yet: a refused conversion or a field with no equivalent (`--handover` implies
//!    `--strict`), a Kustomization being deleted, applied by another Kustomization (always:
//!    the GitOps flow of docs/migrating-from-flux.md hands those over), not Ready for its
//!    generation or whose last applied revision is not its last attempted one, a revision
//!    that pins nothing, or an inventory that cannot be read stop here); an inventory object
//!    Flux never owned is not waited for (a `note:` says so); warn about the Kustomizations
//!    that depend on it;
//! 2. merge-patch the Kustomization `spec.suspend: true`, `spec.deletionPolicy: Orphan`
//!    (kustomize-controller applies nothing more, and its finalizer deletes nothing: see its
//!    `finalizerShouldDeleteResources`), and wait until kustomize-controller has handled it;
//!    stop if it applied another revision or inventory than step 1 read meanwhile;
//! 3. server-side apply the converted set with its source pinned to the revision Flux applied
//!    (a git commit, an OCI digest: see [`revision`]), so that it applies the values Flux
//!    applied; it adopts the objects and takes over `kustomize-controller`'s fields
//!    (`adoptExisting`, `takeOverFieldManagers`);
//! 4. wait, bounded by `--timeout`, until the set is Ready for its generation and every
//!    inventory object carries the set's part-of label, no field of `kustomize-controller` and
//!    no Flux owner label (an object whose live marks skip it, or with `ssa: Merge`, keeps
//!    them by design: a `note:` says so);
//! 5. delete the Kustomization (with its resourceVersion as precondition, once it is seen
//!    still suspended with `Orphan`) and wait, bounded by `--timeout`, until it is gone (no
//!    object of that name, or one with another UID);
//! 6. server-side apply the set as converted (following its branch or tag again) and wait,
//!    bounded by `--timeout`, until it is Ready for that generation.
//!
//! Any failure stops the handover with an error naming the object and how to go on (run
//! the command again: every step is idempotent) or back (resume the Kustomization). Nothing
//! but the Kustomization is ever deleted.

pub mod checks;
pub mod left;
mod read;
pub mod revision;

use std::time::{Duration, Instant};

use applyset_operator::{
    applyset::ParentRef,
    convert::{Conversion, Converted, FluxRef, Set, Severity},
    discovery::Resolved,
    parent::Parent,
};
use kube::{
    Api, Client, ResourceExt,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
        Preconditions,
    },
};
use serde_json::Value;

use crate::{conn, progress::Progress, sets::FIELD_MANAGER};
use checks::{Exempt, InventoryError, InventoryId, SetState};
pub use left::{AppliedSet, Left};

/// How often the waits read the set, the inventory objects and the Kustomization.
const POLL: Duration = Duration::from_secs(2);

/// Inventory objects named in a timeout's message (the rest are counted).
const NAMED: usize = 5;

/// The handover's options.
#[derive(Clone, Debug)]
pub struct Options {
    /// Bound of each wait (the set's handover, the Kustomization's deletion, the set's
    /// return to its branch or tag).
    pub timeout: Duration,
}

/// Why a handover stopped.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    /// The conversion refused the Kustomization, or gave it no set.
    #[error("{kustomization} not handed over: {why}; {left}")]
    Refused {
        kustomization: FluxRef,
        why: String,
        left: Box<Left>,
    },
    /// Flux has not applied the values it was last asked to.
    #[error("{kustomization} not handed over: {error}; {left}")]
    NotApplied {
        kustomization: FluxRef,
        #[source]
        error: Box<revision::NotApplied>,
        left: Box<Left>,
    },
    /// The revision Flux applied pins nothing.
    #[error("{kustomization} not handed over: {error}; {left}")]
    Pin {
        kustomization: FluxRef,
        #[source]
        error: Box<revision::PinError>,
        left: Box<Left>,
    },
    /// An object could not be encoded as JSON (nothing is sent).
    #[error("encoding {what} as JSON: {error}; {left}")]
    Encode {
        what: String,
        #[source]
        error: serde_json::Error,
        left: Box<Left>,
    },
    /// Its inventory cannot be read.
    #[error("{kustomization}: {error}; {left}")]
    Inventory {
        kustomization: FluxRef,
        #[source]
        error: InventoryError,
        left: Box<Left>,
    },
    /// A request failed: what it was doing.
    #[error("{doing}: {error}; {left}")]
    Api {
        doing: String,
        #[source]
        error: kube::Error,
        left: Box<Left>,
    },
    /// A wait ran out: what it waited for, and what was still missing.
    #[error("{what} within {timeout:?}: {missing}; {left}")]
    Timeout {
        what: String,
        timeout: Duration,
        missing: String,
        left: Box<Left>,
    },
    /// Flux applied another revision before it saw the suspension.
    #[error(
        "{kustomization} not handed over: Flux applied a new revision while being suspended ({what}): run the command again; {left}"
    )]
    Moved {
        kustomization: FluxRef,
        what: String,
        left: Box<Left>,
    },
    /// The Kustomization is no longer safe to delete (resumed, or its policy changed).
    #[error("{kustomization} not deleted: {why}; {left}")]
    Unsafe {
        kustomization: FluxRef,
        why: String,
        left: Box<Left>,
    },
}

impl From<HandoverError> for crate::error::CliError {
    fn from(e: HandoverError) -> Self {
        crate::error::CliError::Handover(Box::new(e))
    }
}

/// `convert`'s handover flags (flattened into the command).
#[derive(clap::Args, Debug, Clone)]
pub struct HandoverArgs {
    /// Hand the objects of the Kustomization named by --from-cluster NAMESPACE/NAME over to
    /// its converted set, deleting nothing but the Kustomization: suspend it (with
    /// deletionPolicy: Orphan), apply the set pinned to the revision Flux applied, wait until
    /// the set is Ready and holds every object of the Kustomization's inventory alone, delete
    /// the Kustomization, then apply the set as converted. Implies --strict.
    #[arg(long, requires = "from_cluster")]
    pub handover: bool,
    /// With --handover: how long each wait may take (the set's take-over, the Kustomization's
    /// removal, the set's return to its branch or tag), e.g. 90s, 5m.
    #[arg(long, default_value = "5m", value_parser = crate::parse_timeout, requires = "handover")]
    pub timeout: Duration,
}

/// `convert --from-cluster FROM --handover` after the conversion: `from` must name one
/// Kustomization (`NAMESPACE/NAME`); hands it over (see [`run`]); exit code 0 once done.
pub async fn after_convert(
    client: &Client,
    from: &str,
    args: &HandoverArgs,
    conversion: &Conversion,
) -> Result<u8, crate::error::CliError> {
    let Some((namespace, name)) = from
        .split_once('/')
        .filter(|(ns, n)| !ns.is_empty() && !n.is_empty() && !n.contains('/'))
    else {
        return Err(crate::error::CliError::Usage(format!(
            "--handover needs --from-cluster NAMESPACE/NAME (one Kustomization), not {from:?}"
        )));
    };
    let from = FluxRef {
        kind: "Kustomization".into(),
        namespace: namespace.into(),
        name: name.into(),
    };
    // --handover implies --strict: `run` refuses a field with no equivalent.
    let opts = Options {
        timeout: args.timeout,
    };
    run(client, &from, conversion, &opts).await?;
    Ok(0)
}

/// The Kustomization's API resource (kustomize.toolkit.fluxcd.io/v1).
pub fn kustomization_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
        "kustomizations",
    )
}

/// The set converted from `from`, unless the conversion refused it (a note of severity
/// Refused about it or its source), made none, or (`strict`, which the handover always is)
/// dropped a field of it.
pub fn chosen<'a>(
    conversion: &'a Conversion,
    from: &FluxRef,
    strict: bool,
) -> Result<&'a Converted, HandoverError> {
    let refuse = |why: String| HandoverError::Refused {
        kustomization: from.clone(),
        why,
        left: Box::new(Left::Unchanged),
    };
    let set = conversion.sets.iter().find(|c| &c.from == from);
    let about = |n: &&applyset_operator::convert::Note| {
        &n.object == from || set.is_some_and(|s| n.object == s.source)
    };
    let notes: Vec<_> = conversion.notes.iter().filter(about).collect();
    if let Some(n) = notes.iter().find(|n| n.severity == Severity::Refused) {
        return Err(refuse(format!("the conversion refused it: {n}")));
    }
    if strict && let Some(n) = notes.iter().find(|n| n.severity == Severity::Dropped) {
        return Err(refuse(format!(
            "a field has no equivalent (--handover implies --strict): {n}"
        )));
    }
    let set = set.ok_or_else(|| refuse("the conversion made no set of it".into()))?;
    let suspended = match &set.set {
        Set::Namespaced(s) => s.spec.suspend,
        Set::Cluster(s) => s.spec.0.suspend,
    };
    if suspended {
        return Err(refuse(
            "it was suspended (spec.suspend: true), so its set would be too and would never take the objects over; resume it first (`flux resume kustomization`)".into(),
        ));
    }
    Ok(set)
}

/// Hands `from` over to its set in `conversion` (see the module's contract).
pub async fn run(
    client: &Client,
    from: &FluxRef,
    conversion: &Conversion,
    opts: &Options,
) -> Result<(), HandoverError> {
    read::refuse_applied_by_parent(client, from).await?;
    let converted = chosen(conversion, from, true)?;
    let source = converted.source.kind.as_str();
    match &converted.set {
        Set::Namespaced(set) => Handover::new(client, from, set, opts, source).run().await,
        Set::Cluster(set) => Handover::new(client, from, set, opts, source).run().await,
    }
}

/// One handover in progress.
struct Handover<'a, P: Parent> {
    client: &'a Client,
    from: &'a FluxRef,
    set: &'a P,
    parent: ParentRef,
    /// `applyset/NAME` or `clusterapplyset/NAME`.
    shown: String,
    opts: &'a Options,
    kustomizations: Api<DynamicObject>,
    /// The kind of the Kustomization's source (`GitRepository`, `OCIRepository`, ...).
    source_kind: &'a str,
}

impl<'a, P: Parent> Handover<'a, P> {
    fn new(
        client: &'a Client,
        from: &'a FluxRef,
        set: &'a P,
        opts: &'a Options,
        source_kind: &'a str,
    ) -> Self {
        let mut parent = set.parent_ref();
        if parent.namespace.is_none() && P::KIND.is_namespaced() {
            parent.namespace = Some(from.namespace.clone());
        }
        let kustomizations =
            Api::namespaced_with(client.clone(), &from.namespace, &kustomization_resource());
        Handover {
            client,
            from,
            set,
            shown: conn::set_name(&parent),
            parent,
            opts,
            kustomizations,
            source_kind,
        }
    }

    async fn run(&self) -> Result<(), HandoverError> {
        eprintln!("handover of {} to {}:", self.from, self.shown);
        let converted = self.body(&Left::Unchanged)?;
        let read = self.read(&converted).await?;
        self.warn_dependents().await;
        let sources = converted
            .pointer("/spec/sources")
            .map(|s| {
                serde_json::to_string(s)
                    .map_err(self.encode_error("the set's sources", &Left::Unchanged))
            })
            .transpose()?
            .unwrap_or_else(|| "[]".into());
        let applied = self.applied_set();
        let mut left = Left::Suspended {
            kustomization: self.from.clone(),
            original: checks::original(&read.kustomization),
            set: None,
        };
        self.suspend(&read.kustomization, &left).await?;
        let generation = self.apply(&read.pinned, &left).await?;
        eprintln!(
            "[3/6] applied {} with its source pinned to the revision Flux applied (server-side, field manager {FIELD_MANAGER}; generation {})",
            self.shown,
            generation.unwrap_or_default()
        );
        if let Left::Suspended { set, .. } = &mut left {
            *set = Some(applied.clone());
        }
        eprintln!(
            "[4/6] waiting (at most {:?}) until {} is Ready and holds the {} objects alone ...",
            self.opts.timeout,
            self.shown,
            read.objects.len()
        );
        let exempt = self
            .wait_handed_over(generation, &read.objects, &left)
            .await?;
        for (object, why) in &exempt {
            eprintln!("note: {object} {why}");
        }
        let deleting = Left::Deleting {
            kustomization: self.from.clone(),
            set: applied.clone(),
            sources: sources.clone(),
        };
        self.delete(&left, &deleting).await?;
        let left = Left::Pinned {
            set: applied,
            sources,
        };
        self.follow_again(&converted, &read, &left).await
    }

    /// Step 6: the set applied as converted, Ready for that generation; the final line says
    /// whether it applied the revision Flux had applied or a newer one.
    async fn follow_again(
        &self,
        converted: &Value,
        read: &read::Read,
        left: &Left,
    ) -> Result<(), HandoverError> {
        let generation = self.apply(converted, left).await?;
        eprintln!(
            "[6/6] applied {} as converted, following its branch or tag again (generation {}); waiting until it is Ready ...",
            self.shown,
            generation.unwrap_or_default()
        );
        self.wait_handed_over(generation, &[], left).await?;
        let api = P::api(self.client.clone(), self.parent.namespace.as_deref());
        let doing = format!("reading {}", self.shown);
        let set = api.get_opt(&self.parent.name).await;
        let set = set.map_err(self.api_error(doing, left))?;
        let now = set
            .as_ref()
            .and_then(|s| s.status())
            .and_then(|s| s.last_applied_revision.clone())
            .unwrap_or_default();
        let count = read.objects.len();
        if !now.is_empty() && revision::moved_on(&now, &read.pin) {
            eprintln!(
                "handover done: {} holds the {count} objects of {}; the set now follows {} at {} (Flux had applied {}): what changed between them was applied",
                self.shown,
                self.from,
                revision::followed(converted),
                revision::source_part(&now, &read.pin),
                read.revision
            );
        } else {
            eprintln!(
                "handover done: {} holds the {count} objects of {}; nothing was deleted but the Kustomization",
                self.shown, self.from
            );
        }
        Ok(())
    }

    /// How kubectl names the set.
    fn applied_set(&self) -> AppliedSet {
        let kubectl = match &self.parent.namespace {
            Some(ns) if P::KIND.is_namespaced() => {
                format!("applysets.applyset.dev {} -n {ns}", self.parent.name)
            }
            _ => format!("clusterapplysets.applyset.dev {}", self.parent.name),
        };
        AppliedSet {
            shown: self.shown.clone(),
            kubectl,
        }
    }

    fn encode_error(
        &self,
        what: &str,
        left: &Left,
    ) -> impl FnOnce(serde_json::Error) -> HandoverError {
        let (what, left) = (what.to_owned(), Box::new(left.clone()));
        move |error| HandoverError::Encode { what, error, left }
    }

    /// Warns about the Kustomizations whose `spec.dependsOn` names this one (all namespaces).
    async fn warn_dependents(&self) {
        match applyset_operator::convert::cluster::all_kustomizations(self.client).await {
            Ok(listed) => {
                let dependents = checks::dependents(&listed, self.from);
                if !dependents.is_empty() {
                    eprintln!(
                        "warning: the Kustomizations {} depend on {} (spec.dependsOn): once it is deleted they report DependencyNotReady and apply nothing until they are handed over too; hand over in dependency order, dependencies first",
                        dependents.join(", "),
                        self.from
                    );
                }
            }
            Err(e) => eprintln!(
                "warning: could not check which Kustomizations depend on {} ({e}); any that do (spec.dependsOn) report DependencyNotReady once it is deleted and apply nothing until they are handed over too",
                self.from
            ),
        }
    }

    fn api_error(&self, doing: String, left: &Left) -> impl FnOnce(kube::Error) -> HandoverError {
        let left = Box::new(left.clone());
        move |error| HandoverError::Api { doing, error, left }
    }

    /// Step 2: `spec.suspend: true`, `spec.deletionPolicy: Orphan`, then, bounded by
    /// `--timeout`, until kustomize-controller has handled a reconcile of the suspended
    /// Kustomization (so that none of its applies is still in flight when the set applies).
    async fn suspend(&self, kustomization: &Value, left: &Left) -> Result<(), HandoverError> {
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let token = format!(
            "applyset-handover-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        );
        let patch = checks::suspend_patch(kustomization, &token)
            .map_err(self.encode_error("the suspension's patch", &Left::Unchanged))?;
        let doing = format!("suspending {}", self.from);
        self.kustomizations
            .patch(&self.from.name, &params, &Patch::Merge(&patch))
            .await
            .map_err(self.api_error(doing, &Left::Unchanged))?;
        eprintln!(
            "[2/6] suspended {}: spec.suspend: true, spec.deletionPolicy: Orphan; waiting until kustomize-controller has seen it ...",
            self.from
        );
        let deadline = Instant::now() + self.opts.timeout;
        loop {
            let doing = format!("reading {}", self.from);
            let live = self.kustomizations.get(&self.from.name).await;
            let live = live.map_err(self.api_error(doing, left))?;
            let live = serde_json::to_value(&live)
                .map_err(self.encode_error(&self.from.to_string(), left))?;
            if checks::acknowledged(&live, &token) {
                if let Some(what) = checks::applied_since(kustomization, &live) {
                    return Err(HandoverError::Moved {
                        kustomization: self.from.clone(),
                        what,
                        left: Box::new(left.clone()),
                    });
                }
                eprintln!(
                    "      kustomize-controller handled the suspended {} (status.lastHandledReconcileAt): it applies and deletes nothing more",
                    self.from
                );
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(HandoverError::Timeout {
                    what: format!(
                        "kustomize-controller did not acknowledge the suspension of {} (check that it runs and watches this namespace)",
                        self.from
                    ),
                    timeout: self.opts.timeout,
                    missing: format!("status.lastHandledReconcileAt is not yet {token}"),
                    left: Box::new(left.clone()),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The converted set's body for a server-side apply.
    fn body(&self, left: &Left) -> Result<Value, HandoverError> {
        let mut body =
            serde_json::to_value(self.set).map_err(self.encode_error(&self.shown, left))?;
        if let Some(o) = body.as_object_mut() {
            o.remove("status");
            o.insert("apiVersion".into(), P::api_version(&()).into());
            o.insert("kind".into(), P::kind(&()).into());
        }
        if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in [
                "managedFields",
                "resourceVersion",
                "uid",
                "creationTimestamp",
                "generation",
            ] {
                meta.remove(k);
            }
            if P::KIND.is_namespaced() {
                meta.insert("namespace".into(), self.from.namespace.clone().into());
            }
        }
        Ok(body)
    }

    /// Steps 3 and 6: the set's `body`, server-side applied as the plugin; its generation.
    async fn apply(&self, body: &Value, left: &Left) -> Result<Option<i64>, HandoverError> {
        let api = P::api(self.client.clone(), self.parent.namespace.as_deref());
        let doing = format!("applying {}", self.shown);
        let applied = api
            .patch(
                &self.parent.name,
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Apply(body),
            )
            .await
            .map_err(self.api_error(doing, left))?;
        Ok(applied.meta().generation)
    }

    /// Steps 4 and 6: until the set is Ready for `generation` and holds every inventory object
    /// alone (but those exempt, returned with why).
    async fn wait_handed_over(
        &self,
        generation: Option<i64>,
        objects: &[(InventoryId, Resolved)],
        left: &Left,
    ) -> Result<Vec<(String, Exempt)>, HandoverError> {
        let progress = Progress::new();
        let deadline = Instant::now() + self.opts.timeout;
        let api = P::api(self.client.clone(), self.parent.namespace.as_deref());
        let id = self.parent.id();
        loop {
            let doing = format!("reading {}", self.shown);
            let set = api.get_opt(&self.parent.name).await;
            let set = set.map_err(self.api_error(doing, left))?;
            let state = match &set {
                Some(s) => checks::set_state(s.status(), generation),
                None => SetState::NotYet("it does not exist (deleted meanwhile?)".into()),
            };
            let (missing, exempt) = self.missing(objects, &id, left).await?;
            if state == SetState::Ready && missing.is_empty() {
                progress.finish();
                let but = if exempt.is_empty() {
                    ""
                } else {
                    " (but those noted)"
                };
                match objects.len() {
                    0 => eprintln!("      {} is Ready", self.shown),
                    n => eprintln!(
                        "      {} is Ready; the {n} objects carry its label, no field of {} and no Flux label{but}",
                        self.shown,
                        checks::FLUX_MANAGER
                    ),
                }
                return Ok(exempt);
            }
            let what = describe(&self.shown, &state, &missing);
            if Instant::now() >= deadline {
                progress.finish();
                return Err(HandoverError::Timeout {
                    what: if objects.is_empty() {
                        format!("{} did not become Ready", self.shown)
                    } else {
                        format!(
                            "{} did not take over the objects of {}",
                            self.shown, self.from
                        )
                    },
                    timeout: self.opts.timeout,
                    missing: what,
                    left: Box::new(left.clone()),
                });
            }
            progress.say(&what);
            tokio::time::sleep(POLL).await;
        }
    }

    /// The inventory objects not handed over yet, with what each lacks, and those exempt (by
    /// a metadata-only GET of each: only labels, annotations and managedFields are checked).
    async fn missing(
        &self,
        objects: &[(InventoryId, Resolved)],
        set_id: &str,
        left: &Left,
    ) -> Result<Missing, HandoverError> {
        let (mut out, mut exempt) = (Vec::new(), Vec::new());
        for (id, resolved) in objects {
            let live = self.metadata(id, resolved, left).await?;
            let meta = live.as_ref();
            if let Some(why) = meta.and_then(checks::exempt) {
                exempt.push((id.to_string(), why));
            }
            let pending = checks::pending(meta, set_id);
            if !pending.is_empty() {
                out.push((id.to_string(), pending));
            }
        }
        Ok((out, exempt))
    }

    /// Step 5: the Kustomization deleted, once seen suspended with Orphan, and gone (`left`
    /// before the deletion, `deleting` after).
    async fn delete(&self, left: &Left, deleting: &Left) -> Result<(), HandoverError> {
        let doing = format!("reading {}", self.from);
        let live = self.kustomizations.get_opt(&self.from.name).await;
        let live = live.map_err(self.api_error(doing, left))?;
        let uid = live.as_ref().and_then(ResourceExt::uid);
        if let Some(live) = live {
            let value = serde_json::to_value(&live)
                .map_err(self.encode_error(&self.from.to_string(), left))?;
            if let Some(why) = checks::safe_to_delete(&value) {
                return Err(HandoverError::Unsafe {
                    kustomization: self.from.clone(),
                    why,
                    left: Box::new(left.clone()),
                });
            }
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: live.resource_version(),
                    uid: live.uid(),
                }),
                ..DeleteParams::default()
            };
            let doing = format!(
                "deleting {} (it changed meanwhile: run the command again)",
                self.from
            );
            self.kustomizations
                .delete(&self.from.name, &params)
                .await
                .map_err(self.api_error(doing, left))?;
        }
        eprintln!(
            "[5/6] deleted {} (suspended, deletionPolicy: Orphan: its finalizer deletes nothing); waiting until it is gone ...",
            self.from
        );
        self.wait_gone(uid.as_deref(), deleting).await
    }

    /// Until the Kustomization of UID `uid` is gone (kustomize-controller removed its
    /// finalizer): no object of its name, or one with another UID (created again since).
    async fn wait_gone(&self, uid: Option<&str>, left: &Left) -> Result<(), HandoverError> {
        let deadline = Instant::now() + self.opts.timeout;
        loop {
            let doing = format!("reading {}", self.from);
            let live = self.kustomizations.get_opt(&self.from.name).await;
            let live = live.map_err(self.api_error(doing, left))?;
            let Some(live) = live.filter(|l| uid.is_some() && l.uid().as_deref() == uid) else {
                eprintln!("      {} is gone", self.from);
                return Ok(());
            };
            if Instant::now() >= deadline {
                return Err(HandoverError::Timeout {
                    what: format!("{} was not removed", self.from),
                    timeout: self.opts.timeout,
                    missing: format!("finalizers {:?}", live.finalizers()),
                    left: Box::new(left.clone()),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// The objects not handed over yet (with what each lacks), and those exempt (with why).
type Missing = (Vec<(String, Vec<checks::Pending>)>, Vec<(String, Exempt)>);

/// What a wait still waits for: the set's state and the first [`NAMED`] objects not handed
/// over (the rest counted).
fn describe(set: &str, state: &SetState, missing: &[(String, Vec<checks::Pending>)]) -> String {
    let mut parts = Vec::new();
    if let SetState::NotYet(why) = state {
        parts.push(format!("{set} is not Ready: {why}"));
    }
    for (object, pending) in missing.iter().take(NAMED) {
        let what: Vec<String> = pending.iter().map(ToString::to_string).collect();
        parts.push(format!("{object} {}", what.join(", ")));
    }
    if missing.len() > NAMED {
        parts.push(format!("and {} more objects", missing.len() - NAMED));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use applyset_operator::{
        api::ApplySet,
        convert::{Note, Set},
    };

    fn flux(kind: &str, name: &str) -> FluxRef {
        FluxRef {
            kind: kind.into(),
            namespace: "team".into(),
            name: name.into(),
        }
    }

    fn note(object: FluxRef, severity: Severity) -> Note {
        Note {
            object,
            field: "spec.x".into(),
            severity,
            why: "because".into(),
        }
    }

    fn conversion(notes: Vec<Note>) -> Conversion {
        let set = ApplySet::new("web", Default::default());
        Conversion {
            sets: vec![Converted {
                from: flux("Kustomization", "web"),
                source: flux("GitRepository", "repo"),
                set: Set::Namespaced(set),
            }],
            notes,
        }
    }

    #[test]
    fn the_set_is_chosen_unless_refused_or_strict_with_a_dropped_field() {
        let web = flux("Kustomization", "web");
        let c = conversion(vec![note(web.clone(), Severity::Info)]);
        assert!(chosen(&c, &web, true).is_ok());
        let c = conversion(vec![note(web.clone(), Severity::Dropped)]);
        assert!(chosen(&c, &web, false).is_ok());
        let e = chosen(&c, &web, true).expect_err("strict");
        assert!(e.to_string().contains("--strict"), "{e}");
        // A refusal about its source refuses it.
        let c = conversion(vec![note(flux("GitRepository", "repo"), Severity::Refused)]);
        let e = chosen(&c, &web, false).expect_err("refused");
        assert!(e.to_string().ends_with("nothing was changed"), "{e}");
        // Notes about other Kustomizations do not matter; a Kustomization without a set is refused.
        let c = conversion(vec![note(
            flux("Kustomization", "other"),
            Severity::Refused,
        )]);
        assert!(chosen(&c, &web, true).is_ok());
        let e = chosen(&c, &flux("Kustomization", "other"), false).expect_err("none");
        assert!(e.to_string().contains("refused"), "{e}");
        let e = chosen(&c, &flux("Kustomization", "third"), false).expect_err("none");
        assert!(e.to_string().contains("made no set"), "{e}");
        // A suspended set would never take over: refused.
        let mut c = conversion(vec![]);
        if let Set::Namespaced(s) = &mut c.sets[0].set {
            s.spec.suspend = true;
        }
        let e = chosen(&c, &web, false).expect_err("suspended");
        assert!(e.to_string().contains("flux resume kustomization"), "{e}");
    }

    #[test]
    fn a_wait_names_the_first_objects_and_counts_the_rest() {
        let missing: Vec<_> = (0..7)
            .map(|i| {
                (
                    format!("ConfigMap team/c{i}"),
                    vec![checks::Pending::NotPartOf],
                )
            })
            .collect();
        let text = describe(
            "applyset/web",
            &SetState::NotYet("Ready=False".into()),
            &missing,
        );
        assert!(
            text.starts_with("applyset/web is not Ready: Ready=False; ConfigMap team/c0 "),
            "{text}"
        );
        assert!(text.contains("ConfigMap team/c4"), "{text}");
        assert!(!text.contains("ConfigMap team/c5"), "{text}");
        assert!(text.ends_with("and 2 more objects"), "{text}");
        assert_eq!(describe("s", &SetState::Ready, &[]), "");
    }
}

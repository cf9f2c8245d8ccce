//! [`SetEngine`]: the one API for one set. Its methods are the reconcile's verbs, in the
//! order they run — observe ([`SetEngine::extent`], [`SetEngine::observe`]), plan (a dry run:
//! [`SetEngine::plan`]), apply ([`SetEngine::apply`]), prune ([`SetEngine::decide_prune`],
//! [`SetEngine::prune`]) — plus what views read ([`SetEngine::members`], the paged listing of
//! whole objects, and [`SetEngine::look_at_namespaces`] for a run without the operator's
//! namespace watch). Every verb acts with the scope's client, under the scope's field manager,
//! within `spec.timeout` from the engine's clock, and answers in one vocabulary
//! ([`MemberResult`], classified once by [`super::class`]). The reconcile, `kubectl applyset
//! diff` and `tree`, and the tests go through it.

use std::{collections::BTreeSet, time::Instant};

use futures::StreamExt;
use kube::{Api, api::DynamicObject};

use super::{
    Extent, SetScope, adopt, apply,
    live::{self, Detail, Listed, Live, LiveMember, Unscoped},
    outcome::MemberResult,
    plan::{Before, Clock, Desired, Plan, Pruning, Run, TimedOut, empty_set_refused},
    prune::{self, Keep, Listing, Selection},
};
use crate::{
    Error, Result,
    api::ApplySetSpec,
    applyset::ConventionError,
    discovery::Resolver,
    parent::{AnyParent, Recorded},
};

/// One set's engine: who acts ([`SetScope`]), how kinds resolve, what the spec asks, and the
/// reconcile's clock.
pub struct SetEngine<'a> {
    scope: &'a SetScope,
    resolver: &'a Resolver,
    spec: &'a ApplySetSpec,
    clock: Clock,
}

/// What the engine knows of its set once observed: what is declared, over which extent, and
/// what is live.
#[derive(Clone, Copy)]
pub struct SetView<'a> {
    pub desired: &'a Desired,
    pub extent: &'a Extent,
    pub live: &'a Live,
}

impl<'a> SetEngine<'a> {
    /// The engine of `scope`'s set as `spec` declares it; its clock starts now.
    pub fn new(scope: &'a SetScope, resolver: &'a Resolver, spec: &'a ApplySetSpec) -> Self {
        SetEngine {
            scope,
            resolver,
            spec,
            clock: Clock::start(spec),
        }
    }

    /// Starts the clock again (`spec.timeout` from now): the reconcile's work begins.
    pub fn restart_clock(&mut self) {
        self.clock = Clock::start(self.spec);
    }

    pub fn scope(&self) -> &'a SetScope {
        self.scope
    }

    /// What the live parent recorded (see [`super::plan::before`]); nothing for a parent
    /// that does not exist. The inner error: its annotations are malformed.
    pub async fn recorded(
        &self,
        parent: Option<&AnyParent>,
    ) -> Result<std::result::Result<Before, ConventionError>> {
        match parent {
            None => Ok(Ok(Before::default())),
            Some(p) => super::plan::before(p.meta(), p.status(), self.resolver).await,
        }
    }

    /// The reconcile's extent: what the parent recorded before, and what is declared now.
    pub fn extent(&self, before: &Recorded, desired: &Desired) -> Extent {
        let namespace = self.scope.parent.namespace.as_deref();
        Extent::new(namespace, before, desired.recorded())
    }

    /// What of the set is live over `extent` (see [`live::observe`]). Reads touch no member.
    pub async fn observe(&self, extent: &Extent, desired: &Desired) -> Result<Live> {
        let (known, declared) = (&desired.known, &desired.declared);
        live::observe(self.scope, self.resolver, extent, known, declared).await
    }

    /// Applies the members, staged and concurrently, within `spec.timeout`.
    pub async fn apply(
        &self,
        view: &SetView<'_>,
    ) -> Result<std::result::Result<Vec<MemberResult>, TimedOut>> {
        self.run(view, Run::Apply).await
    }

    /// Plans the set, writing nothing: every member dry-run with server-side apply as the set
    /// would apply it (within spec.timeout), then — unless the empty-set guard refuses it
    /// (`before`: what the parent recorded) or prune is off — the prune decision, keeping
    /// what the dry-run found (decided even when a member would fail, so that a diff shows
    /// it; Plan mode reports the failure instead). `preview`: keep what the dry-run showed of
    /// each member.
    pub async fn plan(
        &self,
        view: &SetView<'_>,
        before: &Recorded,
        preview: bool,
    ) -> Result<std::result::Result<Plan, TimedOut>> {
        let members = match self.run(view, Run::DryRun { preview }).await? {
            Ok(members) => members,
            Err(timed_out) => return Ok(Err(timed_out)),
        };
        let spec = self.spec;
        let prune = if empty_set_refused(spec, view.desired.set.members.is_empty(), before) {
            Pruning::EmptySetRefused
        } else if !spec.prune {
            Pruning::Off
        } else {
            match self.decide_prune(view, &members, Listing::Earlier).await {
                Ok(selection) => Pruning::Decided(selection),
                Err(e) => Pruning::Undecided(e),
            }
        };
        Ok(Ok(Plan { members, prune }))
    }

    /// What to prune, keeping the declared members and what `applied` just wrote (see
    /// [`prune::decide`] for `listing`).
    pub async fn decide_prune(
        &self,
        view: &SetView<'_>,
        applied: &[MemberResult],
        listing: Listing,
    ) -> Result<Selection> {
        let keep = Keep::new(&view.desired.known, &view.desired.declared, applied);
        let (scope, resolver) = (self.scope, self.resolver);
        prune::decide(scope, resolver, view.extent, &keep, view.live, listing).await
    }

    /// Carries out a prune decision (see [`prune::prune`]).
    pub async fn prune(&self, selection: Selection) -> Vec<MemberResult> {
        prune::prune(self.scope, selection).await
    }

    /// The set's live members as whole objects, for views: every object labelled with its
    /// ID in the kinds and namespaces `recorded` (with the parent's own namespace), listed
    /// page by page, a 404 settled by a fresh discovery as the reconcile's listing does.
    pub async fn members(&self, recorded: &Recorded) -> Result<Vec<LiveMember>> {
        let namespace = self.scope.parent.effective_namespace();
        let namespaces = crate::applyset::prune_namespaces(namespace, &recorded.namespaces);
        let listed = Listed {
            kinds: &recorded.group_kinds,
            namespaces: &namespaces,
            unscoped: Unscoped::Refuse,
        };
        let known = Default::default();
        live::list_in(self.scope, self.resolver, &known, listed, Detail::Objects).await
    }

    /// A member's live object now (one GET), `None` when it is gone: what a view shows of a
    /// candidate the plan would prune.
    pub async fn live_object(&self, member: &LiveMember) -> kube::Result<Option<DynamicObject>> {
        let namespace = member.reference.namespace.as_deref();
        let api: Api<DynamicObject> =
            crate::discovery::api_in(&self.scope.client, namespace, &member.resource);
        api.get_opt(&member.reference.name).await
    }

    /// Looks at each namespace `desired` puts members in (one metadata GET each, through the
    /// scope's [`crate::terminating::Terminating`]), so that a plan refuses the members of one
    /// being terminated as the operator would: for a run without the operator's namespace
    /// watch (`kubectl applyset diff`). Nothing without a `Terminating` in the scope.
    pub async fn look_at_namespaces(&self, desired: &Desired) {
        let Some(terminating) = self.scope.terminating() else {
            return;
        };
        let namespaces: BTreeSet<&str> = desired
            .set
            .members
            .iter()
            .filter_map(|m| m.reference.namespace.as_deref())
            .collect();
        futures::stream::iter(namespaces)
            .map(|ns| terminating.confirms(ns))
            .buffer_unordered(self.scope.concurrency)
            .collect::<Vec<bool>>()
            .await;
    }

    /// Applies (or dry-runs) the members within spec.timeout, after looking up which members
    /// exist unlabelled (they are adopted only if allowed). The outer `Result` is I/O of the
    /// lookup.
    async fn run(
        &self,
        view: &SetView<'_>,
        run: Run,
    ) -> Result<std::result::Result<Vec<MemberResult>, TimedOut>> {
        let (scope, spec, clock, live) = (self.scope, self.spec, &self.clock, view.live);
        let members = &view.desired.set.members;
        let dry_run = run != Run::Apply;
        let applying = async {
            // A plan looks at what exists first; an apply creates what is absent without a
            // look (see engine::create) and looks only at what exists.
            let lookup = match dry_run {
                true => adopt::unlabelled(scope, members, &live.owned).await?,
                false => adopt::Lookup::default(),
            };
            let opts = apply::Options {
                force: spec.force,
                dry_run,
                existing: &live.existing,
                started: clock.epoch,
                deadline: clock.deadline,
                lookup: &lookup,
                adopt_existing: spec.adopt_existing,
                take_over: &spec.take_over_field_managers,
                preview: run == Run::DryRun { preview: true },
                create_only: (!dry_run).then_some(&live.owned),
            };
            Ok::<_, Error>(apply::apply_staged(scope, members, &opts).await)
        };
        let remaining = clock.deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(remaining, applying).await {
            Ok(results) => Ok(Ok(results?)),
            Err(_) => Ok(Err(TimedOut {
                timeout: spec.timeout(),
            })),
        }
    }
}

//! `--shards auto` in the controllers: a replica reconciles only the sets it owns now
//! ([`owns`]); every write of a parent's metadata is conditional on the resourceVersion it
//! was read at and carries the owner and epoch ([`write_parent`]: the first one claims the
//! set); a member is written only once the reconcile proved its claim (a conditional write
//! of the parent, or the fence: [`fence`]); a deletion claims by a JSON patch
//! ([`claim_to_delete`]); before it deletes anything of a set, a replica proves it still
//! holds its claim ([`check`]). The rules are [`crate::shard::fence`]'s.

use std::{sync::Arc, time::Duration};

use futures::{FutureExt, StreamExt, stream::BoxStream};
use kube::{
    Client,
    api::{Patch, PatchParams},
};

use super::Context;
use crate::{
    Error, Result,
    api::{ApplySet, ClusterApplySet},
    applyset::{ParentKind, ParentRef},
    engine::{SetScope, live::Live},
    metrics::Metrics,
    parent::{self, Parent, Recorded, Shrink},
    shard::{
        ANNOTATION_EPOCH, ANNOTATION_OWNER, FirstWrite, LABEL_BUCKET, assign,
        fence::{AfterRefusal, Fence, Owner, after_refusal, check_patch, claim_patch},
    },
};

/// The field manager of the claims (the owner and epoch annotations of a parent).
pub const CLAIM_FIELD_MANAGER: &str = "applyset.dev/shard";

/// A fenced reconcile (its claim lost to another write, or taken since by another replica)
/// comes back after this: by then the parent's next version is in the cache.
pub(super) const FENCED_RETRY: Duration = Duration::from_secs(1);

/// Changes of this replica's buckets within this long are taken as one (a replica starting
/// sees its first list of the Leases, then the stale ones expire; a rollout moves several).
const SETTLE: Duration = Duration::from_millis(300);

/// A parent write refused for a stale resourceVersion is tried again (after reading the
/// parent) at most this many times in all.
const WRITE_ATTEMPTS: usize = 3;

/// Follows this replica's assignment: its member watches select its buckets. Never ends
/// (pending without sharding).
pub(super) async fn follow(ctx: Arc<Context>) {
    let Some(shards) = &ctx.config.shards else {
        return std::future::pending().await;
    };
    let mut rx = shards.assignment.clone();
    while rx.changed().await.is_ok() {
        tokio::time::sleep(SETTLE).await;
        let mine = rx.borrow_and_update().mine.clone();
        ctx.members.use_buckets(&mine);
    }
    std::future::pending().await
}

/// A tick at every change of this replica's buckets (changes within [`SETTLE`] as one): the
/// parent watches start again, and their lists cache and reconcile the sets it owns now
/// (the ones gained start; the ones lost are forgotten). Never ticks without sharding.
pub(super) fn assignment_changes(ctx: &Context) -> BoxStream<'static, ()> {
    let Some(shards) = &ctx.config.shards else {
        return futures::stream::pending().boxed();
    };
    let rx = shards.assignment.clone();
    futures::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        tokio::time::sleep(SETTLE).await;
        rx.borrow_and_update();
        Some(((), rx))
    })
    .boxed()
}

/// The items of the streams `make` starts: a new one (a watch that lists again) at every
/// tick of `changes`, the previous one dropped.
pub(super) fn restarting<S>(
    make: impl Fn() -> S + Send + 'static,
    changes: BoxStream<'static, ()>,
) -> BoxStream<'static, S::Item>
where
    S: futures::Stream + Send + Unpin + 'static,
    S::Item: Send,
{
    let first = make();
    futures::stream::unfold(
        (first, changes, make),
        |(mut current, mut changes, make)| async move {
            loop {
                tokio::select! {
                    item = current.next() => return item.map(|i| (i, (current, changes, make))),
                    Some(()) = changes.next() => current = make(),
                }
            }
        },
    )
    .boxed()
}

/// Whether this replica reconciles the set of ID `id` now: always without sharding.
pub(super) fn owns(ctx: &Context, id: &str) -> bool {
    ctx.config.shards.as_ref().is_none_or(|s| s.owns(id))
}

/// The scope with this replica's fence of the set: the epoch recorded when the set's owner
/// annotation names this replica already, else the next one (claimed by the reconcile's
/// first write of the parent, or by [`claim_to_delete`]), and the proof its member writes
/// wait for. Unchanged without sharding.
pub(super) fn fence<P: Parent>(obj: &P, ctx: &Context, scope: SetScope) -> Result<SetScope> {
    let Some(shards) = &ctx.config.shards else {
        return Ok(scope);
    };
    let meta = obj.meta();
    let uid = meta.uid.clone().ok_or(Error::Unnamed("the parent's UID"))?;
    let owner = Owner::of(meta.annotations.as_ref());
    let epoch = match owner.is(&shards.holder) {
        true => owner.epoch,
        false => owner.epoch + 1,
    };
    let fence = Fence {
        uid,
        holder: shards.holder.clone(),
        epoch,
        bucket: assign::bucket(&scope.id),
    };
    let (client, parent, metrics) = (
        ctx.client.clone(),
        scope.parent.clone(),
        ctx.metrics.clone(),
    );
    let f = fence.clone();
    let first_write = FirstWrite::new(move || {
        let (client, parent, metrics, f) =
            (client.clone(), parent.clone(), metrics.clone(), f.clone());
        async move { prove(&client, &parent, &f, &metrics).await.is_ok() }.boxed()
    });
    Ok(scope.with_fence(fence, first_write))
}

/// Writes the parent's metadata (see [`parent::write`]); under sharding, conditional on the
/// resourceVersion it was read at and with the owner and epoch of the scope's fence. A write
/// refused for a stale resourceVersion (a status write meanwhile, an edit of its metadata)
/// reads the parent again and is tried again while the parent is still ours, nobody else
/// claimed the set and its spec is the one this reconcile rendered; otherwise
/// [`Error::NotOurs`] or [`Error::Fenced`] ([`after_refusal`]). A write sent proves the claim
/// for the member writes.
pub(super) async fn write_parent<P: Parent>(
    ctx: &Context,
    scope: &SetScope,
    obj: &P,
    set: &Recorded,
    shrink: Shrink,
) -> Result<P> {
    let Some(fence) = &scope.fence else {
        let none = parent::Ownership::default();
        return parent::write(&ctx.client, obj, set, shrink, &none).await;
    };
    let mut fresh: Option<P> = None;
    for _ in 0..WRITE_ATTEMPTS {
        let base = fresh.as_ref().unwrap_or(obj);
        let (ownership, claiming) = ownership(base.meta(), fence)?;
        match parent::write(&ctx.client, base, set, shrink, &ownership).await {
            Ok(stored) => {
                if stored.meta().resource_version != base.meta().resource_version {
                    if let Some(first) = &scope.first_write {
                        first.written();
                    }
                    if claiming {
                        ctx.metrics.shard_claimed();
                        tracing::info!(epoch = fence.epoch, "claimed the set");
                    }
                }
                return Ok(stored);
            }
            Err(Error::Kube(kube::Error::Api(s))) if s.code == 409 => {}
            Err(e) => return Err(e),
        }
        let api = P::api(ctx.client.clone(), scope.parent.namespace.as_deref());
        let Some(now) = api.get_opt(&scope.parent.name).await? else {
            return Err(fenced(&ctx.metrics, &scope.parent, fence));
        };
        // Another tool's parent now, another spec (its plan is stale: another replica may
        // have written members of the new one), another owner: nothing more is written.
        match after_refusal(now.meta(), obj.meta().generation, &scope.parent, fence) {
            AfterRefusal::Again => fresh = Some(now),
            AfterRefusal::NotOurs(cause) => {
                return Err(Error::NotOurs {
                    parent: scope.parent.to_string(),
                    cause,
                });
            }
            AfterRefusal::Fenced => return Err(fenced(&ctx.metrics, &scope.parent, fence)),
        }
    }
    Err(fenced(&ctx.metrics, &scope.parent, fence))
}

/// The owner annotations and the precondition of a parent write by `fence`'s holder of the
/// parent as `meta` says it is, and whether the write claims the set.
fn ownership(meta: &kube::api::ObjectMeta, fence: &Fence) -> Result<(parent::Ownership, bool)> {
    let owner = Owner::of(meta.annotations.as_ref());
    let claiming = !(owner.is(&fence.holder) && owner.epoch == fence.epoch);
    let rv = meta
        .resource_version
        .clone()
        .ok_or(Error::Unnamed("the parent's resourceVersion"))?;
    let ownership = parent::Ownership {
        annotations: [
            (ANNOTATION_OWNER.to_string(), fence.holder.clone()),
            (ANNOTATION_EPOCH.to_string(), fence.epoch.to_string()),
        ]
        .into(),
        if_version: Some(rv),
    };
    Ok((ownership, claiming))
}

/// Claims the set before its deletion deletes anything (the deletion writes no parent
/// metadata that could carry the claim): a JSON patch testing the parent's UID and
/// resourceVersion, writing the owner and epoch of the scope's fence. Nothing to do when the
/// parent records them already, or without sharding.
pub(super) async fn claim_to_delete<P: Parent>(
    obj: &P,
    ctx: &Context,
    scope: &SetScope,
) -> Result<()> {
    let Some(fence) = &scope.fence else {
        return Ok(());
    };
    let meta = obj.meta();
    let (ownership, claiming) = ownership(meta, fence)?;
    let (true, Some(rv)) = (claiming, &ownership.if_version) else {
        return Ok(());
    };
    let patch = claim_patch(
        &fence.uid,
        rv,
        meta.annotations.is_some(),
        &fence.holder,
        fence.epoch,
    );
    let patch: json_patch::Patch =
        serde_json::from_value(patch).map_err(|source| Error::Serialize {
            what: "the claim of a set",
            source,
        })?;
    let api = P::api(ctx.client.clone(), scope.parent.namespace.as_deref());
    match api
        .patch(
            &scope.parent.name,
            &claim_params(),
            &Patch::Json::<()>(patch),
        )
        .await
    {
        Ok(_) => {
            ctx.metrics.shard_claimed();
            tracing::info!(epoch = fence.epoch, "claimed the set to delete it");
            Ok(())
        }
        // A failed test: the parent moved since it was read.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => {
            Err(fenced(&ctx.metrics, &scope.parent, fence))
        }
        Err(e) => Err(e.into()),
    }
}

/// Proves that this replica still holds its claim of the set (the API server tests the
/// parent's UID, owner and epoch, and writes nothing): [`Error::Fenced`] once another
/// replica claimed it. Nothing to prove without sharding.
pub(super) async fn check(ctx: &Context, scope: &SetScope) -> Result<()> {
    match &scope.fence {
        Some(fence) => prove(&ctx.client, &scope.parent, fence, &ctx.metrics).await,
        None => Ok(()),
    }
}

/// [`Error::Fenced`] when this reconcile's proof of its claim, sent before its first member
/// write, was refused (nothing was written then).
pub(super) fn refused(scope: &SetScope) -> Option<Error> {
    let (fence, first) = (scope.fence.as_ref()?, scope.first_write.as_ref()?);
    first.refused().then(|| Error::Fenced {
        parent: scope.parent.to_string(),
        holder: fence.holder.clone(),
        epoch: fence.epoch,
    })
}

/// Whether every member a LIST found carries the set's bucket label (then the member
/// watches, which select by it, see all of them): None when the members were not listed
/// (the watches answered) or without sharding.
pub(super) fn all_labelled(scope: &SetScope, live: &Live) -> Option<bool> {
    let fence = scope.fence.as_ref()?;
    let crate::engine::live::Observed::Listed(listed) = &live.observed else {
        return None;
    };
    let bucket = fence.bucket.to_string();
    Some(
        listed
            .iter()
            .all(|m| m.meta.labels.as_ref().and_then(|l| l.get(LABEL_BUCKET)) == Some(&bucket)),
    )
}

/// Sends the fence's JSON patch of tests to `parent`: a refusal is [`Error::Fenced`].
async fn prove(
    client: &Client,
    parent: &ParentRef,
    fence: &Fence,
    metrics: &Metrics,
) -> Result<()> {
    let checked = match parent.kind {
        ParentKind::ApplySet => test_only::<ApplySet>(client, parent, fence).await,
        ParentKind::ClusterApplySet => test_only::<ClusterApplySet>(client, parent, fence).await,
    };
    match checked {
        Ok(()) => Ok(()),
        // A failed test (422), a parent gone (404) or re-created: not ours to touch any more.
        Err(kube::Error::Api(s)) if s.code == 422 || s.code == 404 || s.code == 409 => {
            Err(fenced(metrics, parent, fence))
        }
        Err(e) => Err(e.into()),
    }
}

/// Sends the fence's JSON patch of tests to the parent (of kind `P`).
async fn test_only<P: Parent>(
    client: &Client,
    parent: &ParentRef,
    fence: &Fence,
) -> kube::Result<()> {
    let patch: json_patch::Patch =
        serde_json::from_value(check_patch(fence)).map_err(kube::Error::SerdeError)?;
    let api = P::api(client.clone(), parent.namespace.as_deref());
    api.patch(&parent.name, &claim_params(), &Patch::Json::<()>(patch))
        .await
        .map(|_| ())
}

/// The parameters of the claim's and the fence's JSON patches.
fn claim_params() -> PatchParams {
    PatchParams {
        field_manager: Some(CLAIM_FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// The error of a replica whose claim of the set another replica has taken (counted).
fn fenced(metrics: &Metrics, parent: &ParentRef, fence: &Fence) -> Error {
    metrics.shard_fenced();
    Error::Fenced {
        parent: parent.to_string(),
        holder: fence.holder.clone(),
        epoch: fence.epoch,
    }
}

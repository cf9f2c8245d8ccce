//! `--shards auto` in the controllers: a replica reconciles only the sets it owns now
//! ([`owns`]); before it touches a set it claims it ([`claim`]); before it deletes anything of
//! a set, or shrinks its record, it proves it still holds its claim ([`check`]). The rules
//! are [`crate::shard::fence`]'s.

use std::sync::Arc;

use futures::{StreamExt, stream::BoxStream};
use kube::api::{Patch, PatchParams};

use super::Context;
use crate::{
    Error, Result,
    api::{ApplySet, ClusterApplySet},
    applyset::ParentKind,
    engine::SetScope,
    parent::Parent,
    shard::{
        assign,
        fence::{Fence, Owner, check_patch, claim_patch},
    },
};

/// The field manager of the claims (the owner and epoch annotations of a parent).
pub const CLAIM_FIELD_MANAGER: &str = "applyset.dev/shard";

/// When a claim lost to another write, the reconcile comes back after this (by then the
/// parent's next version is in the cache).
pub(super) const CLAIM_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Follows this replica's assignment: its member watches select its buckets. Never ends
/// (pending without sharding).
pub(super) async fn follow(ctx: Arc<Context>) {
    let Some(shards) = &ctx.config.shards else {
        return std::future::pending().await;
    };
    let mut rx = shards.assignment.clone();
    while rx.changed().await.is_ok() {
        let mine = rx.borrow_and_update().mine.clone();
        ctx.members.use_buckets(&mine);
    }
    std::future::pending().await
}

/// A tick at every change of this replica's buckets: the controllers then reconcile every
/// set they know (the ones gained start, the ones lost are forgotten). Never ticks without
/// sharding.
pub(super) fn assignment_changes(ctx: &Context) -> BoxStream<'static, ()> {
    let Some(shards) = &ctx.config.shards else {
        return futures::stream::pending().boxed();
    };
    let rx = shards.assignment.clone();
    futures::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        rx.borrow_and_update();
        Some(((), rx))
    })
    .boxed()
}

/// Whether this replica reconciles the set of ID `id` now: always without sharding.
pub(super) fn owns(ctx: &Context, id: &str) -> bool {
    ctx.config.shards.as_ref().is_none_or(|s| s.owns(id))
}

/// The scope with this replica's claim of the set: as recorded already, or claimed now (the
/// epoch plus one). `None` when another replica's write came first (the parent moved since
/// it was read): the reconcile ends and comes back with the parent's next version.
pub(super) async fn claim<P: Parent>(
    obj: &P,
    ctx: &Context,
    scope: SetScope,
) -> Result<Option<SetScope>> {
    let Some(shards) = &ctx.config.shards else {
        return Ok(Some(scope));
    };
    let meta = obj.meta();
    let owner = Owner::of(meta.annotations.as_ref());
    let (uid, rv) = (meta.uid.clone(), meta.resource_version.clone());
    let (Some(uid), Some(rv), Some(name)) = (uid, rv, meta.name.clone()) else {
        return Err(Error::Unnamed("parent"));
    };
    let mut fence = Fence {
        uid,
        holder: shards.holder.clone(),
        epoch: owner.epoch,
        bucket: assign::bucket(&scope.id),
    };
    if owner.is(&shards.holder) {
        return Ok(Some(scope.with_fence(fence)));
    }
    fence.epoch = owner.epoch + 1;
    let patch = claim_patch(
        &fence.uid,
        &rv,
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
    let params = PatchParams {
        field_manager: Some(CLAIM_FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api.patch(&name, &params, &Patch::Json::<()>(patch)).await {
        Ok(_) => {
            ctx.metrics.shard_claimed();
            tracing::info!(
                previous = owner.holder.as_deref().unwrap_or("none"),
                epoch = fence.epoch,
                "claimed the set"
            );
            Ok(Some(scope.with_fence(fence)))
        }
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => {
            tracing::debug!(message = %s.message, "the set changed before the claim; waiting for its next version");
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// Proves that this replica still holds its claim of the set (the API server tests the
/// parent's UID, owner and epoch, and writes nothing): [`Error::Fenced`] once another
/// replica claimed it. Nothing to prove without sharding.
pub(super) async fn check(ctx: &Context, scope: &SetScope) -> Result<()> {
    let Some(fence) = &scope.fence else {
        return Ok(());
    };
    let checked = match scope.parent.kind {
        ParentKind::ApplySet => test_only::<ApplySet>(ctx, scope, fence).await,
        ParentKind::ClusterApplySet => test_only::<ClusterApplySet>(ctx, scope, fence).await,
    };
    match checked {
        Ok(()) => Ok(()),
        // A failed test (422), a parent gone (404) or re-created: not ours to touch any more.
        Err(kube::Error::Api(s)) if s.code == 422 || s.code == 404 || s.code == 409 => {
            ctx.metrics.shard_fenced();
            Err(Error::Fenced {
                parent: scope.parent.to_string(),
                holder: fence.holder.clone(),
                epoch: fence.epoch,
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// Sends the fence's JSON patch of tests to the parent (of kind `P`).
async fn test_only<P: Parent>(ctx: &Context, scope: &SetScope, fence: &Fence) -> kube::Result<()> {
    let patch: json_patch::Patch =
        serde_json::from_value(check_patch(fence)).map_err(kube::Error::SerdeError)?;
    let api = P::api(ctx.client.clone(), scope.parent.namespace.as_deref());
    let params = PatchParams {
        field_manager: Some(CLAIM_FIELD_MANAGER.into()),
        ..Default::default()
    };
    api.patch(&scope.parent.name, &params, &Patch::Json::<()>(patch))
        .await
        .map(|_| ())
}

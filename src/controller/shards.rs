//! `--shards auto` in the controllers: a replica reconciles only the sets it owns now
//! ([`owns`]); it claims a set with its first write of the parent's metadata ([`ownership`],
//! [`claimed`]; [`claim_to_delete`] for a deletion); before it deletes anything of a set, or
//! shrinks its record, it proves it still holds its claim ([`check`]). The rules are
//! [`crate::shard::fence`]'s.

use std::sync::Arc;

use futures::{StreamExt, stream::BoxStream};
use kube::api::{Patch, PatchParams};

use super::Context;
use crate::{
    Error, Result,
    api::{ApplySet, ClusterApplySet},
    applyset::ParentKind,
    engine::SetScope,
    parent,
    parent::Parent,
    shard::{
        ANNOTATION_EPOCH, ANNOTATION_OWNER, assign,
        fence::{Fence, Owner, check_patch, claim_patch},
    },
};

/// The field manager of the claims (the owner and epoch annotations of a parent).
pub const CLAIM_FIELD_MANAGER: &str = "applyset.dev/shard";

/// A fenced reconcile (its claim lost to another write, or taken since by another replica)
/// comes back after this: by then the parent's next version is in the cache.
pub(super) const FENCED_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

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

/// The scope with this replica's fence of the set: the epoch recorded when the set's owner
/// annotation names this replica already, else the next one (the set is claimed by the
/// reconcile's first write of the parent, or by [`claim_to_delete`]). Unchanged without
/// sharding.
pub(super) fn fence<P: Parent>(obj: &P, ctx: &Context, scope: SetScope) -> SetScope {
    let Some(shards) = &ctx.config.shards else {
        return scope;
    };
    let meta = obj.meta();
    let owner = Owner::of(meta.annotations.as_ref());
    let epoch = match owner.is(&shards.holder) {
        true => owner.epoch,
        false => owner.epoch + 1,
    };
    let fence = Fence {
        uid: meta.uid.clone().unwrap_or_default(),
        holder: shards.holder.clone(),
        epoch,
        bucket: assign::bucket(&scope.id),
    };
    scope.with_fence(fence)
}

/// What the parent's metadata writes carry under sharding: the owner and epoch of the
/// scope's fence, and, when the parent does not record them yet, its resourceVersion (the
/// write claims the set only if nobody wrote the parent since it was read).
pub(super) fn ownership<P: Parent>(obj: &P, scope: &SetScope) -> parent::Ownership {
    let Some(fence) = &scope.fence else {
        return parent::Ownership::default();
    };
    let meta = obj.meta();
    let owner = Owner::of(meta.annotations.as_ref());
    let claiming = !(owner.is(&fence.holder) && owner.epoch == fence.epoch);
    parent::Ownership {
        annotations: [
            (ANNOTATION_OWNER.to_string(), fence.holder.clone()),
            (ANNOTATION_EPOCH.to_string(), fence.epoch.to_string()),
        ]
        .into(),
        claim_from: claiming.then(|| meta.resource_version.clone()).flatten(),
    }
}

/// The result of a parent write that carried `ownership`: a claim overtaken by another write
/// (409) is [`Error::Fenced`] (the reconcile ends and comes back); a claim that succeeded is
/// counted and logged.
pub(super) fn claimed<P>(
    ctx: &Context,
    scope: &SetScope,
    ownership: &parent::Ownership,
    written: Result<P>,
) -> Result<P> {
    let (Some(fence), Some(_)) = (&scope.fence, &ownership.claim_from) else {
        return written;
    };
    match written {
        Ok(p) => {
            ctx.metrics.shard_claimed();
            tracing::info!(epoch = fence.epoch, "claimed the set");
            Ok(p)
        }
        Err(Error::Kube(kube::Error::Api(s))) if s.code == 409 => Err(fenced(ctx, scope, fence)),
        Err(e) => Err(e),
    }
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
    let ownership = ownership(obj, scope);
    let (Some(fence), Some(rv)) = (&scope.fence, &ownership.claim_from) else {
        return Ok(());
    };
    let meta = obj.meta();
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
    let params = claim_params();
    match api
        .patch(&scope.parent.name, &params, &Patch::Json::<()>(patch))
        .await
    {
        Ok(_) => {
            ctx.metrics.shard_claimed();
            tracing::info!(epoch = fence.epoch, "claimed the set to delete it");
            Ok(())
        }
        // A failed test: the parent moved since it was read.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => {
            Err(fenced(ctx, scope, fence))
        }
        Err(e) => Err(e.into()),
    }
}

/// The parameters of the claim's and the fence's JSON patches.
fn claim_params() -> PatchParams {
    PatchParams {
        field_manager: Some(CLAIM_FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// The error of a replica whose claim of the set another replica has taken (counted).
fn fenced(ctx: &Context, scope: &SetScope, fence: &Fence) -> Error {
    ctx.metrics.shard_fenced();
    Error::Fenced {
        parent: scope.parent.to_string(),
        holder: fence.holder.clone(),
        epoch: fence.epoch,
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
            Err(fenced(ctx, scope, fence))
        }
        Err(e) => Err(e.into()),
    }
}

/// Sends the fence's JSON patch of tests to the parent (of kind `P`).
async fn test_only<P: Parent>(ctx: &Context, scope: &SetScope, fence: &Fence) -> kube::Result<()> {
    let patch: json_patch::Patch =
        serde_json::from_value(check_patch(fence)).map_err(kube::Error::SerdeError)?;
    let api = P::api(ctx.client.clone(), scope.parent.namespace.as_deref());
    let params = claim_params();
    api.patch(&scope.parent.name, &params, &Patch::Json::<()>(patch))
        .await
        .map(|_| ())
}

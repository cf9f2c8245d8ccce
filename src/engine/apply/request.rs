//! The requests of one member's apply: a server-side apply patch (as the set's member field
//! manager, forced or not, dry-run or not) and what the server answered.
//!
//! Promises: no read before a write; a 404 of a route or namespace that settles within
//! seconds (a CRD just Established, a namespace being created) is retried up to 10 s, never
//! past the reconcile's deadline, and never in a dry-run.

use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    Api,
    api::{DynamicObject, Patch, PatchParams},
};
use serde_json::Value;

use crate::render::Member;

/// What the server answered a successful apply with.
pub(super) struct Answer {
    pub(super) rv: Option<String>,
    pub(super) uid: Option<String>,
    /// Its [`crate::members::shape`], for kinds the member watches see whole.
    pub(super) shape: Option<u64>,
    /// The object itself, for a dry-run's preview.
    pub(super) object: Option<Value>,
    /// Its metadata (`managedFields` included), for Override (see [`super::take_over`]).
    pub(super) meta: Option<Box<ObjectMeta>>,
}

impl Answer {
    /// What the watches know of a member known unchanged: its UID.
    pub(super) fn uid(uid: String) -> Self {
        Answer {
            rv: None,
            uid: Some(uid),
            shape: None,
            object: None,
            meta: None,
        }
    }
}

/// One member's apply requests: the parameters and the body.
pub(super) struct Request<'a> {
    pub(super) api: &'a Api<DynamicObject>,
    pub(super) name: &'a str,
    pub(super) body: &'a Value,
    pub(super) manager: &'a str,
    pub(super) dry_run: bool,
}

impl Request<'_> {
    pub(super) async fn send(&self, force: bool) -> kube::Result<DynamicObject> {
        let mut p = PatchParams::apply(self.manager);
        p.force = force;
        p.dry_run = self.dry_run;
        self.api
            .patch(self.name, &p, &Patch::Apply(self.body))
            .await
    }

    /// Sends without force; a server-side apply creates missing objects, so a 404 means the
    /// route is not served (a CRD Established a moment ago) or the namespace does not exist
    /// yet (being created concurrently). Both settle within seconds: retried up to 10 s.
    pub(super) async fn send_settled(&self, deadline: Instant) -> kube::Result<DynamicObject> {
        let mut result = self.send(false).await;
        let settle = Instant::now() + Duration::from_secs(10);
        while !self.dry_run
            && matches!(&result, Err(kube::Error::Api(s)) if s.code == 404)
            && Instant::now() < settle.min(deadline)
        {
            tokio::time::sleep(Duration::from_millis(250)).await;
            result = self.send(false).await;
        }
        result
    }
}

/// What the server answered a successful apply of `member` with (the whole object too when
/// `preview`: what a dry-run would make of it, for `kubectl applyset diff`).
pub(super) fn answer(member: &Member, applied: &DynamicObject, preview: bool) -> Answer {
    Answer {
        rv: applied.metadata.resource_version.clone(),
        uid: applied.metadata.uid.clone(),
        shape: crate::health::needs_object(&member.reference.group, &member.reference.kind)
            .then(|| crate::members::shape(applied)),
        object: preview
            .then(|| serde_json::to_value(applied).ok())
            .flatten(),
        meta: Some(Box::new(applied.metadata.clone())),
    }
}

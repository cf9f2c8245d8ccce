//! The claim of a set and the fence before its deletes: a replica proves it still owns the
//! set, with no assumption on clocks.
//!
//! A Lease is not a fence: a replica that lost a set (paused past its Lease, or a new replica
//! won the set's bucket) may still hold a plan made before, and the UID and resourceVersion
//! preconditions of its deletes would pass on members it read after the new owner wrote them.
//! So every set carries its owner and an epoch, in two annotations of the parent:
//! [`super::ANNOTATION_OWNER`] (`<name>/<incarnation>`) and [`super::ANNOTATION_EPOCH`].
//!
//! - **The claim.** A replica that reconciles a set (or deletes it) whose owner annotation
//!   does not name it first claims it: a JSON patch of the parent ([`claim_patch`]) that tests
//!   the parent's UID and resourceVersion (as it last saw them) and writes itself as the owner
//!   with the epoch plus one. Two replicas that claim at once: one patch is refused (409 or
//!   422), the other's epoch is the new one.
//! - **The epoch on members.** Every member body carries the owner's epoch
//!   ([`super::ANNOTATION_EPOCH`]) and the set's bucket ([`super::LABEL_BUCKET`]), so the new
//!   owner's first apply of each member after a claim is a real write: the member's
//!   resourceVersion moves.
//! - **The fence.** After the live read the deletes are planned from, before the first
//!   delete, the replica sends a JSON patch of the parent made only of `test` operations
//!   ([`check_patch`]: the UID, itself as owner, its epoch). The API server reads the parent
//!   from etcd and refuses the patch (422) once another replica has claimed it: the replica
//!   then deletes nothing and writes nothing.
//!
//! Why that is enough: every delete carries the UID and resourceVersion of the live read.
//! If the read came after the new owner's claim, the fence (sent after the read) is refused.
//! If it came before, any member the new owner has written since has another resourceVersion
//! (its epoch moved), and the delete is refused (409). What the stale replica may still delete
//! is an object the new owner has not written yet, as the stale replica's plan left it: the
//! same as a prune that finished just before the claim. Clocks play no part in this; the
//! Leases' durations only decide how soon a set moves.

use kube::api::ObjectMeta;
use serde_json::{Map, Value, json};

use super::{ANNOTATION_EPOCH, ANNOTATION_OWNER, LABEL_BUCKET};
use crate::applyset::{OwnershipError, ParentRef};

/// Who owns a set, as its annotations say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owner {
    /// `<name>/<incarnation>`, if any replica claimed the set.
    pub holder: Option<String>,
    /// The epoch of the last claim (0 before any).
    pub epoch: u64,
}

impl Owner {
    /// The owner recorded in `annotations`: an epoch that is not a number counts as 0 (the
    /// next claim writes 1).
    pub fn of(annotations: Option<&std::collections::BTreeMap<String, String>>) -> Self {
        let get = |k: &str| annotations.and_then(|a| a.get(k));
        Owner {
            holder: get(ANNOTATION_OWNER).filter(|h| !h.is_empty()).cloned(),
            epoch: get(ANNOTATION_EPOCH)
                .and_then(|e| e.parse().ok())
                .unwrap_or(0),
        }
    }

    /// Whether `holder` is the owner.
    pub fn is(&self, holder: &str) -> bool {
        self.holder.as_deref() == Some(holder)
    }
}

/// What a replica holds of a set it claimed: the parent's UID, itself, the epoch, and the
/// set's bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    pub uid: String,
    pub holder: String,
    pub epoch: u64,
    pub bucket: u16,
}

/// Whether a replica holding `fence` may still write the parent whose owner annotations now
/// say `now` (read again after a write of it was refused for a stale resourceVersion): the
/// parent is still its own at its epoch, or still the previous owner's at the epoch its claim
/// follows (nobody claimed it since). Any other owner or epoch: another replica claimed it.
pub fn may_write(now: &Owner, fence: &Fence) -> bool {
    match now.is(&fence.holder) {
        true => now.epoch == fence.epoch,
        false => now.epoch.checked_add(1) == Some(fence.epoch),
    }
}

/// What a replica does with a write of the parent refused for a stale resourceVersion, once
/// it has read the parent again (`now`); `rendered`: the generation its reconcile rendered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterRefusal {
    /// Send the write again, on `now`.
    Again,
    /// The parent is not ours any more (another tool's, or another parent's ID): nothing is
    /// written, and the set reports the conflict.
    NotOurs(OwnershipError),
    /// Another spec than the one rendered (its plan is stale), another object, or another
    /// replica's claim: nothing more is written (`Error::Fenced`).
    Fenced,
}

/// Decides [`AfterRefusal`]: ownership first (the checks every reconcile starts with), then
/// the spec, the UID and the claim ([`may_write`]).
pub fn after_refusal(
    now: &ObjectMeta,
    rendered: Option<i64>,
    parent: &ParentRef,
    fence: &Fence,
) -> AfterRefusal {
    if let Err(e) = crate::parent::check_ownership(now, parent) {
        return AfterRefusal::NotOurs(e);
    }
    let respecified = now.generation != rendered;
    if respecified
        || now.uid.as_deref() != Some(fence.uid.as_str())
        || !may_write(&Owner::of(now.annotations.as_ref()), fence)
    {
        return AfterRefusal::Fenced;
    }
    AfterRefusal::Again
}

/// The JSON patch claiming a parent of `uid` last seen at `resource_version` for `holder`,
/// at `epoch`; `has_annotations`: whether the parent has an annotation map already (a JSON
/// patch cannot add a key to a map that does not exist).
pub fn claim_patch(
    uid: &str,
    resource_version: &str,
    has_annotations: bool,
    holder: &str,
    epoch: u64,
) -> Value {
    let mut ops = vec![
        json!({"op": "test", "path": "/metadata/uid", "value": uid}),
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version}),
    ];
    if has_annotations {
        for (k, v) in [
            (ANNOTATION_OWNER, holder.to_string()),
            (ANNOTATION_EPOCH, epoch.to_string()),
        ] {
            ops.push(json!({"op": "add", "path": annotation_path(k), "value": v}));
        }
    } else {
        ops.push(
            json!({"op": "add", "path": "/metadata/annotations", "value": {
            ANNOTATION_OWNER: holder, ANNOTATION_EPOCH: epoch.to_string()}}),
        );
    }
    Value::Array(ops)
}

/// The JSON patch of tests only that the API server accepts (writing nothing) while the
/// parent is still the one of `fence`'s UID, owned by its holder at its epoch.
pub fn check_patch(fence: &Fence) -> Value {
    json!([
        {"op": "test", "path": "/metadata/uid", "value": fence.uid},
        {"op": "test", "path": annotation_path(ANNOTATION_OWNER), "value": fence.holder},
        {"op": "test", "path": annotation_path(ANNOTATION_EPOCH), "value": fence.epoch.to_string()},
    ])
}

/// Marks a member's body with the set's bucket (label) and the owner's epoch (annotation).
pub fn mark(body: &mut Value, fence: &Fence) {
    let Value::Object(object) = body else {
        return;
    };
    let meta = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else {
        return;
    };
    for (field, key, value) in [
        ("labels", LABEL_BUCKET, fence.bucket.to_string()),
        ("annotations", ANNOTATION_EPOCH, fence.epoch.to_string()),
    ] {
        let map = meta
            .entry(field)
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(map) = map {
            map.insert(key.into(), Value::String(value));
        }
    }
}

/// The JSON pointer of an annotation.
fn annotation_path(key: &str) -> String {
    format!(
        "/metadata/annotations/{}",
        key.replace('~', "~0").replace('/', "~1")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence() -> Fence {
        Fence {
            uid: "u1".into(),
            holder: "r-0/ab12".into(),
            epoch: 7,
            bucket: 513,
        }
    }

    #[test]
    fn the_owner_is_read_from_the_annotations() {
        assert_eq!(Owner::of(None), Owner::default());
        let a = [
            (ANNOTATION_OWNER.to_string(), "r-1/x".to_string()),
            (ANNOTATION_EPOCH.to_string(), "12".to_string()),
        ]
        .into();
        let o = Owner::of(Some(&a));
        assert_eq!((o.holder.as_deref(), o.epoch), (Some("r-1/x"), 12));
        assert!(o.is("r-1/x") && !o.is("r-1/y"));
        let bad = [
            (ANNOTATION_OWNER.to_string(), String::new()),
            (ANNOTATION_EPOCH.to_string(), "x".to_string()),
        ]
        .into();
        assert_eq!(Owner::of(Some(&bad)), Owner::default());
    }

    #[test]
    fn a_claim_tests_the_uid_and_version_then_writes_owner_and_epoch() {
        let p = claim_patch("u1", "42", true, "r-0/ab12", 8);
        assert_eq!(
            p,
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "u1"},
                {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "add", "path": "/metadata/annotations/applyset.dev~1shard-owner", "value": "r-0/ab12"},
                {"op": "add", "path": "/metadata/annotations/applyset.dev~1shard-epoch", "value": "8"},
            ])
        );
        let p = claim_patch("u1", "42", false, "r-0/ab12", 1);
        assert_eq!(
            p[2],
            json!({"op": "add", "path": "/metadata/annotations", "value": {
                "applyset.dev/shard-owner": "r-0/ab12", "applyset.dev/shard-epoch": "1"}})
        );
    }

    #[test]
    fn a_refused_write_read_again_is_sent_again_only_on_a_parent_still_ours_and_unchanged() {
        use crate::applyset::{ANNOTATION_TOOLING, LABEL_ID, ParentKind};
        let f = fence();
        let parent = ParentRef {
            kind: ParentKind::ApplySet,
            name: "web".to_owned(),
            namespace: Some("team-a".to_owned()),
        };
        // The parent as read again: ours (tooling, ID), generation 3, UID u1, held by the
        // fence's holder at its epoch.
        let meta = |tooling: &str, id: &str, generation: i64, uid: &str, owner: &str| ObjectMeta {
            generation: Some(generation),
            uid: Some(uid.to_owned()),
            labels: Some([(LABEL_ID.to_owned(), id.to_owned())].into()),
            annotations: Some(
                [
                    (ANNOTATION_TOOLING.to_owned(), tooling.to_owned()),
                    (ANNOTATION_OWNER.to_owned(), owner.to_owned()),
                    (ANNOTATION_EPOCH.to_owned(), "7".to_owned()),
                ]
                .into(),
            ),
            ..ObjectMeta::default()
        };
        let (ours, id) = ("applyset-operator/v0.1.0", parent.id());
        let decide = |m: &ObjectMeta| after_refusal(m, Some(3), &parent, &f);
        assert_eq!(
            decide(&meta(ours, &id, 3, "u1", "r-0/ab12")),
            AfterRefusal::Again
        );
        // Another tool took the parent meanwhile: not written, whatever else holds.
        assert!(matches!(
            decide(&meta("kubectl/v1.37", &id, 3, "u1", "r-0/ab12")),
            AfterRefusal::NotOurs(OwnershipError::ForeignTooling { .. })
        ));
        assert!(matches!(
            decide(&meta("kubectl/v1.37", &id, 4, "u2", "r-1/x")),
            AfterRefusal::NotOurs(OwnershipError::ForeignTooling { .. })
        ));
        // Another parent's ID label.
        assert!(matches!(
            decide(&meta(ours, "applyset-other-v1", 3, "u1", "r-0/ab12")),
            AfterRefusal::NotOurs(OwnershipError::IdMismatch { .. })
        ));
        // Ours, but another spec, another object, or another replica's claim.
        assert_eq!(
            decide(&meta(ours, &id, 4, "u1", "r-0/ab12")),
            AfterRefusal::Fenced
        );
        assert_eq!(
            decide(&meta(ours, &id, 3, "u2", "r-0/ab12")),
            AfterRefusal::Fenced
        );
        assert_eq!(
            decide(&meta(ours, &id, 3, "u1", "r-1/x")),
            AfterRefusal::Fenced
        );
    }

    #[test]
    fn a_refused_write_is_retried_only_while_nobody_else_claimed_the_set() {
        let f = fence();
        let owner = |h: Option<&str>, epoch| Owner {
            holder: h.map(String::from),
            epoch,
        };
        assert!(may_write(&owner(Some("r-0/ab12"), 7), &f), "still its own");
        assert!(may_write(&owner(Some("r-1/x"), 6), &f), "its claim's base");
        assert!(
            may_write(&owner(None, 6), &f),
            "unclaimed at the base epoch"
        );
        assert!(
            !may_write(&owner(Some("r-0/ab12"), 8), &f),
            "its own at another epoch"
        );
        assert!(!may_write(&owner(Some("r-0/ab12"), 6), &f));
        assert!(
            !may_write(&owner(Some("r-1/x"), 7), &f),
            "claimed by another"
        );
        assert!(!may_write(&owner(Some("r-1/x"), 8), &f));
        assert!(!may_write(&owner(None, 0), &f));
        let first = Fence {
            epoch: 1,
            ..fence()
        };
        assert!(
            may_write(&owner(None, 0), &first),
            "a new set's first claim"
        );
        assert!(!may_write(
            &owner(None, u64::MAX),
            &Fence {
                epoch: 0,
                ..fence()
            }
        ));
    }

    #[test]
    fn the_fence_only_tests() {
        let p = check_patch(&fence());
        let ops = p.as_array().cloned().unwrap_or_default();
        assert_eq!(ops.len(), 3);
        assert_eq!(ops[0]["value"], "u1");
        assert!(ops.iter().all(|o| o["op"] == "test"));
        assert_eq!(ops[1]["value"], "r-0/ab12");
        assert_eq!(ops[2]["value"], "7");
        assert_eq!(annotation_path("a~b/c"), "/metadata/annotations/a~0b~1c");
    }

    #[test]
    fn members_carry_the_bucket_and_the_epoch() {
        let mut body =
            json!({"kind": "ConfigMap", "metadata": {"name": "a", "labels": {"x": "1"}}});
        mark(&mut body, &fence());
        assert_eq!(body["metadata"]["labels"]["x"], "1");
        assert_eq!(body["metadata"]["labels"][LABEL_BUCKET], "513");
        assert_eq!(body["metadata"]["annotations"][ANNOTATION_EPOCH], "7");
        let mut bare = json!({"kind": "ConfigMap"});
        mark(&mut bare, &fence());
        assert_eq!(bare["metadata"]["labels"][LABEL_BUCKET], "513");
        let mut not_an_object = json!([1]);
        mark(&mut not_an_object, &fence());
        assert_eq!(not_an_object, json!([1]));
    }
}

//! Unit tests of [`super`]: the metadata-only body, when an IfNotPresent member is adopted,
//! and when its adoption's patch is sent.

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use kube::discovery::ApiResource;
use serde_json::json;

use super::*;
use crate::{api::MemberRef, kind_order::Stage, manifest::Origin};

fn member(namespace: Option<&str>, adopt: bool, annotations: Value) -> Member {
    let object = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "tls", "namespace": namespace, "annotations": annotations},
        "type": "Opaque",
        "data": {"tls.crt": "bmV3"},
    });
    Member {
        origin: Origin::inline(0),
        object: object.as_object().cloned().unwrap_or_default(),
        resource: ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "Secret".into(),
            plural: "secrets".into(),
        },
        namespaced: namespace.is_some(),
        reference: MemberRef {
            group: String::new(),
            kind: "Secret".into(),
            namespace: namespace.map(str::to_string),
            name: "tls".into(),
        },
        stage: Stage::Resources,
        force_recreate: false,
        adopt,
        ignore: Vec::new(),
        redaction: None,
        secret_substituted: false,
    }
}

fn if_not_present() -> Value {
    json!({"kustomize.toolkit.fluxcd.io/ssa": "IfNotPresent"})
}

#[test]
fn the_body_carries_the_identity_and_our_label_only() {
    let m = member(Some("demo"), false, if_not_present());
    assert_eq!(
        metadata_only(&m, "applyset-x-v1"),
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "tls", "namespace": "demo",
                "labels": {LABEL_PART_OF: "applyset-x-v1"}},
        })
    );
    let cluster = member(None, false, if_not_present());
    assert!(
        metadata_only(&cluster, "id")["metadata"]
            .get("namespace")
            .is_none()
    );
}

/// The set names kustomize-controller.
static NAMED: std::sync::LazyLock<Vec<String>> =
    std::sync::LazyLock::new(|| vec!["kustomize-controller".to_string()]);

fn options<'a>(
    adopt_existing: bool,
    existing: &'a HashMap<MemberRef, crate::engine::live::LiveObject>,
    lookup: &'a adopt::Lookup,
) -> Options<'a> {
    Options {
        force: false,
        dry_run: false,
        existing,
        started: 0,
        deadline: std::time::Instant::now(),
        lookup,
        adopt_existing,
        take_over: &NAMED,
        preview: false,
        create_only: None,
    }
}

#[test]
fn adopted_only_when_it_exists_unlabelled_and_adoption_is_allowed() {
    let existing = HashMap::new();
    let m = member(Some("demo"), false, if_not_present());
    let mut lookup = adopt::Lookup::default();
    assert!(!adoptable(&m, &options(true, &existing, &lookup), &lookup));
    lookup.unlabelled.insert(m.reference.clone());
    // Unlabelled, but nothing says whose it is: skipped.
    assert!(!adoptable(&m, &options(true, &existing, &lookup), &lookup));
    let flux = adopt::Holders {
        managers: vec!["kustomize-controller".into()],
        flux_labelled: true,
        ours_beyond_label: false,
    };
    lookup.holders.insert(m.reference.clone(), flux);
    assert!(adoptable(&m, &options(true, &existing, &lookup), &lookup));
    assert!(!adoptable(&m, &options(false, &existing, &lookup), &lookup));
    let annotated = member(Some("demo"), true, if_not_present());
    assert!(adoptable(
        &annotated,
        &options(false, &existing, &lookup),
        &lookup
    ));
}

fn entry(manager: &str, fields: Value) -> ManagedFieldsEntry {
    ManagedFieldsEntry {
        manager: Some(manager.into()),
        operation: Some("Apply".into()),
        fields_v1: Some(FieldsV1(fields)),
        ..Default::default()
    }
}

fn live(extra: &[(&str, &str)], managers: &[&str]) -> ObjectMeta {
    let mut annotations: std::collections::BTreeMap<String, String> = [(
        "kustomize.toolkit.fluxcd.io/ssa".to_string(),
        "IfNotPresent".to_string(),
    )]
    .into();
    annotations.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    ObjectMeta {
        resource_version: Some("3".into()),
        labels: Some(
            [(
                "kustomize.toolkit.fluxcd.io/name".to_string(),
                "app".to_string(),
            )]
            .into(),
        ),
        annotations: Some(annotations),
        managed_fields: Some(
            managers
                .iter()
                .map(|m| entry(m, json!({"f:data": {"f:tls.crt": {}}})))
                .collect(),
        ),
        ..Default::default()
    }
}

#[test]
fn the_patch_is_sent_only_for_a_named_manager_and_without_merge() {
    let m = member(Some("demo"), false, if_not_present());
    let declared = take_over::declared(&m);
    let named = vec!["kustomize-controller".to_string()];
    let takers = Takers::new("me", &named);
    let flux = live(&[], &["kustomize-controller", "me"]);
    let p = patch_for(&flux, &declared, &m, takers).expect("a patch");
    let removed: Vec<&Value> = p
        .as_array()
        .into_iter()
        .flatten()
        .filter(|op| op["op"] == "remove")
        .map(|op| &op["path"])
        .collect();
    assert_eq!(
        removed,
        [&json!("/metadata/labels/kustomize.toolkit.fluxcd.io~1name")]
    );
    // No named manager on it, or none named by the set: nothing is sent.
    assert_eq!(
        patch_for(&live(&[], &["helm", "me"]), &declared, &m, takers),
        None
    );
    assert_eq!(
        patch_for(&flux, &declared, &m, Takers::new("me", &[])),
        None
    );
    // Merge (live or desired) or a live skip mark: nothing is sent.
    let merge = live(&[("applyset.dev/ssa", "Merge")], &["kustomize-controller"]);
    assert_eq!(patch_for(&merge, &declared, &m, takers), None);
    let ignored = live(
        &[("applyset.dev/reconcile", "disabled")],
        &["kustomize-controller"],
    );
    assert_eq!(patch_for(&ignored, &declared, &m, takers), None);
    let merged = member(
        Some("demo"),
        false,
        json!({"kustomize.toolkit.fluxcd.io/ssa": "IfNotPresent", "applyset.dev/ssa": "Merge"}),
    );
    assert_eq!(patch_for(&flux, &declared, &merged, takers), None);
}

fn holders(managers: &[&str], flux_labelled: bool, ours_beyond_label: bool) -> adopt::Holders {
    adopt::Holders {
        managers: managers.iter().map(|m| (*m).to_string()).collect(),
        flux_labelled,
        ours_beyond_label,
    }
}

#[test]
fn only_an_object_another_tool_hands_over_is_adopted() {
    let named = vec!["kustomize-controller".to_string()];
    // A named manager owns fields on it, or Flux's owner labels are on it.
    assert!(handed_over(
        &holders(&["kustomize-controller"], false, false),
        &named
    ));
    assert!(handed_over(
        &holders(&["kubectl-create"], true, false),
        &named
    ));
    assert!(handed_over(&holders(&[], true, false), &named));
    // Flux's labels alone hand it over only to a set that names kustomize-controller.
    assert!(!handed_over(&holders(&[], true, false), &[]));
    assert!(!handed_over(
        &holders(&["kubectl-create"], true, false),
        &["helm".to_string()]
    ));
    // Made by hand (kubectl create, a client's Update): never adopted.
    assert!(!handed_over(
        &holders(&["kubectl-create"], false, false),
        &named
    ));
    assert!(!handed_over(
        &holders(&["before-first-apply"], false, false),
        &named
    ));
    // A manager the set does not name (exact names only).
    assert!(!handed_over(&holders(&["helm"], false, false), &named));
    assert!(!handed_over(
        &holders(&["kustomize-controller"], false, false),
        &[]
    ));
    assert!(!handed_over(
        &holders(&["kustomize-controller-x"], false, false),
        &named
    ));
    // The set's own manager owns data on it: a metadata-only apply would remove that data.
    assert!(!handed_over(
        &holders(&["kustomize-controller"], true, true),
        &named
    ));
}

#[test]
fn holders_are_read_from_the_managed_fields_and_labels() {
    let ours = "applyset.dev/ns/demo/app";
    let label = json!({"f:metadata": {"f:labels": {format!("f:{LABEL_PART_OF}"): {}}}});
    let mut status = entry("kube-controller-manager", json!({"f:status": {}}));
    status.subresource = Some("status".into());
    let meta = |entries: Vec<ManagedFieldsEntry>, labels: &[&str]| ObjectMeta {
        labels: Some(
            labels
                .iter()
                .map(|k| (k.to_string(), "v".to_string()))
                .collect(),
        ),
        managed_fields: Some(entries),
        ..Default::default()
    };
    let flux = meta(
        vec![
            entry("kustomize-controller", json!({"f:data": {}})),
            status.clone(),
        ],
        &["kustomize.toolkit.fluxcd.io/name"],
    );
    assert_eq!(
        adopt::Holders::of(&flux, ours),
        holders(&["kustomize-controller"], true, false)
    );
    // Our entry owning only the part-of label is no data of ours.
    let labelled = meta(vec![entry(ours, label.clone())], &[]);
    assert_eq!(
        adopt::Holders::of(&labelled, ours),
        holders(&[ours], false, false)
    );
    // Our entry owning data (the label removed by someone else, say): data of ours.
    let data = json!({"f:data": {"f:tls.crt": {}}, "f:metadata": {"f:labels": {}}});
    let owning = meta(vec![entry(ours, data)], &[]);
    assert!(adopt::Holders::of(&owning, ours).ours_beyond_label);
    // Another set's manager, or an Update of ours, is not our Apply entry.
    let mut update = entry(ours, json!({"f:data": {}}));
    update.operation = Some("Update".into());
    let other = meta(
        vec![
            entry("applyset.dev/ns/demo/other", json!({"f:data": {}})),
            update,
        ],
        &[],
    );
    assert!(!adopt::Holders::of(&other, ours).ours_beyond_label);
}

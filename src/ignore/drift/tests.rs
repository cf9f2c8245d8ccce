use serde_json::{Value, json};

use super::*;

/// [`super::settle`] as Override (no `ssa: Merge`).
fn settle(body: &mut Value, live: &Value, paths: &[Pointer], manager: &str) -> Settled {
    super::settle(body, live, paths, manager, true)
}

const OURS: &str = "applyset.dev/member-x";

fn p(t: &str) -> Pointer {
    Pointer::parse(t).expect("a pointer")
}

/// A live Deployment with `replicas` and one container, and these managedFields entries.
fn live(replicas: Value, entries: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team", "managedFields": entries},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [
            {"name": "app", "image": "live:2"}
        ]}}}
    })
}

fn body(replicas: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team"},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [
            {"name": "app", "image": "git:1"}
        ]}}}
    })
}

fn entry(manager: &str, operation: &str, subresource: &str, fields: Value) -> Value {
    json!({"manager": manager, "operation": operation, "subresource": subresource,
        "apiVersion": "apps/v1", "fieldsType": "FieldsV1", "fieldsV1": fields})
}

fn replicas() -> Value {
    json!({"f:spec": {"f:replicas": {}}})
}

fn image() -> Value {
    json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
        "k:{\"name\":\"app\"}": {".": {}, "f:name": {}, "f:image": {}}
    }}}}})
}

#[test]
fn only_ours_adopts_the_live_value() {
    let live = live(json!(5), json!([entry(OURS, "Apply", "", replicas())]));
    let mut b = body(json!(2));
    let s = settle(&mut b, &live, &[p("/spec/replicas")], OURS);
    assert_eq!(b["spec"]["replicas"], json!(5));
    assert_eq!(s.adopted, ["/spec/replicas"]);
    assert!(s.stripped.is_empty());
}

#[test]
fn another_apply_manager_strips() {
    let entries = json!([
        entry(OURS, "Apply", "", json!({"f:spec": {}})),
        entry("other-applier", "Apply", "", replicas()),
    ]);
    let mut b = body(json!(2));
    let s = settle(
        &mut b,
        &live(json!(7), entries),
        &[p("/spec/replicas")],
        OURS,
    );
    assert_eq!(b["spec"].get("replicas"), None);
    assert_eq!(s.stripped, ["/spec/replicas"]);
}

#[test]
fn shared_with_another_apply_manager_strips_as_flux() {
    let entries = json!([
        entry(OURS, "Apply", "", replicas()),
        entry("other-applier", "Apply", "", replicas()),
    ]);
    let mut b = body(json!(3));
    settle(
        &mut b,
        &live(json!(2), entries),
        &[p("/spec/replicas")],
        OURS,
    );
    assert_eq!(b["spec"].get("replicas"), None);
}

#[test]
fn a_manager_override_takes_over_adopts_the_live_value() {
    // Override makes these managers' fields ours after the apply: a field ours and not sent
    // would then be removed, so the live value is sent.
    for e in [
        entry("kubectl-edit", "Update", "", replicas()),
        entry("kubectl", "Apply", "", replicas()),
        entry("before-first-apply", "Update", "", replicas()),
        entry(OURS, "Update", "", replicas()),
    ] {
        let entries = json!([entry(OURS, "Apply", "", json!({"f:spec": {}})), e]);
        let mut b = body(json!(2));
        let s = settle(
            &mut b,
            &live(json!(5), entries),
            &[p("/spec/replicas")],
            OURS,
        );
        assert_eq!(b["spec"]["replicas"], 5);
        assert_eq!(s.adopted, ["/spec/replicas"]);
    }
}

#[test]
fn a_named_manager_is_taken_over_too_and_adopts_the_live_value() {
    // kustomize-controller's Apply entry: another tool's (strip) unless the set names it,
    // when it is taken over after this apply (adopt, or the field would be removed).
    let named = vec!["kustomize-controller".to_string()];
    let entries = || {
        json!([
            entry(OURS, "Apply", "", json!({"f:spec": {}})),
            entry("kustomize-controller", "Apply", "", replicas())
        ])
    };
    let mut b = body(json!(2));
    let takers = Takers::new(OURS, &named);
    let s = settle_for(
        &mut b,
        &live(json!(5), entries()),
        &[p("/spec/replicas")],
        takers,
        true,
    );
    assert_eq!(b["spec"]["replicas"], 5);
    assert_eq!(s.adopted, ["/spec/replicas"]);
    // Not named, or under Merge: another Apply manager's field, given up.
    for (takers, overrides) in [(Takers::new(OURS, &[]), true), (takers, false)] {
        let mut b = body(json!(2));
        let s = settle_for(
            &mut b,
            &live(json!(5), entries()),
            &[p("/spec/replicas")],
            takers,
            overrides,
        );
        assert_eq!(b["spec"].get("replicas"), None);
        assert_eq!(s.stripped, ["/spec/replicas"]);
    }
}

#[test]
fn an_update_manager_or_a_subresource_entry_strips_without_taking_the_field() {
    for e in [
        entry("hpa-test", "Update", "scale", replicas()),
        entry("hpa-test", "Update", "", replicas()),
        entry("kubectl-edit", "Update", "scale", replicas()),
        // An Apply entry of a subresource is not an owner of the object's fields.
        entry("scaler", "Apply", "scale", replicas()),
    ] {
        let entries = json!([entry(OURS, "Apply", "", json!({"f:spec": {}})), e]);
        let mut b = body(json!(2));
        let s = settle(
            &mut b,
            &live(json!(5), entries),
            &[p("/spec/replicas")],
            OURS,
        );
        assert_eq!(b["spec"].get("replicas"), None);
        assert_eq!(s.stripped, ["/spec/replicas"]);
    }
}

#[test]
fn an_equal_value_stays_in_the_body() {
    let live = live(json!(2), json!([entry("other", "Apply", "", replicas())]));
    let mut b = body(json!(2));
    let s = settle(&mut b, &live, &[p("/spec/replicas")], OURS);
    assert!(s.is_empty());
    assert_eq!(b, body(json!(2)));
}

#[test]
fn a_field_only_live_has_is_kept_if_ours_and_left_alone_otherwise() {
    let ours = live(json!(5), json!([entry(OURS, "Apply", "", replicas())]));
    let mut b = body(json!(2));
    b["spec"].as_object_mut().map(|s| s.remove("replicas"));
    let s = settle(&mut b, &ours, &[p("/spec/replicas")], OURS);
    assert_eq!(
        b["spec"]["replicas"],
        json!(5),
        "ours: carried, not removed"
    );
    assert_eq!(s.adopted, ["/spec/replicas"]);

    let nobody = live(json!(5), json!([]));
    let mut b = body(json!(2));
    b["spec"].as_object_mut().map(|s| s.remove("replicas"));
    let s = settle(&mut b, &nobody, &[p("/spec/replicas")], OURS);
    assert_eq!(b["spec"].get("replicas"), None);
    assert_eq!(s.stripped, ["/spec/replicas"]);
}

#[test]
fn a_field_live_lacks_is_not_set() {
    let mut l = live(json!(1), json!([entry(OURS, "Apply", "", replicas())]));
    l["spec"].as_object_mut().map(|s| s.remove("replicas"));
    let mut b = body(json!(2));
    settle(&mut b, &l, &[p("/spec/replicas")], OURS);
    assert_eq!(b["spec"].get("replicas"), None);
}

#[test]
fn list_items_map_to_their_merge_key() {
    let path = p("/spec/template/spec/containers/0/image");
    let other = json!([
        entry(
            OURS,
            "Apply",
            "",
            json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
            "k:{\"name\":\"app\"}": {".": {}, "f:name": {}}}}}}})
        ),
        entry("image-updater", "Apply", "", image()),
    ]);
    let mut b = body(json!(2));
    let s = settle(
        &mut b,
        &live(json!(2), other),
        std::slice::from_ref(&path),
        OURS,
    );
    assert_eq!(s.stripped, [path.to_string()]);
    assert_eq!(
        b["spec"]["template"]["spec"]["containers"][0].get("image"),
        None
    );
    assert_eq!(
        b["spec"]["template"]["spec"]["containers"][0]["name"],
        "app"
    );

    let ours = json!([entry(OURS, "Apply", "", image())]);
    let mut b = body(json!(2));
    let s = settle(
        &mut b,
        &live(json!(2), ours),
        std::slice::from_ref(&path),
        OURS,
    );
    assert_eq!(s.adopted, [path.to_string()]);
    assert_eq!(
        b["spec"]["template"]["spec"]["containers"][0]["image"],
        "live:2"
    );
}

#[test]
fn an_unmapped_list_index_counts_as_ours_as_in_flux() {
    // No entry names the item: it cannot be mapped, so the live value is carried.
    let path = p("/spec/template/spec/containers/0/image");
    let mut b = body(json!(2));
    let s = settle(
        &mut b,
        &live(json!(2), json!([])),
        std::slice::from_ref(&path),
        OURS,
    );
    assert_eq!(s.adopted, [path.to_string()]);
    assert_eq!(
        b["spec"]["template"]["spec"]["containers"][0]["image"],
        "live:2"
    );
}

#[test]
fn keys_with_slashes_map_to_their_field() {
    let path = p("/metadata/annotations/example.com~1hash");
    let mut l = live(
        json!(2),
        json!([entry(
            "webhook",
            "Apply",
            "",
            json!({
        "f:metadata": {"f:annotations": {"f:example.com/hash": {}}}})
        )]),
    );
    l["metadata"]["annotations"] = json!({"example.com/hash": "live"});
    let mut b = body(json!(2));
    b["metadata"]["annotations"] = json!({"example.com/hash": "git"});
    let s = settle(&mut b, &l, std::slice::from_ref(&path), OURS);
    assert_eq!(s.stripped, [path.to_string()]);
    assert_eq!(b["metadata"]["annotations"], json!({}));
}

#[test]
fn no_managed_fields_strips_a_live_field() {
    let mut l = live(json!(5), json!([]));
    l["metadata"]
        .as_object_mut()
        .map(|m| m.remove("managedFields"));
    let mut b = body(json!(2));
    let s = settle(&mut b, &l, &[p("/spec/replicas")], OURS);
    assert_eq!(s.stripped, ["/spec/replicas"]);
}

#[test]
fn under_merge_a_kubectl_owned_field_is_stripped() {
    let entries = json!([
        entry(OURS, "Apply", "", json!({"f:spec": {}})),
        entry("kubectl-edit", "Update", "", replicas()),
    ]);
    let mut b = body(json!(2));
    let s = super::settle(
        &mut b,
        &live(json!(5), entries),
        &[p("/spec/replicas")],
        OURS,
        false,
    );
    assert_eq!(b["spec"].get("replicas"), None);
    assert_eq!(s.stripped, ["/spec/replicas"]);
}

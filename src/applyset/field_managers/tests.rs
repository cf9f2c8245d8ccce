//! Unit tests of [`super`]: which entries are taken over, the union of field sets, and the
//! managed fields once taken over (the cases fluxcd/pkg/ssa's patch tests cover, and more).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta};
use serde_json::{Value, json};

use super::*;

const OWNER: &str = "applyset.dev/ns/app";

fn entry(manager: &str, operation: &str, fields: Value) -> ManagedFieldsEntry {
    ManagedFieldsEntry {
        manager: Some(manager.into()),
        operation: Some(operation.into()),
        api_version: Some("v1".into()),
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(FieldsV1(fields)),
        ..Default::default()
    }
}

fn sub(mut e: ManagedFieldsEntry, subresource: &str) -> ManagedFieldsEntry {
    e.subresource = Some(subresource.into());
    e
}

fn names(entries: &[ManagedFieldsEntry]) -> Vec<(String, String)> {
    entries
        .iter()
        .map(|e| (e.manager.clone().unwrap(), e.operation.clone().unwrap()))
        .collect()
}

#[test]
fn kubectl_managers_of_either_operation_are_taken_over() {
    for name in [
        "kubectl",
        "kubectl-edit",
        "kubectl-client-side-apply",
        "kubectl-patch",
        "kubectl-label",
    ] {
        assert!(takes_over(&entry(name, UPDATE, json!({}))), "{name} Update");
        assert!(takes_over(&entry(name, APPLY, json!({}))), "{name} Apply");
    }
}

#[test]
fn before_first_apply_only_as_update() {
    assert!(takes_over(&entry("before-first-apply", UPDATE, json!({}))));
    assert!(takes_over(&entry(
        "before-first-apply-x",
        UPDATE,
        json!({})
    )));
    assert!(!takes_over(&entry("before-first-apply", APPLY, json!({}))));
}

#[test]
fn other_managers_are_not_taken_over() {
    for name in [
        "helm",
        "kube-controller-manager",
        "Kubectl",
        "my-kubectl",
        "flux-client-side-apply",
        "",
    ] {
        assert!(!takes_over(&entry(name, UPDATE, json!({}))), "{name}");
        assert!(!takes_over(&entry(name, APPLY, json!({}))), "{name}");
    }
    assert!(!takes_over(&entry("kubectl", "Other", json!({}))));
    // The operator's own plugin.
    assert!(!takes_over(&entry("kubectl-applyset", UPDATE, json!({}))));
    assert!(takes_over(&entry("kubectl-applyset-x", UPDATE, json!({}))));
    assert!(!takes_over(&ManagedFieldsEntry::default()));
}

#[test]
fn subresource_entries_are_never_taken_over() {
    for s in ["status", "scale"] {
        assert!(!takes_over(&sub(
            entry("kubectl-edit", UPDATE, json!({})),
            s
        )));
        assert!(!takes_over_for(
            &sub(entry(OWNER, UPDATE, json!({})), s),
            OWNER
        ));
    }
    assert!(takes_over(&sub(
        entry("kubectl-edit", UPDATE, json!({})),
        ""
    )));
}

#[test]
fn the_owners_update_entry_is_taken_over_not_its_apply_entry() {
    assert!(!takes_over(&entry(OWNER, UPDATE, json!({}))));
    assert!(takes_over_for(&entry(OWNER, UPDATE, json!({})), OWNER));
    assert!(!takes_over_for(&entry(OWNER, APPLY, json!({})), OWNER));
    // Another set whose manager name extends ours keeps its entry.
    assert!(!takes_over_for(
        &entry(&format!("{OWNER}-2"), UPDATE, json!({})),
        OWNER
    ));
}

#[test]
fn has_takeover_reads_managed_fields() {
    let mut meta = ObjectMeta::default();
    assert!(!has_takeover(&meta));
    meta.managed_fields = Some(vec![entry(OWNER, APPLY, json!({}))]);
    assert!(!has_takeover(&meta));
    meta.managed_fields = Some(vec![
        entry(OWNER, APPLY, json!({})),
        entry("kubectl-edit", UPDATE, json!({})),
    ]);
    assert!(has_takeover(&meta));
}

#[test]
fn union_merges_tries() {
    let a = json!({"f:metadata": {"f:labels": {"f:a": {}}}, "f:data": {"f:x": {}}});
    let b = json!({"f:metadata": {"f:labels": {"f:b": {}}, "f:annotations": {".": {}, "f:c": {}}}, "f:data": {"f:y": {}}});
    assert_eq!(
        union(&a, &b),
        json!({
            "f:data": {"f:x": {}, "f:y": {}},
            "f:metadata": {"f:annotations": {".": {}, "f:c": {}}, "f:labels": {"f:a": {}, "f:b": {}}}
        })
    );
}

#[test]
fn union_of_a_member_and_its_children_keeps_both() {
    let a = json!({"f:spec": {"f:template": {}}});
    let b = json!({"f:spec": {"f:template": {"f:metadata": {}}}});
    let both = json!({"f:spec": {"f:template": {".": {}, "f:metadata": {}}}});
    assert_eq!(union(&a, &b), both);
    assert_eq!(union(&b, &a), both);
    // A member spelt `{".": {}}` is the same member.
    assert_eq!(
        union(&json!({"f:x": {".": {}}}), &json!({})),
        json!({"f:x": {}})
    );
}

#[test]
fn union_of_list_keys_values_and_indices() {
    let a = json!({"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:name": {}}}}});
    let b = json!({"f:spec": {"f:containers": {
        "k:{\"name\":\"app\"}": {"f:env": {"k:{\"name\":\"A\"}": {".": {}, "f:value": {}}}},
        "k:{\"name\":\"side\"}": {".": {}, "f:name": {}}
    }, "f:finalizers": {"v:\"x\"": {}}, "f:args": {"i:0": {}}}});
    assert_eq!(
        union(&a, &b),
        json!({"f:spec": {
            "f:args": {"i:0": {}},
            "f:containers": {
                "k:{\"name\":\"app\"}": {".": {}, "f:env": {"k:{\"name\":\"A\"}": {".": {}, "f:value": {}}}, "f:image": {}, "f:name": {}},
                "k:{\"name\":\"side\"}": {".": {}, "f:name": {}}
            },
            "f:finalizers": {"v:\"x\"": {}}
        }})
    );
}

#[test]
fn union_with_empty_is_identity_and_idempotent() {
    let a = json!({"f:data": {".": {}, "f:x": {}}});
    assert_eq!(union(&a, &json!({})), a);
    assert_eq!(union(&json!({}), &a), a);
    assert_eq!(union(&a, &a), a);
}

#[test]
fn nothing_to_take_over_is_none() {
    assert_eq!(taken_over(&[], OWNER), None);
    let managed = [
        entry(OWNER, APPLY, json!({"f:data": {"f:a": {}}})),
        entry("helm", UPDATE, json!({"f:data": {"f:b": {}}})),
        sub(
            entry("kubectl-edit", UPDATE, json!({"f:status": {}})),
            "status",
        ),
    ];
    assert_eq!(taken_over(&managed, OWNER), None);
}

#[test]
fn matches_are_merged_into_the_owners_apply_entry() {
    let managed = [
        entry(
            "kubectl-client-side-apply",
            UPDATE,
            json!({"f:data": {"f:b": {}}}),
        ),
        entry(OWNER, APPLY, json!({"f:data": {"f:a": {}}})),
        entry("helm", UPDATE, json!({"f:data": {"f:h": {}}})),
        entry(
            "kubectl-edit",
            UPDATE,
            json!({"f:data": {"f:a": {}, "f:c": {}}}),
        ),
        sub(
            entry(
                "kubectl-edit",
                UPDATE,
                json!({"f:spec": {"f:replicas": {}}}),
            ),
            "scale",
        ),
        entry("before-first-apply", UPDATE, json!({"f:data": {"f:d": {}}})),
        entry(OWNER, UPDATE, json!({"f:data": {"f:e": {}}})),
    ];
    let after = taken_over(&managed, OWNER).unwrap();
    assert_eq!(
        names(&after),
        [
            ("helm".into(), UPDATE.into()),
            ("kubectl-edit".into(), UPDATE.into()),
            (OWNER.into(), APPLY.into())
        ]
    );
    assert_eq!(after[1].subresource.as_deref(), Some("scale"));
    assert_eq!(
        after[2].fields_v1.as_ref().unwrap().0,
        json!({"f:data": {"f:a": {}, "f:b": {}, "f:c": {}, "f:d": {}, "f:e": {}}})
    );
}

#[test]
fn without_an_apply_entry_the_first_match_becomes_it() {
    let mut first = entry("kubectl-create", UPDATE, json!({"f:data": {"f:a": {}}}));
    first.time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
    ));
    let managed = [
        entry("helm", UPDATE, json!({"f:data": {"f:h": {}}})),
        first.clone(),
        entry("kubectl-edit", UPDATE, json!({"f:data": {"f:b": {}}})),
    ];
    let after = taken_over(&managed, OWNER).unwrap();
    assert_eq!(
        names(&after),
        [("helm".into(), UPDATE.into()), (OWNER.into(), APPLY.into())]
    );
    assert_eq!(
        after[1].time, first.time,
        "the renamed entry keeps its other fields"
    );
    assert_eq!(
        after[1].fields_v1.as_ref().unwrap().0,
        json!({"f:data": {"f:a": {}, "f:b": {}}})
    );
}

#[test]
fn a_lone_match_is_renamed() {
    let managed = [entry("kubectl", APPLY, json!({"f:data": {"f:a": {}}}))];
    let after = taken_over(&managed, OWNER).unwrap();
    assert_eq!(names(&after), [(OWNER.into(), APPLY.into())]);
}

#[test]
fn the_last_owner_apply_entry_is_the_target() {
    let managed = [
        entry(OWNER, APPLY, json!({"f:data": {"f:a": {}}})),
        entry(OWNER, APPLY, json!({"f:data": {"f:z": {}}})),
        entry("kubectl-edit", UPDATE, json!({"f:data": {"f:b": {}}})),
    ];
    let after = taken_over(&managed, OWNER).unwrap();
    assert_eq!(after.len(), 2);
    assert_eq!(
        after[0].fields_v1.as_ref().unwrap().0,
        json!({"f:data": {"f:a": {}}})
    );
    assert_eq!(
        after[1].fields_v1.as_ref().unwrap().0,
        json!({"f:data": {"f:b": {}, "f:z": {}}})
    );
}

#[test]
fn absent_fields_count_as_empty() {
    let mut owner = entry(OWNER, APPLY, json!({}));
    owner.fields_v1 = None;
    let managed = [
        owner,
        entry("kubectl-edit", UPDATE, json!({"f:data": {"f:b": {}}})),
    ];
    let after = taken_over(&managed, OWNER).unwrap();
    assert_eq!(
        after[0].fields_v1.as_ref().unwrap().0,
        json!({"f:data": {"f:b": {}}})
    );
    let mut edit = entry("kubectl-edit", UPDATE, json!({}));
    edit.fields_v1 = None;
    let managed = [entry(OWNER, APPLY, json!({"f:data": {"f:a": {}}})), edit];
    let after = taken_over(&managed, OWNER).unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(
        after[0].fields_v1.as_ref().unwrap().0,
        json!({"f:data": {"f:a": {}}})
    );
}

#[test]
fn cleanup_paths_skip_declared_and_absent_keys() {
    let strings = |pairs: &[&str]| {
        Some(
            pairs
                .iter()
                .map(|k| ((*k).to_string(), "x".to_string()))
                .collect(),
        )
    };
    let live = ObjectMeta {
        annotations: strings(&[
            "kubectl.kubernetes.io/last-applied-configuration",
            "fluxcd.io/sync-checksum",
            "other",
        ]),
        labels: strings(&["fluxcd.io/sync-gc-mark", "app"]),
        ..Default::default()
    };
    let declared = ObjectMeta {
        annotations: strings(&["fluxcd.io/sync-checksum"]),
        ..Default::default()
    };
    assert_eq!(
        cleanup_paths(&live, &declared),
        [
            "/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration",
            "/metadata/labels/fluxcd.io~1sync-gc-mark"
        ]
    );
    assert!(cleanup_paths(&ObjectMeta::default(), &declared).is_empty());
}

#[test]
fn shows_work_for_entries_to_take_over_or_leftovers() {
    let mut meta = ObjectMeta {
        managed_fields: Some(vec![
            entry(OWNER, APPLY, json!({})),
            entry("helm", UPDATE, json!({})),
        ]),
        ..Default::default()
    };
    assert!(!shows_work(&meta, OWNER));
    meta.labels = Some([("fluxcd.io/sync-gc-mark".to_string(), "x".to_string())].into());
    assert!(shows_work(&meta, OWNER));
    meta.labels = None;
    meta.annotations = Some([(CLEANUP_ANNOTATIONS[0].to_string(), "{}".to_string())].into());
    assert!(shows_work(&meta, OWNER));
    meta.annotations = None;
    meta.managed_fields = Some(vec![entry(OWNER, UPDATE, json!({}))]);
    assert!(shows_work(&meta, OWNER));
}

/// An annotation and a label of a per-object control, as `kubectl annotate` / `label` own them.
fn marks_fields(extra: Value) -> Value {
    let mut v = json!({"f:metadata": {
        "f:annotations": {".": {}, "f:applyset.dev/prune": {}},
        "f:labels": {"f:kustomize.toolkit.fluxcd.io/force": {}, "f:app": {}}
    }});
    if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
        v.extend(extra.clone());
    }
    v
}

#[test]
fn control_keys_stay_with_the_entry_that_owns_them() {
    let managed = vec![
        entry(OWNER, "Apply", json!({"f:data": {"f:a": {}}})),
        entry(
            "kubectl-annotate",
            "Update",
            marks_fields(json!({"f:data": {"f:b": {}}})),
        ),
    ];
    let out = taken_over(&managed, OWNER).expect("the other fields are taken over");
    assert_eq!(
        names(&out),
        vec![
            ("kubectl-annotate".into(), "Update".into()),
            (OWNER.into(), "Apply".into())
        ]
    );
    assert_eq!(
        out[0].fields_v1.as_ref().unwrap().0,
        json!({"f:metadata": {
            "f:annotations": {".": {}, "f:applyset.dev/prune": {}},
            "f:labels": {"f:kustomize.toolkit.fluxcd.io/force": {}}
        }})
    );
    assert_eq!(
        out[1].fields_v1.as_ref().unwrap().0,
        json!({"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:app": {}}}})
    );
}

#[test]
fn an_entry_of_control_keys_only_is_left_alone() {
    for key in ["ssa", "prune", "force", "reconcile"] {
        for prefix in ["applyset.dev/", "kustomize.toolkit.fluxcd.io/"] {
            let f = format!("f:{prefix}{key}");
            let managed = vec![
                entry(OWNER, "Apply", json!({"f:data": {"f:a": {}}})),
                entry(
                    "kubectl-label",
                    "Update",
                    json!({"f:metadata": {"f:labels": {".": {}, f.clone(): {}}}}),
                ),
            ];
            assert_eq!(taken_over(&managed, OWNER), None, "{f}");
            let meta = ObjectMeta {
                managed_fields: Some(managed),
                ..Default::default()
            };
            assert!(!shows_work(&meta, OWNER), "{f}: no work, no loop");
            assert!(!has_takeover(&meta), "{f}");
        }
    }
}

#[test]
fn other_keys_of_the_prefixes_are_taken_over() {
    // Not a control: another key under the prefix, and a control key under another prefix.
    let managed = vec![entry(
        "kubectl-annotate",
        "Update",
        json!({"f:metadata": {"f:annotations": {
            "f:applyset.dev/prune-later": {}, "f:example.com/prune": {}
        }}}),
    )];
    let meta = ObjectMeta {
        managed_fields: Some(managed.clone()),
        ..Default::default()
    };
    assert!(shows_work(&meta, OWNER));
    let out = taken_over(&managed, OWNER).expect("taken over");
    assert_eq!(names(&out), vec![(OWNER.into(), "Apply".into())]);
}

#[test]
fn without_an_apply_entry_the_control_keys_stay_and_the_rest_is_renamed() {
    let managed = vec![entry("kubectl-annotate", "Update", marks_fields(json!({})))];
    let out = taken_over(&managed, OWNER).expect("f:app is taken over");
    assert_eq!(
        names(&out),
        vec![
            ("kubectl-annotate".into(), "Update".into()),
            (OWNER.into(), "Apply".into())
        ]
    );
    assert_eq!(
        out[1].fields_v1.as_ref().unwrap().0,
        json!({"f:metadata": {"f:labels": {"f:app": {}}}})
    );
}

fn named(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| (*s).to_string()).collect()
}

#[test]
fn named_managers_are_taken_over_by_exact_name_apply_or_update() {
    let list = named(&["kustomize-controller"]);
    let takers = Takers::new(OWNER, &list);
    for op in [APPLY, UPDATE] {
        assert!(
            takers.takes(&entry("kustomize-controller", op, json!({}))),
            "{op}"
        );
    }
    assert!(!takers.takes(&entry("kustomize-controller-x", APPLY, json!({}))));
    assert!(!takers.takes(&entry("kustomize", APPLY, json!({}))));
    assert!(!takers.takes(&entry("Kustomize-Controller", APPLY, json!({}))));
    assert!(!takers.takes(&entry("kustomize-controller", "Other", json!({}))));
    assert!(!takers.takes(&sub(
        entry("kustomize-controller", UPDATE, json!({})),
        "status"
    )));
    // The kubectl managers and the owner's Update entry stay taken over.
    assert!(takers.takes(&entry("kubectl-edit", UPDATE, json!({}))));
    assert!(takers.takes(&entry(OWNER, UPDATE, json!({}))));
    assert!(!takers.takes(&entry(OWNER, APPLY, json!({}))));
    // No name: none of it.
    let none = Takers::new(OWNER, &[]);
    assert!(!none.takes(&entry("kustomize-controller", APPLY, json!({}))));
    assert!(!none.names_manager("kustomize-controller"));
}

#[test]
fn named_in_and_shows_work_for_see_a_named_entry() {
    let list = named(&["kustomize-controller"]);
    let takers = Takers::new(OWNER, &list);
    let meta = |manager: &str| ObjectMeta {
        managed_fields: Some(vec![
            entry(OWNER, APPLY, json!({"f:data": {}})),
            entry(manager, APPLY, json!({"f:data": {"f:a": {}}})),
        ]),
        ..Default::default()
    };
    assert!(takers.named_in(&meta("kustomize-controller")));
    assert!(shows_work_for(&meta("kustomize-controller"), takers));
    assert!(!takers.named_in(&meta("helm")));
    assert!(!shows_work_for(&meta("helm"), takers));
    assert!(!Takers::new(OWNER, &[]).named_in(&meta("kustomize-controller")));
    assert!(!shows_work(&meta("kustomize-controller"), OWNER));
    // A named entry of control keys only is still taken over (the tool's own manifest).
    let marks = ObjectMeta {
        managed_fields: Some(vec![entry(
            "kustomize-controller",
            APPLY,
            marks_fields(json!({})),
        )]),
        ..Default::default()
    };
    assert!(shows_work_for(&marks, takers));
}

#[test]
fn a_named_entry_is_merged_whole_control_keys_included() {
    let list = named(&["kustomize-controller"]);
    let managed = vec![
        entry(
            "kustomize-controller",
            APPLY,
            marks_fields(json!({"f:spec": {"f:replicas": {}}})),
        ),
        entry(OWNER, APPLY, json!({"f:spec": {"f:paused": {}}})),
        entry("kube-controller-manager", UPDATE, json!({"f:status": {}})),
    ];
    let out = taken_over_by(&managed, Takers::new(OWNER, &list)).unwrap();
    assert_eq!(
        names(&out),
        [
            ("kube-controller-manager".to_string(), UPDATE.to_string()),
            (OWNER.to_string(), APPLY.to_string())
        ]
    );
    let merged = &out[1].fields_v1.as_ref().unwrap().0;
    assert_eq!(merged["f:spec"], json!({"f:paused": {}, "f:replicas": {}}));
    assert!(
        merged.pointer("/f:metadata/f:annotations").is_some(),
        "{merged}"
    );
    // Without the name, the same entry is not touched.
    assert_eq!(taken_over_by(&managed, Takers::new(OWNER, &[])), None);
}

#[test]
fn a_lone_named_entry_becomes_the_owners_apply_entry() {
    let list = named(&["kustomize-controller"]);
    let managed = vec![entry("kustomize-controller", UPDATE, json!({"f:data": {}}))];
    let out = taken_over_by(&managed, Takers::new(OWNER, &list)).unwrap();
    assert_eq!(names(&out), [(OWNER.to_string(), APPLY.to_string())]);
    assert_eq!(out[0].fields_v1.as_ref().unwrap().0, json!({"f:data": {}}));
}

#[test]
fn flux_labels_to_remove_are_the_present_undeclared_ones_as_escaped_pointers() {
    let meta = |keys: &[&str]| ObjectMeta {
        labels: Some(
            keys.iter()
                .map(|k| (k.to_string(), "v".to_string()))
                .collect(),
        ),
        ..Default::default()
    };
    let none = ObjectMeta::default();
    let all = flux_labels_to_remove(&meta(&FLUX_OWNER_LABELS), &none);
    assert_eq!(all, FLUX_OWNER_LABELS);
    assert_eq!(
        label_paths(&all),
        [
            "/metadata/labels/kustomize.toolkit.fluxcd.io~1name",
            "/metadata/labels/kustomize.toolkit.fluxcd.io~1namespace"
        ]
    );
    assert_eq!(
        flux_labels_to_remove(
            &meta(&["kustomize.toolkit.fluxcd.io/namespace", "app"]),
            &none
        ),
        ["kustomize.toolkit.fluxcd.io/namespace"]
    );
    // Declared by the manifest: kept.
    assert_eq!(
        flux_labels_to_remove(
            &meta(&FLUX_OWNER_LABELS),
            &meta(&["kustomize.toolkit.fluxcd.io/name"])
        ),
        ["kustomize.toolkit.fluxcd.io/namespace"]
    );
    assert!(flux_labels_to_remove(&none, &none).is_empty());
    assert!(flux_labelled(&meta(&["kustomize.toolkit.fluxcd.io/name"])));
    assert!(!flux_labelled(&meta(&["app"])));
    assert!(!flux_labelled(&none));
}

#[test]
fn without_labels_drops_their_ownership_and_emptied_entries() {
    let labels = |extra: Value| {
        let mut l = json!({
            "f:kustomize.toolkit.fluxcd.io/name": {},
            "f:kustomize.toolkit.fluxcd.io/namespace": {}
        });
        if let (Some(l), Some(e)) = (l.as_object_mut(), extra.as_object()) {
            l.extend(e.clone());
        }
        json!({"f:metadata": {"f:labels": l}})
    };
    let entries = vec![
        entry(OWNER, APPLY, {
            let mut f = labels(json!({"f:app": {}}));
            f["f:data"] = json!({"f:a": {}});
            f
        }),
        entry("other", UPDATE, labels(json!({}))),
        entry("kept", UPDATE, labels(json!({".": {}}))),
        entry("none", UPDATE, json!({"f:spec": {}})),
        ManagedFieldsEntry {
            manager: Some("no-fields".into()),
            ..Default::default()
        },
    ];
    let out = without_labels(entries, &FLUX_OWNER_LABELS);
    let managers: Vec<&str> = out.iter().filter_map(|e| e.manager.as_deref()).collect();
    assert_eq!(managers, [OWNER, "kept", "none", "no-fields"]);
    assert_eq!(
        out[0].fields_v1.as_ref().unwrap().0,
        json!({"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:app": {}}}})
    );
    assert_eq!(
        out[1].fields_v1.as_ref().unwrap().0,
        json!({"f:metadata": {"f:labels": {".": {}}}})
    );
    assert_eq!(out[2].fields_v1.as_ref().unwrap().0, json!({"f:spec": {}}));
}

#[test]
fn validate_accepts_exact_names_of_other_tools() {
    let own = "applyset.dev/ns/flux-system/app";
    assert_eq!(validate(&[], own), Ok(()));
    assert_eq!(
        validate(&named(&["kustomize-controller", "helm-controller"]), own),
        Ok(())
    );
    let sixteen: Vec<String> = (0..MAX_NAMED).map(|i| format!("tool-{i}")).collect();
    assert_eq!(validate(&sixteen, own), Ok(()));
    assert_eq!(validate(&["a".repeat(MAX_NAME_LEN)], own), Ok(()));
    // Kubernetes' managers are refused by exact name only.
    assert_eq!(
        validate(&named(&["kube-controller-manager-x", "kubelet2"]), own),
        Ok(())
    );
}

#[test]
fn validate_refuses_each_bad_name_naming_its_index() {
    let own = "applyset.dev/ns/flux-system/app";
    let cases: [(&str, &str); 13] = [
        ("", "spec.takeOverFieldManagers[1] is empty"),
        ("kustomize-*", "is a pattern, and names are exact"),
        ("*", "is a pattern"),
        (" kustomize-controller", "a space at either end"),
        ("kustomize\ncontroller", "control character"),
        (own, "is this set's own field manager"),
        ("kubectl-applyset", "the kubectl plugin's"),
        ("applyset.dev/adoption", "a field manager of this operator"),
        (
            "applyset.dev/ns/other/set",
            "a field manager of this operator",
        ),
        ("kube-controller-manager", "of Kubernetes itself"),
        ("kube-scheduler", "the controller and the set then fight"),
        ("kubelet", "of Kubernetes itself"),
        ("kube-apiserver", "of Kubernetes itself"),
    ];
    for (bad, said) in cases {
        let err = validate(&named(&["kustomize-controller", bad]), own)
            .expect_err(bad)
            .to_string();
        assert!(
            err.starts_with("spec.takeOverFieldManagers[1]"),
            "{bad:?}: {err}"
        );
        assert!(err.contains(said), "{bad:?}: {err}");
    }
    let long = "a".repeat(MAX_NAME_LEN + 1);
    let err = validate(&[long], own).expect_err("long").to_string();
    assert!(err.contains("[0] is 129 characters long"), "{err}");
    let seventeen: Vec<String> = (0..=MAX_NAMED).map(|i| format!("tool-{i}")).collect();
    assert_eq!(
        validate(&seventeen, own),
        Err(NamedError::TooMany { count: 17 })
    );
}

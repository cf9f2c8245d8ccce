//! End to end through the in-process controller against the real control plane: applying,
//! planning and pruning sets, the KEP-3659 parent conventions, field ownership, conflicts,
//! ClusterApplySets with CRDs, Namespaces and cluster-scoped members.

mod support;

use support::operator;

use std::collections::BTreeSet;

use applyset_operator::api::MemberRef;
use kube::ResourceExt;
use operator::*;
use serde_json::json;

fn member(group: &str, kind: &str, namespace: Option<&str>, name: &str) -> MemberRef {
    MemberRef {
        group: group.into(),
        kind: kind.into(),
        namespace: namespace.map(Into::into),
        name: name.into(),
    }
}

fn sorted(v: &[MemberRef]) -> Vec<MemberRef> {
    let mut v = v.to_vec();
    v.sort();
    v
}

/// The KEP's flow: set1 applied → set2 (partly overlapping) in Plan mode changes nothing and
/// its plan lists the prune → set2 applied prunes exactly that → applying again changes
/// nothing, as the summary shows.
#[tokio::test]
async fn kep_flow_plan_then_apply_then_no_op() {
    let h = Harness::new("kep").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("kep");

    let a = configmap("a", json!({"k": "a"}));
    let b = configmap("b", json!({"k": "b"}));
    let c = configmap("c", json!({"k": "c"}));
    let s = secret("s");
    let svc = service("svc");

    // set1
    set.create(json!({"manifests": [a, b, s, svc]})).await;
    let st = set.wait_ready().await;
    let sum = summary(&st);
    assert_eq!(sum.members, 4, "{}", status_json(&st));
    assert_eq!(sum.created, 4, "{}", status_json(&st));
    assert_eq!(sum.pruned, 0, "{}", status_json(&st));
    assert_eq!(
        sorted(&st.members),
        sorted(&[
            member("", "ConfigMap", Some(ns), "a"),
            member("", "ConfigMap", Some(ns), "b"),
            member("", "Secret", Some(ns), "s"),
            member("", "Service", Some(ns), "svc"),
        ]),
        "status.members: {}",
        status_json(&st)
    );
    assert!(st.last_error.is_none(), "{}", status_json(&st));
    let objs = vec![
        (configmap_ar(), Some(ns.to_owned()), "a".to_owned()),
        (configmap_ar(), Some(ns.to_owned()), "b".to_owned()),
        (secret_ar(), Some(ns.to_owned()), "s".to_owned()),
        (service_ar(), Some(ns.to_owned()), "svc".to_owned()),
    ];
    let before = resource_versions(&h.client, &objs).await;

    // set2 in Plan mode: drop b and the Secret, add c.
    set.patch_spec(json!({"manifests": [a, c, svc], "mode": "Plan"}))
        .await;
    let st = set.wait_ready_reason(None, "PlanReady").await;
    let plan = st
        .plan
        .clone()
        .unwrap_or_else(|| panic!("no status.plan in Plan mode: {}", status_json(&st)));
    assert_eq!(
        sorted(&plan.create),
        vec![member("", "ConfigMap", Some(ns), "c")],
        "plan.create: {}",
        status_json(&st)
    );
    assert_eq!(
        sorted(&plan.prune),
        sorted(&[
            member("", "ConfigMap", Some(ns), "b"),
            member("", "Secret", Some(ns), "s"),
        ]),
        "plan.prune: {}",
        status_json(&st)
    );
    assert!(plan.update.is_empty(), "plan.update: {}", status_json(&st));
    assert_eq!(plan.unchanged, 2, "plan.unchanged: {}", status_json(&st));

    // Plan writes nothing, even after more reconciles.
    wait_reconciles(&op, 2).await;
    assert!(
        !exists(&h.client, &configmap_ar(), Some(ns), "c").await,
        "Plan mode must not create c"
    );
    assert_eq!(
        resource_versions(&h.client, &objs).await,
        before,
        "Plan mode must not change or delete any member"
    );

    // set2 applied: prunes exactly b and the Secret, creates c.
    set.patch_spec(json!({"mode": "Apply"})).await;
    let st = set.wait_ready().await;
    let sum = summary(&st);
    assert_eq!(sum.members, 3, "{}", status_json(&st));
    assert_eq!(sum.created, 1, "{}", status_json(&st));
    assert_eq!(sum.pruned, 2, "{}", status_json(&st));
    assert_eq!(sum.unchanged, 2, "{}", status_json(&st));
    assert!(
        !exists(&h.client, &configmap_ar(), Some(ns), "b").await,
        "b pruned"
    );
    assert!(
        !exists(&h.client, &secret_ar(), Some(ns), "s").await,
        "Secret s pruned"
    );
    assert!(
        exists(&h.client, &configmap_ar(), Some(ns), "c").await,
        "c created"
    );
    assert_eq!(
        list_part_of(&h.client, &configmap_ar(), Some(ns), &set.id()).await,
        BTreeSet::from(["a".to_owned(), "c".to_owned()])
    );
    assert!(
        st.plan.is_none(),
        "status.plan cleared in Apply mode: {}",
        status_json(&st)
    );
    let members2 = vec![
        (configmap_ar(), Some(ns.to_owned()), "a".to_owned()),
        (configmap_ar(), Some(ns.to_owned()), "c".to_owned()),
        (service_ar(), Some(ns.to_owned()), "svc".to_owned()),
    ];
    let after_apply = resource_versions(&h.client, &members2).await;
    // a and svc were not rewritten by the apply of set2.
    for key in ["ConfigMap/{ns}/a", "Service/{ns}/svc"] {
        let key = key.replace("{ns}", ns);
        assert_eq!(after_apply[&key], before[&key], "{key} must be unchanged");
    }

    // Applying the same set again (a spec change that leaves the desired set as it is)
    // changes nothing, and the summary says so.
    set.patch_spec(json!({"interval": "6s"})).await;
    let st = set.wait_ready().await;
    let sum = summary(&st);
    assert_eq!(sum.members, 3, "{}", status_json(&st));
    assert_eq!(sum.unchanged, 3, "{}", status_json(&st));
    assert_eq!(sum.created, 0, "{}", status_json(&st));
    assert_eq!(sum.configured, 0, "{}", status_json(&st));
    assert_eq!(sum.pruned, 0, "{}", status_json(&st));
    assert_eq!(
        resource_versions(&h.client, &members2).await,
        after_apply,
        "re-applying an unchanged set must not write any member"
    );
    stop(op).await;
}

/// Parent labels and annotations exactly per SPEC §3, against an ID computed by the test.
#[tokio::test]
async fn parent_labels_and_annotations_follow_the_conventions() {
    // The test's own ID function against kubectl's fixtures (SPEC §3.2).
    assert_eq!(
        compute_id("my-set", "test", "Secret", ""),
        "applyset-0eFHV8ySqp7XoShsGvyWFQD3s96yqwHmzc4e0HR1dsY-v1"
    );
    assert_eq!(
        compute_id("my-set", "", "ApplySet", "company.com"),
        "applyset-rhp1a-HVAVT_dFgyEygyA1BEB82HPp2o10UiFTpqtAs-v1"
    );
    assert_eq!(
        compute_id("test", "default", "ConfigMap", ""),
        "applyset-XYWvxXDUlCqMdjmmY1arThcdGiF0cvBW6sAfSMWYUdE-v1"
    );

    let h = Harness::new("conv").await;
    let op = h.start_operator_cross_namespace();
    let ns = h.ns.as_str();
    let set = h.applyset("conventions");
    let id = compute_id("conventions", ns, "ApplySet", "applyset.dev");

    set.create(json!({"manifests": [
        configmap("cm1", json!({"k": "v"})),
        secret("s1"),
        deployment("d1"),
    ]}))
    .await;
    let st = set.wait_ready().await;
    assert_eq!(
        st.applyset_id.as_deref(),
        Some(id.as_str()),
        "status.applySetID: {}",
        status_json(&st)
    );

    let parent = set.live().await;
    assert_eq!(
        parent.labels().get(LABEL_ID).map(String::as_str),
        Some(id.as_str()),
        "parent id label; labels: {:?}",
        parent.labels()
    );
    let ann = parent.annotations();
    let tooling = ann.get(ANNOTATION_TOOLING).cloned().unwrap_or_default();
    assert!(
        tooling.starts_with("applyset-operator/") && tooling.len() > "applyset-operator/".len(),
        "tooling annotation {tooling:?}"
    );
    assert_eq!(
        ann.get(ANNOTATION_GROUP_KINDS).map(String::as_str),
        Some("ConfigMap,Deployment.apps,Secret"),
        "contains-group-kinds; annotations: {ann:?}"
    );
    assert_eq!(
        ann.get(ANNOTATION_NAMESPACES).map(String::as_str),
        Some(""),
        "additional-namespaces must be present and empty; annotations: {ann:?}"
    );
    // Parent metadata is written with server-side apply by its own manager (SPEC §5).
    let ms = managers(&parent);
    assert!(
        ms.iter()
            .any(|(m, op)| m == PARENT_MANAGER && op == "Apply"),
        "parent managedFields should have an Apply entry by {PARENT_MANAGER}: {ms:?}"
    );
    for m in ["cm1"] {
        let obj = must_get(&h.client, &configmap_ar(), Some(ns), m).await;
        assert_member_of(&obj, &id, &set.manager());
    }
    assert_member_of(
        &must_get(&h.client, &secret_ar(), Some(ns), "s1").await,
        &id,
        &set.manager(),
    );
    assert_member_of(
        &must_get(&h.client, &deployment_ar(), Some(ns), "d1").await,
        &id,
        &set.manager(),
    );

    // Members in two other namespaces: additional-namespaces lists them, sorted.
    let mut others = [
        h.extra_namespace("conv-z").await,
        h.extra_namespace("conv-b").await,
    ];
    set.patch_spec(json!({"manifests": [
        configmap("cm1", json!({"k": "v"})),
        secret("s1"),
        deployment("d1"),
        configmap_in(&others[0], "remote", json!({"k": "v"})),
        configmap_in(&others[1], "remote", json!({"k": "v"})),
    ]}))
    .await;
    set.wait_ready().await;
    others.sort();
    let expected = format!("{},{}", others[0], others[1]);
    let ann = set.live().await.annotations().clone();
    assert_eq!(
        ann.get(ANNOTATION_NAMESPACES),
        Some(&expected),
        "additional-namespaces; annotations: {ann:?}"
    );
    assert_eq!(
        ann.get(ANNOTATION_GROUP_KINDS).map(String::as_str),
        Some("ConfigMap,Deployment.apps,Secret")
    );
    for o in &others {
        assert_member_of(
            &must_get(&h.client, &configmap_ar(), Some(o), "remote").await,
            &id,
            &set.manager(),
        );
    }

    // After a successful prune the parent shrinks to exactly the new set.
    set.patch_spec(json!({"manifests": [deployment("d1"), configmap("cm1", json!({"k": "v"}))]}))
        .await;
    set.wait_ready().await;
    let ann = set.live().await.annotations().clone();
    assert_eq!(
        ann.get(ANNOTATION_GROUP_KINDS).map(String::as_str),
        Some("ConfigMap,Deployment.apps"),
        "contains-group-kinds after shrink; annotations: {ann:?}"
    );
    assert_eq!(
        ann.get(ANNOTATION_NAMESPACES).map(String::as_str),
        Some(""),
        "additional-namespaces after shrink; annotations: {ann:?}"
    );
    for o in &others {
        assert!(
            !exists(&h.client, &configmap_ar(), Some(o), "remote").await,
            "{o}/remote pruned"
        );
    }
    assert!(
        !exists(&h.client, &secret_ar(), Some(ns), "s1").await,
        "s1 pruned"
    );
    stop(op).await;
}

/// Every member carries part-of and its parent's manager; two ApplySets with ConfigMaps in
/// the same namespace never touch each other's objects.
#[tokio::test]
async fn members_are_labelled_and_sets_do_not_touch_each_other() {
    let h = Harness::new("two").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let one = h.applyset("one");
    let two = h.applyset("two");
    one.create(json!({"manifests": [
        configmap("one-a", json!({"k": "1"})), configmap("one-b", json!({"k": "1"}))]}))
        .await;
    two.create(json!({"manifests": [
        configmap("two-a", json!({"k": "2"})), configmap("two-b", json!({"k": "2"}))]}))
        .await;
    one.wait_ready().await;
    two.wait_ready().await;
    assert_ne!(one.id(), two.id());

    for (set, names) in [(&one, ["one-a", "one-b"]), (&two, ["two-a", "two-b"])] {
        for n in names {
            let obj = must_get(&h.client, &configmap_ar(), Some(ns), n).await;
            assert_member_of(&obj, &set.id(), &set.manager());
        }
        assert_eq!(
            list_part_of(&h.client, &configmap_ar(), Some(ns), &set.id()).await,
            names.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>(),
            "objects labelled part-of {}",
            set.display()
        );
    }

    let two_objs = vec![
        (configmap_ar(), Some(ns.to_owned()), "two-a".to_owned()),
        (configmap_ar(), Some(ns.to_owned()), "two-b".to_owned()),
    ];
    let two_rvs = resource_versions(&h.client, &two_objs).await;

    // Shrinking one prunes only its own object.
    one.patch_spec(json!({"manifests": [configmap("one-a", json!({"k": "1"}))]}))
        .await;
    let st = one.wait_ready().await;
    assert_eq!(summary(&st).pruned, 1, "{}", status_json(&st));
    assert!(
        !exists(&h.client, &configmap_ar(), Some(ns), "one-b").await,
        "one-b pruned"
    );
    wait_reconciles(&op, 2).await;
    assert_eq!(
        resource_versions(&h.client, &two_objs).await,
        two_rvs,
        "shrinking ApplySet one must not touch ApplySet two's ConfigMaps"
    );
    for n in ["two-a", "two-b"] {
        assert_member_of(
            &must_get(&h.client, &configmap_ar(), Some(ns), n).await,
            &two.id(),
            &two.manager(),
        );
    }

    // And the other way round.
    let one_rv = rv(&h.client, &configmap_ar(), Some(ns), "one-a").await;
    two.patch_spec(json!({"manifests": [configmap("two-b", json!({"k": "2"}))]}))
        .await;
    two.wait_ready().await;
    assert!(
        !exists(&h.client, &configmap_ar(), Some(ns), "two-a").await,
        "two-a pruned"
    );
    wait_reconciles(&op, 2).await;
    assert_eq!(
        rv(&h.client, &configmap_ar(), Some(ns), "one-a").await,
        one_rv
    );
    assert_member_of(
        &must_get(&h.client, &configmap_ar(), Some(ns), "one-a").await,
        &one.id(),
        &one.manager(),
    );
    stop(op).await;
}

/// A field owned by another manager: Conflict naming it; with force the apply succeeds.
#[tokio::test]
async fn conflict_names_the_other_manager_and_force_takes_over() {
    let h = Harness::new("conflict").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    ssa(
        &h.client,
        &configmap_ar(),
        Some(ns),
        "someone-else",
        configmap("shared", json!({"key": "x"})),
    )
    .await;

    // The object is someone else's: taking it over needs the opt-in (tests/tenancy.rs
    // shows the refusal without it).
    let set = h.applyset("conflict");
    set.create(json!({"adoptExisting": true,
        "manifests": [configmap("shared", json!({"key": "y"}))]}))
        .await;
    let st = set.wait_ready_reason(Some("False"), "Conflict").await;
    let msg = ready(&st).message.clone();
    assert!(
        msg.contains("someone-else"),
        "the Conflict message must name the other manager: {msg:?}\n{}",
        status_json(&st)
    );
    assert!(
        summary(&st).conflicts >= 1,
        "summary.conflicts: {}",
        status_json(&st)
    );
    let cm = must_get(&h.client, &configmap_ar(), Some(ns), "shared").await;
    assert_eq!(
        cm.data["data"]["key"], "x",
        "the conflicting value must not be written"
    );

    set.patch_spec(json!({"force": true})).await;
    let st = set.wait_ready().await;
    assert!(
        st.last_error.is_none(),
        "lastError cleared on success: {}",
        status_json(&st)
    );
    let cm = must_get(&h.client, &configmap_ar(), Some(ns), "shared").await;
    assert_eq!(cm.data["data"]["key"], "y", "force takes the field over");
    assert_member_of(&cm, &set.id(), &set.manager());
    stop(op).await;
}

/// A ClusterApplySet installs a CRD, a Namespace, custom resources of that CRD and a
/// cluster-scoped ClusterRole; removing a custom resource and the ClusterRole prunes them.
#[tokio::test]
async fn cluster_applyset_with_crd_namespace_custom_resources_and_cluster_scoped_members() {
    let h = Harness::new("caset").await;
    let op = h.start_operator();
    let group = unique_group();
    let wns = unique("widgets");
    let role = unique("reader");
    let set = h.cluster_applyset(&unique("caset"));
    let id = set.id();
    assert_eq!(
        id,
        compute_id(&set.name, "", "ClusterApplySet", "applyset.dev")
    );

    let manifests = |widgets: &[&str], with_role: bool| {
        let mut m = vec![widget_crd(&group), namespace(&wns)];
        for w in widgets {
            m.push(widget(&group, &wns, w, 1));
        }
        if with_role {
            m.push(cluster_role(&role));
        }
        json!(m)
    };
    set.create(json!({"manifests": manifests(&["w1", "w2"], true)}))
        .await;
    let st = set.wait_ready_within(LONG_DEADLINE).await;
    assert_eq!(summary(&st).members, 5, "{}", status_json(&st));
    assert_eq!(st.applyset_id.as_deref(), Some(id.as_str()));

    let war = widget_ar(&group);
    for w in ["w1", "w2"] {
        assert_member_of(
            &must_get(&h.client, &war, Some(&wns), w).await,
            &id,
            &set.manager(),
        );
    }
    assert_member_of(
        &must_get(&h.client, &namespace_ar(), None, &wns).await,
        &id,
        &set.manager(),
    );
    assert_member_of(
        &must_get(&h.client, &crd_ar(), None, &format!("widgets.{group}")).await,
        &id,
        &set.manager(),
    );
    assert_member_of(
        &must_get(&h.client, &clusterrole_ar(), None, &role).await,
        &id,
        &set.manager(),
    );

    let parent = set.live().await;
    assert_eq!(parent.labels().get(LABEL_ID), Some(&id));
    let mut gks = [
        "ClusterRole.rbac.authorization.k8s.io".to_owned(),
        "CustomResourceDefinition.apiextensions.k8s.io".to_owned(),
        "Namespace".to_owned(),
        format!("Widget.{group}"),
    ];
    gks.sort();
    assert_eq!(
        parent.annotations().get(ANNOTATION_GROUP_KINDS),
        Some(&gks.join(",")),
        "annotations: {:?}",
        parent.annotations()
    );
    assert_eq!(
        parent.annotations().get(ANNOTATION_NAMESPACES),
        Some(&wns),
        "a cluster-scoped parent lists the namespaces of its namespaced members"
    );

    // Shrink: drop w2 and the ClusterRole.
    set.patch_spec(json!({"manifests": manifests(&["w1"], false)}))
        .await;
    let st = set.wait_ready().await;
    assert_eq!(summary(&st).pruned, 2, "{}", status_json(&st));
    assert!(
        !exists(&h.client, &war, Some(&wns), "w2").await,
        "w2 pruned"
    );
    assert!(exists(&h.client, &war, Some(&wns), "w1").await, "w1 kept");
    assert!(
        !exists(&h.client, &clusterrole_ar(), None, &role).await,
        "ClusterRole pruned"
    );
    assert!(exists(&h.client, &namespace_ar(), None, &wns).await);
    assert!(exists(&h.client, &crd_ar(), None, &format!("widgets.{group}")).await);
    stop(op).await;
}

/// The old prune's leaks, fixed: a set spanning namespaces A and B that shrinks to B prunes
/// A's members; a kind removed entirely from the set is pruned.
#[tokio::test]
async fn prune_covers_dropped_namespaces_and_dropped_kinds() {
    let h = Harness::new("leak").await;
    let op = h.start_operator_cross_namespace();
    let a = h.ns.clone();
    let b = h.extra_namespace("leak-b").await;
    let set = h.applyset("span");
    set.create(json!({"manifests": [
        configmap("cm-a", json!({"k": "v"})),
        secret("s-a"),
        configmap_in(&b, "cm-b", json!({"k": "v"})),
        secret_in(&b, "s-b"),
    ]}))
    .await;
    // (Not `created == 4`: a reconcile that follows at once — the member watches' first
    // listing may predate the creation — reports the same members as unchanged.)
    let st = set.wait_ready().await;
    assert_eq!(summary(&st).members, 4, "{}", status_json(&st));
    for (ar, ns, name) in [
        (configmap_ar(), &a, "cm-a"),
        (secret_ar(), &a, "s-a"),
        (configmap_ar(), &b, "cm-b"),
        (secret_ar(), &b, "s-b"),
    ] {
        assert!(exists(&h.client, &ar, Some(ns), name).await, "{ns}/{name}");
    }
    assert_eq!(
        set.annotation(ANNOTATION_NAMESPACES).await.as_ref(),
        Some(&b)
    );

    // Shrink to namespace B alone.
    set.patch_spec(json!({"manifests": [
        configmap_in(&b, "cm-b", json!({"k": "v"})),
        secret_in(&b, "s-b"),
    ]}))
    .await;
    let st = set.wait_ready().await;
    assert_eq!(summary(&st).pruned, 2, "{}", status_json(&st));
    assert!(
        !exists(&h.client, &configmap_ar(), Some(&a), "cm-a").await,
        "cm-a pruned"
    );
    assert!(
        !exists(&h.client, &secret_ar(), Some(&a), "s-a").await,
        "s-a pruned"
    );
    assert!(exists(&h.client, &configmap_ar(), Some(&b), "cm-b").await);
    assert!(exists(&h.client, &secret_ar(), Some(&b), "s-b").await);
    assert_eq!(
        set.annotation(ANNOTATION_NAMESPACES).await.as_ref(),
        Some(&b)
    );

    // Drop the Secret kind entirely.
    set.patch_spec(json!({"manifests": [configmap_in(&b, "cm-b", json!({"k": "v"}))]}))
        .await;
    let st = set.wait_ready().await;
    assert_eq!(summary(&st).pruned, 1, "{}", status_json(&st));
    assert!(
        !exists(&h.client, &secret_ar(), Some(&b), "s-b").await,
        "s-b pruned"
    );
    assert!(exists(&h.client, &configmap_ar(), Some(&b), "cm-b").await);
    assert_eq!(
        set.annotation(ANNOTATION_GROUP_KINDS).await.as_deref(),
        Some("ConfigMap")
    );
    assert!(
        list_part_of(&h.client, &secret_ar(), None, &set.id())
            .await
            .is_empty(),
        "no Secret of the set is left anywhere"
    );
    stop(op).await;
}

use serde_json::{Map, Value, json};

use super::*;

fn rule(paths: &[&str], target: Option<Value>) -> IgnoreRule {
    IgnoreRule {
        paths: paths.iter().map(|p| p.to_string()).collect(),
        target: target.map(|t| serde_json::from_value(t).expect("a selector")),
    }
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!("an object"),
    }
}

fn deployment() -> Map<String, Value> {
    object(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web-1", "namespace": "team",
            "labels": {"app": "web"}, "annotations": {"example.com/scaled": "hpa"}},
        "spec": {"replicas": 2}
    }))
}

fn paths(rules: &Rules, o: &Map<String, Value>) -> Vec<String> {
    rules.paths_for(o).iter().map(|p| p.to_string()).collect()
}

#[test]
fn a_rule_without_target_matches_every_member() {
    let rules = Rules::compile(&[rule(&["/spec/replicas"], None)]).expect("valid");
    assert_eq!(paths(&rules, &deployment()), ["/spec/replicas"]);
    let cm = object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}));
    assert_eq!(paths(&rules, &cm), ["/spec/replicas"]);
    assert!(Rules::compile(&[]).expect("valid").is_empty());
}

#[test]
fn targets_are_anchored_regular_expressions_and_selectors() {
    let d = deployment();
    let matches = |t: Value| {
        let rules = Rules::compile(&[rule(&["/spec/replicas"], Some(t))]).expect("valid");
        !rules.paths_for(&d).is_empty()
    };
    assert!(matches(
        json!({"group": "apps", "version": "v1", "kind": "Deployment"})
    ));
    assert!(matches(
        json!({"kind": "Deploy.*", "name": "web-[0-9]+", "namespace": "team"})
    ));
    assert!(
        matches(json!({"group": "", "kind": ""})),
        "empty fields match anything"
    );
    assert!(
        !matches(json!({"kind": "Deploy"})),
        "anchored: no partial match"
    );
    assert!(!matches(json!({"name": "web"})));
    assert!(!matches(json!({"group": "apps|batch", "version": "v2"})));
    assert!(
        matches(json!({"kind": "StatefulSet|Deployment"})),
        "alternation stays inside"
    );
    assert!(matches(json!({"labelSelector": "app in (web,api)"})));
    assert!(!matches(json!({"labelSelector": "app=api"})));
    assert!(matches(
        json!({"annotationSelector": "example.com/scaled=hpa"})
    ));
    assert!(!matches(
        json!({"annotationSelector": "!example.com/scaled"})
    ));
    let core = object(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}));
    let rules = Rules::compile(&[rule(&["/spec/x"], Some(json!({"group": ""})))]).expect("valid");
    assert_eq!(paths(&rules, &core).len(), 1);
    let rules = Rules::compile(&[rule(
        &["/spec/x"],
        Some(json!({"group": "^$|core", "namespace": "" })),
    )])
    .expect("valid");
    assert_eq!(paths(&rules, &core).len(), 1, "the core group is empty");
    let rules =
        Rules::compile(&[rule(&["/spec/x"], Some(json!({"namespace": "team"})))]).expect("valid");
    assert!(
        paths(&rules, &core).is_empty(),
        "cluster-scoped: namespace is empty"
    );
}

#[test]
fn paths_of_every_matching_rule_once_in_order() {
    let rules = Rules::compile(&[
        rule(
            &["/spec/replicas", "/spec/template/spec/containers/0/image"],
            None,
        ),
        rule(
            &["/spec/replicas", "/data/x"],
            Some(json!({"kind": "Deployment"})),
        ),
        rule(&["/spec/never"], Some(json!({"kind": "StatefulSet"}))),
    ])
    .expect("valid");
    assert_eq!(
        paths(&rules, &deployment()),
        [
            "/spec/replicas",
            "/spec/template/spec/containers/0/image",
            "/data/x"
        ]
    );
}

#[test]
fn identity_paths_are_refused() {
    for (path, what) in [
        ("", "the whole object"),
        ("/apiVersion", "apiVersion"),
        ("/kind", "kind"),
        ("/metadata", "name"),
        ("/metadata/name", "name"),
        ("/metadata/namespace", "namespace"),
        ("/metadata/labels", "part-of"),
        (
            "/metadata/labels/applyset.kubernetes.io~1part-of",
            "part-of",
        ),
        ("/metadata/annotations", "adoption"),
        ("/metadata/annotations/applyset.dev~1adopted", "adoption"),
        ("/metadata/name/x", "name"),
        ("/metadata/uid", "uid"),
        ("/metadata/resourceVersion", "resourceVersion"),
        ("/metadata/managedFields", "managedFields"),
        ("/metadata/managedFields/0/manager", "managedFields"),
        ("/metadata/generation", "generation"),
    ] {
        let err = Rules::compile(&[rule(&["/spec/ok"], None), rule(&["/data/a", path], None)])
            .expect_err(path);
        let IgnoreError::Protected {
            rule: 1,
            index: 1,
            what: w,
            ..
        } = &err
        else {
            panic!("{path}: {err:?}");
        };
        assert!(w.contains(what), "{path}: {w}");
        let msg = err.to_string();
        assert!(msg.starts_with("spec.ignore[1].paths[1]"), "{msg}");
        assert!(msg.contains("remove the path"), "{msg}");
    }
    // Next to the set's own, a label or annotation of the object's own may be ignored.
    let ok = [
        "/metadata/labels/app",
        "/metadata/annotations/example.com~1hash",
        "/metadata/finalizers",
    ];
    Rules::compile(&[rule(&ok, None)]).expect("not identity");
}

#[test]
fn malformed_pointers_are_refused_naming_them() {
    for (path, cause) in [
        ("spec/replicas", PointerError::NoLeadingSlash),
        ("/", PointerError::EmptySegment { segment: 0 }),
        ("/spec//x", PointerError::EmptySegment { segment: 1 }),
        ("/a~2", PointerError::BadEscape { segment: 0 }),
    ] {
        let err = Rules::compile(&[rule(&[path], None)]).expect_err(path);
        assert_eq!(
            err,
            IgnoreError::Malformed {
                rule: 0,
                index: 0,
                path: path.into(),
                cause
            }
        );
        let msg = err.to_string();
        assert!(
            msg.starts_with("spec.ignore[0].paths[0]") && msg.contains("~1"),
            "{msg}"
        );
    }
}

#[test]
fn bounds_are_checked() {
    let many: Vec<IgnoreRule> = (0..=MAX_RULES).map(|_| rule(&["/a"], None)).collect();
    assert_eq!(
        Rules::compile(&many).expect_err("too many"),
        IgnoreError::TooManyRules {
            count: MAX_RULES + 1
        }
    );
    Rules::compile(&many[..MAX_RULES]).expect("at the bound");
    let p: Vec<String> = (0..=MAX_PATHS).map(|i| format!("/a{i}")).collect();
    let r = IgnoreRule {
        paths: p,
        target: None,
    };
    assert_eq!(
        Rules::compile(&[r]).expect_err("too many paths"),
        IgnoreError::TooManyPaths {
            rule: 0,
            count: MAX_PATHS + 1
        }
    );
    assert_eq!(
        Rules::compile(&[rule(&[], None)]).expect_err("no path"),
        IgnoreError::NoPaths { rule: 0 }
    );
    let long = format!("/{}", "a".repeat(MAX_PATH_LEN));
    assert_eq!(
        Rules::compile(&[rule(&[&long], None)]).expect_err("too long"),
        IgnoreError::PathTooLong {
            rule: 0,
            index: 0,
            len: MAX_PATH_LEN + 1
        }
    );
    Rules::compile(&[rule(&[&long[..MAX_PATH_LEN]], None)]).expect("at the bound");
    let t = json!({"name": "a".repeat(MAX_TARGET_LEN + 1)});
    let err = Rules::compile(&[rule(&["/a"], Some(t))]).expect_err("long target");
    assert!(
        matches!(
            err,
            IgnoreError::Target {
                rule: 0,
                field: "name",
                cause: TargetError::TooLong { .. }
            }
        ),
        "{err:?}"
    );
}

#[test]
fn bad_targets_are_refused_naming_the_field() {
    for (t, field) in [
        (json!({"group": "("}), "group"),
        (json!({"version": "[z-a]"}), "version"),
        (json!({"kind": "*"}), "kind"),
        (json!({"name": "a)"}), "name"),
        (json!({"namespace": "(?<"}), "namespace"),
        (json!({"labelSelector": "app in ()"}), "labelSelector"),
        (json!({"annotationSelector": "a b"}), "annotationSelector"),
    ] {
        let err = Rules::compile(&[rule(&["/a"], None), rule(&["/a"], Some(t))]).expect_err(field);
        let IgnoreError::Target {
            rule: 1, field: f, ..
        } = &err
        else {
            panic!("{field}: {err:?}");
        };
        assert_eq!(*f, field);
        assert!(
            err.to_string()
                .starts_with(&format!("spec.ignore[1].target.{field}: "))
        );
    }
}

#[test]
fn an_expensive_regular_expression_is_refused() {
    let t = json!({"name": "(?:[a-z]{1,100}){1,100}"});
    let err = Rules::compile(&[rule(&["/a"], Some(t))]).expect_err("over the size limit");
    assert!(
        matches!(
            err,
            IgnoreError::Target {
                field: "name",
                cause: TargetError::Regex(_),
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn strip_removes_what_is_there() {
    let mut v = json!({"spec": {"replicas": 2, "paused": false}, "data": {}});
    let p = |t: &str| Pointer::parse(t).expect("a pointer");
    strip(
        &[p("/spec/replicas"), p("/spec/missing"), p("/data/x/y")],
        &mut v,
    );
    assert_eq!(v, json!({"spec": {"paused": false}, "data": {}}));
}

//! Unit tests of the conversion: every Kustomization field mapped, Flux's defaults made
//! explicit, the two traps, every refusal, the scope cases, dependsOn kinds, and every set
//! checked against the CRD's schema (patterns, lengths, required and known fields).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::*;
use crate::api::{ApplySetSpec, DeletionPolicy, DependencyKind, KustomizeOverrides};

fn ks(name: &str, ns: &str, spec: Value) -> Value {
    json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

fn source(kind: &str, name: &str, ns: &str, spec: Value) -> Value {
    json!({"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": kind,
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

fn repo(name: &str, ns: &str) -> Value {
    source(
        "GitRepository",
        name,
        ns,
        json!({"url": "https://git.example/r.git", "interval": "1m", "ref": {"branch": "main"}}),
    )
}

fn minimal(name: &str, ns: &str) -> Value {
    ks(
        name,
        ns,
        json!({"interval": "10m", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "repo"}}),
    )
}

fn run(objects: Vec<Value>) -> Conversion {
    let c = convert(&Input {
        objects,
        ..Input::default()
    });
    check_schema(&c);
    c
}

fn spec(c: &Conversion, i: usize) -> &ApplySetSpec {
    match &c.sets[i].set {
        Set::Namespaced(a) => &a.spec,
        Set::Cluster(s) => &s.spec.0,
    }
}

fn has_note(c: &Conversion, field: &str, severity: Severity, part: &str) -> bool {
    c.notes
        .iter()
        .any(|n| n.field == field && n.severity == severity && n.why.contains(part))
}

fn refused(objects: Vec<Value>, field: &str, part: &str) {
    let c = run(objects);
    assert!(c.sets.is_empty(), "{:?}", c.sets);
    assert!(
        has_note(&c, field, Severity::Refused, part),
        "{:#?}",
        c.notes
    );
    assert!(c.fails_strict());
}

/// A Kustomization setting every field a set carries (wait: true), with `change` applied to
/// its spec, converted with its GitRepository.
fn full(change: impl FnOnce(&mut Value)) -> Conversion {
    let mut spec = json!({
        "interval": "5m", "retryInterval": "1m", "timeout": "3m", "path": "./deploy/prod/",
        "prune": false, "wait": true, "suspend": true, "deletionPolicy": "Orphan",
        "serviceAccountName": "deployer", "targetNamespace": "team",
        "namePrefix": "p-", "nameSuffix": "-s",
        "commonMetadata": {"labels": {"team": "a"}, "annotations": {"x": "y"}},
        "patches": [{"patch": "- op: add\n  path: /x\n  value: 1", "target": {"kind": "Deployment", "labelSelector": "a=b"}}],
        "images": [{"name": "nginx", "newTag": "1.27"}],
        "components": ["../c"],
        "healthChecks": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "team"}],
        "healthCheckExprs": [{"apiVersion": "example.com/v1", "kind": "Thing", "current": "status.ready == true"}],
        "ignore": [{"paths": ["/spec/replicas"], "target": {"kind": "Deployment"}}],
        "postBuild": {"substitute": {"env": "prod"}, "substituteFrom": [{"kind": "ConfigMap", "name": "vars", "optional": true}]},
        "decryption": {"provider": "sops", "secretRef": {"name": "age"}},
        "sourceRef": {"kind": "GitRepository", "name": "repo"}
    });
    change(&mut spec);
    let c = run(vec![ks("apps", "team", spec), repo("repo", "team")]);
    assert_eq!(c.sets.len(), 1, "{:#?}", c.notes);
    assert!(!c.fails_strict(), "{:#?}", c.notes);
    c
}

#[test]
fn every_kustomization_field_is_mapped() {
    let c = full(|_| ());
    let Set::Namespaced(a) = &c.sets[0].set else {
        panic!("an ApplySet")
    };
    assert_eq!(a.metadata.name.as_deref(), Some("apps"));
    assert_eq!(a.metadata.namespace.as_deref(), Some("team"));
    let s = &a.spec;
    assert_eq!(
        (
            s.interval.as_str(),
            s.retry_interval.as_str(),
            s.timeout.as_str()
        ),
        ("5m", "1m", "3m")
    );
    assert!(!s.prune && s.wait && s.suspend && !s.force);
    assert_eq!(s.deletion_policy, DeletionPolicy::Orphan);
    assert_eq!(s.service_account_name.as_deref(), Some("deployer"));
    assert_eq!(s.service_account_namespace, None);
    assert_eq!(s.target_namespace, None);
    let git = s.sources[0].git.as_ref().expect("git");
    assert_eq!(git.url, "https://git.example/r.git");
    assert_eq!(git.reference.branch.as_deref(), Some("main"));
    assert_eq!(git.path.as_deref(), Some("deploy/prod"));
    assert!(s.adopt_existing);
    assert_eq!(s.take_over_field_managers, vec!["kustomize-controller"]);
    assert_eq!(c.sets[0].source.to_string(), "GitRepository team/repo");
}

#[test]
fn every_kustomize_field_is_mapped() {
    let c = full(|_| ());
    let k = spec(&c, 0).kustomize.as_ref().expect("kustomize");
    assert_eq!(k.target_namespace.as_deref(), Some("team"));
    assert_eq!(
        (k.name_prefix.as_deref(), k.name_suffix.as_deref()),
        (Some("p-"), Some("-s"))
    );
    let meta = k.common_metadata.as_ref().expect("metadata");
    assert_eq!(meta.labels["team"], "a");
    assert_eq!(meta.annotations["x"], "y");
    assert_eq!(
        k.patches[0]
            .target
            .as_ref()
            .and_then(|t| t.label_selector.as_deref()),
        Some("a=b")
    );
    assert_eq!(k.images[0].new_tag.as_deref(), Some("1.27"));
    assert_eq!(k.components, vec!["../c"]);
}

#[test]
fn health_post_build_and_decryption_are_mapped() {
    let c = full(|_| ());
    let s = spec(&c, 0);
    assert_eq!(s.health_check_exprs[0].kind.as_deref(), Some("Thing"));
    assert_eq!(s.ignore[0].paths, vec!["/spec/replicas"]);
    let pb = s.post_build.as_ref().expect("postBuild");
    assert_eq!(pb.substitute["env"], "prod");
    assert!(pb.substitute_from[0].optional);
    let d = s.decryption.as_ref().expect("decryption");
    assert_eq!(
        (
            d.secret_ref.name.as_str(),
            d.secret_ref.namespace.as_deref()
        ),
        ("age", None)
    );
}

#[test]
fn with_wait_health_checks_are_left_out_as_flux_ignores_them() {
    let c = full(|_| ());
    let s = spec(&c, 0);
    assert!(s.wait);
    assert!(s.health_checks.is_empty(), "{:?}", s.health_checks);
    assert!(has_note(
        &c,
        "spec.healthChecks",
        Severity::Info,
        "ignored by kustomize-controller when wait is true"
    ));
    // The custom health rules still apply to the members waited for.
    assert_eq!(s.health_check_exprs.len(), 1);
}

#[test]
fn without_wait_health_checks_are_carried() {
    let c = full(|s| s["wait"] = json!(false));
    let s = spec(&c, 0);
    assert!(!s.wait);
    let check = &s.health_checks[0];
    assert_eq!(check.name, "web");
    assert_eq!(
        (check.api_version.as_str(), check.namespace.as_deref()),
        ("apps/v1", Some("team"))
    );
    assert!(
        !c.notes
            .iter()
            .any(|n| n.field.starts_with("spec.healthChecks"))
    );
}

#[test]
fn a_health_check_without_namespace_is_noted() {
    let c = full(|s| {
        s["wait"] = json!(false);
        s["healthChecks"] = json!([
            {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "name": "things.example.com"},
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": ""}
        ]);
    });
    let checks = &spec(&c, 0).health_checks;
    assert_eq!(
        checks
            .iter()
            .map(|c| c.namespace.clone())
            .collect::<Vec<_>>(),
        vec![None, None],
        "no namespace stays none (an empty one too)"
    );
    for i in 0..2 {
        assert!(
            has_note(
                &c,
                &format!("spec.healthChecks[{i}].namespace"),
                Severity::Info,
                "looks the object up with no namespace"
            ),
            "{i}: {:#?}",
            c.notes
        );
    }
    assert!(has_note(
        &c,
        "spec.healthChecks[1].namespace",
        Severity::Info,
        "in the ApplySet's own namespace"
    ));
}

#[test]
fn flux_defaults_are_made_explicit() {
    let c = run(vec![minimal("a", "ns"), repo("repo", "ns")]);
    let s = spec(&c, 0);
    assert_eq!(
        (s.retry_interval.as_str(), s.timeout.as_str()),
        ("10m", "10m")
    );
    assert_eq!(s.deletion_policy, DeletionPolicy::MirrorPrune);
    assert!(s.prune);
    assert_eq!(s.kustomize, Some(KustomizeOverrides::default()));
    assert_eq!(s.sources[0].git.as_ref().and_then(|g| g.path.clone()), None);
    assert!(s.post_build.is_none() && s.decryption.is_none());
    assert!(has_note(
        &c,
        "spec.timeout",
        Severity::Info,
        "Flux's default, the interval (10m)"
    ));
    assert!(has_note(
        &c,
        "spec.deletionPolicy",
        Severity::Info,
        "MirrorPrune"
    ));
    assert!(!c.fails_strict());
}

#[test]
fn durations_are_bounded_as_ours_are() {
    let k = ks(
        "a",
        "ns",
        json!({"interval": "200h", "timeout": "48h", "retryInterval": "100ms", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "repo"}}),
    );
    let c = run(vec![k, repo("repo", "ns")]);
    let s = spec(&c, 0);
    assert_eq!(
        (
            s.interval.as_str(),
            s.timeout.as_str(),
            s.retry_interval.as_str()
        ),
        ("168h", "24h", "1s")
    );
    assert!(has_note(
        &c,
        "spec.timeout",
        Severity::Info,
        "48h is bounded to 24h"
    ));
    let bad = ks(
        "a",
        "ns",
        json!({"interval": "soon", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "repo"}}),
    );
    refused(
        vec![bad, repo("repo", "ns")],
        "spec.interval",
        "not a duration",
    );
}

#[test]
fn the_two_traps_map_to_flux_meaning() {
    let k = ks(
        "a",
        "ns",
        json!({"interval": "1m", "prune": true, "force": true, "targetNamespace": "ns", "sourceRef": {"kind": "GitRepository", "name": "repo"}}),
    );
    let c = run(vec![k, repo("repo", "ns")]);
    let s = spec(&c, 0);
    assert!(!s.force, "our spec.force stays false");
    assert_eq!(s.target_namespace, None, "never our spec.targetNamespace");
    let k = s.kustomize.as_ref().expect("kustomize");
    assert_eq!(k.target_namespace.as_deref(), Some("ns"));
    let ann = &k.common_metadata.as_ref().expect("metadata").annotations;
    assert_eq!(
        ann.get("applyset.dev/force").map(String::as_str),
        Some("enabled")
    );
    assert!(has_note(
        &c,
        "spec.force",
        Severity::Info,
        "applyset.dev/force: enabled"
    ));
}

/// A Kustomization `a` in `ns` whose source is the `kind` named `s`.
fn with_source(kind: &str) -> Value {
    ks(
        "a",
        "ns",
        json!({"interval": "1m", "prune": true, "sourceRef": {"kind": kind, "name": "s"}}),
    )
}

#[test]
fn refusals_of_sources_name_the_field_and_what_to_do() {
    refused(
        vec![
            with_source("Bucket"),
            source("Bucket", "s", "ns", json!({"bucketName": "b"})),
        ],
        "spec.sourceRef",
        "Bucket ns/s: a Bucket source",
    );
    refused(
        vec![
            with_source("ExternalArtifact"),
            source("ExternalArtifact", "s", "ns", json!({})),
        ],
        "spec.sourceRef",
        "an ExternalArtifact",
    );
    refused(
        vec![with_source("GitRepository")],
        "spec.sourceRef",
        "GitRepository ns/s is not among the objects read",
    );
    let remote = ks(
        "a",
        "ns",
        json!({"interval": "1m", "prune": true, "kubeConfig": {"secretRef": {"name": "k"}}, "sourceRef": {"kind": "GitRepository", "name": "repo"}}),
    );
    refused(
        vec![remote, repo("repo", "ns")],
        "spec.kubeConfig",
        "remote cluster",
    );
}

#[test]
fn refusals_of_refs_name_the_field_and_what_to_do() {
    let git = |r: Value| {
        source(
            "GitRepository",
            "s",
            "ns",
            json!({"url": "https://g/r", "interval": "1m", "ref": r}),
        )
    };
    refused(
        vec![
            with_source("GitRepository"),
            git(json!({"semver": ">=1.0"})),
        ],
        "spec.sourceRef",
        "spec.ref.semver: a set does not select tags",
    );
    refused(
        vec![
            with_source("GitRepository"),
            git(json!({"name": "refs/pull/1/head"})),
        ],
        "spec.sourceRef",
        "neither refs/heads",
    );
    refused(
        vec![
            with_source("GitRepository"),
            git(json!({"commit": "abc123"})),
        ],
        "spec.sourceRef",
        "not a full commit SHA",
    );
    let oci = source(
        "OCIRepository",
        "s",
        "ns",
        json!({"url": "oci://r/x", "interval": "1m", "ref": {"semver": "1.x"}}),
    );
    refused(
        vec![with_source("OCIRepository"), oci],
        "spec.sourceRef",
        "spec.ref.semver",
    );
}

#[test]
fn refusals_of_malformed_specs_name_the_field() {
    refused(
        vec![
            ks("a", "ns", json!({"interval": "1m", "prune": true})),
            repo("repo", "ns"),
        ],
        "spec.sourceRef",
        "missing",
    );
    refused(
        vec![
            ks(
                "a",
                "ns",
                json!({"interval": "1m", "prune": "yes", "sourceRef": {"kind": "GitRepository", "name": "repo"}}),
            ),
            repo("repo", "ns"),
        ],
        "spec.prune",
        "not a value of the field's type",
    );
}

fn git_ref(r: Value) -> (crate::api::GitReference, Conversion) {
    let g = source(
        "GitRepository",
        "repo",
        "ns",
        json!({"url": "https://g/r", "interval": "1m", "ref": r}),
    );
    let c = run(vec![minimal("a", "ns"), g]);
    (
        spec(&c, 0).sources[0].git.clone().expect("git").reference,
        c,
    )
}

#[test]
fn git_refs_follow_flux_precedence_and_default() {
    let sha = "0123456789abcdef0123456789abcdef01234567";
    assert_eq!(
        git_ref(json!({"name": "refs/heads/dev"}))
            .0
            .branch
            .as_deref(),
        Some("dev")
    );
    assert_eq!(
        git_ref(json!({"name": "refs/tags/v1", "branch": "x"}))
            .0
            .tag
            .as_deref(),
        Some("v1")
    );
    assert_eq!(
        git_ref(json!({"tag": "v2", "branch": "x"}))
            .0
            .tag
            .as_deref(),
        Some("v2")
    );
    let (r, c) = git_ref(json!({"commit": sha, "branch": "main"}));
    assert_eq!((r.commit.as_deref(), r.branch), (Some(sha), None));
    assert!(has_note(
        &c,
        "spec.ref.commit",
        Severity::Info,
        "precedence"
    ));
    let (r, c) = git_ref(Value::Null);
    assert_eq!(r.branch.as_deref(), Some("master"));
    assert!(has_note(&c, "spec.ref", Severity::Info, "branch master"));
}

#[test]
fn oci_sources_map_url_ref_secret_and_insecure() {
    let k = ks(
        "a",
        "ns",
        json!({"interval": "1m", "prune": true, "path": "./", "sourceRef": {"kind": "OCIRepository", "name": "art"}}),
    );
    let digest = format!("sha256:{}", "a".repeat(64));
    let oci = |r: Value| {
        json!({"apiVersion": "source.toolkit.fluxcd.io/v1beta2", "kind": "OCIRepository", "metadata": {"name": "art", "namespace": "ns"},
        "spec": {"url": "oci://reg.example/app", "interval": "1m", "insecure": true, "secretRef": {"name": "reg"}, "certSecretRef": {"name": "tls"}, "ref": r}})
    };
    let c = run(vec![k.clone(), oci(json!({"digest": digest, "tag": "x"}))]);
    let o = spec(&c, 0).sources[0].oci.clone().expect("oci");
    assert_eq!(
        (o.digest.as_deref(), o.tag.as_deref()),
        (Some(digest.as_str()), None)
    );
    assert!(o.insecure && o.path.is_none());
    assert_eq!(o.secret_ref.map(|s| s.name).as_deref(), Some("reg"));
    assert!(has_note(
        &c,
        "spec.certSecretRef",
        Severity::Dropped,
        "ca.crt"
    ));
    assert!(has_note(
        &c,
        "spec.secretRef",
        Severity::Info,
        ".dockerconfigjson"
    ));
    let c = run(vec![k, oci(Value::Null)]);
    assert_eq!(
        spec(&c, 0).sources[0]
            .oci
            .as_ref()
            .and_then(|o| o.tag.as_deref()),
        Some("latest")
    );
    assert!(has_note(&c, "spec.ref", Severity::Info, "tag latest"));
}

#[test]
fn fields_without_equivalent_are_dropped_with_why() {
    let k = ks(
        "a",
        "ns",
        json!({"interval": "1m", "prune": true, "buildMetadata": ["originAnnotations"], "ignoreMissingComponents": true,
        "somethingNew": 1, "dependsOn": [{"name": "b", "readyExpr": "true"}],
        "postBuild": {"substitute": {"a": "b"}, "substituteStrategy": "Always", "other": 1},
        "decryption": {"provider": "sops", "serviceAccountName": "kms", "secretRef": {"name": "k"}},
        "healthChecks": [{"kind": "Deployment", "name": "web"}],
        "sourceRef": {"kind": "GitRepository", "name": "repo"}}),
    );
    let g = source(
        "GitRepository",
        "repo",
        "ns",
        json!({"url": "https://g/r", "interval": "1m", "verify": {"mode": "HEAD"}, "include": [{"repository": {"name": "x"}}],
        "recurseSubmodules": true, "sparseCheckout": ["a"], "proxySecretRef": {"name": "p"}, "provider": "github", "ignore": "*.md", "secretRef": {"name": "cred"}}),
    );
    let c = run(vec![k, g]);
    assert_eq!(c.sets.len(), 1);
    for field in [
        "spec.buildMetadata",
        "spec.ignoreMissingComponents",
        "spec.somethingNew",
        "spec.dependsOn[0].readyExpr",
        "spec.postBuild.other",
        "spec.decryption.serviceAccountName",
        "spec.verify",
        "spec.include",
        "spec.recurseSubmodules",
        "spec.sparseCheckout",
        "spec.proxySecretRef",
        "spec.provider",
        "spec.ignore",
    ] {
        assert!(
            c.notes
                .iter()
                .any(|n| n.field == field && n.severity == Severity::Dropped),
            "{field}: {:#?}",
            c.notes
        );
    }
    assert!(has_note(
        &c,
        "spec.secretRef",
        Severity::Info,
        "bearerToken"
    ));
    assert!(c.fails_strict());
    let check = &spec(&c, 0).health_checks[0];
    assert_eq!(
        (check.api_version.as_str(), check.name.as_str()),
        ("apps/v1", "web")
    );
    assert!(has_note(
        &c,
        "spec.healthChecks[0].apiVersion",
        Severity::Info,
        "apps/v1"
    ));
}

fn written(ns: &[Option<&str>]) -> Written {
    Written {
        namespaces: ns.iter().map(|n| n.map(String::from)).collect(),
        from: "status.inventory".into(),
    }
}

fn with_written(
    objects: Vec<Value>,
    w: &[(&str, &str, Written)],
    sa: Option<(&str, &str)>,
) -> Conversion {
    let input = Input {
        objects,
        written: w
            .iter()
            .map(|(ns, name, w)| {
                (
                    FluxRef {
                        kind: "Kustomization".into(),
                        namespace: ns.to_string(),
                        name: name.to_string(),
                    },
                    w.clone(),
                )
            })
            .collect(),
        cluster_service_account: sa.map(|(a, b)| (a.into(), b.into())),
    };
    let c = convert(&input);
    check_schema(&c);
    c
}

#[test]
fn what_a_kustomization_writes_decides_its_scope() {
    let k = ks(
        "a",
        "flux",
        json!({"interval": "1m", "prune": true, "serviceAccountName": "sa", "sourceRef": {"kind": "GitRepository", "name": "repo"}, "decryption": {"provider": "sops", "secretRef": {"name": "age"}}}),
    );
    let mut g = repo("repo", "flux");
    g["spec"]["secretRef"] = json!({"name": "cred"});
    let own = with_written(
        vec![k.clone(), g.clone()],
        &[("flux", "a", written(&[Some("flux")]))],
        None,
    );
    assert!(matches!(own.sets[0].set, Set::Namespaced(_)));
    for w in [written(&[Some("flux"), Some("apps")]), written(&[None])] {
        let c = with_written(vec![k.clone(), g.clone()], &[("flux", "a", w)], None);
        let Set::Cluster(cs) = &c.sets[0].set else {
            panic!("a ClusterApplySet")
        };
        let s = &cs.spec.0;
        assert_eq!(
            (
                s.service_account_name.as_deref(),
                s.service_account_namespace.as_deref()
            ),
            (Some("sa"), Some("flux"))
        );
        assert_eq!(
            s.sources[0]
                .git
                .as_ref()
                .and_then(|g| g.secret_ref.as_ref())
                .and_then(|r| r.namespace.as_deref()),
            Some("flux")
        );
        assert_eq!(
            s.decryption
                .as_ref()
                .and_then(|d| d.secret_ref.namespace.as_deref()),
            Some("flux")
        );
        assert!(
            has_note(&c, "", Severity::Info, "a ClusterApplySet: it writes"),
            "{:#?}",
            c.notes
        );
    }
}

#[test]
fn without_what_it_writes_its_target_namespace_decides_the_scope() {
    let t = ks(
        "a",
        "flux",
        json!({"interval": "1m", "prune": true, "targetNamespace": "apps", "sourceRef": {"kind": "GitRepository", "name": "repo"}}),
    );
    let c = with_written(vec![t.clone(), repo("repo", "flux")], &[], None);
    assert!(matches!(c.sets[0].set, Set::Cluster(_)));
    assert!(has_note(&c, "", Severity::Info, "decided from the spec"));
    assert!(has_note(
        &c,
        "spec.serviceAccountName",
        Severity::Info,
        "operator's own identity"
    ));
    let c = with_written(vec![t, repo("repo", "flux")], &[], Some(("ops", "applier")));
    let s = spec(&c, 0);
    assert_eq!(
        (
            s.service_account_name.as_deref(),
            s.service_account_namespace.as_deref()
        ),
        (Some("applier"), Some("ops"))
    );
    let c = with_written(vec![minimal("a", "flux"), repo("repo", "flux")], &[], None);
    assert!(matches!(c.sets[0].set, Set::Namespaced(_)));
    assert!(has_note(
        &c,
        "",
        Severity::Info,
        "an ApplySet (decided from the spec"
    ));
}

#[test]
fn an_applyset_names_a_secret_of_another_namespace_in_a_note() {
    let k = ks(
        "a",
        "apps",
        json!({"interval": "1m", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "repo", "namespace": "flux"}}),
    );
    let mut g = repo("repo", "flux");
    g["spec"]["secretRef"] = json!({"name": "cred"});
    let c = run(vec![k, g]);
    let r = spec(&c, 0).sources[0]
        .git
        .as_ref()
        .and_then(|g| g.secret_ref.clone())
        .expect("secretRef");
    assert_eq!(r.namespace, None);
    assert!(has_note(
        &c,
        "spec.secretRef",
        Severity::Info,
        "copy Secret flux/cred into namespace apps"
    ));
}

#[test]
fn substitute_from_keeps_an_applyset_with_a_service_account() {
    let spec_of = |sa: Option<&str>| {
        let mut s = json!({"interval": "1m", "prune": true, "targetNamespace": "apps", "sourceRef": {"kind": "GitRepository", "name": "repo"},
            "postBuild": {"substitute": {"a": "1"}, "substituteFrom": [{"kind": "Secret", "name": "vars"}]}});
        if let Some(sa) = sa {
            s["serviceAccountName"] = json!(sa);
        }
        ks("a", "flux", s)
    };
    let c = run(vec![spec_of(Some("sa")), repo("repo", "flux")]);
    let Set::Namespaced(a) = &c.sets[0].set else {
        panic!("an ApplySet")
    };
    assert_eq!(a.spec.service_account_name.as_deref(), Some("sa"));
    assert_eq!(
        a.spec.post_build.as_ref().map(|p| p.substitute_from.len()),
        Some(1)
    );
    assert!(has_note(
        &c,
        "",
        Severity::Info,
        "cannot read postBuild.substituteFrom"
    ));
    let c = run(vec![spec_of(None), repo("repo", "flux")]);
    assert!(matches!(c.sets[0].set, Set::Cluster(_)));
    assert!(
        spec(&c, 0)
            .post_build
            .as_ref()
            .is_some_and(|p| p.substitute_from.is_empty())
    );
    assert!(has_note(
        &c,
        "spec.postBuild.substituteFrom",
        Severity::Dropped,
        "ClusterApplySet"
    ));
}

#[test]
fn cluster_names_collide_and_dependencies_get_their_kind() {
    let cluster = |name: &str, ns: &str, deps: Value| {
        ks(
            name,
            ns,
            json!({"interval": "1m", "prune": true, "targetNamespace": "elsewhere", "dependsOn": deps, "sourceRef": {"kind": "GitRepository", "name": "repo"}}),
        )
    };
    let c = run(vec![
        cluster("infra", "a", json!([])),
        cluster("infra", "b", json!([])),
        cluster("addons", "a", json!([{"name": "infra"}])),
        ks(
            "app",
            "a",
            json!({"interval": "1m", "prune": true, "dependsOn": [{"name": "addons"}, {"name": "db", "namespace": "data"}, {"name": "gone"}], "sourceRef": {"kind": "GitRepository", "name": "repo"}}),
        ),
        ks(
            "gone",
            "a",
            json!({"interval": "1m", "prune": true, "sourceRef": {"kind": "Bucket", "name": "b"}}),
        ),
        repo("repo", "a"),
        repo("repo", "b"),
    ]);
    let names: Vec<String> = c
        .sets
        .iter()
        .map(|s| match &s.set {
            Set::Cluster(cs) => cs.metadata.name.clone().unwrap_or_default(),
            Set::Namespaced(a) => a.metadata.name.clone().unwrap_or_default(),
        })
        .collect();
    assert_eq!(names, vec!["a-infra", "b-infra", "addons", "app"]);
    assert!(has_note(
        &c,
        "metadata.name",
        Severity::Info,
        "named a-infra"
    ));
    let dep = &spec(&c, 2).depends_on[0];
    assert_eq!(
        (dep.name.as_str(), dep.kind, dep.namespace.as_deref()),
        ("a-infra", DependencyKind::ClusterApplySet, None)
    );
    let deps = &spec(&c, 3).depends_on;
    assert_eq!(
        (deps[0].name.as_str(), deps[0].kind),
        ("addons", DependencyKind::ClusterApplySet)
    );
    assert_eq!(
        (deps[1].namespace.as_deref(), deps[1].kind),
        (Some("data"), DependencyKind::ApplySet)
    );
    assert!(has_note(
        &c,
        "spec.dependsOn[1]",
        Severity::Info,
        "Kustomization data/db is not among the objects read"
    ));
    assert!(has_note(
        &c,
        "spec.dependsOn[2]",
        Severity::Info,
        "was not converted (refused)"
    ));
}

#[test]
fn other_documents_are_ignored_and_notes_say_where() {
    let c = run(vec![
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
        json!({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": []}),
        json!("text"),
    ]);
    assert!(c.sets.is_empty() && c.notes.is_empty());
    let note = Note {
        object: FluxRef {
            kind: "Kustomization".into(),
            namespace: "n".into(),
            name: "k".into(),
        },
        field: "spec.x".into(),
        severity: Severity::Dropped,
        why: "y".into(),
    };
    assert_eq!(note.to_string(), "Kustomization n/k: spec.x: y");
}

#[test]
fn clean_paths() {
    use kustomization::clean_path;
    for (p, want) in [
        ("./a/b/", Some("a/b")),
        (".", None),
        ("./", None),
        ("", None),
        ("/x", Some("x")),
        ("././y", Some("y")),
    ] {
        assert_eq!(clean_path(Some(p)).as_deref(), want, "{p}");
    }
}

/// Checks every set against its CRD's openAPIV3Schema: known fields, required fields,
/// patterns, lengths and item counts (the CEL rules are checked by the API server in the CLI
/// test's dry-run).
fn check_schema(c: &Conversion) {
    let crds = crate::api::crds();
    for s in &c.sets {
        let (kind, value) = match &s.set {
            Set::Namespaced(a) => ("ApplySet", serde_json::to_value(a).expect("json")),
            Set::Cluster(cs) => ("ClusterApplySet", serde_json::to_value(cs).expect("json")),
        };
        let crd = crds
            .iter()
            .find(|c| c.spec.names.kind == kind)
            .expect("crd");
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("schema");
        let spec_schema = &schema["openAPIV3Schema"]["properties"]["spec"];
        validate(spec_schema, &value["spec"], "spec");
    }
}

fn validate(schema: &Value, v: &Value, at: &str) {
    if let (Some(p), Some(s)) = (schema["pattern"].as_str(), v.as_str()) {
        assert!(
            regex::Regex::new(p).expect("pattern").is_match(s),
            "{at}: {s:?} !~ {p}"
        );
    }
    if let Some(s) = v.as_str() {
        let n = s.chars().count() as u64;
        assert!(
            schema["maxLength"].as_u64().is_none_or(|m| n <= m),
            "{at}: too long"
        );
        assert!(
            schema["minLength"].as_u64().is_none_or(|m| n >= m),
            "{at}: too short"
        );
    }
    if let Some(items) = v.as_array() {
        assert!(
            schema["maxItems"]
                .as_u64()
                .is_none_or(|m| items.len() as u64 <= m),
            "{at}: too many"
        );
        for (i, item) in items.iter().enumerate() {
            validate(&schema["items"], item, &format!("{at}[{i}]"));
        }
    }
    if let (Some(props), Some(obj)) = (schema["properties"].as_object(), v.as_object()) {
        let required: BTreeSet<&str> = schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        for r in required {
            assert!(obj.contains_key(r), "{at}: {r} is required");
        }
        for (k, fv) in obj {
            let sub = props
                .get(k)
                .unwrap_or_else(|| panic!("{at}.{k}: not in the schema"));
            validate(sub, fv, &format!("{at}.{k}"));
        }
    }
}

#[test]
#[should_panic(expected = "spec.interval")]
fn the_schema_check_catches_a_bad_duration() {
    let crds = crate::api::crds();
    let schema = serde_json::to_value(&crds[0].spec.versions[0].schema).expect("schema");
    validate(
        &schema["openAPIV3Schema"]["properties"]["spec"],
        &json!({"interval": "10 minutes"}),
        "spec",
    );
}

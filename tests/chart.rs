//! The Helm chart and the kustomize config: they lint, render and validate their values; the
//! chart installs into the real control plane; and the operator, run out of cluster as the
//! chart's ServiceAccount (impersonation), reconciles the examples. That proves the chart's
//! RBAC suffices; a ClusterRole without a permission the set needs surfaces as a condition.

mod support;

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::OnceLock,
    time::Duration,
};

use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        coordination::v1::Lease,
        core::v1::{Service, ServiceAccount},
        networking::v1::NetworkPolicy,
        rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client,
    api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams},
};
use serde_json::{Value, json};
use support::{cluster, scratch, test_namespace, wait_for};

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/applyset-operator");
const DEADLINE: Duration = Duration::from_secs(120);
const MEMBER_VERBS: [&str; 7] = [
    "get", "list", "watch", "create", "patch", "update", "delete",
];

// ---------------------------------------------------------------------------------------
// helpers

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The helm binary: `$APPLYSET_HELM`, or whatever `tests/testenv/build-helm.sh` prints (it
/// builds helm from the Go module proxy on a cache miss and answers at once on a hit).
fn helm_bin() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| {
        if let Some(p) = std::env::var_os("APPLYSET_HELM").filter(|p| !p.is_empty()) {
            return PathBuf::from(p);
        }
        let out = Command::new("bash")
            .arg(repo().join("tests/testenv/build-helm.sh"))
            .stderr(Stdio::inherit())
            .output()
            .expect("run build-helm.sh");
        assert!(out.status.success(), "build-helm.sh failed: {}", out.status);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let dir = stdout.lines().last().unwrap_or_default().trim().to_string();
        assert!(!dir.is_empty(), "build-helm.sh printed no directory");
        PathBuf::from(dir).join("helm")
    })
}

/// `helm ARGS`, with helm's own state kept out of $HOME.
fn helm(args: &[&str]) -> Output {
    let home = scratch("helm-home");
    Command::new(helm_bin())
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .current_dir(repo())
        .output()
        .expect("run helm")
}

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Parses multi-document YAML into JSON values (empty documents skipped).
fn parse_docs(yaml: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_str_multiple(yaml).expect("valid YAML");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// `helm template` of the chart with `args`; panics when it fails.
fn template(args: &[&str]) -> Vec<Value> {
    let mut all = vec!["template", "aso", CHART, "--namespace", "applyset-system"];
    all.extend_from_slice(args);
    let out = helm(&all);
    assert!(
        out.status.success(),
        "helm template {args:?} failed:\n{}",
        text(&out)
    );
    parse_docs(&String::from_utf8_lossy(&out.stdout))
}

/// `helm template` that must fail; returns its output.
fn template_fails(args: &[&str]) -> String {
    let mut all = vec!["template", "aso", CHART];
    all.extend_from_slice(args);
    let out = helm(&all);
    assert!(
        !out.status.success(),
        "helm template {args:?} should have been refused:\n{}",
        text(&out)
    );
    text(&out)
}

fn kinds(docs: &[Value]) -> Vec<String> {
    let mut k: Vec<String> = docs
        .iter()
        .map(|d| d["kind"].as_str().unwrap_or_default().to_string())
        .collect();
    k.sort();
    k
}

fn find<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found = find(docs, kind);
    assert_eq!(found.len(), 1, "expected one {kind}, got {:?}", kinds(docs));
    found[0]
}

fn container(deployment: &Value) -> &Value {
    &deployment["spec"]["template"]["spec"]["containers"][0]
}

fn args(deployment: &Value) -> Vec<String> {
    container(deployment)["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string arg").to_string())
        .collect()
}

/// True when `rule` grants every verb on every resource of every group.
fn is_wildcard(rule: &Value) -> bool {
    let has = |field: &str| {
        rule[field]
            .as_array()
            .is_some_and(|v| v.iter().any(|x| x == "*"))
    };
    has("apiGroups") && has("resources") && has("verbs")
}

fn rules(role: &Value) -> &Vec<Value> {
    role["rules"].as_array().expect("rules")
}

/// The rule for `resource` in `group`, whose verbs must include every one of `verbs`.
fn assert_grants(role: &Value, group: &str, resource: &str, verbs: &[&str]) {
    let ok = rules(role).iter().any(|r| {
        let contains = |field: &str, v: &str| {
            r[field]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == v))
        };
        contains("apiGroups", group)
            && contains("resources", resource)
            && verbs.iter().all(|v| contains("verbs", v))
    });
    assert!(
        ok,
        "{} {} does not grant {verbs:?} on {group}/{resource}: {}",
        role["kind"],
        role["metadata"]["name"],
        serde_json::to_string_pretty(&role["rules"]).unwrap_or_default()
    );
}

fn kubectl_bin() -> PathBuf {
    applyset_testenv::binaries()
        .expect("kube binaries (tests/testenv/build-kube.sh)")
        .join("kubectl")
}

// ---------------------------------------------------------------------------------------
// lint, template, schema

#[test]
fn helm_lint_passes() {
    for extra in [
        &[][..],
        &["--set", "replicaCount=2"][..],
        &["--set", "serviceMonitor.enabled=true"][..],
        &[
            "--set",
            "rbac.members=namespaced",
            "--set",
            "watchNamespace=team-a",
        ][..],
    ] {
        let mut all = vec!["lint", "--strict", CHART];
        all.extend_from_slice(extra);
        let out = helm(&all);
        assert!(
            out.status.success(),
            "helm lint {extra:?} failed:\n{}",
            text(&out)
        );
    }
}

#[test]
fn default_render_is_a_hardened_single_replica_with_leader_election() {
    let docs = template(&[]);
    assert_eq!(
        kinds(&docs),
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "Deployment",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount"
        ],
        "defaults render no PodDisruptionBudget, no ServiceMonitor"
    );

    let deploy = one(&docs, "Deployment");
    assert_eq!(deploy["metadata"]["namespace"], "applyset-system");
    assert_eq!(deploy["spec"]["replicas"], 1);
    assert_eq!(
        args(deploy),
        [
            "run",
            "--metrics-addr=0.0.0.0:8080",
            "--health-addr=0.0.0.0:8081",
            "--leader-elect",
            "--leader-election-name=aso-applyset-operator",
            "--log-format=json",
            "--concurrency=8"
        ]
    );
    let pod = &deploy["spec"]["template"]["spec"];
    let sa = one(&docs, "ServiceAccount");
    assert_eq!(pod["serviceAccountName"], sa["metadata"]["name"]);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let c = container(deploy);
    assert_eq!(c["image"], "applyset-operator:0.1.0", "tag = appVersion");
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["runAsUser"], 65532);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    for kind in ["requests", "limits"] {
        for res in ["cpu", "memory"] {
            assert!(
                c["resources"][kind][res].is_string(),
                "resources.{kind}.{res} missing: {}",
                c["resources"]
            );
        }
    }
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "health"})
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "health"})
    );
    let ports = c["ports"].as_array().expect("ports");
    assert!(ports.contains(&json!({"name": "metrics", "containerPort": 8080, "protocol": "TCP"})));
    assert!(ports.contains(&json!({"name": "health", "containerPort": 8081, "protocol": "TCP"})));
    for (name, path) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        assert!(
            c["env"]
                .as_array()
                .expect("env")
                .contains(&json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}})),
            "env {name} from the downward API missing: {}",
            c["env"]
        );
    }

    // The metrics Service selects the pods and exposes port 8080 named metrics.
    let svc = one(&docs, "Service");
    assert_eq!(
        svc["spec"]["ports"][0],
        json!({"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"})
    );
    for (k, v) in svc["spec"]["selector"].as_object().expect("selector") {
        assert_eq!(&deploy["spec"]["template"]["metadata"]["labels"][k], v);
    }

    // RBAC: the operator's own rules, `*` on `*/*` for members (the documented default),
    // the Lease role in the release namespace, bindings to the ServiceAccount.
    let cr = one(&docs, "ClusterRole");
    let parent_verbs = ["get", "list", "watch", "patch", "update"];
    assert_grants(cr, "applyset.dev", "applysets", &parent_verbs);
    assert_grants(cr, "applyset.dev", "clusterapplysets", &parent_verbs);
    for sub in ["applysets/status", "clusterapplysets/status"] {
        assert_grants(cr, "applyset.dev", sub, &["get", "patch", "update"]);
    }
    for sub in ["applysets/finalizers", "clusterapplysets/finalizers"] {
        assert_grants(cr, "applyset.dev", sub, &["update"]);
    }
    assert_grants(cr, "events.k8s.io", "events", &["create", "patch"]);
    assert_grants(
        cr,
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        &["get", "list", "watch"],
    );
    assert!(rules(cr).iter().any(is_wildcard), "default grants * on */*");
    let role = one(&docs, "Role");
    assert_eq!(role["metadata"]["namespace"], "applyset-system");
    // Its rules, on the release's Lease only: `the_leader_election_role_names_its_lease`.
    for binding in [one(&docs, "ClusterRoleBinding"), one(&docs, "RoleBinding")] {
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "applyset-system"}])
        );
    }
    assert_eq!(
        one(&docs, "ClusterRoleBinding")["roleRef"]["name"],
        cr["metadata"]["name"]
    );
    assert_eq!(
        one(&docs, "RoleBinding")["roleRef"]["name"],
        role["metadata"]["name"]
    );

    // --include-crds renders the two generated CRDs as well.
    let with_crds = template(&["--include-crds"]);
    let crd_names: Vec<&str> = find(&with_crds, "CustomResourceDefinition")
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        crd_names,
        ["applysets.applyset.dev", "clusterapplysets.applyset.dev"]
    );
}

#[test]
fn the_leader_election_role_names_its_lease() {
    for (args, lease) in [
        (vec![], "aso-applyset-operator"),
        (
            vec!["--set", "leaderElection.leaseName=team-lease"],
            "team-lease",
        ),
    ] {
        let docs = template(&args);
        let flag = format!("--leader-election-name={lease}");
        assert!(args_of(&docs).contains(&flag), "{flag} in {args:?}");
        let role = one(&docs, "Role");
        assert_eq!(
            rules(role),
            &vec![
                json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                       "verbs": ["create"]}),
                json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                       "resourceNames": [lease], "verbs": ["get", "update", "patch", "delete"]}),
            ],
            "create is the one verb RBAC cannot restrict to a name; no list or watch"
        );
    }
    let refused = template_fails(&["--set", "leaderElection.leaseName=Not_A_Name"]);
    assert!(refused.contains("leaseName"), "{refused}");
}

fn args_of(docs: &[Value]) -> Vec<String> {
    args(one(docs, "Deployment"))
}

#[test]
fn the_servers_can_listen_on_the_pod_ip_only() {
    let docs = template(&["--set", "listenAddress=$(POD_IP)"]);
    let deploy = one(&docs, "Deployment");
    let a = args(deploy);
    assert!(
        a.contains(&"--metrics-addr=$(POD_IP):8080".to_string()),
        "{a:?}"
    );
    assert!(
        a.contains(&"--health-addr=$(POD_IP):8081".to_string()),
        "{a:?}"
    );
    let env = container(deploy)["env"].as_array().expect("env");
    let pod_ip = env.iter().find(|e| e["name"] == "POD_IP").expect("POD_IP");
    assert_eq!(pod_ip["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP");
    // IPv6 in brackets; by default every interface, and no POD_IP.
    let a = args(one(
        &template(&["--set", "listenAddress=[$(POD_IP)]"]),
        "Deployment",
    ));
    assert!(
        a.contains(&"--metrics-addr=[$(POD_IP)]:8080".to_string()),
        "{a:?}"
    );
    let default = template(&[]);
    let env = container(one(&default, "Deployment"))["env"].clone();
    assert!(!env.to_string().contains("POD_IP"), "{env}");
    let refused = template_fails(&["--set", "listenAddress=0.0.0.0:9090"]);
    assert!(refused.contains("listenAddress"), "{refused}");
}

#[test]
fn a_shard_is_a_release_with_a_label_selector() {
    let docs = template(&[
        "--set",
        "labelSelector=applyset.dev/shard=blue",
        "--set",
        "crds.install=false",
    ]);
    let a = args(one(&docs, "Deployment"));
    assert!(
        a.contains(&"--label-selector=applyset.dev/shard=blue".to_string()),
        "{a:?}"
    );
    assert!(a.contains(&"--leader-election-name=aso-applyset-operator".to_string()));
    assert!(find(&docs, "CustomResourceDefinition").is_empty());
    let all = args(one(&template(&[]), "Deployment"));
    assert!(
        !all.iter().any(|x| x.starts_with("--label-selector")),
        "{all:?}"
    );
}

#[test]
fn alerts_and_dashboard_are_opt_in() {
    let docs = template(&[]);
    assert!(find(&docs, "PrometheusRule").is_empty());
    assert!(find(&docs, "ConfigMap").is_empty());
    let docs = template(&[
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "prometheusRule.notReadyFor=30m",
        "--set",
        "grafanaDashboard.enabled=true",
        "--set",
        "serviceMonitor.enabled=true",
    ]);
    let rule = one(&docs, "PrometheusRule");
    let rules = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules");
    let alerts: Vec<&str> = rules.iter().filter_map(|r| r["alert"].as_str()).collect();
    assert_eq!(
        alerts,
        ["ApplySetNotReady", "ApplySetReconcileErrorsRising"]
    );
    assert_eq!(rules[0]["for"], "30m");
    let dashboard = one(&docs, "ConfigMap");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json = dashboard["data"]["applyset-operator.json"]
        .as_str()
        .expect("the dashboard");
    let parsed: Value = serde_json::from_str(json).expect("the dashboard is JSON");
    assert_eq!(parsed["uid"], "applyset-operator");
    let monitor = one(&docs, "ServiceMonitor");
    assert_eq!(monitor["spec"]["endpoints"][0]["honorLabels"], true);
}

#[test]
fn the_dockerfile_pins_its_base_images_by_digest() {
    let dockerfile = fs::read_to_string(repo().join("Dockerfile")).expect("Dockerfile");
    let froms: Vec<&str> = dockerfile
        .lines()
        .filter(|l| l.trim_start().starts_with("FROM "))
        .collect();
    // The builder, the kustomize build stage, the runtime.
    assert_eq!(froms.len(), 3, "{froms:?}");
    // The image's kustomize is the tests' (tests/testenv/build-kustomize.sh).
    let script = fs::read_to_string(repo().join("tests/testenv/build-kustomize.sh"))
        .expect("build-kustomize.sh");
    let version = script
        .lines()
        .find_map(|l| l.strip_prefix("KUSTOMIZE_VERSION="))
        .expect("KUSTOMIZE_VERSION");
    assert!(
        dockerfile.contains(&format!("ARG KUSTOMIZE_VERSION={version}")),
        "the Dockerfile builds kustomize {version}"
    );
    for from in froms {
        let image = from.split_whitespace().nth(1).unwrap_or_default();
        let digest = image.split_once("@sha256:").map(|(_, d)| d);
        assert!(
            digest.is_some_and(|d| d.len() == 64 && d.chars().all(|c| c.is_ascii_hexdigit())),
            "not pinned by digest: {from}"
        );
    }
}

#[test]
fn network_policy_is_opt_in_and_selects_the_operator_pods() {
    assert!(
        find(&template(&[]), "NetworkPolicy").is_empty(),
        "off by default"
    );

    // On, with no peers and no egress rules: no ingress at all, egress not restricted.
    let docs = template(&["--set", "networkPolicy.enabled=true"]);
    let policy = one(&docs, "NetworkPolicy");
    let pod_labels = &one(&docs, "Deployment")["spec"]["template"]["metadata"]["labels"];
    let selector = policy["spec"]["podSelector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    assert!(!selector.is_empty());
    for (k, v) in selector {
        assert_eq!(
            &pod_labels[k], v,
            "the policy selects the operator's pods: {k}"
        );
    }
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    assert_eq!(policy["spec"]["ingress"], json!([]));
    assert!(policy["spec"].get("egress").is_none());

    // Peers reach the metrics and health ports only; egress rules restrict egress.
    let docs = template(&[
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=monitoring",
        "--set",
        "networkPolicy.egress[0].ports[0].port=53",
    ]);
    let policy = one(&docs, "NetworkPolicy");
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(
        policy["spec"]["ingress"],
        json!([{
            "from": [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}],
            "ports": [{"port": "metrics", "protocol": "TCP"}, {"port": "health", "protocol": "TCP"}]
        }])
    );
    assert_eq!(policy["spec"]["egress"], json!([{"ports": [{"port": 53}]}]));
}

#[test]
fn two_replicas_add_a_disruption_budget_and_force_leader_election_unless_sharded() {
    let docs = template(&[
        "--set",
        "replicaCount=2",
        "--set",
        "leaderElection.enabled=false",
    ]);
    let deploy = one(&docs, "Deployment");
    assert_eq!(deploy["spec"]["replicas"], 2);
    assert!(
        args(deploy).contains(&"--leader-elect".to_string()),
        "{:?}",
        args(deploy)
    );
    let pdb = one(&docs, "PodDisruptionBudget");
    assert_eq!(pdb["apiVersion"], "policy/v1");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        deploy["spec"]["selector"]["matchLabels"]
    );

    // One replica without leader election: neither.
    let docs = template(&["--set", "leaderElection.enabled=false"]);
    assert!(find(&docs, "PodDisruptionBudget").is_empty());
    assert!(!args(one(&docs, "Deployment")).contains(&"--leader-elect".to_string()));

    // Sharding: every replica reconciles a share, no leader election; the Role covers the
    // Leases of the release namespace (each pod's own, and the watch of the others').
    let docs = template(&["--set", "replicaCount=3", "--set", "sharding=auto"]);
    let a = args(one(&docs, "Deployment"));
    assert!(a.contains(&"--shards=auto".to_string()), "{a:?}");
    assert!(!a.contains(&"--leader-elect".to_string()), "{a:?}");
    assert!(a.contains(&"--leader-election-name=aso-applyset-operator".to_string()));
    assert_eq!(
        rules(one(&docs, "Role")),
        &vec![
            json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
            "verbs": ["create", "get", "list", "watch", "update", "patch", "delete"]})
        ]
    );
    assert!(template_fails(&["--set", "sharding=manual"]).contains("sharding"));

    // Watch namespace and concurrency become flags.
    let docs = template(&["--set", "watchNamespace=team-a", "--set", "concurrency=12"]);
    let a = args(one(&docs, "Deployment"));
    assert!(a.contains(&"--watch-namespace=team-a".to_string()), "{a:?}");
    assert!(a.contains(&"--concurrency=12".to_string()), "{a:?}");
}

#[test]
fn service_monitor_is_optional() {
    let docs = template(&[
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "serviceMonitor.labels.release=prometheus",
    ]);
    let sm = one(&docs, "ServiceMonitor");
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(sm["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(sm["spec"]["endpoints"][0]["path"], "/metrics");
    let svc = one(&docs, "Service");
    for (k, v) in sm["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels")
    {
        assert_eq!(
            &svc["metadata"]["labels"][k], v,
            "selects the metrics Service"
        );
    }
}

#[test]
fn restricted_member_rbac_options() {
    // rules: exactly the supplied rules for members, no wildcard.
    let member_rules = r#"rbac.memberRules=[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","list","watch","create","patch","update","delete"]}]"#;
    let docs = template(&["--set", "rbac.members=rules", "--set-json", member_rules]);
    let cr = one(&docs, "ClusterRole");
    assert!(
        !rules(cr).iter().any(is_wildcard),
        "rbac.members=rules must not grant */*: {}",
        cr["rules"]
    );
    assert!(
        !serde_json::to_string(&cr["rules"])
            .unwrap_or_default()
            .contains("\"*\""),
        "no wildcard at all: {}",
        cr["rules"]
    );
    assert_grants(cr, "", "configmaps", &MEMBER_VERBS);
    assert_grants(cr, "applyset.dev", "applysets", &["watch", "patch"]);
    assert!(
        find(&docs, "Role").len() == 1,
        "only the leader-election Role"
    );

    // rules without rules is refused with a message that says what to do.
    let err = template_fails(&["--set", "rbac.members=rules"]);
    assert!(err.contains("rbac.memberRules"), "{err}");

    // namespaced: `*` only inside the watched namespace; nothing cluster-wide for members.
    let docs = template(&[
        "--set",
        "rbac.members=namespaced",
        "--set",
        "watchNamespace=team-a",
    ]);
    let cr = one(&docs, "ClusterRole");
    assert!(!rules(cr).iter().any(is_wildcard), "{}", cr["rules"]);
    let members: Vec<&Value> = find(&docs, "Role")
        .into_iter()
        .filter(|r| r["metadata"]["namespace"] == "team-a")
        .collect();
    assert_eq!(members.len(), 1, "a members Role in team-a");
    assert!(rules(members[0]).iter().any(is_wildcard));
    let binding = find(&docs, "RoleBinding")
        .into_iter()
        .find(|b| b["metadata"]["namespace"] == "team-a")
        .expect("a members RoleBinding in team-a");
    assert_eq!(binding["roleRef"]["name"], members[0]["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["namespace"], "applyset-system");
    assert!(args(one(&docs, "Deployment")).contains(&"--watch-namespace=team-a".to_string()));
    // ... and refused without the namespace.
    let err = template_fails(&["--set", "rbac.members=namespaced"]);
    assert!(err.contains("watchNamespace"), "{err}");
}

/// rbac.members=impersonate: nothing that writes members, impersonation of ServiceAccounts,
/// and the lock-down flags.
#[test]
fn impersonate_mode_grants_no_write_on_members() {
    let docs = template(&["--set", "rbac.members=impersonate"]);
    let cr = one(&docs, "ClusterRole");
    for r in rules(cr) {
        let own =
            r["apiGroups"] == json!(["applyset.dev"]) || r["apiGroups"] == json!(["events.k8s.io"]);
        if own {
            continue;
        }
        let verbs: Vec<&str> = r["verbs"]
            .as_array()
            .expect("verbs")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(
            verbs
                .iter()
                .all(|v| ["get", "list", "watch", "impersonate"].contains(v)),
            "only reads and impersonation on members: {r}"
        );
    }
    assert_grants(cr, "", "serviceaccounts", &["impersonate"]);
    assert!(
        rules(cr).iter().any(|r| r["apiGroups"] == json!(["*"])
            && r["resources"] == json!(["*"])
            && r["verbs"] == json!(["get", "list", "watch"])),
        "reads every kind, for the member watches: {}",
        cr["rules"]
    );
    let a = args(one(&docs, "Deployment"));
    assert!(
        a.contains(&"--default-service-account=applyset-deployer".to_string()),
        "{a:?}"
    );
    assert!(
        a.contains(
            &"--cluster-default-service-account=applyset-system/applyset-deployer".to_string()
        ),
        "{a:?}"
    );
    let docs = template(&[
        "--set",
        "rbac.members=impersonate",
        "--set",
        "tenancy.defaultServiceAccount=deployer",
        "--set",
        "tenancy.clusterDefaultServiceAccount=platform/admin",
    ]);
    let a = args(one(&docs, "Deployment"));
    assert!(
        a.contains(&"--default-service-account=deployer".to_string()),
        "{a:?}"
    );
    assert!(
        a.contains(&"--cluster-default-service-account=platform/admin".to_string()),
        "{a:?}"
    );
    // Other modes pass neither flag.
    let a = args(one(&template(&[]), "Deployment"));
    assert!(
        !a.iter().any(|x| x.contains("default-service-account")),
        "{a:?}"
    );
}

#[test]
fn invalid_values_are_refused_by_the_schema() {
    for (args, mentions) in [
        (&["--set", "replicaCount=abc"][..], "replicaCount"),
        (&["--set", "replicaCount=-1"][..], "replicaCount"),
        (&["--set", "rbac.members=everything"][..], "members"),
        (&["--set", "logFormat=xml"][..], "logFormat"),
        (&["--set", "concurrency=0"][..], "concurrency"),
        (&["--set", "serviceMonitor.enabled=yes"][..], "enabled"),
        (&["--set", "replicas=2"][..], "replicas"),
        (&["--set", "image.pullPolicy=Sometimes"][..], "pullPolicy"),
        (&["--set", "image.digest=latest"][..], "digest"),
        (&["--set", "crds.install=maybe"][..], "install"),
        (
            &["--set-json", r#"rbac.memberRules=[{"resources":["pods"]}]"#][..],
            "verbs",
        ),
    ] {
        let err = template_fails(args);
        assert!(
            err.contains("schema") && err.contains(mentions),
            "{args:?}: the refusal should come from values.schema.json and name {mentions}:\n{err}"
        );
    }
    // A parent chart's `global` values are accepted; a digest pins the image.
    let digest = format!("sha256:{}", "0123456789abcdef".repeat(4));
    let docs = template(&[
        "--set",
        "global.imageRegistry=registry.example",
        "--set",
        &format!("image.digest={digest}"),
    ]);
    assert_eq!(
        container(one(&docs, "Deployment"))["image"],
        format!("applyset-operator:0.1.0@{digest}")
    );
}

// ---------------------------------------------------------------------------------------
// generated CRDs, kustomize

#[test]
fn chart_crds_are_the_generated_ones() {
    let config = fs::read_to_string(repo().join("config/crd/applyset.dev.yaml")).expect("read");
    let chart = fs::read_to_string(repo().join("charts/applyset-operator/files/applyset.dev.yaml"))
        .expect("read");
    assert!(
        chart == config,
        "charts/applyset-operator/files/applyset.dev.yaml differs from config/crd/applyset.dev.yaml: run `make crds`"
    );
    let generated = applyset_operator::api::crds_yaml().expect("generate");
    assert!(
        chart == generated,
        "the chart's CRDs are stale: run `make crds`"
    );
    // The chart renders exactly those, with its labels and the keep policy added.
    let rendered = find(&template(&[]), "CustomResourceDefinition")
        .into_iter()
        .cloned()
        .collect::<Vec<_>>();
    let expected = parse_docs(&generated);
    assert_eq!(rendered.len(), expected.len());
    for (mut r, e) in rendered.into_iter().zip(expected) {
        let meta = &mut r["metadata"];
        assert_eq!(
            meta["annotations"],
            json!({"helm.sh/resource-policy": "keep"}),
            "uninstall keeps the CRDs (and every ApplySet)"
        );
        assert_eq!(meta["labels"]["app.kubernetes.io/managed-by"], "Helm");
        if let Some(m) = meta.as_object_mut() {
            m.remove("annotations");
        }
        if let Some(labels) = meta["labels"].as_object_mut() {
            labels.retain(|k, _| !k.starts_with("app.kubernetes.io/") && k != "helm.sh/chart");
        }
        assert_eq!(r, e, "the rendered CRD differs from the generated one");
    }
    let without = template(&["--set", "crds.install=false"]);
    assert!(find(&without, "CustomResourceDefinition").is_empty());
}

#[test]
fn kustomize_config_renders_the_chart_defaults() {
    let kustomize = |dir: &str| {
        let out = Command::new(kubectl_bin())
            .args(["kustomize", dir])
            .current_dir(repo())
            .output()
            .expect("run kubectl kustomize");
        assert!(
            out.status.success(),
            "kubectl kustomize {dir} failed:\n{}",
            text(&out)
        );
        parse_docs(&String::from_utf8_lossy(&out.stdout))
    };
    let docs = kustomize("config/default");
    let k = kinds(&docs);
    for kind in [
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
        "Deployment",
    ] {
        assert!(k.iter().any(|x| x == kind), "no {kind} in {k:?}");
    }
    let crds: Vec<&str> = find(&docs, "CustomResourceDefinition")
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        crds,
        ["applysets.applyset.dev", "clusterapplysets.applyset.dev"]
    );
    for d in &docs {
        let cluster_scoped = [
            "Namespace",
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
        ]
        .contains(&d["kind"].as_str().unwrap_or_default());
        if !cluster_scoped {
            assert_eq!(
                d["metadata"]["namespace"], "applyset-system",
                "{}",
                d["kind"]
            );
        }
    }
    let deploy = one(&docs, "Deployment");
    assert_eq!(container(deploy)["image"], "applyset-operator:0.1.0");

    // The same container, pod security and RBAC rules as the chart's defaults (named as the
    // kustomize configuration names them: the Lease is `applyset-operator`).
    let chart = template(&["--set", "fullnameOverride=applyset-operator"]);
    let chart_deploy = one(&chart, "Deployment");
    assert_eq!(container(deploy), container(chart_deploy));
    assert_eq!(
        deploy["spec"]["template"]["spec"]["securityContext"],
        chart_deploy["spec"]["template"]["spec"]["securityContext"]
    );
    assert_eq!(
        rules(one(&docs, "ClusterRole")),
        rules(one(&chart, "ClusterRole"))
    );
    assert_eq!(rules(one(&docs, "Role")), rules(one(&chart, "Role")));

    let samples = kustomize("config/samples");
    assert_eq!(kinds(&samples), ["ApplySet"]);

    // The locked-down overlay: the chart's `rbac.members: impersonate`.
    let locked = kustomize("config/impersonate");
    let chart = template(&[
        "--set",
        "rbac.members=impersonate",
        "--set",
        "fullnameOverride=applyset-operator",
    ]);
    assert_eq!(
        rules(one(&locked, "ClusterRole")),
        rules(one(&chart, "ClusterRole"))
    );
    assert_eq!(
        container(one(&locked, "Deployment")),
        container(one(&chart, "Deployment"))
    );
}

// ---------------------------------------------------------------------------------------
// install into the real control plane; the operator as the chart's ServiceAccount

/// The operator binary, run out of cluster; killed when dropped (also when a test panics),
/// and its log printed if the test is failing.
struct OperatorProcess {
    child: Child,
    log: PathBuf,
    /// POD_NAME: the identity it holds a Lease under.
    identity: String,
}

impl OperatorProcess {
    fn start(kubeconfig: &Path, namespace: &str, selector: &str, extra: &[&str]) -> Self {
        let log = scratch("logs").join(format!("{}.log", selector.replace(['/', '='], "_")));
        let identity = format!("test-{}", selector.replace(['/', '=', '.'], "-"));
        let file = fs::File::create(&log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_applyset-operator"))
            .args([
                "run",
                "--metrics-addr",
                "127.0.0.1:0",
                "--health-addr",
                "127.0.0.1:0",
                "--label-selector",
                selector,
                "--log-format",
                "text",
            ])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAMESPACE", namespace)
            .env("POD_NAME", &identity)
            .env("RUST_LOG", "info,kube=warn")
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .spawn()
            .expect("start the operator");
        OperatorProcess {
            child,
            log,
            identity,
        }
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn assert_running(&mut self) {
        let status = self.child.try_wait().expect("try_wait");
        assert!(
            status.is_none(),
            "the operator exited ({status:?}); its log:\n{}",
            self.log()
        );
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- operator log ({}) ---\n{}",
                self.log.display(),
                self.log()
            );
        }
    }
}

/// A Helm release in the test control plane; `helm uninstall` on `uninstall()`.
struct Release {
    name: String,
    namespace: String,
}

impl Release {
    /// Installs the chart into the shared test cluster, whose CRDs no release owns (several
    /// releases are installed at once: at most one may install the CRDs).
    fn install(name: &str, namespace: &str, values: &[&str]) -> Self {
        let kubeconfig = cluster().kubeconfig().display().to_string();
        let mut args = vec![
            "install",
            name,
            CHART,
            "--namespace",
            namespace,
            "--create-namespace",
            "--kubeconfig",
            &kubeconfig,
            "--timeout",
            "2m",
            "--set",
            "crds.install=false",
        ];
        args.extend_from_slice(values);
        let out = helm(&args);
        assert!(out.status.success(), "helm install failed:\n{}", text(&out));
        let notes = text(&out);
        assert!(
            notes.contains("kubectl get applysets -A")
                && notes.contains("kubectl wait --for=condition=Ready"),
            "NOTES.txt says how to check the installation:\n{notes}"
        );
        Release {
            name: name.into(),
            namespace: namespace.into(),
        }
    }

    /// The release's full name (ServiceAccount, ClusterRole, Deployment ...).
    fn fullname(&self) -> String {
        format!("{}-applyset-operator", self.name)
    }

    fn uninstall(self) {
        let kubeconfig = cluster().kubeconfig().display().to_string();
        let out = helm(&[
            "uninstall",
            &self.name,
            "--namespace",
            &self.namespace,
            "--kubeconfig",
            &kubeconfig,
        ]);
        assert!(
            out.status.success(),
            "helm uninstall failed:\n{}",
            text(&out)
        );
    }

    /// A kubeconfig that authenticates as the release's ServiceAccount with a token of its
    /// own (a TokenRequest), as a pod of the release would.
    async fn token_kubeconfig(&self, client: &Client) -> PathBuf {
        use k8s_openapi::api::authentication::v1::TokenRequest;
        let request: TokenRequest =
            serde_json::from_value(json!({"spec": {"expirationSeconds": 3600}})).expect("request");
        let token = Api::<ServiceAccount>::namespaced(client.clone(), &self.namespace)
            .create_token_request(
                &self.fullname(),
                &kube::api::PostParams::default(),
                &request,
            )
            .await
            .expect("a token for the release's ServiceAccount")
            .status
            .and_then(|s| s.token)
            .expect("a token in the answer");
        let cp = cluster().control_plane();
        let yaml = applyset_testenv::kubeconfig_yaml(cp.server(), &cp.ca_file(), &token);
        let path = scratch("kubeconfigs").join(format!("{}-token.yaml", self.name));
        fs::write(&path, yaml).expect("write");
        path
    }

    /// A copy of the admin kubeconfig whose user impersonates the release's ServiceAccount,
    /// as a pod of the release would authenticate.
    fn impersonating_kubeconfig(&self) -> PathBuf {
        let admin = fs::read_to_string(cluster().kubeconfig()).expect("read kubeconfig");
        let mut kc = parse_docs(&admin).remove(0);
        let users = kc["users"].as_array_mut().expect("users");
        for u in users {
            let user = u["user"].as_object_mut().expect("user");
            user.insert(
                "as".into(),
                json!(format!(
                    "system:serviceaccount:{}:{}",
                    self.namespace,
                    self.fullname()
                )),
            );
            user.insert(
                "as-groups".into(),
                json!([
                    "system:serviceaccounts",
                    format!("system:serviceaccounts:{}", self.namespace),
                    "system:authenticated"
                ]),
            );
        }
        let path = scratch("kubeconfigs").join(format!("{}.yaml", self.name));
        // JSON is YAML.
        fs::write(&path, serde_json::to_string_pretty(&kc).expect("json")).expect("write");
        path
    }
}

/// Creates the CRDs when they are missing (the test installs set `crds.install=false`) and
/// waits until they are Established.
async fn install_crds(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in applyset_operator::api::crds() {
        match crds.create(&Default::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("creating a CRD: {e}"),
        }
    }
    wait_crds_established(client).await;
}

async fn wait_crds_established(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in ["applysets.applyset.dev", "clusterapplysets.applyset.dev"] {
        wait_for(&format!("CRD {name} Established"), DEADLINE, || {
            let crds = crds.clone();
            async move {
                crds.get_opt(name)
                    .await
                    .ok()??
                    .status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            }
        })
        .await;
    }
}

fn applyset_resource(kind: &str) -> ApiResource {
    let plural = match kind {
        "ApplySet" => "applysets",
        "ClusterApplySet" => "clusterapplysets",
        other => panic!("not a parent kind: {other}"),
    };
    ApiResource {
        group: "applyset.dev".into(),
        version: "v1alpha1".into(),
        api_version: "applyset.dev/v1alpha1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn parent_api(client: &Client, obj: &Value) -> Api<DynamicObject> {
    let kind = obj["kind"].as_str().expect("kind");
    let ar = applyset_resource(kind);
    match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// Applies an ApplySet/ClusterApplySet as the admin (a user's `kubectl apply`).
async fn apply_parent(client: &Client, obj: &Value) {
    let name = obj["metadata"]["name"].as_str().expect("name");
    parent_api(client, obj)
        .patch(
            name,
            &PatchParams::apply("chart-test").force(),
            &Patch::Apply(obj),
        )
        .await
        .unwrap_or_else(|e| panic!("apply {name}: {e}"));
}

/// The Ready condition of a parent once it has status `want` and satisfies `also`; on timeout
/// the panic shows the last status seen.
async fn wait_ready(
    client: &Client,
    obj: &Value,
    want: &str,
    also: impl Fn(&Value) -> bool,
) -> Value {
    let api = parent_api(client, obj);
    let name = obj["metadata"]["name"].as_str().expect("name");
    let deadline = std::time::Instant::now() + DEADLINE;
    let mut last = Value::Null;
    loop {
        if let Ok(live) = api.get(name).await {
            last = live.data.get("status").cloned().unwrap_or(Value::Null);
            let ready = last["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"));
            if let Some(ready) = ready
                && ready["status"] == want
                && also(ready)
            {
                return ready.clone();
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {DEADLINE:?} waiting for {} {name} Ready={want}; last status: {last}",
            obj["kind"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn example(file: &str) -> Vec<Value> {
    let yaml = fs::read_to_string(repo().join("examples").join(file)).expect("read example");
    parse_docs(&yaml)
}

/// examples/web-app.yaml's ApplySet, moved into `namespace` and labelled for `selector`.
fn web_example(namespace: &str, name: &str, label: &str) -> Value {
    let mut set = example("web-app.yaml")
        .into_iter()
        .find(|d| d["kind"] == "ApplySet")
        .expect("an ApplySet in web-app.yaml");
    set["metadata"]["namespace"] = json!(namespace);
    set["metadata"]["name"] = json!(name);
    set["metadata"]["labels"] = json!({"applyset.dev/test": label});
    set
}

/// examples/platform-addon.yaml's ClusterApplySet with every cluster-wide name made unique
/// by `suffix` (its CRD group, Namespace and its own name), labelled for `selector`.
fn addon_example(suffix: &str, label: &str) -> Value {
    let set = example("platform-addon.yaml")
        .into_iter()
        .find(|d| d["kind"] == "ClusterApplySet")
        .expect("a ClusterApplySet in platform-addon.yaml");
    let text = serde_json::to_string(&set)
        .expect("json")
        .replace(
            "example.applyset.dev",
            &format!("x{suffix}.example.applyset.dev"),
        )
        .replace("\"widgets-addon\"", &format!("\"widgets-addon-{suffix}\""))
        .replace(
            "\"name\":\"widgets\"",
            &format!("\"name\":\"widgets-{suffix}\""),
        )
        .replace(
            "\"namespace\":\"widgets\"",
            &format!("\"namespace\":\"widgets-{suffix}\""),
        );
    let mut set: Value = serde_json::from_str(&text).expect("json");
    set["metadata"]["labels"] = json!({"applyset.dev/test": label});
    set
}

/// Runs the operator as `release`'s ServiceAccount, with leader election as the chart runs
/// it, and checks that both examples (uniquely renamed by `suffix`) become Ready and that
/// deleting them prunes their members.
async fn examples_reconcile_as(client: &Client, release: &Release, suffix: &str) {
    let label = format!("chart-{suffix}");
    let lease_flag = format!("--leader-election-name={}", release.fullname());
    let mut operator = OperatorProcess::start(
        &release.impersonating_kubeconfig(),
        &release.namespace,
        &format!("applyset.dev/test={label}"),
        &["--leader-elect", &lease_flag],
    );

    let web_ns = test_namespace(client, "chart-web").await;
    let web = web_example(&web_ns, "web", &label);
    let addon = addon_example(suffix, &label);
    apply_parent(client, &web).await;
    apply_parent(client, &addon).await;
    for set in [&web, &addon] {
        let ready = wait_ready(client, set, "True", |_| true).await;
        assert_eq!(ready["reason"], "ReconciliationSucceeded", "{ready}");
    }
    operator.assert_running();

    // The release's Lease is held in its namespace (the leader-election Role, which names
    // that one Lease, suffices).
    let identity = operator.identity.clone();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &release.namespace);
    let lease = leases
        .get(&release.fullname())
        .await
        .expect("the release's Lease");
    let holder = lease.spec.and_then(|s| s.holder_identity);
    assert_eq!(
        holder.as_deref(),
        Some(identity.as_str()),
        "holder of the Lease"
    );

    // Deletion (deletionPolicy Delete) prunes the members as the ServiceAccount too.
    for set in [&web, &addon] {
        let name = set["metadata"]["name"].as_str().expect("name").to_string();
        let api = parent_api(client, set);
        api.delete(&name, &DeleteParams::default())
            .await
            .expect("delete parent");
        wait_for(&format!("{name} to be gone"), DEADLINE, || {
            let api = api.clone();
            let name = name.clone();
            async move { matches!(api.get_opt(&name).await, Ok(None)).then_some(()) }
        })
        .await;
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = format!("widgets.x{suffix}.example.applyset.dev");
    wait_for("the example's CRD to be pruned", DEADLINE, || {
        let crds = crds.clone();
        let crd = crd.clone();
        async move { matches!(crds.get_opt(&crd).await, Ok(None)).then_some(()) }
    })
    .await;
    operator.assert_running();
}

/// Helm never upgrades what is in a chart's `crds/` directory; this chart's CRDs are
/// templates, so `helm upgrade` brings a field a later release adds, and `helm uninstall`
/// keeps them (and every ApplySet). On a control plane of its own: the other tests share
/// the CRDs of theirs.
#[tokio::test(flavor = "multi_thread")]
async fn helm_upgrade_updates_the_crds_and_uninstall_keeps_them() {
    let own = tokio::task::spawn_blocking(support::TestCluster::start_private)
        .await
        .expect("start a control plane");
    let client = own.client().await;
    let kubeconfig = own.kubeconfig().display().to_string();
    let helm_on = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--kubeconfig", &kubeconfig]);
        let out = helm(&all);
        assert!(
            out.status.success(),
            "helm {args:?} failed:\n{}",
            text(&out)
        );
    };
    let ns = "applyset-system";
    helm_on(&[
        "install",
        "aso",
        CHART,
        "-n",
        ns,
        "--create-namespace",
        "--wait=false",
    ]);
    wait_crds_established(&client).await;

    // A later release of the chart: its ApplySet CRD has a new spec field.
    let newer = scratch("chart-upgrade").join("applyset-operator");
    let _ = fs::remove_dir_all(&newer);
    copy_dir(Path::new(CHART), &newer);
    let crds = newer.join("files/applyset.dev.yaml");
    let yaml = fs::read_to_string(&crds).expect("read the CRDs");
    // The first CRD of the file is ApplySet's; its spec's first property is adoptExisting.
    let with_field = yaml.replacen(
        "            properties:\n              adoptExisting:\n",
        "            properties:\n              upgradeProbe:\n                description: A field of a later chart release.\n                type: string\n              adoptExisting:\n",
        1,
    );
    assert_ne!(
        with_field, yaml,
        "the test adds a field to the ApplySet spec"
    );
    fs::write(&crds, with_field).expect("write the CRDs");
    let newer_path = newer.display().to_string();
    helm_on(&["upgrade", "aso", &newer_path, "-n", ns, "--wait=false"]);

    // The new field is kept by the API server (an unknown field would be pruned).
    let set = json!({
        "apiVersion": "applyset.dev/v1alpha1", "kind": "ApplySet",
        "metadata": {"name": "probe", "namespace": ns},
        "spec": {"upgradeProbe": "kept", "manifests": []},
    });
    let api = parent_api(&client, &set);
    let stored = wait_for("the upgraded CRD to keep the new field", DEADLINE, || {
        let api = api.clone();
        let set = set.clone();
        async move {
            let obj: DynamicObject = serde_json::from_value(set).ok()?;
            let pp = PatchParams::apply("chart-test").force();
            let stored = api.patch("probe", &pp, &Patch::Apply(&obj)).await.ok()?;
            (stored.data["spec"]["upgradeProbe"] == "kept").then_some(stored)
        }
    })
    .await;
    assert_eq!(stored.data["spec"]["upgradeProbe"], "kept");

    // Uninstall keeps the CRDs, and so the ApplySet.
    helm_on(&["uninstall", "aso", "-n", ns]);
    let kept: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in ["applysets.applyset.dev", "clusterapplysets.applyset.dev"] {
        let crd = kept.get(name).await.expect("the CRD outlives the release");
        assert!(
            crd.metadata.deletion_timestamp.is_none(),
            "{name} is being deleted"
        );
    }
    api.get("probe")
        .await
        .expect("the ApplySet outlives the release");
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("create dir");
    for entry in fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}

#[tokio::test]
async fn chart_rbac_suffices_for_the_examples() {
    let pid = std::process::id();
    let client = cluster().client().await;
    let release = Release::install(
        &format!("aso-{pid}"),
        &format!("applyset-system-{pid}"),
        &[
            "--set",
            "networkPolicy.enabled=true",
            "--set",
            "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=monitoring",
        ],
    );
    let ns = release.namespace.clone();
    let full = release.fullname();

    // The installed objects.
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .get(&full)
        .await
        .expect("Deployment");
    Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .get(&full)
        .await
        .expect("ServiceAccount");
    Api::<Service>::namespaced(client.clone(), &ns)
        .get(&format!("{full}-metrics"))
        .await
        .expect("metrics Service");
    Api::<ClusterRole>::all(client.clone())
        .get(&full)
        .await
        .expect("ClusterRole");
    Api::<ClusterRoleBinding>::all(client.clone())
        .get(&full)
        .await
        .expect("ClusterRoleBinding");
    Api::<Role>::namespaced(client.clone(), &ns)
        .get(&format!("{full}-leader-election"))
        .await
        .expect("leader-election Role");
    Api::<RoleBinding>::namespaced(client.clone(), &ns)
        .get(&format!("{full}-leader-election"))
        .await
        .expect("leader-election RoleBinding");
    // The API server accepted the opt-in NetworkPolicy as rendered.
    let policy = Api::<NetworkPolicy>::namespaced(client.clone(), &ns)
        .get(&full)
        .await
        .expect("NetworkPolicy");
    let ingress = policy.spec.and_then(|s| s.ingress).unwrap_or_default();
    assert_eq!(ingress.len(), 1, "one ingress rule: {ingress:?}");
    install_crds(&client).await;

    examples_reconcile_as(&client, &release, &pid.to_string()).await;

    release.uninstall();
    wait_for("the ClusterRole to go with the release", DEADLINE, || {
        let api = Api::<ClusterRole>::all(client.clone());
        let full = full.clone();
        async move { matches!(api.get_opt(&full).await, Ok(None)).then_some(()) }
    })
    .await;
}

/// Without the `*` default: the operator's own rules plus exactly the examples' kinds suffice
/// (this also proves the leader-election Role, which `*` would otherwise cover).
#[tokio::test]
async fn restricted_rules_for_exactly_the_examples_suffice() {
    let pid = std::process::id();
    let suffix = format!("r{pid}");
    let client = cluster().client().await;
    let verbs = json!(MEMBER_VERBS);
    let rules = json!([
        {"apiGroups": [""], "resources": ["configmaps", "services", "namespaces"], "verbs": verbs},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": verbs},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": verbs},
        {"apiGroups": [format!("x{suffix}.example.applyset.dev")], "resources": ["widgets"], "verbs": verbs},
    ]);
    let release = Release::install(
        &format!("aso-rules-{pid}"),
        &format!("applyset-rules-{pid}"),
        &[
            "--set",
            "rbac.members=rules",
            "--set-json",
            &format!("rbac.memberRules={rules}"),
        ],
    );
    let cr = Api::<ClusterRole>::all(client.clone())
        .get(&release.fullname())
        .await
        .expect("ClusterRole");
    let cr = serde_json::to_value(&cr).expect("json");
    assert!(
        !serde_json::to_string(&cr["rules"])
            .unwrap_or_default()
            .contains("\"*\""),
        "no wildcard: {}",
        cr["rules"]
    );
    install_crds(&client).await;

    examples_reconcile_as(&client, &release, &suffix).await;
    release.uninstall();
}

/// rbac.members=impersonate in a real control plane, the operator running with the chart
/// ServiceAccount's own token: a set acts as its namespace's default ServiceAccount, which
/// may only manage ConfigMaps; it cannot gain Secrets through the operator, and the
/// operator itself may not write members.
#[tokio::test]
async fn impersonate_mode_gives_a_set_only_its_service_accounts_rights() {
    let pid = std::process::id();
    let client = cluster().client().await;
    let release = Release::install(
        &format!("aso-imp-{pid}"),
        &format!("applyset-imp-{pid}"),
        &["--set", "rbac.members=impersonate"],
    );
    install_crds(&client).await;
    let label = format!("imp-{pid}");
    let kubeconfig = release.token_kubeconfig(&client).await;
    let mut operator = OperatorProcess::start(
        &kubeconfig,
        &release.namespace,
        &format!("applyset.dev/test={label}"),
        &["--default-service-account=applyset-deployer"],
    );

    let ns = test_namespace(&client, "chart-imp").await;
    configmaps_only_service_account(&client, &ns, "applyset-deployer").await;
    let mut set = web_example(&ns, "team", &label);
    set["spec"]["manifests"] = json!([
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"a": "1"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "stolen"}, "stringData": {"a": "1"}}
    ]);
    apply_parent(&client, &set).await;
    let ready = wait_ready(&client, &set, "False", |c| c["reason"] == "ApplyFailed").await;
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("secrets")
            && message.contains(&format!("system:serviceaccount:{ns}:applyset-deployer")),
        "names the ServiceAccount and the resource: {ready}"
    );
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    assert!(matches!(secrets.get_opt("stolen").await, Ok(None)));

    // The operator's own ServiceAccount may not write members at all.
    let operator_user = format!(
        "system:serviceaccount:{}:{}",
        release.namespace,
        release.fullname()
    );
    for (verb, resource) in [
        ("create", "configmaps"),
        ("patch", "secrets"),
        ("delete", "configmaps"),
    ] {
        assert!(
            !may(&client, &operator_user, verb, resource, &ns).await,
            "{operator_user} may {verb} {resource}"
        );
    }

    set["spec"]["manifests"] = json!([
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"a": "1"}}
    ]);
    apply_parent(&client, &set).await;
    wait_ready(&client, &set, "True", |_| true).await;
    operator.assert_running();
    drop(operator);
    release.uninstall();
}

/// ServiceAccount `name` in `namespace` with a Role for ConfigMaps there only.
async fn configmaps_only_service_account(client: &Client, namespace: &str, name: &str) {
    let pp = kube::api::PostParams::default();
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("sa");
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create(&pp, &sa)
        .await
        .expect("ServiceAccount");
    let role: Role = serde_json::from_value(json!({"metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": MEMBER_VERBS}]}))
    .expect("role");
    Api::<Role>::namespaced(client.clone(), namespace)
        .create(&pp, &role)
        .await
        .expect("Role");
    let binding: RoleBinding = serde_json::from_value(json!({"metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]}))
    .expect("binding");
    Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .create(&pp, &binding)
        .await
        .expect("RoleBinding");
}

/// Whether `user` may `verb` `resource` (core group) in `namespace` (a SubjectAccessReview).
async fn may(client: &Client, user: &str, verb: &str, resource: &str, namespace: &str) -> bool {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let review: SubjectAccessReview = serde_json::from_value(json!({"spec": {
        "user": user,
        "groups": ["system:serviceaccounts", "system:authenticated"],
        "resourceAttributes": {"verb": verb, "resource": resource, "namespace": namespace}}}))
    .expect("review");
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&kube::api::PostParams::default(), &review)
        .await
        .expect("SubjectAccessReview");
    answer.status.is_some_and(|s| s.allowed)
}

#[tokio::test]
async fn a_missing_permission_is_a_condition_not_a_crash() {
    let pid = std::process::id();
    let client = cluster().client().await;
    // Everything the web example needs except Services.
    let rules = format!(
        r#"rbac.memberRules=[{{"apiGroups":[""],"resources":["configmaps"],"verbs":{verbs}}},{{"apiGroups":["apps"],"resources":["deployments"],"verbs":{verbs}}}]"#,
        verbs = serde_json::to_string(&MEMBER_VERBS).expect("json")
    );
    let release = Release::install(
        &format!("aso-restricted-{pid}"),
        &format!("applyset-restricted-{pid}"),
        &["--set", "rbac.members=rules", "--set-json", &rules],
    );
    install_crds(&client).await;

    let label = format!("restricted-{pid}");
    let lease_flag = format!("--leader-election-name={}", release.fullname());
    let mut operator = OperatorProcess::start(
        &release.impersonating_kubeconfig(),
        &release.namespace,
        &format!("applyset.dev/test={label}"),
        &["--leader-elect", &lease_flag],
    );

    let ns = test_namespace(&client, "chart-restricted").await;
    let web = web_example(&ns, "web", &label);
    apply_parent(&client, &web).await;
    let ready = wait_ready(&client, &web, "False", |c| c["reason"] == "ApplyFailed").await;
    let message = ready["message"].as_str().unwrap_or_default().to_lowercase();
    assert!(
        message.contains("services") && message.contains("forbidden"),
        "the condition names the forbidden Services: {ready}"
    );
    operator.assert_running();

    // Other ApplySets of the same operator still reconcile.
    let mut config_only = web_example(&ns, "config-only", &label);
    config_only["spec"]["manifests"] = json!([
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "only"}, "data": {"a": "1"}}
    ]);
    apply_parent(&client, &config_only).await;
    wait_ready(&client, &config_only, "True", |_| true).await;
    operator.assert_running();

    // Still failing the same clear way, not crash-looping, on the next attempt.
    let ready = wait_ready(&client, &web, "False", |c| c["reason"] == "ApplyFailed").await;
    assert!(
        ready["message"]
            .as_str()
            .unwrap_or_default()
            .to_lowercase()
            .contains("service"),
        "{ready}"
    );
    operator.assert_running();
    drop(operator);
    release.uninstall();
}

//! Kustomize overlays end to end: the in-process operator builds overlays of git, http and
//! oci sources (served by these tests on loopback) with the pinned upstream `kustomize`, and
//! applies them to the real control plane. What it applies is compared, object by object,
//! with what the same binary's `kustomize build` prints for a checkout of the same files.

mod support;

use support::{init, operator, servers};

use std::path::Path;

use applyset_operator::{api::ApplySetStatus, controller::Operator};
use operator::*;
use serde_json::{Value, json};
use servers::*;
use support::{contains, kustomize_binary, resource_of, upstream_build, wait_for};

/// An operator for `h` that builds with the pinned kustomize and may reach beyond the
/// namespace (the overlays hold a CRD); `tune` adjusts its configuration.
fn start(h: &Harness, tune: impl FnOnce(&mut applyset_operator::controller::Config)) -> Operator {
    let mut config = h.config();
    config.tenancy.allow_cross_namespace = true;
    config.source_limits.kustomize.binary = Some(kustomize_binary());
    tune(&mut config);
    Operator::start(h.client.clone(), config)
}

/// Kustomize builds the operator ran, by result.
fn builds(op: &Operator, result: &str) -> u64 {
    let text = op.metrics().encode();
    let key = format!("applyset_kustomize_builds_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in the metrics:\n{text}"))
}

/// The files of the test repository: a base (a CRD and its custom resource, a Deployment, a
/// Service, a configMapGenerator from a .properties file), a component, and two overlays
/// (`prod`: namePrefix/nameSuffix, labels, images, a strategic-merge patch from a file and an
/// inline JSON 6902 patch, a configMapGenerator merging a .env file, a secretGenerator
/// referenced by the patch, the component, replacements; `dev`: a namePrefix).
fn repo_files(group: &str) -> Vec<(String, String)> {
    let f = |p: &str, t: &str| (p.to_string(), t.replace("GROUP", group));
    vec![
        f(
            "base/kustomization.yaml",
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- crd.yaml\n- deployment.yaml\n- service.yaml\n- widget.yaml\nlabels:\n- pairs: {app.kubernetes.io/name: web}\n  includeSelectors: true\nconfigMapGenerator:\n- name: web-config\n  files: [app.properties]\n",
        ),
        f("base/app.properties", "greeting=hello\n"),
        f(
            "base/deployment.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.25\n        envFrom:\n        - configMapRef: {name: web-config}\n        volumeMounts:\n        - {name: config, mountPath: /etc/web}\n      volumes:\n      - name: config\n        configMap: {name: web-config}\n",
        ),
        f(
            "base/service.yaml",
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector: {app: web}\n  ports:\n  - port: 80\n    targetPort: 80\n",
        ),
        f(
            "base/crd.yaml",
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.GROUP\nspec:\n  group: GROUP\n  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}\n  scope: Namespaced\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n",
        ),
        f(
            "base/widget.yaml",
            "apiVersion: GROUP/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 1\n",
        ),
        f(
            "components/monitoring/kustomization.yaml",
            "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources: [monitor.yaml]\npatches:\n- target: {kind: Deployment}\n  patch: |-\n    - op: add\n      path: /metadata/annotations\n      value: {monitoring: enabled}\n",
        ),
        f(
            "components/monitoring/monitor.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: monitor\ndata:\n  owner: team-a\n",
        ),
        f(
            "overlays/prod/kustomization.yaml",
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../../base]\ncomponents: [../../components/monitoring]\nnamePrefix: prod-\nnameSuffix: -v1\nlabels:\n- pairs: {env: prod}\nimages:\n- name: nginx\n  newName: registry.example.com/nginx\n  newTag: \"1.27\"\npatches:\n- path: replicas.yaml\n- target: {kind: Service, name: web}\n  patch: |-\n    - op: replace\n      path: /spec/ports/0/port\n      value: 8080\nconfigMapGenerator:\n- name: web-config\n  behavior: merge\n  envs: [prod.env]\nsecretGenerator:\n- name: web-secret\n  literals: [password=s3cret]\nreplacements:\n- source: {kind: ConfigMap, name: monitor, fieldPath: data.owner}\n  targets:\n  - select: {kind: Widget}\n    fieldPaths: [spec.owner]\n    options: {create: true}\n",
        ),
        f("overlays/prod/prod.env", "level=prod\n"),
        f(
            "overlays/prod/replicas.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 3\n  template:\n    spec:\n      containers:\n      - name: web\n        env:\n        - name: PASSWORD\n          valueFrom:\n            secretKeyRef: {name: web-secret, key: password}\n",
        ),
        f(
            "overlays/dev/kustomization.yaml",
            "resources: [../../base]\nnamePrefix: dev-\n",
        ),
    ]
}

/// A unique API group for this test's CRD (CRDs are cluster-wide).
fn group(test: &str) -> String {
    format!("{test}{}.kz.example.com", std::process::id())
}

/// Commits `files` to `repo`.
fn commit(repo: &GitRepo, files: &[(String, String)], message: &str) -> String {
    let refs: Vec<(&str, Option<&str>)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), Some(t.as_str())))
        .collect();
    repo.commit(&refs, message)
}

/// Asserts that every object of `want` is live (namespaced ones in `ns` unless they name
/// theirs) and holds what `want` says, and that the set has exactly as many members.
async fn assert_applied(h: &Harness, st: &ApplySetStatus, want: &[Value]) {
    assert!(!want.is_empty());
    for o in want {
        let ar = resource_of(&h.client, o).await;
        let name = o["metadata"]["name"].as_str().expect("name");
        let namespaced = ar.kind != "CustomResourceDefinition" && ar.kind != "Namespace";
        let ns = o["metadata"]["namespace"].as_str().unwrap_or(&h.ns);
        let ns = namespaced.then_some(ns);
        let live = must_get(&h.client, &ar, ns, name).await;
        let live = serde_json::to_value(&live).expect("json");
        assert!(
            contains(&live, o),
            "{} {name}: the live object does not hold what kustomize built\nbuilt: {}\nlive: {}",
            ar.kind,
            serde_json::to_string_pretty(o).unwrap_or_default(),
            serde_json::to_string_pretty(&live).unwrap_or_default()
        );
        assert!(
            live["metadata"]["labels"][LABEL_PART_OF].as_str().is_some(),
            "{name} is a member"
        );
    }
    let members = st.summary.as_ref().map(|s| s.members).unwrap_or_default();
    assert_eq!(members as usize, want.len(), "{}", status_json(st));
}

fn message(st: &ApplySetStatus) -> String {
    ready(st).message.clone()
}

/// A git source of `server`'s repository `repo` at branch main, `path`.
fn git_source(server: &GitServer, repo: &str, path: &str) -> Value {
    json!({"git": {"url": server.url(repo), "ref": {"branch": "main"}, "path": path}})
}

// ---------------------------------------------------------------------------------------------

/// An overlay in a git repository is built, and what is applied is exactly what upstream
/// `kustomize build` prints for it: patches (strategic merge from a file, JSON 6902 inline),
/// images, namePrefix/nameSuffix, labels, a configMapGenerator (hash suffix, merged with a
/// .env file, and the references renamed), a secretGenerator, a component, replacements, a
/// CRD with its custom resource. A reconcile of an unchanged revision runs no build (counted);
/// a new commit is built once.
#[tokio::test]
async fn git_overlays_are_built_as_upstream_kustomize_builds_them() {
    init();
    let h = Harness::new("kz-git").await;
    let op = start(&h, |_| {});
    let server = GitServer::start(None, None).await;
    let repo = server.repo("apps");
    let files = repo_files(&group("git"));
    commit(&repo, &files, "first");

    let prod = h.applyset("prod");
    prod.create(
        json!({"interval": "1s", "sources": [git_source(&server, "apps", "overlays/prod")]}),
    )
    .await;
    let st = prod.wait_ready().await;
    let want = upstream_build(&files, &[], "overlays/prod");
    assert_eq!(want.len(), 7, "{want:?}");
    assert_applied(&h, &st, &want).await;
    // The generated names are kustomize's (hash suffixes) and the references follow them.
    let cm = want
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["data"]["level"] == "prod")
        .expect("generated configmap");
    let cm_name = cm["metadata"]["name"].as_str().expect("name");
    assert!(cm_name.starts_with("prod-web-config-v1-"), "{cm_name}");

    // Unchanged revision: reconciles run (interval 1s), no build.
    let built = builds(&op, "built");
    assert!(built >= 1);
    wait_reconciles(&op, 3).await;
    assert_eq!(
        builds(&op, "built"),
        built,
        "an unchanged revision is not built again"
    );
    assert_eq!(builds(&op, "failed"), 0);

    // A new commit: built once more; the ConfigMap generated from the changed .env file
    // gets a new name, the references follow, the old one is pruned.
    let old = st.last_applied_revision.clone().expect("applied revision");
    let mut changed = files.clone();
    changed.push((
        "overlays/prod/prod.env".into(),
        "level=prod\nzone=eu\n".into(),
    ));
    commit(&repo, &changed, "second");
    let st = prod
        .wait_until("the new commit applied", LONG_DEADLINE, |_, st| {
            let st = st?;
            let applied = st.last_applied_revision.as_deref()?;
            (applied != old && ready(st).status == "True").then(|| st.clone())
        })
        .await;
    let want = upstream_build(&changed, &[], "overlays/prod");
    assert_applied(&h, &st, &want).await;
    assert!(builds(&op, "built") > built, "the new commit was built");
    assert!(!exists(&h.client, &configmap_ar(), Some(&h.ns), cm_name).await);
    stop(op).await;
}

/// Refused before (or by) the build, each with a message naming the file, and nothing applied
/// or pruned: a remote base, a KRM function plugin, helmCharts, a file outside the source's
/// root, a build beyond the time limit, output beyond the memory budget.
#[tokio::test]
async fn unsafe_or_unbounded_overlays_are_refused_naming_the_file() {
    init();
    let h = Harness::new("kz-refuse").await;
    // The build's time limit is 3/4 of the sources' deadline: 6 s.
    let op = start(&h, |c| {
        c.source_limits.timeout = std::time::Duration::from_secs(8);
        c.source_limits.memory = 6 << 20;
    });
    let server = GitServer::start(None, None).await;
    let repo = server.repo("bad");
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: good\ndata: {a: b}\n";
    // A slow build: kustomize's name references over many objects take seconds.
    let slow: String = (0..20_000)
        .map(|i| format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c{i}\n"))
        .collect();
    // A large output from a small input: one 1.5 MiB ConfigMap, included five times.
    let big = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n  v: {}\n",
        "x".repeat(1_500_000)
    );
    let mut files: Vec<(String, String)> = vec![
        ("good/kustomization.yaml".into(), "resources: [cm.yaml]\n".into()),
        ("good/cm.yaml".into(), cm.into()),
        (
            "remote/kustomization.yaml".into(),
            "resources:\n- ../good\n- https://github.com/kubernetes-sigs/kustomize//examples/helloWorld?ref=v5.7.1\n".into(),
        ),
        (
            "plugin/kustomization.yaml".into(),
            "resources: [../good]\ngenerators: [gen.yaml]\n".into(),
        ),
        (
            "plugin/gen.yaml".into(),
            "apiVersion: example.com/v1\nkind: Exec\nmetadata:\n  name: x\n  annotations:\n    config.kubernetes.io/function: |\n      exec: {path: /bin/sh}\n".into(),
        ),
        (
            "helm/kustomization.yaml".into(),
            "helmCharts:\n- name: nginx\n  repo: https://charts.example.com\n".into(),
        ),
        (
            "outside/kustomization.yaml".into(),
            "resources: [../good, ../../../../etc/hostname]\n".into(),
        ),
        ("slow/kustomization.yaml".into(), "resources: [cm.yaml]\nnamePrefix: p-\n".into()),
        ("slow/cm.yaml".into(), slow),
        ("big/base/cm.yaml".into(), big),
        ("big/base/kustomization.yaml".into(), "resources: [cm.yaml]\n".into()),
        (
            "big/kustomization.yaml".into(),
            "resources: [a, b, c, d, e]\n".into(),
        ),
    ];
    files.push((
        "broken/kustomization.yaml".into(),
        "resources: [missing.yaml]\n".into(),
    ));
    for p in ["a", "b", "c", "d", "e"] {
        files.push((
            format!("big/{p}/kustomization.yaml"),
            format!("resources: [../base]\nnamePrefix: {p}-\n"),
        ));
    }
    commit(&repo, &files, "cases");

    // A set applied from a good path, then pointed at a remote base: refused, nothing pruned.
    let set = h.applyset("switch");
    set.create(json!({"interval": "1h", "retryInterval": "1h", "sources": [git_source(&server, "bad", "good")]}))
        .await;
    set.wait_ready().await;
    set.patch_spec(json!({"sources": [git_source(&server, "bad", "remote")]}))
        .await;
    let st = set
        .wait_ready_reason(Some("False"), "ValidationFailed")
        .await;
    let msg = message(&st);
    for part in [
        "remote/kustomization.yaml: resources[1] entry \"https://github.com/kubernetes-sigs/kustomize//examples/helloWorld?ref=v5.7.1\" is remote",
        "not fetched",
    ] {
        assert!(msg.contains(part), "{part} in {msg}");
    }
    assert!(
        exists(&h.client, &configmap_ar(), Some(&h.ns), "good").await,
        "nothing pruned"
    );

    let cases = [
        (
            "plugin",
            "ValidationFailed",
            "plugin/kustomization.yaml: generators[0] entry \"gen.yaml\" is a kustomize plugin",
        ),
        (
            "helm",
            "ValidationFailed",
            "helm/kustomization.yaml: helmCharts is not supported",
        ),
        (
            "outside",
            "ValidationFailed",
            "outside/kustomization.yaml: resources[1] entry \"../../../../etc/hostname\" is outside the source's root",
        ),
        (
            "slow",
            "SourceFailed",
            "kustomize build of slow did not finish within 6s",
        ),
        (
            "big",
            "SourceFailed",
            "kustomize build of big: its output exceeds the memory budget",
        ),
        // kustomize's own words, the file named relative to the source's root.
        (
            "broken",
            "ValidationFailed",
            "kustomize build of broken failed: Error: accumulating resources",
        ),
    ];
    for (path, reason, part) in cases {
        // No retries while the other cases run: they share the small memory budget.
        let s = h.applyset(path);
        s.create(json!({"interval": "1h", "retryInterval": "1h", "sources": [git_source(&server, "bad", path)]}))
            .await;
        let st = s.wait_ready_reason(Some("False"), reason).await;
        let msg = message(&st);
        assert!(msg.contains(part), "{path}: {part} in {msg}");
        assert!(
            !msg.contains("/kustomize-"),
            "{path}: no path of the private copy: {msg}"
        );
        let applied = st.summary.as_ref().map(|s| s.members).unwrap_or_default();
        assert_eq!(applied, 0, "{path}: nothing applied: {}", status_json(&st));
    }
    assert!(
        builds(&op, "failed") >= 3,
        "the slow, big and broken builds ran and failed"
    );
    stop(op).await;
}

/// The `v` data of ConfigMap `name` in `ns`.
async fn cm_data(h: &Harness, name: &str) -> Option<Value> {
    let o = get_obj(&h.client, &configmap_ar(), Some(&h.ns), name).await?;
    o.data.get("data").cloned()
}

async fn put(h: &Harness, kind: &str, name: &str, data: Value) {
    let ar = if kind == "ConfigMap" {
        configmap_ar()
    } else {
        gvk_resource("", "v1", "Secret", "secrets")
    };
    let field = if kind == "ConfigMap" {
        "data"
    } else {
        "stringData"
    };
    let obj: kube::api::DynamicObject = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}, field: data}),
    )
    .expect("object");
    dyn_api(&h.client, &ar, Some(&h.ns))
        .patch(
            name,
            &kube::api::PatchParams::apply("test").force(),
            &kube::api::Patch::Apply(&obj),
        )
        .await
        .expect("apply");
}

/// spec.postBuild on inline members and source members: every syntax form, substituteFrom
/// precedence (later entries win, substitute wins over all), an optional missing entry, the
/// opt-out annotation, a number from `replicas: ${n}`, a ConfigMap change applied through
/// the watch (interval 1h), and a missing variable failing by name without pruning or
/// showing Secret values.
#[tokio::test]
async fn post_build_substitution_as_flux_with_strict_variables() {
    init();
    let h = Harness::new("kz-subst").await;
    let op = start(&h, |_| {});
    let server = GitServer::start(None, None).await;
    let repo = server.repo("subst");
    repo.commit(
        &[(
            "deploy/web.yaml",
            Some("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web-${cluster_name}\nspec:\n  replicas: ${replicas}\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - {name: web, image: \"nginx:${tag:=1.27}\"}\n"),
        )],
        "web",
    );
    put(
        &h,
        "ConfigMap",
        "vars-a",
        json!({"a": "from-a", "b": "from-a", "replicas": "1"}),
    )
    .await;
    put(
        &h,
        "Secret",
        "vars-s",
        json!({"b": "from-secret", "c": "s3cret-value"}),
    )
    .await;
    let inline = json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "subst"},
        "data": {
            "plain": "${cluster_name}", "default1": "${unset:=d1}", "default2": "${unset:-d2}",
            "empty": "${unset:=}", "literal": "$${cluster_name}", "a": "${a}", "b": "${b}",
            "c": "${c}", "text": "in ${cluster_name} at $5"
        }
    });
    let opted = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "opted", "annotations": {"applyset.dev/substitute": "disabled"}},
        "data": {"v": "${not_defined}"}
    });
    let post_build = json!({
        "substitute": {"cluster_name": "prod", "c": "from-substitute", "replicas": "2"},
        "substituteFrom": [
            {"kind": "ConfigMap", "name": "vars-a"},
            {"kind": "Secret", "name": "vars-s"},
            {"kind": "ConfigMap", "name": "absent", "optional": true}
        ]
    });
    let set = h.applyset("subst");
    set.create(json!({
        "interval": "1h",
        "manifests": [inline, opted],
        "sources": [git_source(&server, "subst", "deploy")],
        "postBuild": post_build
    }))
    .await;
    set.wait_ready().await;
    let data = cm_data(&h, "subst").await.expect("subst");
    assert_eq!(
        data,
        json!({
            "plain": "prod", "default1": "d1", "default2": "d2", "empty": "", "literal": "${cluster_name}",
            "a": "from-a", "b": "from-secret", "c": "from-substitute", "text": "in prod at $5"
        })
    );
    assert_eq!(
        cm_data(&h, "opted").await,
        Some(json!({"v": "${not_defined}"}))
    );
    let deploy = must_get(
        &h.client,
        &gvk_resource("apps", "v1", "Deployment", "deployments"),
        Some(&h.ns),
        "web-prod",
    )
    .await;
    assert_eq!(deploy.data["spec"]["replicas"], json!(2), "a number");
    assert_eq!(
        deploy.data["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.27"
    );

    // A change of a referenced ConfigMap is applied at once (the interval is an hour).
    put(
        &h,
        "ConfigMap",
        "vars-a",
        json!({"a": "changed", "b": "from-a", "replicas": "1"}),
    )
    .await;
    wait_for("the changed variable applied", DEADLINE, || async {
        let d = cm_data(&h, "subst").await?;
        (d["a"] == "changed").then_some(())
    })
    .await;

    // A variable without a value fails by name; nothing is pruned; no Secret value shows.
    let broken = json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "broken"},
        "data": {"v": "${nope}", "c": "${c}"}
    });
    set.patch_spec(json!({"manifests": [broken]})).await;
    let st = set
        .wait_ready_reason(Some("False"), "ValidationFailed")
        .await;
    let msg = ready(&st).message.clone();
    assert!(
        msg.contains("variable nope has no value and no default"),
        "{msg}"
    );
    assert!(msg.contains("${nope:=}"), "{msg}");
    assert!(
        !status_json(&st).contains("s3cret-value"),
        "{}",
        status_json(&st)
    );
    assert!(cm_data(&h, "subst").await.is_some(), "nothing pruned");
    stop(op).await;
}

/// spec.kustomize gives what Flux gives for the same overrides: the upstream build of the
/// overlay's kustomization with the overrides set as Flux's generator sets them (namespace,
/// namePrefix and nameSuffix replaced, patches and components appended, images merged by
/// name), then commonMetadata on every object; and an http bundle (no kustomization at its
/// path) is built through a generated kustomization.
#[tokio::test]
async fn kustomize_overrides_match_the_equivalent_upstream_build() {
    init();
    let h = Harness::new("kz-over").await;
    let op = start(&h, |_| {});
    let server = GitServer::start(None, None).await;
    let repo = server.repo("over");
    let mut files = repo_files(&group("over"));
    files.push((
        "components/extra/kustomization.yaml".into(),
        "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nconfigMapGenerator:\n- name: extra\n  literals: [k=v]\n".into(),
    ));
    commit(&repo, &files, "first");
    let ns = h.ns.clone();
    let set = h.applyset("over");
    set.create(json!({
        "sources": [git_source(&server, "over", "overlays/prod")],
        "kustomize": {
            "targetNamespace": ns,
            "namePrefix": "ov-",
            "nameSuffix": "-x",
            "commonMetadata": {"labels": {"team": "a"}, "annotations": {"owner": "me"}},
            "patches": [{"patch": "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: any\nspec:\n  replicas: 5\n", "target": {"kind": "Deployment"}}],
            "images": [{"name": "nginx", "newTag": "1.28"}],
            "components": ["../../components/extra"]
        }
    }))
    .await;
    let st = set.wait_ready().await;
    let equivalent = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: {ns}\nresources: [../../base]\ncomponents: [../../components/monitoring, ../../components/extra]\nnamePrefix: ov-\nnameSuffix: -x\nlabels:\n- pairs: {{env: prod}}\nimages:\n- name: nginx\n  newName: registry.example.com/nginx\n  newTag: \"1.28\"\npatches:\n- path: replicas.yaml\n- target: {{kind: Service, name: web}}\n  patch: |-\n    - op: replace\n      path: /spec/ports/0/port\n      value: 8080\n- target: {{kind: Deployment}}\n  patch: |\n    apiVersion: apps/v1\n    kind: Deployment\n    metadata:\n      name: any\n    spec:\n      replicas: 5\nconfigMapGenerator:\n- name: web-config\n  behavior: merge\n  envs: [prod.env]\nsecretGenerator:\n- name: web-secret\n  literals: [password=s3cret]\nreplacements:\n- source: {{kind: ConfigMap, name: monitor, fieldPath: data.owner}}\n  targets:\n  - select: {{kind: Widget}}\n    fieldPaths: [spec.owner]\n    options: {{create: true}}\n"
    );
    let mut want = upstream_build(
        &files,
        &[("overlays/prod/kustomization.yaml", &equivalent)],
        "overlays/prod",
    );
    for o in &mut want {
        o["metadata"]["labels"]["team"] = json!("a");
        o["metadata"]["annotations"]["owner"] = json!("me");
    }
    assert!(
        want.iter().any(|o| o["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("ov-extra-x-"))),
        "the component's generator is in"
    );
    assert_applied(&h, &st, &want).await;
    let deploy = want
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("deployment");
    assert_eq!(deploy["spec"]["replicas"], json!(5));
    assert_eq!(
        deploy["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example.com/nginx:1.28"
    );

    // An http bundle whose path holds plain manifests and a directory with a kustomization:
    // built through a generated kustomization (Flux's rule), with a namePrefix override.
    let files = [
        (
            "app/plain.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\n",
        ),
        (
            "app/sub/kustomization.yaml",
            "resources: [cm.yaml]\nnameSuffix: -sub\n",
        ),
        (
            "app/sub/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: nested\n",
        ),
        (".sourceignore", "app/ignored.yaml\n"),
        ("app/ignored.yaml", "not: [valid"),
    ];
    let entries: Vec<Entry<'_>> = files
        .iter()
        .map(|(p, t)| Entry::File(p, t.as_bytes()))
        .collect();
    let http = FileServer::start(None).await;
    http.put("/app.tgz", tar_gz(&entries));
    let bundle = h.applyset("bundle");
    bundle
        .create(json!({
            "sources": [{"http": {"url": http.url("/app.tgz"), "path": "app"}}],
            "kustomize": {"namePrefix": "b-"}
        }))
        .await;
    bundle.wait_ready().await;
    for name in ["b-plain", "b-nested-sub"] {
        assert!(
            exists(&h.client, &configmap_ar(), Some(&h.ns), name).await,
            "{name}"
        );
    }
    stop(op).await;
}

/// Runs the plugin with `args` and the pinned kustomize.
async fn plugin(args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-applyset"))
        .args(args)
        .arg("--kustomize-binary")
        .arg(kustomize_binary())
        .env_remove("KUBECONFIG")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("run kubectl-applyset")
}

/// `kubectl applyset build` (offline) and `diff` (against the cluster) of a set whose source
/// is an overlay show the built members, as upstream kustomize builds them.
#[tokio::test]
async fn plugin_build_and_diff_show_the_built_overlay() {
    init();
    let h = Harness::new("kz-cli").await;
    let server = GitServer::start(None, None).await;
    let repo = server.repo("cli");
    let files: Vec<(String, String)> = [
        ("base/kustomization.yaml", "resources: [deploy.yaml]\nconfigMapGenerator:\n- name: settings\n  literals: [mode=base]\n"),
        ("base/deploy.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\nspec:\n  selector:\n    matchLabels: {app: api}\n  template:\n    metadata:\n      labels: {app: api}\n    spec:\n      containers:\n      - name: api\n        image: api:1\n        envFrom: [{configMapRef: {name: settings}}]\n"),
        ("overlays/staging/kustomization.yaml", "resources: [../../base]\nnamePrefix: stg-\nimages: [{name: api, newTag: \"2\"}]\nconfigMapGenerator:\n- name: settings\n  behavior: replace\n  literals: [mode=staging]\n"),
    ]
    .iter()
    .map(|(p, t)| (p.to_string(), t.to_string()))
    .collect();
    commit(&repo, &files, "cli");
    let want = upstream_build(&files, &[], "overlays/staging");
    let names: Vec<String> = want
        .iter()
        .map(|o| {
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    let set = json!({
        "apiVersion": "applyset.dev/v1alpha1", "kind": "ApplySet",
        "metadata": {"name": "cli", "namespace": h.ns},
        "spec": {"sources": [git_source(&server, "cli", "overlays/staging")]}
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("set.yaml");
    std::fs::write(&file, serde_json::to_string(&set).expect("json")).expect("write");
    let path = file.to_str().expect("path");

    let out = plugin(&["build", "-f", path]).await;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Vec<Value> = serde_saphyr::from_multiple(&text).expect("YAML");
    for o in &want {
        let name = &o["metadata"]["name"];
        let got = printed
            .iter()
            .find(|p| p["metadata"]["name"] == *name && p["kind"] == o["kind"])
            .unwrap_or_else(|| panic!("{name} not printed:\n{text}"));
        assert!(contains(got, o), "{name}: printed {got:#}, built {o:#}");
    }

    let kubeconfig = format!("--kubeconfig={}", support::cluster().kubeconfig().display());
    let out = plugin(&[&kubeconfig, "diff", "-f", path]).await;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "changes: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("2 to create, 0 to change, 0 to prune"),
        "{text}"
    );
    for name in &names {
        assert!(text.contains(name.as_str()), "{name} in the diff:\n{text}");
    }
    assert!(text.contains("image: api:2"), "{text}");
}

/// examples/kustomize: the sets are valid, each overlay of its repository builds with the
/// pinned kustomize, and the variables its sets give fill in every reference.
#[test]
fn kustomize_examples_build_and_substitute() {
    use applyset_operator::{
        api::ApplySet,
        manifest::{Origin, parse_documents},
        parent::Parent as _,
        sources, substitute,
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/kustomize");
    let text = std::fs::read_to_string(root.join("applysets.yaml")).expect("read");
    let docs = parse_documents(&text, &Origin::file("examples/kustomize", "applysets.yaml"))
        .expect("parses");
    let cluster_vars: std::collections::BTreeMap<String, String> = docs
        .iter()
        .find(|d| d.kind == "ConfigMap")
        .map(|d| serde_json::from_value(d.object["data"].clone()).expect("data"))
        .expect("the cluster-vars ConfigMap");
    let mut sets = 0;
    for d in docs.iter().filter(|d| d.kind == "ApplySet") {
        sets += 1;
        let a: ApplySet = serde_json::from_value(Value::Object(d.object.clone())).expect("set");
        sources::validate(&a.parent_ref(), &a.spec).expect("valid sources");
        let path = a.spec.sources[0]
            .git
            .as_ref()
            .and_then(|g| g.path.clone())
            .expect("path");
        let out = std::process::Command::new(kustomize_binary())
            .arg("build")
            .arg(root.join("repo").join(&path))
            .output()
            .expect("kustomize");
        assert!(
            out.status.success(),
            "{path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let built = parse_documents(
            &String::from_utf8_lossy(&out.stdout),
            &Origin::source(&path),
        )
        .expect("built manifests parse");
        let pb = a.spec.post_build.as_ref().expect("postBuild");
        let from = if pb.substitute_from.is_empty() {
            Default::default()
        } else {
            cluster_vars.clone()
        };
        let vars = substitute::merge(vec![
            ("substituteFrom[0]".into(), from, false),
            ("substitute".into(), pb.substitute.clone(), false),
        ])
        .expect("valid names");
        let done = substitute::apply(built, &vars).expect("every variable has a value");
        let deploy = done
            .iter()
            .find(|m| m.kind == "Deployment")
            .expect("deployment");
        let replicas = &deploy.object["spec"]["replicas"];
        assert!(
            replicas.is_u64(),
            "{path}: replicas is a number: {replicas}"
        );
        let text = serde_json::to_string(&deploy.object).expect("json");
        assert!(!text.contains("${"), "{path}: {text}");
    }
    assert_eq!(sets, 2);
}

/// The cost of builds (not run by `make test`; `cargo test --test kustomize --
/// --ignored kustomize_build_cost --nocapture`, `KZ_BENCH_N` builds of each kind): the
/// operator's build path (private copy, checks, the binary, the output read within the
/// budget) for a one-file kustomization and for the overlay of these tests, one at a time and
/// `KZ_BENCH_N` at --kustomize-concurrency 2. A set whose source, revision, path and overrides
/// are cached runs no build at all: 1,000 sets reading one overlay with the same inputs cost
/// one build; 1,000 sets with distinct inputs (or a new revision) cost 1,000.
#[tokio::test]
#[ignore]
async fn kustomize_build_cost() {
    use applyset_operator::sources::{
        kustomize::{BuildScope, Builder, Job, Settings},
        memory::MemoryBudget,
        tree::Tree,
    };
    let n: usize = std::env::var("KZ_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let builder = std::sync::Arc::new(Builder::new(Settings {
        binary: Some(kustomize_binary()),
        ..Default::default()
    }));
    let budget = MemoryBudget::new(1 << 30, std::time::Duration::from_secs(10));
    let work = tempfile::tempdir().expect("tempdir");
    let one_file: Vec<(String, String)> = vec![
        (
            "app/kustomization.yaml".into(),
            "resources: [cm.yaml]\nnamePrefix: x-\n".into(),
        ),
        (
            "app/cm.yaml".into(),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n".into(),
        ),
    ];
    for (what, files, dir) in [
        ("one-file kustomization", one_file, "app"),
        (
            "overlay (tests/kustomize.rs prod)",
            repo_files("bench.example.com"),
            "overlays/prod",
        ),
    ] {
        let mut tree = Tree::new();
        for (p, t) in &files {
            tree.insert(p.clone(), t.as_bytes().to_vec());
        }
        let tree = std::sync::Arc::new(tree);
        let build = |tree: std::sync::Arc<Tree>| {
            let builder = builder.clone();
            let budget = budget.clone();
            let work = work.path().to_path_buf();
            async move {
                let job = Job {
                    tree: &tree,
                    dir,
                    overrides: None,
                    work_dir: &work,
                    timeout: std::time::Duration::from_secs(60),
                    max_output: 64 << 20,
                    replace: None,
                    scope: BuildScope::new("", std::time::Duration::from_secs(60)),
                };
                builder
                    .build(job, &mut budget.lease())
                    .await
                    .expect("builds");
            }
        };
        let start = std::time::Instant::now();
        for _ in 0..5 {
            build(tree.clone()).await;
        }
        let one = start.elapsed() / 5;
        let start = std::time::Instant::now();
        futures::future::join_all((0..n).map(|_| build(tree.clone()))).await;
        let all = start.elapsed();
        println!(
            "{what}: one build {one:?}; {n} builds at concurrency 2: {all:?} ({:?} each)",
            all / n as u32
        );
    }
}

/// An overlay in an OCI artifact (`flux push artifact` of the repository) is built as
/// upstream kustomize builds it.
#[tokio::test]
async fn oci_overlays_are_built_as_upstream_kustomize_builds_them() {
    init();
    let h = Harness::new("kz-oci").await;
    let op = start(&h, |_| {});
    let registry = Registry::start().await;
    let files = repo_files(&group("oci"));
    let entries: Vec<Entry<'_>> = files
        .iter()
        .map(|(p, t)| Entry::File(p, t.as_bytes()))
        .collect();
    push_artifact(&registry, "team/web", "v1", &tar_gz(&entries)).await;
    let set = h.applyset("oci");
    set.create(json!({"sources": [{"oci": {"url": registry.url("team/web"), "tag": "v1", "insecure": true, "path": "overlays/prod"}}]}))
        .await;
    let st = set.wait_ready().await;
    assert_applied(&h, &st, &upstream_build(&files, &[], "overlays/prod")).await;
    stop(op).await;
}

/// The child's memory is capped (RLIMIT_DATA, --kustomize-memory-mib): a build that needs
/// more fails with kustomize's own words and the cap named, while the same build under the
/// default cap succeeds.
#[tokio::test]
async fn a_build_beyond_its_memory_cap_fails_naming_the_cap() {
    use applyset_operator::sources::{
        kustomize::{BuildScope, Builder, Job, KustomizeError, Settings},
        memory::MemoryBudget,
        tree::Tree,
    };
    let mut tree = Tree::new();
    let docs: String = (0..1000)
        .map(|i| {
            format!(
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c{i}\ndata:\n  v: {}\n",
                "y".repeat(20_000)
            )
        })
        .collect();
    tree.insert("big/cm.yaml".into(), docs.into_bytes());
    tree.insert(
        "big/kustomization.yaml".into(),
        b"resources: [cm.yaml]\nnamePrefix: p-\n".to_vec(),
    );
    let budget = MemoryBudget::new(1 << 30, std::time::Duration::from_secs(10));
    let work = tempfile::tempdir().expect("tempdir");
    let job = || Job {
        tree: &tree,
        dir: "big",
        overrides: None,
        work_dir: work.path(),
        timeout: std::time::Duration::from_secs(120),
        max_output: 256 << 20,
        replace: None,
        scope: BuildScope::new("", std::time::Duration::from_secs(120)),
    };
    let capped = Builder::new(Settings {
        binary: Some(kustomize_binary()),
        memory: 128 << 20,
        ..Default::default()
    });
    let err = capped
        .build(job(), &mut budget.lease())
        .await
        .expect_err("beyond 128 MiB");
    match &err {
        KustomizeError::Build { dir, message } => {
            assert_eq!(dir, "big");
            assert!(
                message.contains("capped at 128 MiB, --kustomize-memory-mib"),
                "{message}"
            );
        }
        other => panic!("not a build error: {other}"),
    }
    let roomy = Builder::new(Settings {
        binary: Some(kustomize_binary()),
        ..Default::default()
    });
    let out = roomy
        .build(job(), &mut budget.lease())
        .await
        .expect("builds within 512 MiB");
    assert!(out.len() > 20_000_000);
}

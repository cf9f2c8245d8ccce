//! `kubectl applyset convert` end to end, against the real API server: a directory of Flux
//! objects (tests/fixtures/flux/flux: a GitRepository, an OCIRepository and three
//! Kustomizations over them, valid for Flux's own CRDs) is converted by the plugin binary; its
//! output passes `kubectl apply --dry-run=server` and, applied with kubectl, gives sets that the
//! in-process operator makes Ready. What they apply is compared, object by object, with what
//! Flux applies for the same Kustomizations: the upstream `kustomize build` of each path over
//! the kustomization Flux's generator writes there (targetNamespace, namePrefix/Suffix,
//! patches, components and images set as fluxcd/pkg/kustomize sets them), the SOPS-encrypted
//! files decrypted, postBuild's variables substituted (Flux's envsubst rules for the forms the
//! fixtures use), then commonMetadata. Nothing else is a member of the sets. Then the same
//! Flux objects are applied by the real kustomize-controller in a control plane of its own
//! ([`real_flux`]; the test stands in for source-controller), and every member is compared
//! with what it applied (its status.inventory, object by object). Also the two
//! fields whose names Flux shares with ours but not their meaning: Flux `force` becomes the
//! members' `applyset.dev/force: enabled` (our spec.force stays false) and Flux
//! `targetNamespace` becomes our spec.kustomize.targetNamespace (never spec.targetNamespace).

#[path = "flux_convert/real_flux.rs"]
mod real_flux;
mod support;

use support::{
    cli::{PLUGIN, shown},
    flux, operator, servers, sops as sops_tools,
};

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    process::Output,
    time::Duration,
};

use applyset_operator::controller::Operator;
use kube::{Client, api::ApiResource};
use operator::*;
use serde_json::{Value, json};
use servers::*;
use support::{
    cluster, contains, init, kustomize_binary, resource_of, upstream_build, write_files,
};

/// The fixtures: Flux objects (`flux/`), the git repository (`repo/`), the OCI artifact
/// (`artifact/`).
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/flux");
/// The annotation Flux's `force: true` becomes on every member.
const FORCE: &str = "applyset.dev/force";
/// The annotation that makes the Widget healthy by the fixtures' healthCheckExprs, written by
/// the test (as another controller would), in both clusters.
const READY: &str = "example.com/ready";
/// Annotations a member gets from the cluster's controllers or the test, not from the set.
const SERVER_ANNOTATIONS: [&str; 2] = ["deployment.kubernetes.io/revision", READY];
/// Labels a member gets from the API server, not from the set.
const SERVER_LABELS: [&str; 1] = ["kubernetes.io/metadata.name"];
/// Each wait of this test.
const WAIT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// Fixtures

/// The values of the fixtures' placeholders in this run.
struct Names {
    ns: String,
    target: String,
    group: String,
    git_url: String,
    oci_url: String,
}

impl Names {
    fn fill(&self, text: &str) -> String {
        text.replace("@NS@", &self.ns)
            .replace("@TARGET@", &self.target)
            .replace("@GROUP@", &self.group)
            .replace("@GIT_URL@", &self.git_url)
            .replace("@OCI_URL@", &self.oci_url)
    }
}

/// The files under `FIXTURES/sub` (paths relative to it, sorted), placeholders filled.
fn fixture_files(sub: &str, names: &Names) -> Vec<(String, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).expect("under root");
                let text = std::fs::read_to_string(&path).expect("read fixture");
                out.push((rel.to_string_lossy().into_owned(), text));
            }
        }
    }
    let root = Path::new(FIXTURES).join(sub);
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out.sort();
    out.into_iter().map(|(p, t)| (p, names.fill(&t))).collect()
}

/// The text of file `path` of `files`.
fn file<'a>(files: &'a [(String, String)], path: &str) -> &'a str {
    files
        .iter()
        .find(|(p, _)| p == path)
        .map(|(_, t)| t.as_str())
        .unwrap_or_else(|| panic!("no file {path}"))
}

/// The YAML documents of `text` (empty ones left out).
fn docs(text: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text)
        .unwrap_or_else(|e| panic!("YAML does not parse: {e}\n{text}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// The Flux Kustomization `name` among the fixtures' Flux objects.
fn flux_kustomization(flux: &[(String, String)], name: &str) -> Value {
    flux.iter()
        .flat_map(|(_, t)| docs(t))
        .find(|d| d["kind"] == "Kustomization" && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no Kustomization {name} in the fixtures"))
}

// ---------------------------------------------------------------------------------------------
// What Flux applies (the expected side)

/// The kustomization.yaml kustomize-controller generates over `original` for the Kustomization
/// `spec` (fluxcd/pkg/kustomize, kustomize_generator.go): namespace, namePrefix and nameSuffix
/// replaced, patches and components appended, images merged by name (newName when set; newTag
/// and digest together when either is set), appended otherwise.
fn flux_generated(original: &Value, spec: &Value) -> Value {
    let mut kus = original.clone();
    for (flux, ours) in [
        ("targetNamespace", "namespace"),
        ("namePrefix", "namePrefix"),
        ("nameSuffix", "nameSuffix"),
    ] {
        if let Some(v) = spec.get(flux) {
            kus[ours] = v.clone();
        }
    }
    let append = |kus: &mut Value, key: &str, items: &[Value]| {
        if !items.is_empty() {
            let list = kus[key].as_array().cloned().unwrap_or_default();
            kus[key] = Value::Array(list.into_iter().chain(items.iter().cloned()).collect());
        }
    };
    let list = |key: &str| spec[key].as_array().cloned().unwrap_or_default();
    append(&mut kus, "patches", &list("patches"));
    append(&mut kus, "components", &list("components"));
    for image in list("images") {
        let images = kus["images"].as_array().cloned().unwrap_or_default();
        match images.iter().position(|i| i["name"] == image["name"]) {
            Some(at) => {
                let entry = &mut kus["images"][at];
                if let Some(n) = image.get("newName") {
                    entry["newName"] = n.clone();
                }
                if image.get("newTag").is_some() || image.get("digest").is_some() {
                    entry["newTag"] = image.get("newTag").cloned().unwrap_or(Value::Null);
                    entry["digest"] = image.get("digest").cloned().unwrap_or(Value::Null);
                }
            }
            None => append(&mut kus, "images", &[image]),
        }
    }
    kus
}

/// Flux's variable substitution (fluxcd/pkg/envsubst) of one string, for the forms the
/// fixtures use: `${var}`, `${var:=default}`, `${var:-default}`, and `$$` for a literal `$`.
/// An unset variable without a default is an error (kustomize-controller 1.9 substitutes
/// strictly by default: its StrictPostBuildSubstitutions feature is on).
fn substitute_str(text: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if let Some(after) = rest.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some(body) = rest.strip_prefix("${") {
            let end = body
                .find('}')
                .unwrap_or_else(|| panic!("unclosed ${{ in {text}"));
            let expr = &body[..end];
            let (name, default) = match expr.split_once(":=").or_else(|| expr.split_once(":-")) {
                Some((n, d)) => (n, Some(d)),
                None => (expr, None),
            };
            let value = vars.get(name).map(String::as_str).or(default);
            out.push_str(value.unwrap_or_else(|| panic!("variable {name} is not set, in {text}")));
            rest = &body[end + 1..];
        } else {
            panic!("a bare $ the fixtures do not use, in {text}");
        }
    }
    out.push_str(rest);
    out
}

/// [`substitute_str`] of every string (keys and values) of `v`.
fn substitute(v: &Value, vars: &BTreeMap<String, String>) -> Value {
    match v {
        Value::String(s) => Value::String(substitute_str(s, vars)),
        Value::Array(items) => Value::Array(items.iter().map(|i| substitute(i, vars)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (substitute_str(k, vars), substitute(v, vars)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// What kustomize-controller applies for Kustomization `ks` over `files` (the source's
/// content, encrypted files already decrypted), with `from` the data of the objects its
/// postBuild.substituteFrom names, by name: the build of the generated kustomization, then
/// postBuild (substituteFrom in order, then substitute, which wins), then commonMetadata.
fn flux_applies(
    ks: &Value,
    files: &[(String, String)],
    from: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<Value> {
    let spec = &ks["spec"];
    let path = spec["path"]
        .as_str()
        .expect("path")
        .trim_start_matches("./");
    let kus_path = format!("{path}/kustomization.yaml");
    let original: Value = serde_saphyr::from_str(file(files, &kus_path)).expect("kustomization");
    let generated = serde_json::to_string_pretty(&flux_generated(&original, spec)).expect("json");
    let mut objects = upstream_build(files, &[(kus_path.as_str(), generated.as_str())], path);
    if let Some(post) = spec.get("postBuild") {
        let mut vars = BTreeMap::new();
        for r in post["substituteFrom"].as_array().into_iter().flatten() {
            let name = r["name"].as_str().expect("name");
            vars.extend(from.get(name).cloned().expect("substituteFrom data"));
        }
        for (k, v) in post["substitute"].as_object().into_iter().flatten() {
            vars.insert(k.clone(), v.as_str().expect("string").to_owned());
        }
        objects = objects.iter().map(|o| substitute(o, &vars)).collect();
    }
    let common = &spec["commonMetadata"];
    for o in &mut objects {
        for field in ["labels", "annotations"] {
            for (k, v) in common[field].as_object().into_iter().flatten() {
                o["metadata"][field][k] = v.clone();
            }
        }
    }
    objects
}

// ---------------------------------------------------------------------------------------------
// Comparison with the live members

/// `group/kind/namespace/name` of an object (empty group and namespace for the core group and
/// cluster-scoped objects).
fn identity(group: &str, kind: &str, namespace: Option<&str>, name: &str) -> String {
    format!("{group}/{kind}/{}/{name}", namespace.unwrap_or_default())
}

/// `map` without the keys in `ignored`.
fn without(map: &Value, ignored: &[&str]) -> BTreeMap<String, Value> {
    map.as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| !ignored.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The identities (see [`identity`]) of the members in a set's status.
fn member_identities(st: &applyset_operator::api::ApplySetStatus) -> BTreeSet<String> {
    st.members
        .iter()
        .map(|m| identity(&m.group, &m.kind, m.namespace.as_deref(), &m.name))
        .collect()
}

/// Asserts that the members of `set` (status.members), and the objects labelled part of it,
/// are exactly the objects of `want`, and that each live object holds what `want` says, with
/// the same labels and annotations but for our part-of label, what the cluster's controllers
/// add, and (`force`) Flux's force as our `applyset.dev/force: enabled`; ConfigMap and Secret
/// data are equal, with no SOPS metadata. `group` is the Widgets'.
async fn assert_members(client: &Client, set: &Parent, want: &[Value], force: bool, group: &str) {
    let st = set.status().await.expect("status");
    let members = member_identities(&st);
    let mut expected = BTreeSet::new();
    for o in want {
        let ar = resource_of(client, o).await;
        let name = o["metadata"]["name"].as_str().expect("name");
        let ns = o["metadata"]["namespace"].as_str();
        expected.insert(identity(&ar.group, &ar.kind, ns, name));
        let live = serde_json::to_value(must_get(client, &ar, ns, name).await).expect("json");
        let what = format!("{}: {} {ns:?}/{name}", set.display(), ar.kind);
        let shown = || {
            format!(
                "\nFlux applies: {}\nlive: {}",
                serde_json::to_string_pretty(o).unwrap_or_default(),
                serde_json::to_string_pretty(&live).unwrap_or_default()
            )
        };
        assert!(
            contains(&live, o),
            "{what}: not what Flux applies{}",
            shown()
        );
        let mut ignored = SERVER_LABELS.to_vec();
        ignored.push(LABEL_PART_OF);
        let labels = without(&live["metadata"]["labels"], &ignored);
        assert_eq!(
            labels,
            without(&o["metadata"]["labels"], &[]),
            "{what}: labels{}",
            shown()
        );
        let mut ignored = SERVER_ANNOTATIONS.to_vec();
        if force {
            assert_eq!(
                live["metadata"]["annotations"][FORCE],
                "enabled",
                "{what}: Flux's force is {FORCE}: enabled on every member{}",
                shown()
            );
            ignored.push(FORCE);
        }
        let annotations = without(&live["metadata"]["annotations"], &ignored);
        let flux = without(&o["metadata"]["annotations"], &[]);
        assert_eq!(annotations, flux, "{what}: annotations{}", shown());
        if ar.kind == "ConfigMap" || ar.kind == "Secret" {
            assert_eq!(live["data"], o["data"], "{what}: data{}", shown());
            assert!(
                live.get("sops").is_none(),
                "{what}: SOPS metadata{}",
                shown()
            );
        }
    }
    assert_eq!(
        members,
        expected,
        "{}: the members are exactly what Flux applies\n{}",
        set.display(),
        status_json(&st)
    );
    assert_eq!(
        labelled(client, set, group).await,
        expected,
        "{}: the objects labelled part of it are exactly what Flux applies",
        set.display()
    );
}

/// The objects labelled part of `set`, of every kind the fixtures hold (`group`: the Widgets'),
/// in every namespace.
async fn labelled(client: &Client, set: &Parent, group: &str) -> BTreeSet<String> {
    let kinds = [
        ("", "v1", "ConfigMap", "configmaps"),
        ("", "v1", "Secret", "secrets"),
        ("", "v1", "Service", "services"),
        ("", "v1", "Namespace", "namespaces"),
        ("apps", "v1", "Deployment", "deployments"),
    ];
    let mut out = BTreeSet::new();
    let mut ars: Vec<ApiResource> = kinds
        .iter()
        .map(|(g, v, k, p)| gvk_resource(g, v, k, p))
        .collect();
    ars.push(widget_ar(group));
    for ar in &ars {
        let selector = format!("{LABEL_PART_OF}={}", set.id());
        let api: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(client.clone(), ar);
        let list = api
            .list_metadata(&kube::api::ListParams::default().labels(&selector))
            .await
            .unwrap_or_else(|e| panic!("listing {}: {e}", ar.kind));
        for m in list.items {
            let ns = m.metadata.namespace.as_deref();
            let name = m.metadata.name.as_deref().unwrap_or_default();
            out.insert(identity(&ar.group, &ar.kind, ns, name));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The cluster side: CRDs, prerequisites, kubectl, the plugin

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// kubectl (of the test cluster's release) on the test cluster.
fn test_kubectl() -> tokio::process::Command {
    tokio::process::Command::from(cluster().kubectl())
}

/// Runs `kubectl` (a command for one of the test's clusters) with `args`; panics unless it
/// succeeds.
async fn run_kubectl(mut kubectl: tokio::process::Command, args: &[&str]) {
    kubectl
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(WAIT, kubectl.output())
        .await
        .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish within {WAIT:?}"))
        .expect("run kubectl");
    assert!(out.status.success(), "kubectl {args:?}: {}", shown(&out));
}

/// Installs Flux's CRDs (Kustomization, GitRepository, OCIRepository, ...) and the test's
/// Widget CRD in the cluster of `client`, and waits until they are Established.
async fn install_crds(client: &Client, group: &str) {
    flux::install_crds(client).await;
    ssa(client, &crd_ar(), None, "test", widget_crd(group)).await;
    wait_established(client, &format!("widgets.{group}"), WAIT).await;
}

/// What kustomize-controller would read in the cluster: the ConfigMap postBuild substitutes
/// from, the age key Secret, and ServiceAccount `deployer` of namespace `ns`, allowed to manage
/// Namespaces, ConfigMaps and Services everywhere.
async fn prerequisites(client: &Client, ns: &str, vars: &BTreeMap<String, String>, age_key: &str) {
    ssa(
        client,
        &configmap_ar(),
        Some(ns),
        "test",
        configmap("web-vars", json!(vars)),
    )
    .await;
    let key = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sops-age"},
        "stringData": {"identity.agekey": age_key}});
    ssa(client, &secret_ar(), Some(ns), "test", key).await;
    let sa_ar = gvk_resource("", "v1", "ServiceAccount", "serviceaccounts");
    let sa =
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "deployer"}});
    ssa(client, &sa_ar, Some(ns), "test", sa).await;
    let role = format!("flux-deployer-{ns}");
    let rule = json!({"apiGroups": [""], "resources": ["namespaces", "configmaps", "services"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]});
    let cr = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": role}, "rules": [rule]});
    ssa(client, &clusterrole_ar(), None, "test", cr).await;
    let crb_ar = gvk_resource(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
    );
    let crb = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": ns}]});
    ssa(client, &crb_ar, None, "test", crb).await;
}

/// The operator of this test: every parent (this binary's only test makes them with kubectl,
/// without the isolation label), ApplySets of the test namespace, the pinned kustomize.
fn start(h: &Harness) -> Operator {
    let mut config = h.config();
    config.label_selector = None;
    config.source_limits.kustomize.binary = Some(kustomize_binary());
    Operator::start(h.client.clone(), config)
}

/// The content of the git repository and of the OCI artifact (its `deploy/secret.yaml`
/// encrypted with SOPS for `recipient`), served on loopback; returned as tar.gz (the
/// repository's commit, the artifact's layer).
async fn serve_sources(
    server: &GitServer,
    registry: &Registry,
    names: &Names,
    key_dir: &Path,
    recipient: &str,
) -> (Vec<u8>, Vec<u8>) {
    let repo: Vec<(String, String)> = fixture_files("repo", names);
    let refs: Vec<(&str, Option<&str>)> = repo
        .iter()
        .map(|(p, t)| (p.as_str(), Some(t.as_str())))
        .collect();
    server.repo("apps").commit(&refs, "first");
    let regex = ["--encrypted-regex", "^(data|stringData)$"];
    let mut artifact = fixture_files("artifact", names);
    for (path, text) in &mut artifact {
        if path == "deploy/secret.yaml" {
            let enc = sops_tools::sops_encrypt(
                key_dir,
                "secret.yaml",
                text.as_bytes(),
                recipient,
                &regex,
            );
            *text = String::from_utf8(enc).expect("utf-8");
            assert!(text.contains("sops:") && !text.contains("aHVudGVyMi1mbHV4"));
        }
    }
    let layer = flux::artifact(&artifact);
    push_artifact(registry, "team/secrets", "v1", &layer).await;
    (flux::artifact(&repo), layer)
}

/// Sources' contents as tar.gz: the git repository's, the OCI artifact's.
struct Contents {
    repo: Vec<u8>,
    artifact: Vec<u8>,
}

/// What the real kustomize-controller applies for the fixtures' Flux objects (in `flux_dir`)
/// in a control plane of its own (namespace, CRDs, RBAC and prerequisites as in the test's),
/// by Kustomization name: the objects of its status.inventory, as live there.
async fn real_flux_applies(
    names: &Names,
    flux_dir: &str,
    contents: &Contents,
    vars: &BTreeMap<String, String>,
    age_key: &str,
) -> BTreeMap<String, BTreeMap<String, Value>> {
    let flux = real_flux::RealFlux::start().await;
    install_crds(&flux.client, &names.group).await;
    let ns = namespace(&names.ns);
    ssa(&flux.client, &namespace_ar(), None, "test", ns).await;
    prerequisites(&flux.client, &names.ns, vars, age_key).await;
    run_kubectl(flux.kubectl(), &["apply", "-R", "-f", flux_dir]).await;
    let files = FileServer::start(None).await;
    files.put("/repo.tar.gz", contents.repo.clone());
    files.put("/artifact.tar.gz", contents.artifact.clone());
    let git = flux::Stored {
        url: &files.url("/repo.tar.gz"),
        revision: &format!("main@sha1:{}", "a".repeat(40)),
        tarball: &contents.repo,
    };
    flux::write_artifact_status(&flux.client, "GitRepository", &names.ns, "repo", &git).await;
    let oci = flux::Stored {
        url: &files.url("/artifact.tar.gz"),
        revision: &format!("v1@sha256:{}", sha256_hex(&contents.artifact)),
        tarball: &contents.artifact,
    };
    flux::write_artifact_status(&flux.client, "OCIRepository", &names.ns, "artifacts", &oci).await;
    let controller = flux.start_controller();
    mark_widget_ready(&flux.client, &names.ns, &names.group).await;
    let mut out = BTreeMap::new();
    for name in ["web", "secrets", "cross"] {
        let ks =
            flux::wait_kustomization_ready(&flux.client, &controller, &names.ns, name, None, WAIT)
                .await;
        out.insert(name.to_owned(), flux.inventory(&ks).await);
    }
    out
}

/// `obj` (live) without what differs between two clusters or two appliers: server-set
/// metadata, status, the allocated cluster IPs, our part-of label, Flux's owner labels, the
/// annotations of the cluster's controllers and (`force`) our `applyset.dev/force`.
fn comparable(obj: &Value, force: bool) -> Value {
    let mut labels = SERVER_LABELS.to_vec();
    labels.extend([
        LABEL_PART_OF,
        "kustomize.toolkit.fluxcd.io/name",
        "kustomize.toolkit.fluxcd.io/namespace",
    ]);
    let mut annotations = SERVER_ANNOTATIONS.to_vec();
    if force {
        annotations.push(FORCE);
    }
    let mut out = obj.clone();
    let meta = &obj["metadata"];
    out["metadata"] = json!({
        "name": meta["name"], "namespace": meta["namespace"],
        "labels": without(&meta["labels"], &labels),
        "annotations": without(&meta["annotations"], &annotations),
    });
    if let Some(o) = out.as_object_mut() {
        o.remove("status");
    }
    if let Some(spec) = out["spec"].as_object_mut() {
        spec.remove("clusterIP");
        spec.remove("clusterIPs");
    }
    out
}

// ---------------------------------------------------------------------------------------------

/// Three Flux Kustomizations (over a git and an OCI source; with postBuild, SOPS decryption,
/// patches, images, commonMetadata, namePrefix, dependsOn, healthChecks, healthCheckExprs,
/// force; one deploying into another namespace as a ServiceAccount) converted by
/// `kubectl applyset convert -f DIR` apply, once their sets are Ready, exactly what Flux
/// applies for them.
#[tokio::test]
async fn converted_kustomizations_apply_what_flux_applies() {
    init();
    let h = Harness::new("flux-conv").await;
    let server = GitServer::start(None, None).await;
    let registry = Registry::start().await;
    let names = Names {
        ns: h.ns.clone(),
        target: unique("flux-target"),
        group: unique_group(),
        git_url: server.url("apps"),
        oci_url: registry.url("team/secrets"),
    };
    install_crds(&h.client, &names.group).await;
    let key_dir = tempfile::tempdir().expect("tempdir");
    let key = sops_tools::age_keygen(key_dir.path(), "key.txt");
    let (repo, artifact) =
        serve_sources(&server, &registry, &names, key_dir.path(), &key.recipient).await;
    let contents = Contents { repo, artifact };
    let vars = BTreeMap::from([("GREETING".to_owned(), "hello".to_owned())]);
    prerequisites(&h.client, &h.ns, &vars, &key.text).await;

    // The Flux objects, valid for Flux's CRDs, converted.
    let flux = fixture_files("flux", &names);
    let flux_dir = tempfile::tempdir().expect("tempdir");
    write_files(flux_dir.path(), &flux);
    let flux_path = flux_dir.path().to_string_lossy().into_owned();
    let flux_objects = ["apply", "--dry-run=server", "-R", "-f", &flux_path];
    run_kubectl(test_kubectl(), &flux_objects).await;
    let out = convert(&flux_path, &key.text).await;
    assert!(out.status.success(), "convert: {}", shown(&out));
    assert_scope_note(&out, &names);
    assert_converted(&out, &names);
    let sets_dir = tempfile::tempdir().expect("tempdir");
    let sets_file = sets_dir.path().join("sets.yaml");
    std::fs::write(&sets_file, stdout(&out)).expect("write the sets");
    let sets_path = sets_file.to_string_lossy().into_owned();

    // Applied with kubectl: a server-side dry run, then for real, with the operator running.
    let op = start(&h);
    run_kubectl(
        test_kubectl(),
        &["apply", "--dry-run=server", "-f", &sets_path],
    )
    .await;
    run_kubectl(test_kubectl(), &["apply", "-f", &sets_path]).await;
    let web = h.applyset("web");
    let secrets = h.applyset("secrets");
    let cross = h.cluster_applyset("cross");
    web_waits_for_its_widget(&web, &h.client, &names.group).await;
    for set in [&web, &secrets, &cross] {
        set.wait_ready_within(WAIT).await;
    }
    assert_traps(&web, &cross, &names).await;

    // What Flux applies for each Kustomization, built here.
    let from = BTreeMap::from([("web-vars".to_owned(), vars)]);
    let sets = [(&web, true), (&secrets, false), (&cross, false)];
    assert_as_built(&h.client, &sets, &names, &from).await;
    stop(op).await;

    // What the real kustomize-controller applies for the same Flux objects.
    let flux_applied =
        real_flux_applies(&names, &flux_path, &contents, &from["web-vars"], &key.text).await;
    for (set, force) in sets {
        assert_same_as_flux(&h.client, set, &flux_applied[&set.name], force).await;
    }
}

/// Asserts that the members of `set` are the objects Flux applied (`flux`, by identity) and
/// that each is, live, what Flux's is (see [`comparable`]).
async fn assert_same_as_flux(
    client: &Client,
    set: &Parent,
    flux: &BTreeMap<String, Value>,
    force: bool,
) {
    let st = set.status().await.expect("status");
    let members = member_identities(&st);
    let applied: BTreeSet<String> = flux.keys().cloned().collect();
    assert_eq!(
        members,
        applied,
        "{}: members and Flux's inventory",
        set.display()
    );
    for (id, theirs) in flux {
        let ar = resource_of(client, theirs).await;
        let ns = theirs["metadata"]["namespace"].as_str();
        let name = theirs["metadata"]["name"].as_str().expect("name");
        let ours = serde_json::to_value(must_get(client, &ar, ns, name).await).expect("json");
        let (ours, theirs) = (comparable(&ours, force), comparable(theirs, false));
        assert_eq!(
            ours,
            theirs,
            "{}: {id} is not what kustomize-controller applied\nours: {}\nFlux's: {}",
            set.display(),
            serde_json::to_string_pretty(&ours).unwrap_or_default(),
            serde_json::to_string_pretty(&theirs).unwrap_or_default()
        );
    }
}

/// Waits until the Widget `app-w1-v1` exists in `ns`, then annotates it ready (manager `test`):
/// healthy by the fixtures' healthCheckExprs.
async fn mark_widget_ready(client: &Client, ns: &str, group: &str) {
    let ar = widget_ar(group);
    eventually("the Widget app-w1-v1", WAIT, || async {
        exists(client, &ar, Some(ns), "app-w1-v1")
            .await
            .then_some(())
    })
    .await;
    let obj = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": {"name": "app-w1-v1", "namespace": ns, "annotations": {READY: "yes"}}});
    ssa(client, &ar, Some(ns), "test", obj).await;
}

/// The set `web` is not Ready while its health check (the Widget, by the healthCheckExprs
/// converted from Flux's; without them a custom resource without status is Current) is not
/// Current, naming it and the expressions; the Widget is then made healthy.
async fn web_waits_for_its_widget(web: &Parent, client: &Client, group: &str) {
    let message = web
        .wait_until(
            "Ready not True naming the Widget app-w1-v1",
            WAIT,
            |_, st| {
                let ready = condition(st?, "Ready")?;
                (ready.status != "True" && ready.message.contains("app-w1-v1"))
                    .then(|| ready.message.clone())
            },
        )
        .await;
    assert!(
        message.contains("healthCheckExprs"),
        "the converted healthCheckExprs hold it: {message}"
    );
    let ns = web.namespace.as_deref().expect("namespaced");
    mark_widget_ready(client, ns, group).await;
}

/// `kubectl-applyset convert -f DIR` with the pinned kustomize and the age key (for the
/// offline build that decides each set's scope), without a kubeconfig.
async fn convert(dir: &str, age_key: &str) -> Output {
    let mut c = tokio::process::Command::new(PLUGIN);
    c.args(["convert", "-f", dir])
        .arg("--kustomize-binary")
        .arg(kustomize_binary())
        .env("SOPS_AGE_KEY", age_key)
        .env_remove("SOPS_AGE_KEY_FILE")
        .env_remove("KUBECONFIG")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(WAIT, c.output())
        .await
        .unwrap_or_else(|_| panic!("convert did not finish within {WAIT:?}"))
        .expect("run kubectl-applyset")
}

/// The plugin's output: exactly the three sets, of the kinds our scope rule gives, each
/// adopting what Flux applied and taking over kustomize-controller's fields.
fn assert_converted(out: &Output, names: &Names) {
    let sets = docs(&stdout(out));
    let got: BTreeSet<(String, String, String)> = sets
        .iter()
        .map(|s| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            (
                text(&s["kind"]),
                text(&s["metadata"]["namespace"]),
                text(&s["metadata"]["name"]),
            )
        })
        .collect();
    let ns = names.ns.clone();
    let want = BTreeSet::from([
        ("ApplySet".to_owned(), ns.clone(), "web".to_owned()),
        ("ApplySet".to_owned(), ns, "secrets".to_owned()),
        (
            "ClusterApplySet".to_owned(),
            String::new(),
            "cross".to_owned(),
        ),
    ]);
    assert_eq!(got, want, "the converted sets: {}", shown(out));
    for s in &sets {
        assert_eq!(s["apiVersion"], "applyset.dev/v1alpha1", "{s}");
        assert_eq!(s["spec"]["adoptExisting"], true, "{s}");
        assert_eq!(
            s["spec"]["takeOverFieldManagers"],
            json!(["kustomize-controller"]),
            "{s}"
        );
    }
}

/// Asserts that each set of `sets` (with whether its Kustomization has Flux's force) applies
/// what Flux applies for its Kustomization, built here ([`flux_applies`]; the repository's
/// files for `web` and `cross`, the artifact's, decrypted, for `secrets`); `from` is what
/// postBuild.substituteFrom reads.
async fn assert_as_built(
    client: &Client,
    sets: &[(&Parent, bool)],
    names: &Names,
    from: &BTreeMap<String, BTreeMap<String, String>>,
) {
    let flux = fixture_files("flux", names);
    let repo = fixture_files("repo", names);
    let artifact = fixture_files("artifact", names);
    for (set, force) in sets {
        let files = if set.name == "secrets" {
            &artifact
        } else {
            &repo
        };
        let want = flux_applies(&flux_kustomization(&flux, &set.name), files, from);
        assert!(!want.is_empty(), "{} builds objects", set.name);
        let named = |prefix: &str| {
            want.iter().any(|o| {
                o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(prefix))
            })
        };
        assert!(
            set.name != "web" || named("app-extra-v1-"),
            "the component's ConfigMap: {want:?}"
        );
        assert_members(client, set, &want, *force, &names.group).await;
    }
}

/// `convert` says why `cross` is a ClusterApplySet (on standard error): what it writes, known
/// from an offline build of the converted set (the sources are served, kustomize and the age
/// key are given).
fn assert_scope_note(out: &Output, names: &Names) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let about = format!("Kustomization {}/cross", names.ns);
    assert!(
        stderr.lines().any(|l| l.contains(&about)
            && l.contains("ClusterApplySet")
            && l.contains(&names.target)
            && l.contains("build")),
        "convert names why {about} becomes a ClusterApplySet: {}",
        shown(out)
    );
}

/// The two fields Flux names as we do but means otherwise, read on the live sets: Flux's
/// `force: true` (web) is our `applyset.dev/force: enabled` on every member, through
/// commonMetadata, and our spec.force stays false; Flux's targetNamespace is our
/// spec.kustomize.targetNamespace, never our spec.targetNamespace. The cross-namespace one is
/// a ClusterApplySet acting as the Kustomization's ServiceAccount.
async fn assert_traps(web: &Parent, cross: &Parent, names: &Names) {
    let web = serde_json::to_value(web.live().await).expect("json");
    let spec = &web["spec"];
    assert_ne!(
        spec["force"], true,
        "Flux's force is not our spec.force: {spec}"
    );
    assert_eq!(
        spec["kustomize"]["commonMetadata"]["annotations"][FORCE], "enabled",
        "{spec}"
    );
    assert_eq!(
        spec["kustomize"]["commonMetadata"]["annotations"]["owner"], "me",
        "{spec}"
    );
    assert_eq!(
        spec["kustomize"]["targetNamespace"],
        names.ns.as_str(),
        "{spec}"
    );
    assert!(spec.get("targetNamespace").is_none(), "{spec}");
    let cross = serde_json::to_value(cross.live().await).expect("json");
    let spec = &cross["spec"];
    assert_eq!(
        spec["kustomize"]["targetNamespace"],
        names.target.as_str(),
        "{spec}"
    );
    assert!(spec.get("targetNamespace").is_none(), "{spec}");
    assert_ne!(spec["force"], true, "{spec}");
    assert_eq!(spec["serviceAccountName"], "deployer", "{spec}");
    assert_eq!(spec["serviceAccountNamespace"], names.ns.as_str(), "{spec}");
    let annotations = &spec["kustomize"]["commonMetadata"]["annotations"];
    assert!(
        annotations.get(FORCE).is_none(),
        "no force without Flux's: {spec}"
    );
}

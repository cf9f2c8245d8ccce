//! The test control plane is real: each test checks behaviour that lives in the API server
//! or the controller manager and that a fake would not have.

mod support;

use std::{
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::core::v1::{ConfigMap, Namespace},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, ResourceExt,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
        PostParams,
    },
    core::PartialObjectMeta,
};
use serde_json::json;
use support::{cluster, test_namespace, wait_for};

const DEADLINE: Duration = Duration::from_secs(60);

#[tokio::test]
async fn server_side_apply_conflict_names_the_other_manager() {
    let client = cluster().client().await;
    let ns = test_namespace(&client, "ssa").await;
    let cms: Api<ConfigMap> = Api::namespaced(client, &ns);
    let body = |v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"}, "data": {"a": v}});
    cms.patch(
        "shared",
        &PatchParams::apply("alice"),
        &Patch::Apply(body("1")),
    )
    .await
    .expect("first apply");
    let err = cms
        .patch(
            "shared",
            &PatchParams::apply("bob"),
            &Patch::Apply(body("2")),
        )
        .await
        .expect_err("a second manager changing the same field must conflict");
    let kube::Error::Api(status) = err else {
        panic!("expected an API error, got {err:?}")
    };
    assert_eq!(status.code, 409, "{status:?}");
    assert!(
        status.message.contains("alice"),
        "message should name the owner: {}",
        status.message
    );

    // With force the second manager takes the field over.
    let cm = cms
        .patch(
            "shared",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(body("2")),
        )
        .await
        .expect("forced apply");
    assert_eq!(
        cm.data.unwrap_or_default().get("a").map(String::as_str),
        Some("2")
    );
}

#[tokio::test]
async fn custom_resources_are_served_once_the_crd_is_established() {
    let client = cluster().client().await;
    let ns = test_namespace(&client, "crd").await;
    let group = format!("t{}.example.com", std::process::id());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}}}]
        }
    }))
    .expect("crd");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create crd");
    wait_for("the CRD to be Established", DEADLINE, || {
        let crds = crds.clone();
        let name = format!("widgets.{group}");
        async move {
            let c = crds.get(&name).await.ok()?;
            let established = c
                .status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            established.then_some(())
        }
    })
    .await;

    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&group, "v1", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(client, &ns, &ar);
    // Served, with the schema applied: an unknown field is pruned by the API server.
    let w = DynamicObject::new("w1", &ar).data(json!({"spec": {"size": 3, "colour": "red"}}));
    let created = wait_for("the Widget to be accepted", DEADLINE, || {
        let widgets = widgets.clone();
        let w = w.clone();
        async move { widgets.create(&PostParams::default(), &w).await.ok() }
    })
    .await;
    assert_eq!(created.data["spec"], json!({"size": 3}));
    let list = widgets
        .list(&ListParams::default())
        .await
        .expect("list widgets");
    assert_eq!(
        list.items.iter().map(|w| w.name_any()).collect::<Vec<_>>(),
        ["w1"]
    );
}

#[tokio::test]
async fn metadata_only_list_by_label_selector() {
    let client = cluster().client().await;
    let ns = test_namespace(&client, "meta").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for (name, labelled) in [("a", true), ("b", false), ("c", true)] {
        let labels = if labelled {
            json!({"set": "one"})
        } else {
            json!({"set": "two"})
        };
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels}, "data": {"big": "x".repeat(1000)}});
        cms.patch(name, &PatchParams::apply("test"), &Patch::Apply(cm))
            .await
            .expect("apply");
    }
    let meta: Api<PartialObjectMeta<ConfigMap>> = Api::namespaced(client, &ns);
    let list = meta
        .list_metadata(&ListParams::default().labels("set=one"))
        .await
        .expect("metadata list");
    assert_eq!(
        list.types.kind, "PartialObjectMetadataList",
        "the server converted the list"
    );
    let mut names: Vec<String> = list.items.iter().map(|m| m.name_any()).collect();
    names.sort();
    assert_eq!(names, ["a", "c"]);
}

#[tokio::test]
async fn deleting_a_namespace_with_objects_completes() {
    let client = cluster().client().await;
    let ns = test_namespace(&client, "nsdel").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "inside"}});
    cms.patch("inside", &PatchParams::apply("test"), &Patch::Apply(cm))
        .await
        .expect("apply");
    let namespaces: Api<Namespace> = Api::all(client);
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("delete namespace");
    // Only the namespace controller finishes this: it empties the namespace and removes the
    // `kubernetes` finalizer.
    wait_for("the namespace to be gone", DEADLINE, || {
        let namespaces = namespaces.clone();
        let ns = ns.clone();
        async move {
            match namespaces.get_opt(&ns).await {
                Ok(None) => Some(()),
                _ => None,
            }
        }
    })
    .await;
}

#[tokio::test]
async fn dependents_of_a_deleted_owner_are_garbage_collected() {
    let client = cluster().client().await;
    let ns = test_namespace(&client, "gc").await;
    let cms: Api<ConfigMap> = Api::namespaced(client, &ns);
    let owner = cms
        .patch(
            "owner",
            &PatchParams::apply("test"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}}),
            ),
        )
        .await
        .expect("owner");
    let dependent = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dependent",
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner.uid().expect("uid")}]}});
    cms.patch(
        "dependent",
        &PatchParams::apply("test"),
        &Patch::Apply(dependent),
    )
    .await
    .expect("dependent");
    cms.delete("owner", &DeleteParams::background())
        .await
        .expect("delete owner");
    wait_for("the dependent to be garbage-collected", DEADLINE, || {
        let cms = cms.clone();
        async move { matches!(cms.get_opt("dependent").await, Ok(None)).then_some(()) }
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// No process is left behind. The test binary re-runs itself as a child that starts a control
// plane of its own and then either panics half-way or hangs until it is SIGKILLed; afterwards
// none of the processes that child started may be alive and its state directory must be gone.

const CHILD_MODE: &str = "APPLYSET_TESTENV_CHILD_MODE";
const CHILD_REPORT: &str = "APPLYSET_TESTENV_CHILD_REPORT";

/// Runs only as the child of the two tests below (it is `#[ignore]`d and does nothing without
/// their environment).
#[test]
#[ignore = "helper: run by control_plane_processes_end_when_* as a child process"]
fn child_starts_a_control_plane() {
    let (Ok(mode), Ok(report)) = (std::env::var(CHILD_MODE), std::env::var(CHILD_REPORT)) else {
        return;
    };
    let bin = applyset_testenv::binaries().expect("binaries");
    let mut opts = applyset_testenv::Options::new(bin);
    opts.controller_manager = true;
    let cp = applyset_testenv::ControlPlane::start(&opts).expect("start");
    let pids: Vec<String> = cp.pids().iter().map(u32::to_string).collect();
    std::fs::write(
        &report,
        format!("{}\n{}\n", cp.dir().display(), pids.join(" ")),
    )
    .expect("report");
    // Keep the control plane referenced from a place no destructor reaches, as the shared
    // per-binary cluster is.
    let cp = Box::leak(Box::new(cp));
    match mode.as_str() {
        "panic" => {
            // Fail once the parent has seen the processes running.
            let go = format!("{report}.go");
            let deadline = Instant::now() + Duration::from_secs(120);
            while !std::path::Path::new(&go).exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            panic!(
                "failing half-way on purpose (control plane at {})",
                cp.server()
            )
        }
        _ => loop {
            std::thread::sleep(Duration::from_secs(1));
        },
    }
}

fn alive(pid: &str) -> bool {
    // A zombie (state Z) has ended; only its parent has not reaped it yet.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            stat.rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next())
                != Some("Z")
        }
        Err(_) => false,
    }
}

fn run_child_and_check(mode: &str) {
    let report = std::env::temp_dir().join(format!("applyset-child-{}-{mode}", std::process::id()));
    let _ = std::fs::remove_file(&report);
    let _ = std::fs::remove_file(format!("{}.go", report.display()));
    // The child's own test output (it fails on purpose) goes to a file, not into this log.
    let log_path = PathBuf::from(format!("{}.log", report.display()));
    let log = std::fs::File::create(&log_path).expect("child log");
    let mut child = Command::new(std::env::current_exe().expect("current exe"))
        .args([
            "--exact",
            "child_starts_a_control_plane",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_MODE, mode)
        .env(CHILD_REPORT, &report)
        .stdout(log.try_clone().expect("log handle"))
        .stderr(log)
        .spawn()
        .expect("spawn child test");
    let child_log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    let deadline = Instant::now() + Duration::from_secs(180);
    let text = loop {
        if let Ok(t) = std::fs::read_to_string(&report)
            && t.lines().count() >= 2
        {
            break t;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "child exited with {status} before starting its control plane:\n{}",
                child_log()
            );
        }
        assert!(
            Instant::now() < deadline,
            "child did not start a control plane in time"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut lines = text.lines();
    let dir = PathBuf::from(lines.next().unwrap_or_default());
    let pids: Vec<String> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect();
    assert_eq!(
        pids.len(),
        4,
        "etcd, kube-apiserver, kube-controller-manager and the guard: {pids:?}"
    );
    assert!(
        pids.iter().all(|p| alive(p)),
        "all running while the child runs"
    );

    let go = PathBuf::from(format!("{}.go", report.display()));
    if mode == "kill" {
        child.kill().expect("SIGKILL the child");
    } else {
        std::fs::write(&go, "").expect("tell the child to fail");
    }
    let status = child.wait().expect("wait child");
    assert!(
        !status.success(),
        "the child must have failed or been killed: {status}"
    );

    let deadline = Instant::now() + Duration::from_secs(30);
    while pids.iter().any(|p| alive(p)) || dir.exists() {
        assert!(
            Instant::now() < deadline,
            "left behind after the child ended: processes {:?}, state dir exists: {}",
            pids.iter().filter(|p| alive(p)).collect::<Vec<_>>(),
            dir.exists()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = std::fs::remove_file(&report);
    let _ = std::fs::remove_file(&go);
    let _ = std::fs::remove_file(&log_path);
}

#[test]
fn control_plane_processes_end_when_a_test_panics_half_way() {
    run_child_and_check("panic");
}

#[test]
fn control_plane_processes_end_when_the_test_binary_is_killed() {
    run_child_and_check("kill");
}

/// `ControlPlane::restart_apiserver` (the model walk's fault): kube-apiserver comes back on
/// the same address with the same serving certificate (the kubeconfig still works) and etcd
/// kept the data; the new process is stopped with the control plane, the old one forgotten.
#[test]
fn a_restarted_apiserver_serves_the_same_data_at_the_same_address() {
    let bin = applyset_testenv::binaries().expect("binaries");
    let mut opts = applyset_testenv::Options::new(bin);
    opts.controller_manager = false;
    let mut cp = applyset_testenv::ControlPlane::start(&opts).expect("start");
    let (bin, kubeconfig) = (cp.kubectl(), cp.kubeconfig().to_owned());
    let kubectl = |args: &[&str]| {
        let out = Command::new(&bin)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(args)
            .output()
            .expect("kubectl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (ok, _) = kubectl(&["create", "configmap", "kept", "--from-literal=k=v"]);
    assert!(ok, "creating a ConfigMap");
    let (server, before) = (cp.server().to_owned(), cp.pids());
    cp.restart_apiserver(Duration::from_secs(90))
        .expect("kube-apiserver restarts");
    assert_eq!(cp.server(), server, "the same address");
    let (ok, data) = kubectl(&["get", "configmap", "kept", "-o", "jsonpath={.data.k}"]);
    assert!(ok && data == "v", "etcd kept the ConfigMap: {ok} {data:?}");
    let after = cp.pids();
    assert_eq!(
        after.len(),
        before.len(),
        "one kube-apiserver: {before:?} → {after:?}"
    );
    assert_ne!(after, before, "a new kube-apiserver process");
    cp.stop();
    for pid in after {
        assert!(
            !alive(&pid.to_string()),
            "process {pid} still alive after stop"
        );
    }
}

//! Shared support for the integration tests: one real control plane per test binary, a
//! namespace per test, impersonating clients, polling with a deadline, the test's logging and
//! TLS provider ([`init`]), the pinned kustomize; the plugin binary as a process ([`cli`]); the in-process
//! operator and its handles ([`operator`]), the operator binary as a process ([`process`])
//! the source tests' servers ([`servers`]), the real sops and age-keygen ([`sops`]) and
//! Flux's CRDs and real kustomize-controller ([`flux`]), `kubectl applyset ui` as a process and raw
//! HTTP to it ([`ui`]). A test file declares it with `mod support;`
//! (tests/model, one directory down, with a `#[path]`).
#![allow(dead_code)] // each test binary uses its own subset

pub mod cli;
pub mod flux;
pub mod operator;
pub mod process;
pub mod servers;
pub mod sops;
pub mod ui;

use std::{
    future::Future,
    path::Path,
    process::Command,
    sync::{
        OnceLock,
        atomic::{AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

use applyset_testenv::{ControlPlane, Options, binaries};
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client, Config,
    api::{ObjectMeta, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};

pub struct TestCluster {
    cp: ControlPlane,
}

static CLUSTER: OnceLock<Result<TestCluster, String>> = OnceLock::new();

/// The control plane of this test binary, started on first use. Its processes end when the
/// test binary ends, however it ends (see `applyset_testenv`).
pub fn cluster() -> &'static TestCluster {
    let c = CLUSTER.get_or_init(|| {
        let bin = binaries().map_err(|e| e.to_string())?;
        let cp = ControlPlane::start(&Options::new(bin)).map_err(|e| e.to_string())?;
        Ok(TestCluster { cp })
    });
    match c {
        Ok(c) => c,
        Err(e) => panic!("the test control plane did not start: {e}"),
    }
}

impl TestCluster {
    /// A control plane of its own, for a test that changes cluster-wide objects the other
    /// tests of its binary rely on (the CRDs); stopped when dropped.
    pub fn start_private() -> TestCluster {
        let started = binaries()
            .map_err(|e| e.to_string())
            .and_then(|bin| ControlPlane::start(&Options::new(bin)).map_err(|e| e.to_string()));
        match started {
            Ok(cp) => TestCluster { cp },
            Err(e) => panic!("a private control plane did not start: {e}"),
        }
    }

    pub fn control_plane(&self) -> &ControlPlane {
        &self.cp
    }

    pub fn kubeconfig(&self) -> &Path {
        self.cp.kubeconfig()
    }

    pub async fn config(&self) -> Config {
        let kc = Kubeconfig::read_from(self.cp.kubeconfig()).expect("kubeconfig readable");
        Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("kubeconfig valid")
    }

    /// An admin client (group `system:masters`). Make one per test: a client belongs to the
    /// tokio runtime it was made on.
    pub async fn client(&self) -> Client {
        Client::try_from(self.config().await).expect("client")
    }

    /// A client that impersonates ServiceAccount `namespace/name` (RBAC applies to it).
    pub async fn service_account_client(&self, namespace: &str, name: &str) -> Client {
        let mut config = self.config().await;
        config.auth_info.impersonate = Some(format!("system:serviceaccount:{namespace}:{name}"));
        config.auth_info.impersonate_groups = Some(vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{namespace}"),
            "system:authenticated".into(),
        ]);
        Client::try_from(config).expect("client")
    }

    /// `kubectl` of the same release, pointed at this cluster.
    pub fn kubectl(&self) -> Command {
        let mut c = Command::new(self.cp.kubectl());
        c.arg(format!("--kubeconfig={}", self.cp.kubeconfig().display()));
        c
    }
}

/// A scratch directory of this test binary, under the OS temp directory, created if missing
/// and removed by nobody (it is small).
pub fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("applyset-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

static NS_COUNTER: AtomicU32 = AtomicU32::new(0);

/// Creates a namespace of its own for a test: `<prefix>-<pid>-<n>`.
pub async fn test_namespace(client: &Client, prefix: &str) -> String {
    let name = format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NS_COUNTER.fetch_add(1, Ordering::SeqCst)
    );
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create test namespace");
    name
}

/// Polls `check` every 100 ms until it returns `Some`, or panics after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether `live` holds everything `want` says (maps: every key of `want`, recursively;
/// lists: the same length, element by element): the server adds defaults, status and
/// metadata, and the operator its part-of label.
pub fn contains(live: &serde_json::Value, want: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (live, want) {
        (Value::Object(l), Value::Object(w)) => w
            .iter()
            .all(|(k, v)| l.get(k).is_some_and(|lv| contains(lv, v))),
        (Value::Array(l), Value::Array(w)) => {
            l.len() == w.len() && l.iter().zip(w).all(|(a, b)| contains(a, b))
        }
        (l, w) => l == w,
    }
}

/// The API resource of object `o` (by discovery).
pub async fn resource_of(client: &Client, o: &serde_json::Value) -> kube::api::ApiResource {
    let api_version = o["apiVersion"].as_str().expect("apiVersion");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = o["kind"].as_str().expect("kind");
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let (ar, _) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("discovery of {gvk:?}: {e}"));
    ar
}

/// What a test that fetches sources calls first: installs the TLS crypto provider and, with
/// `RUST_LOG` set, logs to the test's output.
pub fn init() {
    applyset_operator::sources::install_crypto_provider();
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// The kustomize binary: `$APPLYSET_KUSTOMIZE`, else whatever
/// `tests/testenv/build-kustomize.sh` builds (or finds in its cache).
pub fn kustomize_binary() -> std::path::PathBuf {
    testenv_tool(
        "APPLYSET_KUSTOMIZE",
        "build-kustomize.sh",
        Some("kustomize"),
    )
}

/// Writes `files` (path relative to `root`, text), creating their directories.
pub fn write_files<P: AsRef<str>, T: AsRef<str>>(root: &Path, files: &[(P, T)]) {
    for (p, t) in files {
        let path = root.join(p.as_ref());
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, t.as_ref()).expect("write");
    }
}

/// What the pinned upstream `kustomize build DIR` prints for `files` (written to a fresh
/// directory, with `extra` files on top), as objects.
pub fn upstream_build(
    files: &[(String, String)],
    extra: &[(&str, &str)],
    dir: &str,
) -> Vec<serde_json::Value> {
    let root = tempfile::tempdir().expect("tempdir");
    write_files(root.path(), files);
    write_files(root.path(), extra);
    let out = Command::new(kustomize_binary())
        .arg("build")
        .arg(root.path().join(dir))
        .output()
        .expect("run kustomize");
    assert!(
        out.status.success(),
        "kustomize build {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("kustomize output does not parse: {e}\n{text}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// A tool of the test environment: the path in `$var` when set, else the last line
/// `tests/testenv/<script>` prints (the directory it built or fetched into, or found in its
/// cache), joined with `file` when given.
pub fn testenv_tool(var: &str, script: &str, file: Option<&str>) -> std::path::PathBuf {
    if let Some(p) = std::env::var_os(var).filter(|p| !p.is_empty()) {
        return std::path::PathBuf::from(p);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/testenv")
        .join(script);
    let out = Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run the testenv script");
    assert!(out.status.success(), "{} failed", script.display());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = std::path::PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    match file {
        Some(f) => dir.join(f),
        None => dir,
    }
}

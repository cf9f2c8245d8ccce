//! Kustomize sees no network: the operator binary, run as a process with
//! the network sandbox off (`--kustomize-network-sandbox off`, so the pre-build check alone is
//! tried) and the pinned upstream `kustomize`, builds overlays of http sources served on
//! loopback. Each overlay names a URL of another loopback server (the "victim", counting every
//! connection) in one field spelling or URL placement kustomize v5.7.1 would load: every set is
//! refused naming the file and the field, the victim sees no connection at all, and its answer
//! (which kustomize's errors would quote) reaches no status and no event. Before the check was
//! complete (e1dfac3), the victim was asked for the patch, resource and schema URLs.

mod support;

use support::{operator, process, servers};

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use kube::api::{Api, ListParams};
use operator::{Harness, condition, configmap_ar, get_obj};
use parking_lot::Mutex;
use process::OperatorProcess;
use serde_json::json;
use servers::{Entry, FileServer, tar_gz};
use support::{cluster, kustomize_binary, wait_for};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const DEADLINE: Duration = Duration::from_secs(120);

/// What the victim answers: text kustomize's errors would quote.
const ANSWER: &str = "admin-token: LEAKED-7f3a-loopback-answer\n";

/// A loopback HTTP server that counts every connection and keeps each request line.
struct Victim {
    addr: std::net::SocketAddr,
    connections: Arc<AtomicU64>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Victim {
    async fn start() -> Victim {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("listen");
        let addr = listener.local_addr().expect("addr");
        let connections = Arc::new(AtomicU64::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (count, seen) = (connections.clone(), requests.clone());
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .unwrap_or(0);
                    let head = String::from_utf8_lossy(&buf[..n]);
                    let line = head.lines().next().unwrap_or_default().to_string();
                    seen.lock().push(line);
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{ANSWER}",
                        ANSWER.len()
                    );
                    let _ = stream.write_all(reply.as_bytes()).await;
                });
            }
        });
        Victim {
            addr,
            connections,
            requests,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// One attack: its name, the files of the source (under `k/`, the built directory; `URL/`
/// stands for the victim's address), and what the refusal must name: the file and where in
/// it.
type Case = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static str,
    &'static str,
);

const K: &str = "k/kustomization.yaml";

/// A transformer configuration file `k/t.yaml`.
const T: &str = "k/t.yaml";

/// Every field spelling and URL placement found (kustomize v5.7.1 loads each of these).
const CASES: [Case; 37] = [
    (
        "patch-path-with-equals",
        &[(K, "patches:\n- path: URL/patch?a=b\n")],
        K,
        "patches[0].path",
    ),
    (
        "resources-capitalised",
        &[(K, "Resources: [URL/res.yaml]\n")],
        K,
        "Resources",
    ),
    (
        "resources-upper",
        &[(K, "RESOURCES: [URL/res-upper.yaml]\n")],
        K,
        "RESOURCES",
    ),
    (
        "resources-long-s",
        &[(K, "reſources: [URL/res-long-s.yaml]\n")],
        K,
        "reſources",
    ),
    (
        "kind-kelvin-sign",
        &[(
            K,
            "\u{212A}ind: Kustomization\nresources: [URL/res-kelvin.yaml]\n",
        )],
        K,
        "\u{212A}ind",
    ),
    (
        "patch-path-capitalised",
        &[(K, "patches:\n- Path: URL/patch-cap\n")],
        K,
        "patches[0].Path",
    ),
    (
        "openapi-path",
        &[(K, "openapi:\n  path: URL/schema?x=y\n")],
        K,
        "openapi.path",
    ),
    (
        "openapi-capitalised",
        &[(K, "OpenAPI:\n  path: URL/schema-cap\n")],
        K,
        "OpenAPI",
    ),
    (
        "resources-scheme-upper",
        &[(K, "resources: [\"HTTP://HOST/res-scheme\"]\n")],
        K,
        "resources[0]",
    ),
    (
        "resources-space",
        &[(K, "resources: [\" URL/res-space\"]\n")],
        K,
        "resources[0]",
    ),
    ("bases", &[(K, "bases: [URL/base]\n")], K, "bases[0]"),
    (
        "components",
        &[(K, "components: [URL/component]\n")],
        K,
        "components[0]",
    ),
    ("crds", &[(K, "crds: [URL/crd.json]\n")], K, "crds[0]"),
    (
        "configurations",
        &[(K, "configurations: [URL/config.yaml]\n")],
        K,
        "configurations[0]",
    ),
    (
        "replacements-path",
        &[(K, "replacements:\n- path: URL/replacement\n")],
        K,
        "replacements[0].path",
    ),
    (
        "patches-strategic-merge",
        &[(K, "patchesStrategicMerge: [URL/psm]\n")],
        K,
        "patchesStrategicMerge[0]",
    ),
    (
        "patches-json6902",
        &[(
            K,
            "patchesJson6902:\n- path: URL/json6902\n  target: {kind: ConfigMap, name: x}\n",
        )],
        K,
        "patchesJson6902[0].path",
    ),
    (
        "generator-files-key",
        &[(
            K,
            "configMapGenerator:\n- name: c\n  files: [key=URL/files-key]\n",
        )],
        K,
        "configMapGenerator[0].files[0]",
    ),
    (
        "generator-files",
        &[(K, "configMapGenerator:\n- name: c\n  files: [URL/files]\n")],
        K,
        "configMapGenerator[0].files[0]",
    ),
    (
        "generator-envs",
        &[(K, "secretGenerator:\n- name: s\n  envs: [URL/envs]\n")],
        K,
        "secretGenerator[0].envs[0]",
    ),
    (
        "generator-env",
        &[(K, "configMapGenerator:\n- name: c\n  env: URL/env\n")],
        K,
        "configMapGenerator[0].env",
    ),
    (
        "generator-envs-capitalised",
        &[(
            K,
            "configMapGenerator:\n- name: c\n  Envs: [URL/envs-cap]\n",
        )],
        K,
        "configMapGenerator[0].Envs",
    ),
    (
        "generators",
        &[(K, "generators: [URL/generator]\n")],
        K,
        "generators[0]",
    ),
    (
        "transformers",
        &[(K, "transformers: [URL/transformer]\n")],
        K,
        "transformers[0]",
    ),
    (
        "validators",
        &[(K, "validators: [URL/validator]\n")],
        K,
        "validators[0]",
    ),
    (
        "inline-value-add",
        &[(
            K,
            "transformers:\n- |\n  apiVersion: builtin\n  kind: ValueAddTransformer\n  metadata: {name: v}\n  targetFilePath: URL/targets\n",
        )],
        K,
        "transformers[0].targetFilePath",
    ),
    (
        "inline-flow-json6902",
        &[(
            K,
            "transformers:\n- '{apiVersion: builtin, kind: PatchJson6902Transformer, metadata: {name: j}, target: {kind: ConfigMap}, path: \"URL/flow\"}'\n",
        )],
        K,
        "transformers[0].path",
    ),
    (
        "inline-generator-files",
        &[(
            K,
            "generators:\n- |\n  apiVersion: builtin\n  kind: ConfigMapGenerator\n  metadata: {name: c}\n  files: [k=URL/gen-files]\n",
        )],
        K,
        "generators[0].files[0]",
    ),
    (
        "inline-replacement-transformer",
        &[(
            K,
            "transformers:\n- |\n  apiVersion: builtin\n  kind: ReplacementTransformer\n  metadata: {name: r}\n  replacements: [{path: \"URL/repl\"}]\n",
        )],
        K,
        "transformers[0].replacements[0].path",
    ),
    (
        "transformer-file",
        &[
            (K, "transformers: [t.yaml]\n"),
            (
                T,
                "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: t}\npath: URL/t-path\n",
            ),
        ],
        T,
        "path",
    ),
    (
        "transformer-file-capitalised",
        &[
            (K, "transformers: [t.yaml]\n"),
            (
                T,
                "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: t}\npAth: URL/t-path-cap\n",
            ),
        ],
        T,
        "pAth",
    ),
    (
        "strategic-merge-transformer",
        &[
            (K, "transformers: [t.yaml]\n"),
            (
                T,
                "apiVersion: builtin\nkind: PatchStrategicMergeTransformer\nmetadata: {name: t}\npaths: [URL/t-paths]\n",
            ),
        ],
        T,
        "paths[0]",
    ),
    (
        "value-add-transformer",
        &[
            (K, "transformers: [t.yaml]\n"),
            (
                T,
                "apiVersion: builtin\nkind: ValueAddTransformer\nmetadata: {name: t}\ntargetFilePath: URL/t-targets\n",
            ),
        ],
        T,
        "targetFilePath",
    ),
    (
        "transformer-directory",
        &[
            (K, "transformers: [../t]\n"),
            ("t/kustomization.yaml", "resources: [t.yaml]\n"),
            (
                "t/t.yaml",
                "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: t}\npath: URL/dir-patch\n",
            ),
        ],
        "t/t.yaml",
        "path",
    ),
    // A directory of configurations whose kustomization patches a URL into one.
    (
        "transformer-directory-patched",
        &[
            (K, "transformers: [../t]\n"),
            (
                "t/kustomization.yaml",
                "resources: [t.yaml]\npatches:\n- target: {kind: PatchTransformer}\n  patch: '[{\"op\": \"replace\", \"path\": \"/path\", \"value\": \"URL/patched\"}]'\n",
            ),
            (
                "t/t.yaml",
                "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: t}\npath: p.yaml\n",
            ),
        ],
        "t/kustomization.yaml",
        "patches",
    ),
    (
        "component",
        &[
            (K, "resources: [cm.yaml]\ncomponents: [../c]\n"),
            (
                "k/cm.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
            ),
            (
                "c/kustomization.yaml",
                "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\npatches:\n- path: URL/component-patch\n",
            ),
        ],
        "c/kustomization.yaml",
        "patches[0].path",
    ),
    (
        "base",
        &[
            (K, "resources: [../base]\n"),
            ("base/kustomization.yaml", "resources:\n- URL/base-res\n"),
        ],
        "base/kustomization.yaml",
        "resources[0]",
    ),
];

/// A tar.gz of `files`, `URL/` in their text replaced by the victim's `http://addr/`, `HOST/`
/// by its `addr/`.
fn bundle(files: &[(&str, &str)], victim: &Victim) -> Vec<u8> {
    let texts: Vec<(&str, String)> = files
        .iter()
        .map(|(p, t)| {
            let t = t
                .replace("URL/", &victim.url("/"))
                .replace("HOST/", &format!("{}/", victim.addr));
            (*p, t)
        })
        .collect();
    let entries: Vec<Entry<'_>> = texts
        .iter()
        .map(|(p, t)| Entry::File(p, t.as_bytes()))
        .collect();
    tar_gz(&entries)
}

/// The control: URLs as data (an annotation, a literal) and a patch file whose name holds `=`
/// and `?`: built and applied, without a connection to the victim.
const CONTROL: &[(&str, &str)] = &[
    (
        K,
        "resources: [cm.yaml]\ncommonAnnotations: {runbook: \"URL/runbook\"}\nconfigMapGenerator:\n- name: net-gen\n  literals: [url=URL/literal]\npatches:\n- path: p=1?x.yaml\n",
    ),
    (
        "k/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: net-ok}\ndata: {a: '1'}\n",
    ),
    (
        "k/p=1?x.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: net-ok}\ndata: {b: '2'}\n",
    ),
];

/// The operator binary for `h`'s sets, with the pinned kustomize and the sandbox off; loopback
/// sources allowed (the test's servers).
fn start_operator(h: &Harness) -> OperatorProcess {
    let selector = format!("applyset.dev/test={}", h.label);
    let kustomize = kustomize_binary();
    OperatorProcess::start(
        cluster().kubeconfig(),
        &[
            "--label-selector",
            &selector,
            "--source-allow-cidrs",
            "127.0.0.0/8",
            "--kustomize-binary",
            kustomize.to_str().expect("utf-8 path"),
            "--kustomize-network-sandbox",
            "off",
        ],
        "kz-net",
    )
}

/// Creates set `name` reading `files` (as a bundle on `http`) at path `k`.
async fn create_set(
    h: &Harness,
    http: &FileServer,
    victim: &Victim,
    name: &str,
    files: &[(&str, &str)],
) {
    let path = format!("/{name}.tgz");
    http.put(&path, bundle(files, victim));
    h.applyset(name)
        .create(json!({"sources": [{"http": {"url": http.url(&path), "path": "k"}}]}))
        .await;
}

/// Waits for `case`'s set to be refused, and checks its message names the file and where.
async fn assert_refused(h: &Harness, i: usize, (name, _, file, at): &Case) {
    let what = format!("case {i} ({name}) refused");
    let message = h
        .applyset(&format!("case-{i}"))
        .wait_until(&what, DEADLINE, |_, st| {
            let c = condition(st?, "Ready")?;
            let refused = c.status == "False"
                && matches!(c.reason.as_str(), "ValidationFailed" | "SourceFailed");
            refused.then(|| c.message.clone())
        })
        .await;
    assert!(
        message.contains(&format!("{file}: {at}")),
        "case {i} ({name}): the refusal names {file}: {at}: {message}"
    );
}

/// No set's status and no event of the namespace quotes the victim's answer (waiting for the
/// refusals' events to be published).
async fn assert_answer_quoted_nowhere(h: &Harness) {
    let list = h
        .applyset("control")
        .api()
        .list(&ListParams::default())
        .await
        .expect("list sets");
    for s in &list.items {
        let status = serde_json::to_string(&s.data["status"]).expect("json");
        assert!(!status.contains("LEAKED"), "{status}");
    }
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(h.client.clone(), &h.ns);
    wait_for("events of the refusals", DEADLINE, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        let notes: Vec<String> = list.items.into_iter().filter_map(|e| e.note).collect();
        assert!(
            notes.iter().all(|n| !n.contains("LEAKED")),
            "an event quotes the victim's answer"
        );
        notes
            .iter()
            .any(|n| n.contains("is not a field of kustomize"))
            .then_some(())
    })
    .await;
}

/// Every field spelling and URL placement is refused before the build, naming the file and
/// the field; the victim on loopback sees no connection; its answer reaches no status, event
/// or log line. The control overlay builds (so builds do run, with the same binary).
#[tokio::test]
async fn kustomize_reaches_no_loopback_server_from_any_field() {
    let h = Harness::new("kz-net").await;
    let victim = Victim::start().await;
    let http = FileServer::start(None).await;
    let op = start_operator(&h);
    create_set(&h, &http, &victim, "control", CONTROL).await;
    for (i, case) in CASES.iter().enumerate() {
        create_set(&h, &http, &victim, &format!("case-{i}"), case.1).await;
    }

    h.applyset("control").wait_ready_within(DEADLINE).await;
    let cm = get_obj(&h.client, &configmap_ar(), Some(&h.ns), "net-ok")
        .await
        .expect("the control overlay's ConfigMap");
    assert_eq!(cm.data["data"], json!({"a": "1", "b": "2"}));
    let runbook = cm
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("runbook"));
    assert_eq!(runbook, Some(&victim.url("/runbook")));

    for (i, case) in CASES.iter().enumerate() {
        assert_refused(&h, i, case).await;
    }
    // Every set has its outcome: none of them made kustomize connect to the victim.
    let seen = victim.requests.lock().clone();
    assert_eq!(
        victim.connections.load(Ordering::SeqCst),
        0,
        "the victim was contacted: {seen:?}"
    );
    assert_answer_quoted_nowhere(&h).await;
    assert!(!op.log().contains("LEAKED"), "the operator's log quotes it");
}

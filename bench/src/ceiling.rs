//! The API server's ceiling: the same writes as the operator's, sent without it. For one
//! set from here (64 in flight); for the Flux shape by the yardstick `hack/ssa-ceiling`,
//! which the bench builds and runs.

use super::*;

/// The group of the twin of the ApplySet CRD that the single-set ceiling writes its set to:
/// the same schema, a group the operator does not watch (it runs meanwhile).
pub const TWIN_GROUP: &str = "ceiling.applyset.dev";

/// The twin of the operator's ApplySet CRD in [`TWIN_GROUP`] (none if the operator's CRDs
/// have no ApplySet).
pub fn twin_crd(crds: &[Value]) -> Option<Value> {
    let mut twin = crds
        .iter()
        .find(|c| c["spec"]["names"]["kind"] == "ApplySet")?
        .clone();
    twin["metadata"] = json!({"name": format!("applysets.{TWIN_GROUP}")});
    twin["spec"]["group"] = json!(TWIN_GROUP);
    Some(twin)
}

/// The ApplySets of the twin CRD in `ns`.
fn twin_sets(client: &Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: TWIN_GROUP.into(),
        version: "v1alpha1".into(),
        api_version: format!("{TWIN_GROUP}/v1alpha1"),
        kind: "ApplySet".into(),
        plural: "applysets".into(),
    };
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// The ApplySet id label value the ceiling's writes carry (any fixed value of the same size).
const SET_ID: &str = "applyset-cXvd15Qi0cG0k6cEnPTLVVr-JMJDFl1WHcBWhFyYa8I-v1";

/// `objs` with the operator's membership label, as the operator applies them.
pub fn labelled(mut objs: Vec<Value>) -> Vec<Value> {
    for o in &mut objs {
        o["metadata"]["labels"] = json!({"applyset.kubernetes.io/part-of": SET_ID});
    }
    objs
}

/// The ceiling's first apply of `n` members in a new namespace `ns`, in seconds: the set's
/// own writes (the user's create, the parent's apply, the status's apply, the event, as the
/// operator sends them) and the member applies, 64 in flight.
pub async fn ceiling_first_apply(client: &Client, ns: &str, n: usize) -> Res<f64> {
    create_namespace(client, ns).await?;
    let objs = labelled(members(n, "m"));
    let api = twin_sets(client, ns);
    let name = format!("set-{n}");
    let start = Instant::now();
    let set: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{TWIN_GROUP}/v1alpha1"), "kind": "ApplySet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"interval": "1h", "manifests": members(n, "m")}}))
    .map_err(|e| e.to_string())?;
    api.create(&PostParams::default(), &set)
        .await
        .map_err(|e| format!("create {name}: {e}"))?;
    set_writes(client, &api, ns, &name, SetWrite::Parent).await?;
    ceiling_requests(client, ns, &objs, Request::Apply).await?;
    set_writes(client, &api, ns, &name, SetWrite::Status(n)).await?;
    set_writes(client, &api, ns, &name, SetWrite::Event).await?;
    let took = start.elapsed().as_secs_f64();
    // Nobody releases the finalizer the parent's apply set: released here, so the
    // namespace can go.
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .map_err(|e| format!("release {name}: {e}"))?;
    Ok(took)
}

/// One of a set's own writes.
pub enum SetWrite {
    /// The parent's labels, annotations and finalizer (server-side apply).
    Parent,
    /// The status after the first apply of this many members (server-side apply).
    Status(usize),
    /// The event about the reconcile.
    Event,
}

/// Sends `write` for set `name` of `api` in `ns` as the operator does (fieldValidation=Ignore
/// on its applies, its field managers).
async fn set_writes(
    client: &Client,
    api: &Api<DynamicObject>,
    ns: &str,
    name: &str,
    write: SetWrite,
) -> Res<()> {
    let api_version = format!("{TWIN_GROUP}/v1alpha1");
    let sent = match write {
        SetWrite::Parent => {
            let body = json!({"apiVersion": api_version, "kind": "ApplySet", "metadata": {"name": name,
                "labels": {"applyset.kubernetes.io/id": SET_ID},
                "annotations": {"applyset.kubernetes.io/tooling": "applyset-operator/v0.1.0",
                    "applyset.kubernetes.io/contains-group-kinds": "ConfigMap,Deployment.apps,Secret,Service,Bench0.bench.applyset.dev",
                    "applyset.kubernetes.io/additional-namespaces": ""},
                "finalizers": ["applyset.dev/cleanup"]}});
            let pp = PatchParams::apply("applyset.dev/parent")
                .force()
                .validation_ignore();
            api.patch(name, &pp, &Patch::Apply(body)).await.map(|_| ())
        }
        SetWrite::Status(n) => {
            let body =
                json!({"apiVersion": api_version, "kind": "ApplySet", "status": status(ns, n)});
            let pp = PatchParams::apply("applyset.dev/status")
                .force()
                .validation_ignore();
            api.patch_status(name, &pp, &Patch::Apply(body))
                .await
                .map(|_| ())
        }
        SetWrite::Event => {
            let ar = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("events.k8s.io", "v1", "Event"),
                "events",
            );
            let events = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar);
            let event: DynamicObject =
                serde_json::from_value(event(ns, name, n_of(name))).map_err(|e| e.to_string())?;
            events
                .create(&PostParams::default(), &event)
                .await
                .map(|_| ())
        }
    };
    sent.map_err(|e| format!("{name}: {e}"))
}

/// The member count in a set name `set-N` (0 if there is none).
fn n_of(name: &str) -> usize {
    name.rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The status the operator writes after the first apply of `n` members (its list capped at
/// 500, as the operator caps it).
fn status(ns: &str, n: usize) -> Value {
    let listed: Vec<Value> = members(n.min(500), "m")
        .iter()
        .map(|m| {
            let ar = resource_of(m);
            json!({"group": ar.group, "kind": ar.kind, "name": m["metadata"]["name"], "namespace": ns})
        })
        .collect();
    let revision = "sha256:d4c731674440c190951be56e79fc9b24bfca4ec9e075258b7adc60416ca34d1f";
    json!({"applySetID": SET_ID, "conditions": [{"lastTransitionTime": "2026-11-25T21:38:49Z",
            "message": format!("applied {n} members ({n} created, 0 configured, 0 unchanged), pruned 0"),
            "observedGeneration": 1, "reason": "ReconciliationSucceeded", "status": "True", "type": "Ready"}],
        "lastAppliedRevision": revision, "lastAttemptedRevision": revision,
        "members": listed, "membersTruncated": n > 500, "observedGeneration": 1,
        "summary": {"configured": 0, "conflicts": 0, "created": n, "failed": 0, "members": n,
            "pruned": 0, "retained": 0, "unchanged": 0}})
}

/// The operator's event about a reconcile of set `name` in `ns` that created `n` members.
fn event(ns: &str, name: &str, n: usize) -> Value {
    let now = k8s_openapi::jiff::Timestamp::now();
    json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": format!("{name}.{:x}", now.as_nanosecond()), "namespace": ns},
        "action": "Reconcile", "reason": "ReconciliationSucceeded", "type": "Normal",
        "note": format!("applied {n} members ({n} created, 0 configured, 0 unchanged), pruned 0; changed: created {n} members"),
        "eventTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(now),
        "regarding": {"apiVersion": format!("{TWIN_GROUP}/v1alpha1"), "kind": "ApplySet", "name": name, "namespace": ns},
        "reportingController": "applyset-operator", "reportingInstance": "applyset-operator"})
}

/// What the ceiling sends for each object.
#[derive(Clone, Copy)]
pub enum Request {
    Apply,
    Delete,
}

/// One request per object, 64 in flight, no controller logic: the API server's ceiling.
pub async fn ceiling_requests(
    client: &Client,
    ns: &str,
    objs: &[Value],
    request: Request,
) -> Res<()> {
    stream::iter(objs.iter())
        .map(|o| async move {
            let api: Api<DynamicObject> =
                Api::dynamic(client.clone(), &resource_of(o), &Scope::Namespaced).constrain(ns);
            let name = o["metadata"]["name"].as_str().unwrap_or_default();
            let sent = match request {
                Request::Apply => api
                    .patch(
                        name,
                        &PatchParams::apply("ceiling").force(),
                        &Patch::Apply(o),
                    )
                    .await
                    .map(|_| ()),
                Request::Delete => api
                    .delete(name, &DeleteParams::background())
                    .await
                    .map(|_| ()),
            };
            sent.map_err(|e| format!("{name}: {e}"))
        })
        .buffer_unordered(64)
        .try_collect::<Vec<()>>()
        .await
        .map(|_| ())
}

pub async fn run_ceiling_set(client: &Client, n: usize) -> Res<Timings> {
    let ns = format!("ceiling-{n}");
    let create = ceiling_first_apply(client, &ns, n).await?;
    let objs = labelled(members(n, "m"));
    let start = Instant::now();
    ceiling_requests(client, &ns, &objs, Request::Apply).await?;
    let noop = start.elapsed().as_secs_f64();
    let start = Instant::now();
    ceiling_requests(client, &ns, &objs[n / 2..], Request::Delete).await?;
    let prune_half = start.elapsed().as_secs_f64();
    Ok(Timings {
        create,
        noop,
        prune_half,
    })
}

/// The yardstick's source, fixed in the repository.
const YARDSTICK_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../hack/ssa-ceiling/main.go");

/// The yardstick `hack/ssa-ceiling`: its binary and what identifies it.
pub struct Yardstick {
    pub binary: PathBuf,
    /// The sha256 of `hack/ssa-ceiling/main.go` (hex).
    pub source_sha256: String,
    /// Built by the bench from that source (else given with `--ceiling`).
    pub built: bool,
}

/// The yardstick: `given`, or built with `go build` next to the bench's own binary.
pub fn yardstick(given: Option<&Path>) -> Res<Yardstick> {
    use sha2::Digest;
    let source = Path::new(YARDSTICK_SOURCE);
    let text = std::fs::read(source).map_err(|e| format!("{}: {e}", source.display()))?;
    let source_sha256: String = sha2::Sha256::digest(&text)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if let Some(binary) = given {
        return Ok(Yardstick {
            binary: binary.to_path_buf(),
            source_sha256,
            built: false,
        });
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let binary = exe
        .parent()
        .ok_or("the bench's binary has no directory")?
        .join("ssa-ceiling");
    // A single file of the standard library only: built as a file, no module needed.
    let out = Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&binary)
        .arg(source)
        .output()
        .map_err(|e| format!("go build of {}: {e}", source.display()))?;
    if !out.status.success() {
        return Err(format!(
            "go build of {}: {}",
            source.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(Yardstick {
        binary,
        source_sha256,
        built: true,
    })
}

impl Yardstick {
    /// What identifies the yardstick in the report: its source's hash and its settings (as
    /// a run printed them).
    pub fn identity(&self, settings: &Value) -> Value {
        json!({"source": "hack/ssa-ceiling/main.go", "source_sha256": self.source_sha256,
            "binary": self.binary.display().to_string(), "built_from_source": self.built,
            "settings": settings})
    }
}

/// One run of the yardstick: its wall time (the sum of its phases'), the API server's CPU
/// seconds, and its JSON document (settings and phases).
pub struct CeilingRun {
    pub wall: f64,
    pub apiserver_cpu: f64,
    pub doc: Value,
}

/// The PID of `cp`'s kube-apiserver.
fn apiserver_pid(cp: &ControlPlane) -> Res<u32> {
    cp.pids()
        .into_iter()
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "kube-apiserver")
        })
        .ok_or_else(|| "no kube-apiserver among the control plane's processes".to_string())
}

/// Runs the yardstick for `k` sets of the Flux shape in a new namespace of `cp`.
pub async fn run_flux(
    y: &Yardstick,
    cp: &ControlPlane,
    client: &Client,
    k: usize,
) -> Res<CeilingRun> {
    let ns = format!("flux-{k}");
    create_namespace(client, &ns).await?;
    let pid = apiserver_pid(cp)?;
    let out = tokio::process::Command::new(&y.binary)
        .args([
            cp.server(),
            cp.token(),
            &pid.to_string(),
            &ns,
            &k.to_string(),
        ])
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("{}: {e}", y.binary.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        return Err(format!("ssa-ceiling: {}: {}", out.status, tail.join(" / ")));
    }
    let doc: Value = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .and_then(|l| serde_json::from_str(l).ok())
        .ok_or("ssa-ceiling printed no JSON document")?;
    let figure = |key: &str| {
        doc[key]
            .as_f64()
            .ok_or_else(|| format!("ssa-ceiling's document has no {key}"))
    };
    Ok(CeilingRun {
        wall: figure("wall_seconds")?,
        apiserver_cpu: figure("apiserver_cpu_seconds")?,
        doc,
    })
}

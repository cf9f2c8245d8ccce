//! The operator as a throttled tenant of the API server: it authenticates as the chart's
//! ServiceAccount (a token from the TokenRequest API) with the chart's RBAC (the ClusterRole,
//! the leader-election Role and their bindings, as `helm template` renders them), not as
//! `system:masters`, which priority and fairness exempts. A FlowSchema puts that identity,
//! while the walk throttles it, in a priority level of the smallest share (one, of about 250
//! in all: two seats of kube-apiserver's 300) that may not borrow and rejects what it cannot
//! run at once (HTTP 429), and otherwise at `workload-low`, where a ServiceAccount is without
//! it. A second FlowSchema, matched first, keeps the identity's Lease requests at the
//! built-in `leader-election` level, so throttling does not starve the replicas' renewals
//! into handovers.
//!
//! The 429s are read from kube-apiserver's own metric
//! `apiserver_flowcontrol_rejected_requests_total` of that priority level.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use k8s_openapi::api::{authentication::v1::TokenRequest, core::v1::ServiceAccount};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

use crate::{operator::dyn_api, world::Result};

/// The namespace the chart is "installed" in (its ServiceAccount and Lease Role live there).
pub const OPERATOR_NAMESPACE: &str = "applyset-system";
/// The chart's release name.
const RELEASE: &str = "walk";
/// The priority level (and FlowSchema) of the operator's requests.
pub const PRIORITY_LEVEL: &str = "model-operator";
/// The FlowSchema of the operator's Lease requests.
const LEASE_FLOW_SCHEMA: &str = "model-operator-leases";
/// The field manager of what the walk installs.
const MANAGER: &str = "model-walk";
/// How long the operator's token is valid: longer than any walk.
const TOKEN_SECONDS: i64 = 7 * 24 * 3600;
/// The chart's templates that make up its RBAC.
const RBAC_TEMPLATES: [&str; 4] = [
    "templates/serviceaccount.yaml",
    "templates/clusterrole.yaml",
    "templates/clusterrolebinding.yaml",
    "templates/leader-election-rbac.yaml",
];

/// The level of the operator's requests while it is not throttled: the one they would have
/// without the walk's FlowSchema (the built-in `service-accounts` FlowSchema's).
const UNTHROTTLED_LEVEL: &str = "workload-low";

/// The operator's identity.
pub struct Identity {
    /// The chart's ServiceAccount (in [`OPERATOR_NAMESPACE`]).
    pub account: String,
    pub token: String,
}

/// Installs the chart's ServiceAccount and RBAC (with `sharding: auto` when `sharded`: the
/// Leases of the operator's namespace), and the flow control that throttles it (from the
/// start when `on`); returns that identity.
pub async fn install(client: &Client, sharded: bool, on: bool) -> Result<Identity> {
    let mut account = None;
    for doc in render_rbac(sharded)? {
        if doc["kind"] == "ServiceAccount" {
            account = doc["metadata"]["name"].as_str().map(str::to_owned);
        }
        apply(client, &doc).await?;
    }
    let account = account.ok_or("the chart rendered no ServiceAccount")?;
    for doc in flow_control(&account) {
        apply(client, &doc).await?;
    }
    set(client, &account, on).await?;
    let token = token(client, &account).await?;
    Ok(Identity { account, token })
}

/// Throttles the operator (`on`: its FlowSchema points at the level of one share) or not
/// (at the level it would have without the walk's FlowSchema).
pub async fn set(client: &Client, account: &str, on: bool) -> Result<()> {
    let level = if on {
        PRIORITY_LEVEL
    } else {
        UNTHROTTLED_LEVEL
    };
    apply(client, &operator_flow_schema(account, level)).await
}

/// The 429s kube-apiserver answered the operator's priority level since it started.
pub async fn rejected(client: &Client) -> Result<u64> {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|e| format!("a /metrics request: {e}"))?;
    let text = client
        .request_text(req)
        .await
        .map_err(|e| format!("reading kube-apiserver's /metrics: {e}"))?;
    Ok(rejected_in(&text))
}

/// The sum of `apiserver_flowcontrol_rejected_requests_total` of [`PRIORITY_LEVEL`] (every
/// reason) in Prometheus text.
fn rejected_in(metrics: &str) -> u64 {
    let level = format!("priority_level=\"{PRIORITY_LEVEL}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with("apiserver_flowcontrol_rejected_requests_total{"))
        .filter(|l| l.contains(&level))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

const FLOW_CONTROL: &str = "flowcontrol.apiserver.k8s.io/v1";

fn subjects(account: &str) -> Value {
    json!([{"kind": "ServiceAccount",
        "serviceAccount": {"name": account, "namespace": OPERATOR_NAMESPACE}}])
}

/// The priority level of one share that may not borrow and rejects at once, and the
/// FlowSchema that keeps `account`'s Leases at `leader-election` (matched before the
/// operator's own, [`operator_flow_schema`]).
fn flow_control(account: &str) -> [Value; 2] {
    let subjects = subjects(account);
    let api_version = FLOW_CONTROL;
    [
        json!({"apiVersion": api_version, "kind": "PriorityLevelConfiguration",
            "metadata": {"name": PRIORITY_LEVEL},
            "spec": {"type": "Limited", "limited": {
                "nominalConcurrencyShares": 1, "lendablePercent": 0, "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"}}}}),
        json!({"apiVersion": api_version, "kind": "FlowSchema",
            "metadata": {"name": LEASE_FLOW_SCHEMA},
            "spec": {"priorityLevelConfiguration": {"name": "leader-election"},
                "matchingPrecedence": 400,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{"subjects": subjects, "resourceRules": [{
                    "verbs": ["*"], "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"], "namespaces": ["*"]}]}]}}),
    ]
}

/// The FlowSchema of every other request of `account`: at priority level `level`.
fn operator_flow_schema(account: &str, level: &str) -> Value {
    json!({"apiVersion": FLOW_CONTROL, "kind": "FlowSchema",
        "metadata": {"name": PRIORITY_LEVEL},
        "spec": {"priorityLevelConfiguration": {"name": level},
            "matchingPrecedence": 500,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{"subjects": subjects(account),
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                    "clusterScope": true, "namespaces": ["*"]}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}})
}

/// Creates the operator's namespace.
pub async fn create_namespace(client: &Client) -> Result<()> {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": OPERATOR_NAMESPACE}});
    apply(client, &ns).await
}

/// Server-side apply of one object as the walk.
async fn apply(client: &Client, doc: &Value) -> Result<()> {
    let what = format!("{} {}", doc["kind"], doc["metadata"]["name"]);
    let (group, version) = match doc["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .split_once('/')
    {
        Some((g, v)) => (g, v),
        None => ("", doc["apiVersion"].as_str().unwrap_or_default()),
    };
    let gvk = GroupVersionKind::gvk(group, version, doc["kind"].as_str().unwrap_or_default());
    let api: Api<DynamicObject> = dyn_api(
        client,
        &ApiResource::from_gvk(&gvk),
        doc["metadata"]["namespace"].as_str(),
    );
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    api.patch(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(doc),
    )
    .await
    .map(|_| ())
    .map_err(|e| format!("applying {what}: {e}"))
}

/// A token of the ServiceAccount (TokenRequest).
async fn token(client: &Client, account: &str) -> Result<String> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let request: TokenRequest = serde_json::from_value(
        json!({"spec": {"audiences": [], "expirationSeconds": TOKEN_SECONDS}}),
    )
    .map_err(|e| e.to_string())?;
    let answer = api
        .create_token_request(account, &PostParams::default(), &request)
        .await
        .map_err(|e| format!("a token of ServiceAccount {account}: {e}"))?;
    match answer.status.and_then(|s| s.token) {
        Some(t) if !t.is_empty() => Ok(t),
        _ => Err(format!(
            "the TokenRequest of {account} came back without a token"
        )),
    }
}

/// The chart's RBAC documents (`helm template`, rbac.members=all: the walk's sets declare
/// CRDs, Namespaces and custom resources; `sharding=auto` when `sharded`).
fn render_rbac(sharded: bool) -> Result<Vec<Value>> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let chart = repo.join("charts/applyset-operator");
    let home = std::env::temp_dir().join(format!("applyset-model-helm-{}", std::process::id()));
    let mut cmd = Command::new(helm_bin(repo)?);
    cmd.arg("template").arg(RELEASE).arg(&chart).args([
        "--namespace",
        OPERATOR_NAMESPACE,
        "--set",
        "rbac.members=all",
    ]);
    if sharded {
        cmd.args(["--set", "sharding=auto"]);
    }
    for t in RBAC_TEMPLATES {
        cmd.args(["--show-only", t]);
    }
    let out = cmd
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .map_err(|e| format!("running helm: {e}"))?;
    let _ = std::fs::remove_dir_all(&home);
    if !out.status.success() {
        return Err(format!(
            "helm template failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let yaml = String::from_utf8_lossy(&out.stdout);
    let docs: Vec<Value> =
        serde_saphyr::from_str_multiple(&yaml).map_err(|e| format!("helm's output: {e}"))?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// The helm binary: `$APPLYSET_HELM`, or what `tests/testenv/build-helm.sh` prints (it builds
/// helm on a cache miss and answers at once on a hit).
fn helm_bin(repo: &Path) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("APPLYSET_HELM").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let out = Command::new("bash")
        .arg(repo.join("tests/testenv/build-helm.sh"))
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("running build-helm.sh: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().last().map(str::trim) {
        Some(dir) if out.status.success() && !dir.is_empty() => Ok(PathBuf::from(dir).join("helm")),
        _ => Err(format!("build-helm.sh failed ({})", out.status)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejections_of_the_operators_level_are_summed_over_reasons_and_schemas() {
        let text = format!(
            "# TYPE apiserver_flowcontrol_rejected_requests_total counter\n\
             apiserver_flowcontrol_rejected_requests_total{{flow_schema=\"{PRIORITY_LEVEL}\",priority_level=\"{PRIORITY_LEVEL}\",reason=\"concurrency-limit\"}} 7\n\
             apiserver_flowcontrol_rejected_requests_total{{flow_schema=\"{PRIORITY_LEVEL}\",priority_level=\"{PRIORITY_LEVEL}\",reason=\"time-out\"}} 2\n\
             apiserver_flowcontrol_rejected_requests_total{{flow_schema=\"other\",priority_level=\"workload-low\",reason=\"queue-full\"}} 100\n"
        );
        assert_eq!(rejected_in(&text), 9);
    }
}

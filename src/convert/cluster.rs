//! The conversion's one I/O edge: reading its [`Input`] from a cluster (the kubectl plugin's
//! `convert --from-cluster`, and its handover): the Kustomizations of a namespace (listed page
//! by page) or one of them, the sources they reference (one GET each; a missing one is left
//! out, and the conversion refuses its Kustomization), and what each Kustomization writes, from
//! its `status.inventory` (entries `<namespace>_<name>_<group>_<kind>`, an empty namespace for
//! a cluster-scoped object, as kustomize-controller records them).

use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams},
};
use serde_json::Value;

use super::{FluxRef, Input, Written, flux};
use crate::engine::DEFAULT_PAGE_SIZE;

/// A request that failed: what it was doing (`reading GitRepository ns/name`), and the error.
#[derive(Debug, thiserror::Error)]
#[error("{doing}: {error}")]
pub struct ReadError {
    pub doing: String,
    #[source]
    pub error: kube::Error,
}

/// The API resource of a Flux kind `convert` reads (v1 of each).
pub fn resource(kind: &str) -> Option<ApiResource> {
    let (group, plural) = match kind {
        "Kustomization" => (flux::KUSTOMIZE_GROUP, "kustomizations"),
        "GitRepository" => (flux::SOURCE_GROUP, "gitrepositories"),
        "OCIRepository" => (flux::SOURCE_GROUP, "ocirepositories"),
        "Bucket" => (flux::SOURCE_GROUP, "buckets"),
        "ExternalArtifact" => (flux::SOURCE_GROUP, "externalartifacts"),
        _ => return None,
    };
    Some(api_resource(group, kind, plural))
}

fn api_resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    let gvk = GroupVersionKind::gvk(group, "v1", kind);
    ApiResource::from_gvk_with_plural(&gvk, plural)
}

/// The Kustomizations of `namespace` (or the one named `name`), the sources they reference,
/// and what each writes from its `status.inventory` (a Kustomization without one has no
/// entry in `written`).
pub async fn read(
    client: &Client,
    namespace: &str,
    name: Option<&str>,
) -> Result<Input, ReadError> {
    let ar = api_resource(flux::KUSTOMIZE_GROUP, "Kustomization", "kustomizations");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    let items = match name {
        Some(n) => vec![api.get(n).await.map_err(|error| ReadError {
            doing: format!("reading Kustomization {namespace}/{n}"),
            error,
        })?],
        None => list(&api, &format!("namespace {namespace}")).await?,
    };
    let mut input = Input::default();
    let mut sources: Vec<FluxRef> = Vec::new();
    for item in items {
        let value = with_type(item, &ar);
        let Some(object) = flux::read(&value, namespace) else {
            continue;
        };
        if let Some(w) = object.status.as_ref().and_then(inventory) {
            input.written.insert(object.id.clone(), w);
        }
        if let Some(s) = source_of(&object)
            && !sources.contains(&s)
        {
            sources.push(s);
        }
        input.objects.push(value);
    }
    for s in sources {
        let Some(ar) = resource(&s.kind) else {
            continue;
        };
        let mut found = get(client, &s, &ar).await?.map(|o| with_type(o, &ar));
        if found.is_none() && s.kind == "OCIRepository" {
            // A source-controller before v1.6 serves OCIRepository as v1beta2 only.
            let beta = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(flux::SOURCE_GROUP, "v1beta2", &s.kind),
                "ocirepositories",
            );
            found = get(client, &s, &beta).await?.map(|o| with_type(o, &beta));
        }
        input.objects.extend(found);
    }
    Ok(input)
}

/// The source `s` as `ar`, if it exists.
async fn get(
    client: &Client,
    s: &FluxRef,
    ar: &ApiResource,
) -> Result<Option<DynamicObject>, ReadError> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &s.namespace, ar);
    api.get_opt(&s.name).await.map_err(|error| ReadError {
        doing: format!("reading {s}"),
        error,
    })
}

/// Every Kustomization of the cluster (all namespaces), page by page, as JSON (for the
/// handover's check of the Kustomizations that depend on the one handed over).
pub async fn all_kustomizations(client: &Client) -> Result<Vec<Value>, ReadError> {
    let ar = api_resource(flux::KUSTOMIZE_GROUP, "Kustomization", "kustomizations");
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let items = list(&api, "all namespaces").await?;
    Ok(items.into_iter().map(|o| with_type(o, &ar)).collect())
}

/// Every Kustomization `api` lists (`scope`: which, for the error), page by page.
async fn list(api: &Api<DynamicObject>, scope: &str) -> Result<Vec<DynamicObject>, ReadError> {
    let mut params = ListParams::default().limit(DEFAULT_PAGE_SIZE);
    let mut items = Vec::new();
    loop {
        let page = api.list(&params).await.map_err(|error| ReadError {
            doing: format!("listing the Kustomizations of {scope}"),
            error,
        })?;
        items.extend(page.items);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(items),
        }
    }
}

/// `obj` as JSON with its apiVersion and kind.
fn with_type(obj: DynamicObject, ar: &ApiResource) -> Value {
    let mut v = serde_json::to_value(obj).unwrap_or(Value::Null);
    if let Some(map) = v.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(ar.api_version.clone()));
        map.insert("kind".into(), Value::String(ar.kind.clone()));
    }
    v
}

/// The source a Kustomization references.
fn source_of(k: &flux::Object) -> Option<FluxRef> {
    let r = k.spec.get("sourceRef")?;
    Some(FluxRef {
        kind: r.get("kind")?.as_str()?.to_string(),
        namespace: r
            .get("namespace")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .unwrap_or(&k.id.namespace)
            .to_string(),
        name: r.get("name")?.as_str()?.to_string(),
    })
}

/// The namespaces of a Kustomization's `status.inventory` entries (`""`: cluster-scoped);
/// `None` without an inventory.
pub fn inventory(status: &Value) -> Option<Written> {
    let entries = status.get("inventory")?.get("entries")?.as_array()?;
    let namespaces = entries
        .iter()
        .filter_map(|e| e.get("id")?.as_str())
        .filter_map(|id| id.split('_').next())
        .map(|ns| (!ns.is_empty()).then(|| ns.to_string()))
        .collect();
    Some(Written {
        namespaces,
        from: "status.inventory".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn inventory_entries_give_the_namespaces_written() {
        let status = json!({"inventory": {"entries": [
            {"id": "apps_web_apps_Deployment", "v": "v1"},
            {"id": "_apps__Namespace", "v": "v1"},
            {"id": "_admin_rbac.authorization.k8s.io_ClusterRole", "v": "v1"}
        ]}});
        let w = inventory(&status).expect("inventory");
        assert_eq!(
            w.namespaces,
            [None, Some("apps".to_string())].into_iter().collect()
        );
        assert!(inventory(&json!({})).is_none());
        let empty = inventory(&json!({"inventory": {"entries": []}})).expect("empty");
        assert!(empty.fits("anything"));
    }

    #[test]
    fn every_kind_read_has_a_resource() {
        for kind in [
            "Kustomization",
            "GitRepository",
            "OCIRepository",
            "Bucket",
            "ExternalArtifact",
        ] {
            let ar = resource(kind).expect(kind);
            assert_eq!(ar.version, "v1");
        }
        assert!(resource("HelmRelease").is_none());
    }
}

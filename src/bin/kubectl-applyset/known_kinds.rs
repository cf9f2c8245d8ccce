//! Kinds known without a cluster: the built-in Kubernetes kinds (from k8s-openapi's types,
//! each with its plural and scope), the operator's own kinds, and kinds defined by
//! CustomResourceDefinitions in the file or the set. `build` resolves kinds with this table
//! when it runs offline.

use std::{any::TypeId, collections::HashMap};

use applyset_operator::{
    api::{ApplySet, ClusterApplySet},
    discovery::Resolved,
    render::Gvk,
};
use k8s_openapi::{
    NamespaceResourceScope,
    api::{
        admissionregistration::v1 as admission, apps::v1 as apps, autoscaling::v1 as autoscaling1,
        autoscaling::v2 as autoscaling2, batch::v1 as batch, certificates::v1 as certificates,
        coordination::v1 as coordination, core::v1 as core, discovery::v1 as discovery,
        flowcontrol::v1 as flowcontrol, networking::v1 as networking, node::v1 as node,
        policy::v1 as policy, rbac::v1 as rbac, scheduling::v1 as scheduling,
        storage::v1 as storage,
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions,
    kube_aggregator::pkg::apis::apiregistration::v1 as apiregistration,
};
use kube::discovery::ApiResource;

/// One k8s-openapi type as a table entry.
fn entry<K>() -> (Gvk, Resolved)
where
    K: k8s_openapi::Resource,
    K::Scope: 'static,
{
    let resource = ApiResource {
        group: K::GROUP.to_string(),
        version: K::VERSION.to_string(),
        api_version: K::API_VERSION.to_string(),
        kind: K::KIND.to_string(),
        plural: K::URL_PATH_SEGMENT.to_string(),
    };
    let namespaced = TypeId::of::<K::Scope>() == TypeId::of::<NamespaceResourceScope>();
    keyed(resource, namespaced)
}

/// One of the operator's own kinds as a table entry.
fn own<K: kube::Resource<DynamicType = ()>>(namespaced: bool) -> (Gvk, Resolved) {
    keyed(ApiResource::erase::<K>(&()), namespaced)
}

/// A resolved kind keyed by its group, version and kind.
fn keyed(resource: ApiResource, namespaced: bool) -> (Gvk, Resolved) {
    let key = (
        resource.group.clone(),
        resource.version.clone(),
        resource.kind.clone(),
    );
    (
        key,
        Resolved {
            resource,
            namespaced,
        },
    )
}

/// The built-in kinds a current Kubernetes serves (the ones manifests declare).
pub fn builtin() -> HashMap<Gvk, Resolved> {
    HashMap::from([
        entry::<core::ConfigMap>(),
        entry::<core::Endpoints>(),
        entry::<core::Event>(),
        entry::<core::LimitRange>(),
        entry::<core::Namespace>(),
        entry::<core::Node>(),
        entry::<core::PersistentVolume>(),
        entry::<core::PersistentVolumeClaim>(),
        entry::<core::Pod>(),
        entry::<core::PodTemplate>(),
        entry::<core::ReplicationController>(),
        entry::<core::ResourceQuota>(),
        entry::<core::Secret>(),
        entry::<core::Service>(),
        entry::<core::ServiceAccount>(),
        entry::<apps::ControllerRevision>(),
        entry::<apps::DaemonSet>(),
        entry::<apps::Deployment>(),
        entry::<apps::ReplicaSet>(),
        entry::<apps::StatefulSet>(),
        entry::<autoscaling1::HorizontalPodAutoscaler>(),
        entry::<autoscaling2::HorizontalPodAutoscaler>(),
        entry::<batch::CronJob>(),
        entry::<batch::Job>(),
        entry::<networking::Ingress>(),
        entry::<networking::IngressClass>(),
        entry::<networking::NetworkPolicy>(),
        entry::<rbac::ClusterRole>(),
        entry::<rbac::ClusterRoleBinding>(),
        entry::<rbac::Role>(),
        entry::<rbac::RoleBinding>(),
        entry::<policy::PodDisruptionBudget>(),
        entry::<storage::StorageClass>(),
        entry::<storage::CSIDriver>(),
        entry::<storage::CSINode>(),
        entry::<storage::CSIStorageCapacity>(),
        entry::<storage::VolumeAttachment>(),
        entry::<scheduling::PriorityClass>(),
        entry::<apiextensions::CustomResourceDefinition>(),
        entry::<admission::MutatingWebhookConfiguration>(),
        entry::<admission::ValidatingWebhookConfiguration>(),
        entry::<admission::ValidatingAdmissionPolicy>(),
        entry::<admission::ValidatingAdmissionPolicyBinding>(),
        entry::<coordination::Lease>(),
        entry::<discovery::EndpointSlice>(),
        entry::<node::RuntimeClass>(),
        entry::<certificates::CertificateSigningRequest>(),
        entry::<flowcontrol::FlowSchema>(),
        entry::<flowcontrol::PriorityLevelConfiguration>(),
        entry::<apiregistration::APIService>(),
        own::<ApplySet>(true),
        own::<ClusterApplySet>(false),
    ])
}

/// Resolves `gvk` offline: exactly from `table`, else the same group and kind at another
/// version (a kind's scope and plural do not change between versions); `None` when unknown.
pub fn resolve(table: &HashMap<Gvk, Resolved>, gvk: &Gvk) -> Option<Resolved> {
    if let Some(r) = table.get(gvk) {
        return Some(r.clone());
    }
    let (group, version, kind) = gvk;
    table
        .iter()
        .find(|((g, _, k), _)| g == group && k == kind)
        .map(|(_, r)| {
            let mut r = r.clone();
            r.resource.version = version.clone();
            r.resource.api_version = if group.is_empty() {
                version.clone()
            } else {
                format!("{group}/{version}")
            };
            r
        })
}

/// What an unknown kind is assumed to be offline: namespaced, its plural guessed.
pub fn assumed((group, version, kind): &Gvk) -> Resolved {
    let api_version = if group.is_empty() {
        version.clone()
    } else {
        format!("{group}/{version}")
    };
    Resolved {
        resource: ApiResource {
            group: group.clone(),
            version: version.clone(),
            api_version,
            kind: kind.clone(),
            plural: format!("{}s", kind.to_ascii_lowercase()),
        },
        namespaced: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gvk(g: &str, v: &str, k: &str) -> Gvk {
        (g.into(), v.into(), k.into())
    }

    #[test]
    fn builtin_kinds_have_their_scope_and_plural() {
        let t = builtin();
        let cm = resolve(&t, &gvk("", "v1", "ConfigMap")).expect("known");
        assert!(cm.namespaced);
        assert_eq!(cm.resource.plural, "configmaps");
        let ns = resolve(&t, &gvk("", "v1", "Namespace")).expect("known");
        assert!(!ns.namespaced);
        let crb = resolve(
            &t,
            &gvk("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
        )
        .expect("known");
        assert!(!crb.namespaced);
        let caset = resolve(&t, &gvk("applyset.dev", "v1alpha1", "ClusterApplySet")).expect("own");
        assert!(!caset.namespaced);
        // Another version of a known kind keeps its scope.
        let beta = resolve(&t, &gvk("batch", "v1beta1", "CronJob")).expect("by group and kind");
        assert_eq!(beta.resource.api_version, "batch/v1beta1");
        assert!(beta.namespaced);
        assert!(resolve(&t, &gvk("example.com", "v1", "Widget")).is_none());
    }
}

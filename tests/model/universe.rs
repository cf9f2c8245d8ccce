//! The universe of a walk: its namespaces, its five parents, the pool of objects the parents
//! may declare (ConfigMaps, Secrets, Services, custom resources of a CRD the test installs,
//! Namespaces, and a CRD with its own custom resources), the foreign objects other actors own,
//! and the manifests the parents declare.

use std::fmt;

use kube::api::ApiResource;
use serde_json::{Value, json};

use crate::operator::{applyset_id, cluster_applyset_id, gvk_resource};

/// Namespaces the test creates (never members): index 0 is the ApplySets' own namespace.
pub const NAMESPACES: [&str; 3] = ["model-home", "model-n1", "model-n2"];
/// The ApplySets' own namespace (an index into [`NAMESPACES`]).
pub const HOME: usize = 0;
/// Namespaces that are themselves members (always empty).
pub const MEMBER_NAMESPACES: [&str; 2] = ["model-m0", "model-m1"];
/// API group of the Widget CRD (installed by the test) and of the Gadget CRD (a member).
pub const GROUP: &str = "model.example.com";
/// The member CRD; its Gadgets are declared only by the set that declares it.
pub const GADGET_CRD: &str = "gadgets.model.example.com";
/// The field manager of every foreign actor.
pub const FOREIGN_MANAGER: &str = "model-foreign";
/// Annotation carrying a member's declared revision (its content).
pub const REV_ANNOTATION: &str = "model.applyset.dev/rev";
/// The data key of ConfigMaps and Secrets.
pub const DATA_KEY: &str = "k";
/// Value of the data key of foreign objects.
pub const FOREIGN_DATA: &str = "foreign";
/// The parents: name and whether it is a ClusterApplySet.
pub const SETS: [(&str, bool); 5] = [
    ("a0", false),
    ("a1", false),
    ("a2", false),
    ("model-c0", true),
    ("model-c1", true),
];
/// Re-reconcile period and first retry of every parent (short: the walk waits for both).
pub const INTERVAL: &str = "3s";
pub const RETRY_INTERVAL: &str = "1s";

/// The kinds of objects in the walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Crd,
    Namespace,
    ConfigMap,
    Secret,
    Service,
    Widget,
    Gadget,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::Crd,
        Kind::Namespace,
        Kind::ConfigMap,
        Kind::Secret,
        Kind::Service,
        Kind::Widget,
        Kind::Gadget,
    ];

    pub fn api_resource(self) -> ApiResource {
        match self {
            Kind::Crd => gvk_resource(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
                "customresourcedefinitions",
            ),
            Kind::Namespace => gvk_resource("", "v1", "Namespace", "namespaces"),
            Kind::ConfigMap => gvk_resource("", "v1", "ConfigMap", "configmaps"),
            Kind::Secret => gvk_resource("", "v1", "Secret", "secrets"),
            Kind::Service => gvk_resource("", "v1", "Service", "services"),
            Kind::Widget => gvk_resource(GROUP, "v1", "Widget", "widgets"),
            Kind::Gadget => gvk_resource(GROUP, "v1", "Gadget", "gadgets"),
        }
    }

    /// As in `applyset.kubernetes.io/contains-group-kinds`: `Kind` or `Kind.group`.
    pub fn group_kind(self) -> String {
        let ar = self.api_resource();
        if ar.group.is_empty() {
            ar.kind
        } else {
            format!("{}.{}", ar.kind, ar.group)
        }
    }

    /// Whether objects of this kind live in a namespace.
    pub fn namespaced(self) -> bool {
        !matches!(self, Kind::Crd | Kind::Namespace)
    }

    /// Whether the walk declares this kind with `applyset.dev/prune: disabled` or lets a
    /// foreign actor annotate it so (not the Gadget CRD and its Gadgets: a retained Gadget
    /// would keep its CRD, which the model does not follow).
    pub fn may_be_retained(self) -> bool {
        !matches!(self, Kind::Crd | Kind::Gadget)
    }
}

/// One object of the walk: kind, namespace (an index into [`NAMESPACES`]) and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub kind: Kind,
    pub ns: Option<usize>,
    pub name: String,
}

impl Key {
    fn new(kind: Kind, ns: Option<usize>, name: &str) -> Key {
        Key {
            kind,
            ns,
            name: name.to_owned(),
        }
    }

    pub fn namespace(&self) -> Option<&'static str> {
        self.ns.map(|i| NAMESPACES[i])
    }

    /// Whether this is the Gadget CRD or a Gadget (they move together).
    pub fn in_gadget_bundle(&self) -> bool {
        matches!(self.kind, Kind::Crd | Kind::Gadget)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.namespace() {
            Some(ns) => write!(f, "{:?} {ns}/{}", self.kind, self.name),
            None => write!(f, "{:?} {}", self.kind, self.name),
        }
    }
}

/// Every object a parent may declare, in a fixed order.
pub fn member_keys() -> Vec<Key> {
    let mut keys = Vec::new();
    let mut add = |kind: Kind, namespaces: &[usize], names: &[&str]| {
        for &ns in namespaces {
            for name in names {
                keys.push(Key::new(kind, Some(ns), name));
            }
        }
    };
    add(Kind::ConfigMap, &[0, 1, 2], &["cm0", "cm1", "cm2", "cm3"]);
    add(Kind::Secret, &[0, 1], &["s0", "s1"]);
    add(Kind::Service, &[0, 2], &["svc0", "svc1"]);
    add(Kind::Widget, &[0, 1], &["w0", "w1"]);
    add(Kind::Gadget, &[0], &["g0", "g1"]);
    for ns in MEMBER_NAMESPACES {
        keys.push(Key::new(Kind::Namespace, None, ns));
    }
    keys.push(Key::new(Kind::Crd, None, GADGET_CRD));
    keys
}

/// The foreign objects (owned by [`FOREIGN_MANAGER`], never declared by a parent).
pub fn foreign_keys() -> Vec<Key> {
    vec![
        Key::new(Kind::ConfigMap, Some(0), "foreign0"),
        Key::new(Kind::ConfigMap, Some(1), "foreign1"),
        Key::new(Kind::ConfigMap, Some(2), "foreign2"),
        Key::new(Kind::Secret, Some(0), "foreign-s"),
    ]
}

/// Whether an object of this name belongs to the universe (others are ignored when the
/// cluster is observed, unless labelled by a parent).
pub fn in_universe(kind: Kind, name: &str) -> bool {
    member_keys()
        .iter()
        .chain(foreign_keys().iter())
        .any(|k| k.kind == kind && k.name == name)
}

// ---------------------------------------------------------------------------------------------
// Parents

pub fn set_name(s: usize) -> &'static str {
    SETS[s].0
}

pub fn is_cluster(s: usize) -> bool {
    SETS[s].1
}

/// `ApplySet model-home/a0` or `ClusterApplySet model-c0`, for messages.
pub fn set_display(s: usize) -> String {
    if is_cluster(s) {
        format!("ClusterApplySet {}", set_name(s))
    } else {
        format!("ApplySet {}/{}", NAMESPACES[HOME], set_name(s))
    }
}

/// The parent's ID (docs/design.md §3.2, computed by the test support, not by the operator).
pub fn set_id(s: usize) -> String {
    if is_cluster(s) {
        cluster_applyset_id(set_name(s))
    } else {
        applyset_id(NAMESPACES[HOME], set_name(s))
    }
}

/// The parent's member field manager (docs/design.md §5).
pub fn set_manager(s: usize) -> String {
    if is_cluster(s) {
        format!("applyset.dev/cluster/{}", set_name(s))
    } else {
        format!("applyset.dev/ns/{}/{}", NAMESPACES[HOME], set_name(s))
    }
}

/// The set whose ID this is.
pub fn set_of_id(id: &str) -> Option<usize> {
    (0..SETS.len()).find(|&s| set_id(s) == id)
}

// ---------------------------------------------------------------------------------------------
// Manifests

/// How a parent declares one member: its revision (content), whether it is annotated
/// `applyset.dev/prune: disabled`, and whether a namespaced member of the ApplySets' own
/// namespace names it explicitly (the namespace may be left to default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decl {
    pub rev: u32,
    pub prune_disabled: bool,
    pub explicit_ns: bool,
}

impl Decl {
    /// The value of the data key (ConfigMap, Secret) for this revision.
    pub fn data(&self) -> String {
        format!("v{}", self.rev)
    }
}

/// The manifest of member `key` as parent `cluster_parent` (a ClusterApplySet or not)
/// declares it.
pub fn manifest(key: &Key, decl: &Decl, cluster_parent: bool) -> Value {
    let ar = key.kind.api_resource();
    let mut annotations = json!({ REV_ANNOTATION: decl.rev.to_string() });
    if decl.prune_disabled {
        annotations["applyset.dev/prune"] = json!("disabled");
    }
    let mut metadata = json!({"name": key.name, "annotations": annotations});
    if let Some(ns) = key.ns
        && (cluster_parent || ns != HOME || decl.explicit_ns)
    {
        metadata["namespace"] = json!(NAMESPACES[ns]);
    }
    let mut m = json!({"apiVersion": ar.api_version, "kind": ar.kind, "metadata": metadata});
    let body = m.as_object_mut().expect("a manifest is an object");
    match key.kind {
        Kind::ConfigMap => {
            body.insert("data".into(), json!({ DATA_KEY: decl.data() }));
        }
        Kind::Secret => {
            use base64::Engine as _;
            let encoded = base64::engine::general_purpose::STANDARD.encode(decl.data());
            body.insert("type".into(), json!("Opaque"));
            body.insert("data".into(), json!({ DATA_KEY: encoded }));
        }
        Kind::Service => {
            body.insert(
                "spec".into(),
                json!({"selector": {"app": key.name},
                       "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}),
            );
        }
        Kind::Widget | Kind::Gadget => {
            body.insert("spec".into(), json!({"size": decl.rev}));
        }
        Kind::Crd => {
            body.insert("spec".into(), crd_spec("Gadget", "gadgets"));
        }
        Kind::Namespace => {}
    }
    m
}

/// The spec of a namespaced CRD of [`GROUP`] with one version and a `spec.size` field.
pub fn crd_spec(kind: &str, plural: &str) -> Value {
    json!({
        "group": GROUP,
        "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                  "listKind": format!("{kind}List")},
        "scope": "Namespaced",
        "versions": [{"name": "v1", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}}}]
    })
}

/// The Widget CRD, installed by the test (not a member).
pub fn widget_crd() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": format!("widgets.{GROUP}")}, "spec": crd_spec("Widget", "widgets")})
}

/// A foreign object's body as its owner applies it, with the `part-of` label of parent
/// `copied` when it copies one.
pub fn foreign_manifest(key: &Key, copied: Option<usize>) -> Value {
    let ar = key.kind.api_resource();
    let labels = match copied {
        Some(s) => json!({ crate::operator::LABEL_PART_OF: set_id(s) }),
        None => json!({}),
    };
    let data = match key.kind {
        Kind::Secret => {
            use base64::Engine as _;
            json!({ DATA_KEY: base64::engine::general_purpose::STANDARD.encode(FOREIGN_DATA) })
        }
        _ => json!({ DATA_KEY: FOREIGN_DATA }),
    };
    json!({"apiVersion": ar.api_version, "kind": ar.kind,
           "metadata": {"name": key.name, "namespace": key.namespace(), "labels": labels},
           "data": data})
}

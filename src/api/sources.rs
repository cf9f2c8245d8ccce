//! `spec.sources`: one entry per manifest source (configMap, secret, http, git or oci; the
//! CRD's CEL rules say exactly one), and the credentials reference they share.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One manifest source: exactly one of configMap, secret, http, git or oci.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "[has(self.configMap), has(self.secret), has(self.http), has(self.git), has(self.oci)].filter(x, x).size() == 1",
    "message": "each source must set exactly one of configMap, secret, http, git or oci"
}]))]
pub struct Source {
    /// Documents in the data keys of a ConfigMap: every key ending in .yaml, .yml or .json
    /// (in key order), or exactly the listed keys. A change of the ConfigMap triggers a
    /// reconcile at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ObjectSource>,

    /// Documents in the data keys of a Secret, like configMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<ObjectSource>,

    /// A YAML/JSON document or a .tar.gz/.tgz bundle of them, downloaded over HTTP(S) and
    /// checked again at every interval (with ETag / Last-Modified when the server sends them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpSource>,

    /// A directory of a Git repository at a branch, tag or commit (a shallow fetch of that
    /// one ref); the resolved commit is the revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSource>,

    /// An OCI artifact whose layer is a tar.gz of manifests (as `flux push artifact` and ORAS
    /// produce); the manifest digest is the revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciSource>,
}

/// A ConfigMap or Secret holding manifests.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectSource {
    /// Name of the ConfigMap or Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// Its namespace. An ApplySet may only reference its own namespace (the default); a
    /// ClusterApplySet must set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,

    /// The data keys to read, in this order. Empty: every key ending in .yaml, .yml or .json,
    /// sorted by name. A listed key that is missing is an error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
}

/// A reference to a Secret with credentials.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// Its namespace. An ApplySet may only reference its own namespace (the default); a
    /// ClusterApplySet must set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// Manifests downloaded over HTTP(S).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpSource {
    /// http:// or https:// URL of a YAML/JSON document (multi-document YAML allowed) or of a
    /// .tar.gz/.tgz bundle (recognised by its content).
    #[schemars(regex(pattern = r"^https?://.+"))]
    pub url: String,

    /// Expected SHA-256 of the downloaded content (64 lowercase hex digits). A mismatch fails
    /// the source (SourceFailed) and nothing is applied; pinned content is downloaded once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-f0-9]{64}$"))]
    pub sha256: Option<String>,

    /// For a bundle: the directory inside it to read (recursively); default the whole bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,

    /// Secret with credentials: `token` (bearer token), or `username` and `password` (basic
    /// auth), and optionally `ca.crt` (PEM CA bundle trusted besides the system roots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
}

/// Manifests in a Git repository.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitSource {
    /// Repository URL: https://, http://, ssh://user@host/path or user@host:path.
    #[schemars(length(min = 1))]
    pub url: String,

    /// The branch, tag or commit to read.
    #[serde(rename = "ref")]
    pub reference: GitReference,

    /// Directory inside the repository to read (recursively); default the whole repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,

    /// Secret with credentials: for https `username` and `password` (or a token as password),
    /// optionally `ca.crt`; for ssh `identity` (a private key) and `known_hosts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
}

/// Exactly one of branch, tag or commit.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "[has(self.branch), has(self.tag), has(self.commit)].filter(x, x).size() == 1",
    "message": "ref must set exactly one of branch, tag or commit"
}]))]
pub struct GitReference {
    /// A branch; its head commit is read (and checked again at every interval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,

    /// A tag (lightweight or annotated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,

    /// A full commit SHA (40 hex digits); pinned content is fetched once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-f0-9]{40}$"))]
    pub commit: Option<String>,
}

/// An OCI artifact in a registry.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.tag) != has(self.digest)",
    "message": "oci must set exactly one of tag or digest"
}]))]
pub struct OciSource {
    /// oci://registry[:port]/repository
    #[schemars(regex(pattern = r"^oci://[^/]+/.+"))]
    pub url: String,

    /// A tag; the digest it points to is checked again at every interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,

    /// A manifest digest (sha256:<64 hex digits>); verified, and fetched once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^sha256:[a-f0-9]{64}$"))]
    pub digest: Option<String>,

    /// Directory inside the artifact's content to read (recursively); default all of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,

    /// Secret with registry credentials: `username` and `password`, or a
    /// `.dockerconfigjson` key (a kubernetes.io/dockerconfigjson Secret); optionally `ca.crt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,

    /// Talk plain HTTP instead of HTTPS to the registry (only for a registry on a trusted
    /// network, e.g. a local development registry).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure: bool,
}

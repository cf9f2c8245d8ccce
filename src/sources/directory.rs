//! What a directory source (git, oci, http bundle) yields from the tree of its revision: the
//! plain manifests under its `path`, or the output of a kustomize build there
//! ([`super::tree::Plan`]), with `spec.kustomize.commonMetadata` set on what was built.

use std::sync::Arc;

use serde_json::Value;

use super::{
    Naming, Parsed, SourceError, SourceFile, Sources,
    decrypt_scope::{Scope, scope},
    kustomization::{Reads, reads},
    kustomize::{self, BuildScope, Job, KustomizeError},
    memory,
    tree::{Plan, Tree},
};
use crate::{api::KustomizeOverrides, manifest::Manifest};

/// The tree of one fetched revision and how to read it.
pub struct Directory<'a> {
    /// The source, for messages and origins (e.g. `git https://host/repo.git@main`).
    pub desc: String,
    pub tree: Tree,
    /// The source's `path` as a directory prefix (`""` or `dir/`).
    pub prefix: &'a str,
    /// Where nothing was found, for the message of an empty source.
    pub where_: String,
    pub overrides: Option<&'a KustomizeOverrides>,
}

/// The cache identity suffix of the build inputs of a set (its `spec.kustomize`): sets with
/// different overrides do not share built content.
pub fn build_identity(overrides: Option<&KustomizeOverrides>) -> String {
    match overrides {
        None => String::new(),
        Some(o) => {
            let json = serde_json::to_string(o).unwrap_or_default();
            format!(" build=sha256:{}", super::sha256_hex(json.as_bytes()))
        }
    }
}

/// A build of a tree whose build reads SOPS files it decrypts or verifies: it waits for the
/// set's keys, which verify those files and decrypt the inputs Flux decrypts
/// ([`decrypt_scope`]: `secretGenerator` inputs and patch files) into the private copy, so it
/// runs per set at render ([`build_deferred`]). The cache keeps the tree as fetched
/// (encrypted), never the output. A SOPS file the build reads otherwise (a `configMapGenerator`
/// input) is neither: it is read as committed, and alone it does not defer the build.
#[derive(Debug)]
pub struct Deferred {
    /// The source, for messages and origins.
    pub desc: String,
    pub tree: Tree,
    /// The directory to build (`""`: the root).
    pub dir: String,
    pub where_: String,
    pub overrides: Option<KustomizeOverrides>,
    /// The files of the tree the build reads.
    pub reads: Reads,
    /// The files the build reads decrypted, and every other file name it mentions.
    pub scope: Scope,
}

impl Deferred {
    /// The SOPS files the build decrypts (`(path, data, true)`: inputs in [`Self::scope`]) or
    /// verifies as committed (`false`: resources, decrypted after the build as members).
    pub fn sops_files(&self) -> impl Iterator<Item = (&str, &[u8], bool)> {
        let inputs = self.scope.decrypt.keys().map(|p| (p, true));
        let resources = self
            .reads
            .resources
            .iter()
            .filter(|p| !self.scope.decrypt.contains_key(*p))
            .map(|p| (p, false));
        inputs.chain(resources).filter_map(|(path, input)| {
            let data = self.tree.get(path)?;
            let format = crate::sops::Format::from_path(path);
            crate::sops::carries_metadata(data, format).then_some((path.as_str(), data, input))
        })
    }
}

/// Reads `d` (see the module documentation); the tree's memory is taken from `lease` by the
/// caller and given back here once it is no longer needed. A build that reads SOPS files is
/// returned as [`Deferred`], holding the tree.
pub async fn read(
    s: &Sources,
    mut d: Directory<'_>,
    lease: &mut memory::Lease,
) -> Result<Parsed, SourceError> {
    d.tree.apply_sourceignore();
    let tree_bytes = d.tree.bytes();
    let plan = d.tree.plan(d.prefix, d.overrides.is_some())?;
    let dir = match plan {
        Plan::Plain(files) => {
            drop(d.tree);
            return super::parse_blocking(d.desc, files, Naming::Files, d.where_, lease).await;
        }
        Plan::Build { dir, .. } => dir,
    };
    let reads = reads(&d.tree, &dir, d.overrides).map_err(|e| at_source(&d.desc, e))?;
    let scope = scope(&d.tree, &dir, d.overrides).map_err(|e| at_source(&d.desc, e))?;
    let deferred = Deferred {
        desc: d.desc,
        tree: d.tree,
        dir,
        where_: d.where_,
        overrides: d.overrides.cloned(),
        reads,
        scope,
    };
    if deferred.sops_files().next().is_some() {
        return Ok(Parsed {
            manifests: Arc::new(Vec::new()),
            bytes: tree_bytes,
            deferred: Some(Arc::new(deferred)),
        });
    }
    // The set's scope (its namespace, its sources' deadline), set by the fetch of its
    // sources; a read outside one builds as cluster-scoped, within --source-timeout.
    let scope = kustomize::current_scope().unwrap_or_else(|| BuildScope::new("", s.limits.timeout));
    let parsed = build(s, &deferred, None, scope, lease).await;
    drop(deferred);
    // The tree goes back: the parse took what the text needs again.
    lease.release(tree_bytes);
    parsed
}

/// Builds `d` now, for one set (`scope`: its namespace, and the render's deadline, which its
/// wait for a build slot counts toward), with its decrypted inputs (`replace`), within the
/// set's share of the memory budget; nothing of it is cached. Returns the members and what
/// they hold of the memory budget, for the caller to keep as long as they live.
pub async fn build_deferred(
    s: &Sources,
    d: &Deferred,
    replace: &std::collections::BTreeMap<String, Vec<u8>>,
    scope: BuildScope,
) -> Result<(Vec<Manifest>, memory::Lease), SourceError> {
    let share = memory::SetShare::new(s.limits.memory_per_set);
    memory::within_share(share, async {
        let mut lease = s.memory.lease();
        let parsed = build(s, d, Some(replace), scope, &mut lease).await?;
        let members = Arc::try_unwrap(parsed.manifests).unwrap_or_else(|a| (*a).clone());
        Ok((members, lease))
    })
    .await
}

/// Runs the build of `d` and parses its output, with `spec.kustomize.commonMetadata` set on
/// what was built.
async fn build(
    s: &Sources,
    d: &Deferred,
    replace: Option<&std::collections::BTreeMap<String, Vec<u8>>>,
    scope: BuildScope,
    lease: &mut memory::Lease,
) -> Result<Parsed, SourceError> {
    let job = Job {
        tree: &d.tree,
        dir: &d.dir,
        overrides: d.overrides.as_ref(),
        work_dir: s.work_dir(),
        timeout: s.limits.timeout / 4 * 3,
        max_output: s.limits.max_unpacked,
        replace,
        scope,
    };
    let text = s
        .kustomize
        .build(job, lease)
        .await
        .map_err(|e| at_source(&d.desc, e))?;
    // The output's bytes go back: the parse takes what the text needs again.
    lease.release(text.len() as u64);
    let shown = if d.dir.is_empty() {
        "."
    } else {
        d.dir.as_str()
    };
    let file = SourceFile {
        path: format!("{shown} (kustomize build)"),
        text,
    };
    let parsed = super::parse_blocking(
        d.desc.clone(),
        vec![file],
        Naming::Files,
        d.where_.clone(),
        lease,
    )
    .await?;
    match d
        .overrides
        .as_ref()
        .and_then(|o| o.common_metadata.as_ref())
    {
        None => Ok(parsed),
        Some(meta) => {
            let mut manifests = Arc::try_unwrap(parsed.manifests).unwrap_or_else(|a| (*a).clone());
            for m in &mut manifests {
                set_common_metadata(m, &meta.labels, &meta.annotations);
            }
            Ok(Parsed {
                manifests: Arc::new(manifests),
                bytes: parsed.bytes,
                deferred: None,
            })
        }
    }
}

/// `error` with the source `desc` named in front.
fn at_source(desc: &str, error: KustomizeError) -> SourceError {
    SourceError::Kustomize {
        description: desc.to_string(),
        error,
    }
}

/// Sets `labels` and `annotations` on `m`'s metadata (replacing values of the same keys), as
/// Flux's commonMetadata does after the build.
pub fn set_common_metadata(
    m: &mut Manifest,
    labels: &std::collections::BTreeMap<String, String>,
    annotations: &std::collections::BTreeMap<String, String>,
) {
    let meta = m
        .object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    let Value::Object(meta) = meta else {
        return;
    };
    for (field, values) in [("labels", labels), ("annotations", annotations)] {
        if values.is_empty() {
            continue;
        }
        let map = meta
            .entry(field)
            .or_insert_with(|| Value::Object(Default::default()));
        if !map.is_object() {
            *map = Value::Object(Default::default());
        }
        if let Value::Object(map) = map {
            for (k, v) in values {
                map.insert(k.clone(), Value::String(v.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{Origin, parse_documents};

    #[test]
    fn common_metadata_is_set_on_every_object() {
        let mut ms = parse_documents(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {x: old, y: keep}\n",
            &Origin::source("t"),
        )
        .expect("parses");
        let labels = [("x".to_string(), "new".to_string())].into();
        let annotations = [("team".to_string(), "a".to_string())].into();
        set_common_metadata(&mut ms[0], &labels, &annotations);
        assert_eq!(
            ms[0].object["metadata"],
            serde_json::json!({"name": "a", "labels": {"x": "new", "y": "keep"}, "annotations": {"team": "a"}})
        );
    }

    #[test]
    fn build_inputs_are_part_of_the_identity() {
        assert_eq!(build_identity(None), "");
        let a = KustomizeOverrides {
            name_prefix: Some("a-".into()),
            ..Default::default()
        };
        let b = KustomizeOverrides {
            name_prefix: Some("b-".into()),
            ..Default::default()
        };
        assert_ne!(build_identity(Some(&a)), build_identity(Some(&b)));
        assert_eq!(build_identity(Some(&a)), build_identity(Some(&a.clone())));
    }
}

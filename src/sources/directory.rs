//! What a directory source (git, oci, http bundle) yields from the tree of its revision: the
//! plain manifests under its `path`, or the output of a kustomize build there
//! ([`super::tree::Plan`]), with `spec.kustomize.commonMetadata` set on what was built.

use std::sync::Arc;

use serde_json::Value;

use super::{
    Naming, Parsed, SourceError, SourceFile, Sources,
    kustomize::{Job, KustomizeError},
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

/// Reads `d` (see the module documentation); the tree's memory is taken from `lease` by the
/// caller and given back here once it is no longer needed.
pub async fn read(
    s: &Sources,
    mut d: Directory<'_>,
    lease: &mut memory::Lease,
) -> Result<Parsed, SourceError> {
    d.tree.apply_sourceignore();
    let tree_bytes = d.tree.bytes();
    let plan = d.tree.plan(d.prefix, d.overrides.is_some())?;
    let (dir, desc) = match plan {
        Plan::Plain(files) => {
            drop(d.tree);
            return super::parse_blocking(d.desc, files, Naming::Files, d.where_, lease).await;
        }
        Plan::Build { dir, .. } => (dir, d.desc.clone()),
    };
    let job = Job {
        tree: &d.tree,
        dir: &dir,
        overrides: d.overrides,
        work_dir: s.work_dir(),
        timeout: s.limits.timeout / 4 * 3,
        max_output: s.limits.max_unpacked,
    };
    let text = s
        .kustomize
        .build(job, lease)
        .await
        .map_err(|e| at_source(&desc, e))?;
    // The tree and the output's bytes go back: the parse takes what the text needs again.
    drop(d.tree);
    lease.release(tree_bytes.saturating_add(text.len() as u64));
    let shown = if dir.is_empty() { "." } else { dir.as_str() };
    let file = SourceFile {
        path: format!("{shown} (kustomize build)"),
        text,
    };
    let parsed = super::parse_blocking(desc, vec![file], Naming::Files, d.where_, lease).await?;
    match d.overrides.and_then(|o| o.common_metadata.as_ref()) {
        None => Ok(parsed),
        Some(meta) => {
            let mut manifests = Arc::try_unwrap(parsed.manifests).unwrap_or_else(|a| (*a).clone());
            for m in &mut manifests {
                set_common_metadata(m, &meta.labels, &meta.annotations);
            }
            Ok(Parsed {
                manifests: Arc::new(manifests),
                bytes: parsed.bytes,
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

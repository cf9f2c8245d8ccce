//! ConfigMap and Secret sources: documents in data keys, read as the set's identity
//! ([`crate::set_reads`]: their content becomes the set's members). The revision is the
//! object's resourceVersion; a change of the object reaches the controller through the
//! operator's watch (see `controller.rs`), so it is applied at once rather than at the next
//! interval.

use super::{Fetched, Limits, ObjectKind, SourceError, SourceFile, resolve_namespace};
use crate::{
    api::ObjectSource,
    applyset::ParentRef,
    set_reads::{ReadError, SetReader},
};

/// Reads the configMap or secret source `source` of `parent` through `reader` (as the set's
/// identity: its content becomes the set's members).
pub async fn fetch(
    reader: &SetReader<'_>,
    parent: &ParentRef,
    kind: ObjectKind,
    source: &ObjectSource,
    limits: &Limits,
    memory: &super::memory::MemoryBudget,
) -> Result<Fetched, SourceError> {
    let ns = resolve_namespace(parent, source.namespace.as_deref())?;
    let (noun, kind_name) = match kind {
        ObjectKind::ConfigMap => ("configMap", "ConfigMap"),
        ObjectKind::Secret => ("secret", "Secret"),
    };
    let desc = format!("{noun} {ns}/{}", source.name);
    let read_err = |e: ReadError| match e {
        ReadError::NotFound { .. } => SourceError::Failed(format!(
            "{e}; create it (the ApplySet is reconciled as soon as it appears)"
        )),
        e => SourceError::Read(e),
    };
    // Every key as bytes, and the resourceVersion.
    let (data, rv): (Vec<(String, Vec<u8>)>, String) = match kind {
        ObjectKind::ConfigMap => {
            let cm = reader
                .config_map(&ns, &source.name)
                .await
                .map_err(read_err)?;
            let mut data: Vec<(String, Vec<u8>)> = cm
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.into_bytes()))
                .collect();
            data.extend(
                cm.binary_data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0)),
            );
            (data, cm.metadata.resource_version.unwrap_or_default())
        }
        ObjectKind::Secret => {
            let s = reader.secret(&ns, &source.name).await.map_err(read_err)?;
            let data = s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            (data, s.metadata.resource_version.unwrap_or_default())
        }
    };
    let files = select_keys(&data, &source.keys, kind_name, &ns, &source.name, limits)?;
    let where_ = format!("among the data keys of {kind_name} {ns}/{}", source.name);
    let mut lease = memory.lease();
    let parsed =
        super::parse_blocking(desc, files, super::Naming::Keys, where_, &mut lease).await?;
    Ok(Fetched {
        manifests: parsed.manifests,
        revision: format!("{noun}:{ns}/{}@{rv}", source.name),
        kind: noun,
        downloaded: true,
        memory: Some(std::sync::Arc::new(lease)),
        deferred: None,
    })
}

/// The keys to read: the listed ones (in that order; each must exist), else every key ending
/// in .yaml, .yml or .json, sorted.
fn select_keys(
    data: &[(String, Vec<u8>)],
    keys: &[String],
    kind: &str,
    ns: &str,
    name: &str,
    limits: &Limits,
) -> Result<Vec<SourceFile>, SourceError> {
    let mut chosen: Vec<&(String, Vec<u8>)> = if keys.is_empty() {
        let mut all: Vec<_> = data
            .iter()
            .filter(|(k, _)| super::paths::is_manifest_file(k))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    } else {
        let mut out = Vec::new();
        for k in keys {
            match data.iter().find(|(key, _)| key == k) {
                Some(e) => out.push(e),
                None => {
                    return Err(SourceError::Failed(format!(
                        "{kind} {ns}/{name} has no key {k:?} (listed in keys)"
                    )));
                }
            }
        }
        out
    };
    let total: u64 = chosen.iter().map(|(_, v)| v.len() as u64).sum();
    if total > limits.max_unpacked {
        return Err(SourceError::Failed(format!(
            "{kind} {ns}/{name}: its manifests exceed {} bytes",
            limits.max_unpacked
        )));
    }
    chosen
        .drain(..)
        .map(|(k, v)| {
            let text = String::from_utf8(v.clone()).map_err(|_| {
                SourceError::Failed(format!(
                    "{kind} {ns}/{name} key {k}: not UTF-8 text; manifests must be UTF-8"
                ))
            })?;
            Ok(SourceFile {
                path: k.clone(),
                text,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> Vec<(String, Vec<u8>)> {
        ["z.yaml", "a.json", "notes.txt", "b.yml"]
            .iter()
            .map(|k| (k.to_string(), b"x".to_vec()))
            .collect()
    }

    #[test]
    fn default_keys_are_manifest_files_sorted() {
        let files =
            select_keys(&data(), &[], "ConfigMap", "n", "c", &Limits::default()).expect("ok");
        let keys: Vec<_> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(keys, ["a.json", "b.yml", "z.yaml"]);
    }

    #[test]
    fn listed_keys_in_order_and_must_exist() {
        let keys = vec!["notes.txt".to_string(), "a.json".to_string()];
        let files =
            select_keys(&data(), &keys, "ConfigMap", "n", "c", &Limits::default()).expect("ok");
        let got: Vec<_> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(got, ["notes.txt", "a.json"]);
        let err = select_keys(
            &data(),
            &["missing.yaml".to_string()],
            "ConfigMap",
            "n",
            "c",
            &Limits::default(),
        )
        .expect_err("missing");
        assert!(
            err.to_string().contains("has no key \"missing.yaml\""),
            "{err}"
        );
    }
}

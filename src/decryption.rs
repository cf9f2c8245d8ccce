//! `spec.decryption` (provider sops): the set's age keys, read from its Secret as the set's
//! identity, and the decryption of SOPS-encrypted members in memory before they are rendered
//! and applied. Plaintext never leaves the members: errors name the member, the field path and
//! the cause, never a value.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use serde_json::Value;

use crate::api::{ApplySetSpec, SecretReference};
use crate::applyset::ParentRef;
use crate::manifest::{Manifest, Origin};
use crate::sops::{self, AgeKeys, IdentityError, SopsError};
use crate::sources::directory::Deferred;
use crate::sources::resolve_namespace;
use crate::tenancy::Identity;

/// The annotation that leaves a member as it is (`disabled`).
pub const DECRYPT_ANNOTATION: &str = "applyset.dev/decrypt";
/// Flux's annotation of the same meaning, honoured for repositories moving over.
pub const FLUX_DECRYPT_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/decrypt";
/// The suffix of the key Secret's entries that hold age identities (as Flux names them).
pub const AGE_KEY_SUFFIX: &str = ".agekey";

/// Why a set's members could not be decrypted.
#[derive(Debug, thiserror::Error)]
pub enum DecryptionError {
    #[error(
        "{member}: carries SOPS metadata and the set has no spec.decryption; set spec.decryption {{provider: sops, secretRef: {{name: …}}}}, or annotate it {DECRYPT_ANNOTATION}: disabled to apply it as it is"
    )]
    NotConfigured { member: String },
    /// The member's name is the error's file.
    #[error("{source}")]
    Sops {
        member: String,
        #[source]
        source: SopsError,
    },
    #[error("{0}")]
    Manifest(#[source] crate::manifest::ManifestError),
    #[error("spec.decryption.secretRef: {0}")]
    Namespace(String),
    #[error(
        "members are SOPS-encrypted and no local age key was found: pass --sops-age-key-file, or set SOPS_AGE_KEY_FILE or SOPS_AGE_KEY"
    )]
    NoLocalKey,
    #[error(
        "spec.decryption.secretRef: {who} may not get Secret {secret}; grant it get on that Secret"
    )]
    Forbidden { who: String, secret: String },
    #[error("spec.decryption.secretRef: Secret {secret} not found")]
    NotFound { secret: String },
    #[error("spec.decryption.secretRef: Secret {secret} has no entry ending in {AGE_KEY_SUFFIX}")]
    NoKeys { secret: String },
    #[error("spec.decryption.secretRef: Secret {secret}: {source}")]
    Identity {
        secret: String,
        #[source]
        source: IdentityError,
    },
    #[error("spec.decryption.secretRef: reading Secret {secret}: {source}")]
    Kube {
        secret: String,
        #[source]
        source: kube::Error,
    },
}

impl DecryptionError {
    /// Whether a later attempt may succeed without a spec change (the Secret or a grant may
    /// appear; the API may answer).
    pub fn retry(&self) -> bool {
        matches!(
            self,
            DecryptionError::Forbidden { .. }
                | DecryptionError::NotFound { .. }
                | DecryptionError::NoKeys { .. }
                | DecryptionError::Identity { .. }
                | DecryptionError::Kube { .. }
                | DecryptionError::Sops {
                    source: SopsError::NoMatchingKey { .. },
                    ..
                }
        )
    }
}

/// Whether a member is to be decrypted: it carries SOPS metadata and is not opted out.
pub fn wants_decryption(manifest: &Manifest) -> bool {
    sops::object::is_encrypted(&manifest.object) && !opted_out(manifest)
}

fn opted_out(manifest: &Manifest) -> bool {
    let annotations = manifest
        .object
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object);
    [DECRYPT_ANNOTATION, FLUX_DECRYPT_ANNOTATION]
        .iter()
        .any(|a| annotations.and_then(|m| m.get(*a)).and_then(Value::as_str) == Some("disabled"))
}

/// Whether a member is a Secret with `data` entries that may be SOPS files.
fn may_hold_sops_files(manifest: &Manifest) -> bool {
    manifest.kind == "Secret" && manifest.group.is_empty() && !opted_out(manifest)
}

/// The identities in the key Secret's `.agekey` entries (`secret` names it in errors).
pub fn keys_from_data(
    secret: &str,
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<AgeKeys, DecryptionError> {
    let mut keys = AgeKeys::new();
    for (name, bytes) in data.iter().filter(|(k, _)| k.ends_with(AGE_KEY_SUFFIX)) {
        let text = String::from_utf8_lossy(bytes);
        keys.add_text(name, &text)
            .map_err(|source| DecryptionError::Identity {
                secret: secret.to_string(),
                source,
            })?;
    }
    if keys.is_empty() {
        return Err(DecryptionError::NoKeys {
            secret: secret.to_string(),
        });
    }
    Ok(keys)
}

/// Reads the set's key Secret as `who` (through `client`, the set's identity).
pub async fn read_keys(
    client: &Client,
    parent: &ParentRef,
    who: &Identity,
    r: &SecretReference,
) -> Result<AgeKeys, DecryptionError> {
    let ns = resolve_namespace(parent, r.namespace.as_deref())
        .map_err(|e| DecryptionError::Namespace(e.to_string()))?;
    let secret = format!("{ns}/{}", r.name);
    let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let found = match api.get_opt(&r.name).await {
        Ok(found) => found,
        Err(kube::Error::Api(s)) if s.code == 403 => {
            return Err(DecryptionError::Forbidden {
                who: who.to_string(),
                secret,
            });
        }
        Err(source) => return Err(DecryptionError::Kube { secret, source }),
    };
    let found = found.ok_or_else(|| DecryptionError::NotFound {
        secret: secret.clone(),
    })?;
    let data: BTreeMap<String, Vec<u8>> = found
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    keys_from_data(&secret, &data)
}

/// Whether any member needs the keys (so that a set without encrypted members reads no
/// Secret).
pub fn needs_keys(manifests: &[Manifest]) -> bool {
    manifests
        .iter()
        .any(|m| wants_decryption(m) || (may_hold_sops_files(m) && secret_data_has_sops(m)))
}

fn secret_data_has_sops(manifest: &Manifest) -> bool {
    use base64::Engine as _;
    let Some(data) = manifest.object.get("data").and_then(Value::as_object) else {
        return false;
    };
    data.iter().any(|(key, value)| {
        value
            .as_str()
            .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
            .is_some_and(|bytes| sops::carries_metadata(&bytes, sops::Format::from_path(key)))
    })
}

/// Decrypts the members that carry SOPS metadata (and the SOPS files in Secrets' data) in
/// place; `keys` is `None` when the set has no spec.decryption. Returns how many members
/// were decrypted.
pub fn decrypt_members(
    manifests: &mut [Manifest],
    keys: Option<&AgeKeys>,
    limits: &sops::Limits,
) -> Result<usize, DecryptionError> {
    if let Some(keys) = keys {
        verify_source_files(manifests, keys, limits)?;
    }
    let mut count = 0;
    for manifest in manifests.iter_mut() {
        let whole = wants_decryption(manifest);
        let files = may_hold_sops_files(manifest) && secret_data_has_sops(manifest);
        if !whole && !files {
            continue;
        }
        let member = format!("{} ({} {})", manifest.origin, manifest.kind, manifest.name);
        let Some(keys) = keys else {
            return Err(DecryptionError::NotConfigured { member });
        };
        let at = |source| DecryptionError::Sops {
            member: member.clone(),
            source,
        };
        let mut plaintexts = Vec::new();
        if whole {
            plaintexts = sops::object::decrypt_object(&member, &mut manifest.object, keys, limits)
                .map_err(at)?;
            *manifest = reparsed(manifest)?;
        }
        if files {
            plaintexts.extend(
                sops::object::decrypt_secret_data(&member, &mut manifest.object, keys, limits)
                    .map_err(at)?,
            );
        }
        manifest.redaction = Some(std::sync::Arc::new(sops::redact::Redaction::new(
            plaintexts,
        )));
        count += 1;
    }
    Ok(count)
}

/// Verifies, once per file, the MAC of each SOPS-encrypted source file a member to decrypt was
/// read from, over the file as committed (a changed unencrypted field fails here, before
/// anything is decrypted for the apply). The plaintext of this check is dropped at once.
fn verify_source_files(
    manifests: &[Manifest],
    keys: &AgeKeys,
    limits: &sops::Limits,
) -> Result<(), DecryptionError> {
    let mut seen: Vec<&std::sync::Arc<crate::manifest::SopsFile>> = Vec::new();
    for manifest in manifests.iter().filter(|m| wants_decryption(m)) {
        let Some(file) = &manifest.sops_file else {
            continue;
        };
        if seen.iter().any(|f| std::sync::Arc::ptr_eq(f, file)) {
            continue;
        }
        seen.push(file);
        let format = sops::Format::from_path(&file.path);
        sops::decrypt(&file.name, file.text.as_bytes(), format, keys, limits).map_err(
            |source| DecryptionError::Sops {
                member: file.name.clone(),
                source,
            },
        )?;
    }
    Ok(())
}

/// Whether a deferred build needs the set's keys: a SOPS file it reads is not opted out.
pub fn build_needs_keys(d: &Deferred) -> bool {
    d.sops_files()
        .any(|(path, data, _)| !file_opted_out(&d.desc, path, data))
}

/// Verifies every SOPS file a deferred build reads, as committed: the MAC over the file and
/// each value's tag (a changed unencrypted field, a flipped byte, a file for another key fail
/// here, before anything is built). Returns the plaintext of the build's inputs (patch files,
/// generator `envs` and `files`), to be written into the private copy in place of the tree's;
/// the plaintext of the other files is dropped at once (they are decrypted again as built
/// members). Without keys (no spec.decryption), an encrypted input is refused; an encrypted
/// resource is left to the members' check after the build. A file annotated
/// `decrypt: disabled` is left as is.
pub fn decrypt_build_inputs(
    d: &Deferred,
    keys: Option<&AgeKeys>,
    limits: &sops::Limits,
) -> Result<BTreeMap<String, Vec<u8>>, DecryptionError> {
    let mut out = BTreeMap::new();
    for (path, data, input) in d.sops_files() {
        if file_opted_out(&d.desc, path, data) {
            continue;
        }
        let name = Origin::file(&d.desc, path).to_string();
        let Some(keys) = keys else {
            if input {
                return Err(DecryptionError::NotConfigured { member: name });
            }
            continue;
        };
        let format = sops::Format::from_path(path);
        let mut plain = sops::decrypt(&name, data, format, keys, limits).map_err(|source| {
            DecryptionError::Sops {
                member: name.clone(),
                source,
            }
        })?;
        if input {
            out.insert(path.to_string(), plain);
        } else {
            zeroize::Zeroize::zeroize(&mut plain);
        }
    }
    Ok(out)
}

/// Overwrites the plaintext of decrypted build inputs before it is freed.
pub fn wipe(inputs: &mut BTreeMap<String, Vec<u8>>) {
    for value in inputs.values_mut() {
        zeroize::Zeroize::zeroize(value);
    }
    inputs.clear();
}

/// Whether a YAML or JSON SOPS file declares objects annotated `decrypt: disabled`.
fn file_opted_out(desc: &str, path: &str, data: &[u8]) -> bool {
    let format = sops::Format::from_path(path);
    if !matches!(format, sops::Format::Yaml | sops::Format::Json) {
        return false;
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    crate::manifest::parse_documents(text, &Origin::file(desc, path))
        .is_ok_and(|ms| !ms.is_empty() && ms.iter().all(opted_out))
}

/// The member read again from its decrypted object, so that its kind, name and namespace are
/// the decrypted ones.
fn reparsed(manifest: &Manifest) -> Result<Manifest, DecryptionError> {
    let value = Value::Object(manifest.object.clone());
    let mut all =
        Manifest::from_value(value, manifest.origin.clone()).map_err(DecryptionError::Manifest)?;
    match (all.pop(), all.is_empty()) {
        (Some(one), true) => Ok(one),
        _ => Err(DecryptionError::Sops {
            member: manifest.name.clone(),
            source: SopsError::Unsupported {
                file: format!("{} ({} {})", manifest.origin, manifest.kind, manifest.name),
                what: "an encrypted List".to_string(),
            },
        }),
    }
}

/// The key Secret of `spec`, if it decrypts.
pub fn secret_ref(spec: &ApplySetSpec) -> Option<&SecretReference> {
    spec.decryption.as_ref().map(|d| &d.secret_ref)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::kustomization::Reads;
    use serde_json::json;

    fn member(value: Value) -> Manifest {
        Manifest::from_value(value, Origin::inline(0))
            .unwrap()
            .remove(0)
    }

    fn encrypted(annotations: Value) -> Manifest {
        member(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "annotations": annotations},
            "stringData": {"p": "ENC[AES256_GCM,data:AA==,iv:AA==,tag:AA==,type:str]"},
            "sops": {"mac": "m", "lastmodified": "t"}}))
    }

    #[test]
    fn members_with_sops_metadata_want_decryption_unless_opted_out() {
        assert!(wants_decryption(&encrypted(json!({}))));
        assert!(!wants_decryption(&encrypted(
            json!({DECRYPT_ANNOTATION: "disabled"})
        )));
        assert!(!wants_decryption(&encrypted(
            json!({FLUX_DECRYPT_ANNOTATION: "disabled"})
        )));
        let plain =
            member(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}));
        assert!(!wants_decryption(&plain));
        assert!(!needs_keys(&[plain]));
    }

    #[test]
    fn without_keys_an_encrypted_member_is_refused_naming_it() {
        let mut members = [encrypted(json!({}))];
        let err = decrypt_members(&mut members, None, &sops::Limits::default()).unwrap_err();
        assert!(matches!(err, DecryptionError::NotConfigured { .. }));
        assert!(
            err.to_string().contains("spec.manifests[0] (Secret s)"),
            "{err}"
        );
        assert!(!err.retry());
    }

    fn deferred(files: &[(&str, &str)], reads: Reads) -> Deferred {
        let mut tree = crate::sources::tree::Tree::new();
        for (path, text) in files {
            tree.insert(path.to_string(), text.as_bytes().to_vec());
        }
        Deferred {
            desc: "git https://host/r.git@main".into(),
            tree,
            dir: "ov".into(),
            where_: String::new(),
            overrides: None,
            reads,
        }
    }

    fn paths(v: &[&str]) -> std::collections::BTreeSet<String> {
        v.iter().map(|p| p.to_string()).collect()
    }

    const ENV: &str = "A=ENC[AES256_GCM,data:AA==,iv:AA==,tag:AA==,type:str]\nsops_mac=m\n";

    #[test]
    fn without_keys_an_encrypted_build_input_is_refused_naming_the_file() {
        let d = deferred(
            &[("ov/s.env", ENV), ("ov/plain.env", "A=b\n")],
            Reads {
                resources: paths(&[]),
                inputs: paths(&["ov/s.env", "ov/plain.env"]),
            },
        );
        assert!(build_needs_keys(&d));
        let err = decrypt_build_inputs(&d, None, &sops::Limits::default()).unwrap_err();
        assert!(matches!(err, DecryptionError::NotConfigured { .. }));
        assert!(
            err.to_string()
                .starts_with("git https://host/r.git@main file ov/s.env: "),
            "{err}"
        );
    }

    #[test]
    fn encrypted_resources_wait_for_the_members_check_and_opted_out_files_are_left() {
        let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  p: ENC[AES256_GCM,data:AA==,iv:AA==,tag:AA==,type:str]\nsops:\n  mac: m\n";
        let d = deferred(
            &[("base/s.yaml", secret)],
            Reads {
                resources: paths(&["base/s.yaml"]),
                inputs: paths(&[]),
            },
        );
        assert!(build_needs_keys(&d));
        let plain = decrypt_build_inputs(&d, None, &sops::Limits::default()).expect("left");
        assert!(plain.is_empty());
        let opted = secret.replace(
            "  name: s\n",
            "  name: s\n  annotations: {kustomize.toolkit.fluxcd.io/decrypt: disabled}\n",
        );
        let d = deferred(
            &[("base/s.yaml", &opted)],
            Reads {
                resources: paths(&["base/s.yaml"]),
                inputs: paths(&[]),
            },
        );
        assert!(!build_needs_keys(&d));
    }

    #[test]
    fn keys_come_from_agekey_entries_only() {
        let mut data = BTreeMap::new();
        data.insert("README".to_string(), b"not a key".to_vec());
        assert!(matches!(
            keys_from_data("ns/k", &data),
            Err(DecryptionError::NoKeys { .. })
        ));
        data.insert("bad.agekey".to_string(), b"AGE-SECRET-KEY-1XYZ".to_vec());
        let err = keys_from_data("ns/k", &data).unwrap_err();
        assert!(err.to_string().contains("bad.agekey: line 1"), "{err}");
        assert!(!err.to_string().contains("XYZ"));
    }
}

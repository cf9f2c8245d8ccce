//! `spec.decryption` (provider sops): the set's age keys, read from its Secret as the set's
//! identity, and the decryption of SOPS-encrypted members in memory before they are rendered
//! and applied. Plaintext never leaves the members: errors name the member, the field path and
//! the cause, never a value.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::api::{ApplySetSpec, SecretReference};
use crate::applyset::ParentRef;
use crate::manifest::{Manifest, Origin};
use crate::set_reads::{ReadError, SetReader};
use crate::sops::redact::Redaction;
use crate::sops::{self, AgeKeys, IdentityError, SopsError};
use crate::sources::directory::Deferred;
use crate::sources::resolve_namespace;

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
    /// A file decrypted for a build (`decrypted_as`) whose name is also used at `also`, where
    /// kustomize would read the plaintext too.
    #[error(
        "{file}: decrypted for {decrypted_as} (secretGenerator inputs and patch files are decrypted, as Flux does), and its name is also used in {also}, where kustomize would read the plaintext too; give the encrypted file a name used only by secretGenerator or patches (configMapGenerator inputs and other files are read as committed, encrypted)"
    )]
    SharedInput {
        file: String,
        decrypted_as: String,
        also: String,
    },
    #[error("spec.decryption.secretRef: {0}")]
    Namespace(String),
    #[error(
        "members are SOPS-encrypted and no local age key was found: pass --sops-age-key-file, or set SOPS_AGE_KEY_FILE or SOPS_AGE_KEY"
    )]
    NoLocalKey,
    /// The key Secret could not be read as the set's identity (see [`crate::set_reads`]).
    #[error("spec.decryption.secretRef: {0}")]
    Read(#[source] ReadError),
    #[error("spec.decryption.secretRef: Secret {secret} has no entry ending in {AGE_KEY_SUFFIX}")]
    NoKeys { secret: String },
    #[error("spec.decryption.secretRef: Secret {secret}: {source}")]
    Identity {
        secret: String,
        #[source]
        source: IdentityError,
    },
}

impl DecryptionError {
    /// Whether a later attempt may succeed without a spec change (the Secret or a grant may
    /// appear; the API may answer).
    pub fn retry(&self) -> bool {
        matches!(
            self,
            DecryptionError::Read(_)
                | DecryptionError::NoKeys { .. }
                | DecryptionError::Identity { .. }
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

/// Reads the set's key Secret through `reader` (as the set's identity).
pub async fn read_keys(
    reader: &SetReader<'_>,
    parent: &ParentRef,
    r: &SecretReference,
) -> Result<AgeKeys, DecryptionError> {
    let ns = resolve_namespace(parent, r.namespace.as_deref())
        .map_err(|e| DecryptionError::Namespace(e.to_string()))?;
    let found = reader
        .secret(&ns, &r.name)
        .await
        .map_err(DecryptionError::Read)?;
    let data: BTreeMap<String, Vec<u8>> = found
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    keys_from_data(&format!("{ns}/{}", r.name), &data)
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

/// The decrypted inputs of a deferred build, and what no message about it may show.
#[derive(Default)]
pub struct BuildInputs {
    /// Path → plaintext, written into the build's private copy in place of the tree's.
    pub files: BTreeMap<String, Vec<u8>>,
    /// The values decrypted (with their lines and their escaped and base64 forms), withheld
    /// from kustomize's messages, the parse errors of its output and the built members' errors.
    pub withheld: Redaction,
}

/// The paths, never the plaintext.
impl std::fmt::Debug for BuildInputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let paths: Vec<&String> = self.files.keys().collect();
        write!(f, "BuildInputs({paths:?}, {:?})", self.withheld)
    }
}

/// Verifies every SOPS file a deferred build decrypts or verifies ([`Deferred::sops_files`]),
/// as committed: the MAC over the file and each value's tag (a changed unencrypted field, a
/// flipped byte, a file for another key fail here, before anything is built). Returns the
/// plaintext of the build's inputs in Flux's scope (`secretGenerator` inputs and patch files,
/// see [`crate::sources::decrypt_scope`]); the plaintext of the other files is dropped at once
/// (they are decrypted again as built members). An input whose name the build also uses
/// elsewhere is refused. Without keys (no spec.decryption), an encrypted input is refused; an
/// encrypted resource is left to the members' check after the build. A file annotated
/// `decrypt: disabled` is left as is.
pub fn decrypt_build_inputs(
    d: &Deferred,
    keys: Option<&AgeKeys>,
    limits: &sops::Limits,
) -> Result<BuildInputs, DecryptionError> {
    let mut out = BuildInputs::default();
    let mut values = Vec::new();
    for (path, data, input) in d.sops_files() {
        if file_opted_out(&d.desc, path, data) {
            continue;
        }
        let name = Origin::file(&d.desc, path).to_string();
        if input && let Some(also) = d.scope.also_named(path) {
            return Err(DecryptionError::SharedInput {
                file: name,
                decrypted_as: d.scope.decrypt.get(path).cloned().unwrap_or_default(),
                also: also.to_string(),
            });
        }
        let Some(keys) = keys else {
            if input {
                return Err(DecryptionError::NotConfigured { member: name });
            }
            continue;
        };
        let format = sops::Format::from_path(path);
        let (mut plain, decrypted) = sops::decrypt_revealing(&name, data, format, keys, limits)
            .map_err(|source| DecryptionError::Sops {
                member: name.clone(),
                source,
            })?;
        if input {
            values.extend(withheld_forms(decrypted, &plain));
            out.files.insert(path.to_string(), plain);
        } else {
            zeroize::Zeroize::zeroize(&mut plain);
        }
    }
    out.withheld = Redaction::new(values);
    Ok(out)
}

/// What to withhold for the decrypted `values` of an input whose plaintext is `plain`: each
/// value, each of its lines, the forms kustomize and Go print it in (JSON-escaped, `\n` for a
/// line break), and the whole plaintext (a `secretGenerator` file is a Secret's value).
/// [`Redaction::new`] adds the base64 of each.
pub fn withheld_forms(values: Vec<String>, plain: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    for value in values {
        out.extend(value.lines().map(|l| l.trim().to_string()));
        let quoted = serde_json::to_string(&value).unwrap_or_default();
        if let Some(inner) = quoted.get(1..quoted.len().saturating_sub(1)) {
            out.extend(inner.split("\\n").map(str::to_string));
            out.push(inner.to_string());
        }
        out.push(value);
    }
    if let Ok(text) = std::str::from_utf8(plain) {
        out.push(text.to_string());
        out.push(text.trim_end().to_string());
    }
    out
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
    use crate::sources::{decrypt_scope::scope, kustomization::reads};
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

    /// The deferred build of `dir` in a tree of `files`, read as the source reads it.
    fn deferred(files: &[(&str, &str)], dir: &str) -> Deferred {
        let mut tree = crate::sources::tree::Tree::new();
        for (path, text) in files {
            tree.insert(path.to_string(), text.as_bytes().to_vec());
        }
        let reads = reads(&tree, dir, None).expect("reads");
        let scope = scope(&tree, dir, None).expect("scope");
        Deferred {
            desc: "git https://host/r.git@main".into(),
            tree,
            dir: dir.into(),
            where_: String::new(),
            overrides: None,
            reads,
            scope,
        }
    }

    const ENV: &str = "A=ENC[AES256_GCM,data:AA==,iv:AA==,tag:AA==,type:str]\nsops_mac=m\n";

    #[test]
    fn without_keys_an_encrypted_build_input_is_refused_naming_the_file() {
        let d = deferred(
            &[
                (
                    "ov/kustomization.yaml",
                    "secretGenerator:\n- name: s\n  envs: [s.env, plain.env]\n",
                ),
                ("ov/s.env", ENV),
                ("ov/plain.env", "A=b\n"),
            ],
            "ov",
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
    fn config_map_generator_inputs_are_neither_decrypted_nor_verified() {
        let d = deferred(
            &[
                (
                    "ov/kustomization.yaml",
                    "configMapGenerator:\n- name: c\n  envs: [s.env]\n  files: [s.bin]\n",
                ),
                ("ov/s.env", ENV),
                (
                    "ov/s.bin",
                    r#"{"data": "ENC[AES256_GCM,data:AA==,iv:AA==,tag:AA==,type:str]", "sops": {"mac": "m"}}"#,
                ),
            ],
            "ov",
        );
        assert_eq!(d.sops_files().count(), 0);
        assert!(!build_needs_keys(&d));
        let inputs = decrypt_build_inputs(&d, None, &sops::Limits::default()).expect("nothing");
        assert!(inputs.files.is_empty() && inputs.withheld.is_empty());
    }

    #[test]
    fn an_input_decrypted_and_named_elsewhere_is_refused_naming_both() {
        let d = deferred(
            &[
                (
                    "ov/kustomization.yaml",
                    "secretGenerator:\n- name: s\n  envs: [s.env]\nconfigMapGenerator:\n- name: c\n  envs: [s.env]\n",
                ),
                ("ov/s.env", ENV),
            ],
            "ov",
        );
        let err = decrypt_build_inputs(&d, None, &sops::Limits::default()).unwrap_err();
        assert!(matches!(err, DecryptionError::SharedInput { .. }), "{err}");
        let msg = err.to_string();
        for part in [
            "file ov/s.env: decrypted for ov/kustomization.yaml secretGenerator[0].envs",
            "also used in ov/kustomization.yaml",
            "configMapGenerator inputs",
        ] {
            assert!(msg.contains(part), "{part:?} not in {msg}");
        }
        assert!(!err.retry());
    }

    #[test]
    fn encrypted_resources_wait_for_the_members_check_and_opted_out_files_are_left() {
        let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  p: ENC[AES256_GCM,data:AA==,iv:AA==,tag:AA==,type:str]\nsops:\n  mac: m\n";
        let kustomization = ("base/kustomization.yaml", "resources: [s.yaml]\n");
        let d = deferred(&[kustomization, ("base/s.yaml", secret)], "base");
        assert!(build_needs_keys(&d));
        let plain = decrypt_build_inputs(&d, None, &sops::Limits::default()).expect("left");
        assert!(plain.files.is_empty());
        let opted = secret.replace(
            "  name: s\n",
            "  name: s\n  annotations: {kustomize.toolkit.fluxcd.io/decrypt: disabled}\n",
        );
        let d = deferred(&[kustomization, ("base/s.yaml", &opted)], "base");
        assert!(!build_needs_keys(&d));
    }

    #[test]
    fn every_form_of_a_decrypted_value_is_withheld() {
        let forms = withheld_forms(
            vec!["pass \"word\"\nline-two".into()],
            b"PASSWORD=pass \"word\"\\nline-two\n",
        );
        let r = Redaction::new(forms);
        for message in [
            "invalid value: pass \"word\"",
            "line-two is not a key",
            r#"quoted: "pass \"word\"\nline-two""#,
            "PASSWORD=pass \"word\"\\nline-two",
        ] {
            let shown = r.apply(message);
            assert!(
                !shown.contains("word") && !shown.contains("line-two"),
                "{message} shown as {shown}"
            );
        }
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

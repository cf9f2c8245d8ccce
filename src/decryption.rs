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
use crate::stage::{Exceeded, StageBudget};

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
    /// A decrypted member that does not read as one manifest; `cause` withholds its
    /// decrypted values.
    #[error("{member}: once decrypted, it is not one valid manifest: {cause}")]
    Reparsed { member: String, cause: String },
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
    /// The keys hold more identities than the operator tries (each is tried on every
    /// recipient stanza of every file).
    #[error(
        "spec.decryption.secretRef: {keys} holds {count} age identities, more than the {limit} the operator tries (--sops-max-age-identities); keep only this set's keys in it"
    )]
    TooManyIdentities {
        keys: String,
        count: usize,
        limit: usize,
    },
    /// The decrypted content would pass the set's bound (decryption stopped there).
    #[error(
        "{member}: its decrypted content takes the set past {limit} bytes ({} MiB), the most the operator allows per set (--max-yaml-mib-per-set); split the set or raise the flag",
        limit >> 20
    )]
    TooLarge { member: String, limit: u64 },
    /// The operator-wide memory budget had no room for the decrypted content.
    #[error("{member}: decrypting: {cause}")]
    Memory {
        member: String,
        cause: crate::sources::memory::MemoryError,
    },
    /// The set's render deadline passed while it was decrypted.
    #[error(
        "{member}: decryption stopped: rendering the set took longer than the {allowed:?} the operator allows (--source-timeout)"
    )]
    TimedOut {
        member: String,
        allowed: std::time::Duration,
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
                | DecryptionError::TooManyIdentities { .. }
                | DecryptionError::TimedOut { .. }
                | DecryptionError::Sops {
                    source: SopsError::NoMatchingKey { .. },
                    ..
                }
        ) || matches!(self, DecryptionError::Memory { cause, .. }
                if Exceeded::Memory(cause.clone()).is_transient())
    }

    /// The error of a stage budget that stopped the decryption of `member`.
    fn stopped(member: &str, e: Exceeded) -> DecryptionError {
        let member = member.to_string();
        match e {
            Exceeded::Bytes { limit } => DecryptionError::TooLarge { member, limit },
            Exceeded::Memory(cause) => DecryptionError::Memory { member, cause },
            Exceeded::Time { allowed } => DecryptionError::TimedOut { member, allowed },
        }
    }
}

/// Copies of a decrypted value the render keeps: in the member, and in its redaction as text
/// and as base64 (4/3), rounded up.
const KEPT_COPIES: u64 = 4;

/// Refuses `keys` (read from `source`, e.g. `Secret team/sops-keys`) when they hold more
/// identities than `limits.max_identities`: each identity is tried on every recipient stanza
/// of every file, so the cost of a set's decryption is bounded by both.
pub fn check_identities(
    keys: &AgeKeys,
    source: &str,
    limits: &sops::Limits,
) -> Result<(), DecryptionError> {
    if keys.len() > limits.max_identities {
        return Err(DecryptionError::TooManyIdentities {
            keys: source.to_string(),
            count: keys.len(),
            limit: limits.max_identities,
        });
    }
    Ok(())
}

/// How the key Secret of `spec` is named in messages (`Secret ns/name`).
pub fn key_source(parent: &ParentRef, r: &SecretReference) -> String {
    match resolve_namespace(parent, r.namespace.as_deref()) {
        Ok(ns) => format!("Secret {ns}/{}", r.name),
        Err(_) => format!("Secret {}", r.name),
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
/// were decrypted. Each file's plaintext is bounded while it is written (`limits`); the
/// decrypted content is charged to `budget` as each member is decrypted (the set's bound,
/// and the operator-wide budget for what the render keeps of it), and the set's deadline is
/// looked at before each file and member.
pub fn decrypt_members(
    manifests: &mut [Manifest],
    keys: Option<&AgeKeys>,
    limits: &sops::Limits,
    budget: &mut StageBudget,
) -> Result<usize, DecryptionError> {
    if let Some(keys) = keys {
        verify_source_files(manifests, keys, limits, budget)?;
    }
    let mut count = 0;
    for manifest in manifests.iter_mut() {
        let whole = wants_decryption(manifest);
        let files = may_hold_sops_files(manifest) && secret_data_has_sops(manifest);
        if !whole && !files {
            continue;
        }
        let member = format!("{} ({} {})", manifest.origin, manifest.kind, manifest.name);
        budget
            .check_time()
            .map_err(|e| DecryptionError::stopped(&member, e))?;
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
            *manifest = reparsed(manifest).map_err(|e| withheld(&member, &e, &plaintexts))?;
        }
        if files {
            plaintexts.extend(
                sops::object::decrypt_secret_data(&member, &mut manifest.object, keys, limits)
                    .map_err(at)?,
            );
        }
        let bytes: u64 = plaintexts.iter().map(|p| p.len() as u64).sum();
        budget
            .count(bytes)
            .and_then(|()| budget.reserve(bytes.saturating_mul(KEPT_COPIES)))
            .map_err(|e| DecryptionError::stopped(&member, e))?;
        manifest.redaction = Some(std::sync::Arc::new(sops::redact::Redaction::new(
            plaintexts,
        )));
        count += 1;
    }
    Ok(count)
}

/// Verifies, once per file, the MAC of each SOPS-encrypted source file a member to decrypt was
/// read from, over the file as committed (a changed unencrypted field fails here, before
/// anything is decrypted for the apply). The plaintext of this check (one file at a time,
/// bounded by `limits`) is dropped at once; the set's deadline is looked at before each file.
fn verify_source_files(
    manifests: &[Manifest],
    keys: &AgeKeys,
    limits: &sops::Limits,
    budget: &StageBudget,
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
        budget
            .check_time()
            .map_err(|e| DecryptionError::stopped(&file.name, e))?;
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

/// The plaintext is overwritten before it is freed, whichever way the inputs go (a build's
/// end, or an error while they were decrypted).
impl Drop for BuildInputs {
    fn drop(&mut self) {
        wipe(&mut self.files);
    }
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
/// `decrypt: disabled` is left as is. Each plaintext is bounded while it is written
/// (`limits`) and the inputs' plaintext is charged to `budget` as each is decrypted.
pub fn decrypt_build_inputs(
    d: &Deferred,
    keys: Option<&AgeKeys>,
    limits: &sops::Limits,
    budget: &mut StageBudget,
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
        budget
            .check_time()
            .map_err(|e| DecryptionError::stopped(&name, e))?;
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
            let forms = withheld_forms(decrypted, &plain);
            // The plaintext, and the forms withheld from messages, are kept: both are charged.
            let kept = plain.len() + forms.iter().map(String::len).sum::<usize>();
            if let Err(e) = budget.charge(kept as u64) {
                zeroize::Zeroize::zeroize(&mut plain);
                return Err(DecryptionError::stopped(&name, e));
            }
            values.extend(forms);
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

/// The error of a decrypted member that no longer reads as one manifest, its text without the
/// member's decrypted values (a manifest error quotes the object's name and kind).
fn withheld(member: &str, e: &DecryptionError, plaintexts: &[String]) -> DecryptionError {
    let redaction = sops::redact::Redaction::new(plaintexts.to_vec());
    DecryptionError::Reparsed {
        member: member.to_string(),
        cause: redaction.apply(&e.to_string()),
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
    use std::time::Duration;

    fn budget() -> StageBudget {
        StageBudget::bytes_only(64 << 20)
    }

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
        let err = decrypt_members(&mut members, None, &sops::Limits::default(), &mut budget())
            .unwrap_err();
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
        let err =
            decrypt_build_inputs(&d, None, &sops::Limits::default(), &mut budget()).unwrap_err();
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
        let inputs = decrypt_build_inputs(&d, None, &sops::Limits::default(), &mut budget())
            .expect("nothing");
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
        let err =
            decrypt_build_inputs(&d, None, &sops::Limits::default(), &mut budget()).unwrap_err();
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
        let plain =
            decrypt_build_inputs(&d, None, &sops::Limits::default(), &mut budget()).expect("left");
        assert!(plain.files.is_empty());
        let opted = secret.replace(
            "  name: s\n",
            "  name: s\n  annotations: {kustomize.toolkit.fluxcd.io/decrypt: disabled}\n",
        );
        let d = deferred(&[kustomization, ("base/s.yaml", &opted)], "base");
        assert!(!build_needs_keys(&d));
    }

    #[test]
    fn a_decrypted_member_that_does_not_read_withholds_its_values() {
        let cause = DecryptionError::NotConfigured {
            member: "spec.manifests[0] (Secret db-password-hunter2)".into(),
        };
        let e = withheld("spec.manifests[0]", &cause, &["db-password-hunter2".into()]);
        assert!(matches!(e, DecryptionError::Reparsed { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(!msg.contains("hunter2"), "{msg}");
        assert!(
            msg.starts_with("spec.manifests[0]: once decrypted"),
            "{msg}"
        );
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
    fn identities_beyond_the_bound_are_refused_naming_the_secret() {
        let mut keys = AgeKeys::new();
        for _ in 0..3 {
            let id = age::x25519::Identity::generate();
            let text = age::secrecy::ExposeSecret::expose_secret(&id.to_string()).to_string();
            keys.add_text("k.agekey", &text).expect("an identity");
        }
        let limits = |max_identities| sops::Limits {
            max_identities,
            ..sops::Limits::default()
        };
        assert!(check_identities(&keys, "Secret ns/k", &limits(3)).is_ok());
        let err = check_identities(&keys, "Secret ns/k", &limits(2)).expect_err("over");
        assert!(err.retry(), "the Secret may be fixed");
        let msg = err.to_string();
        for part in [
            "Secret ns/k holds 3 age identities",
            "more than the 2",
            "--sops-max-age-identities",
        ] {
            assert!(msg.contains(part), "{part:?} not in {msg}");
        }
        let parent = ParentRef::applyset("team", "app");
        let r: SecretReference = serde_json::from_value(json!({"name": "keys"})).expect("ref");
        assert_eq!(key_source(&parent, &r), "Secret team/keys");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn decryption_stops_at_the_sets_deadline() {
        let memory = crate::sources::memory::MemoryBudget::new(1 << 20, Duration::from_secs(1));
        let allowed = Duration::from_secs(120);
        let budget = StageBudget::new(64 << 20, &memory, std::time::Instant::now(), allowed);
        let (out, _) = budget
            .run(|b| {
                let mut members = [encrypted(json!({}))];
                decrypt_members(
                    &mut members,
                    Some(&AgeKeys::new()),
                    &sops::Limits::default(),
                    b,
                )
            })
            .await;
        let err = out.expect_err("the deadline passed");
        assert!(matches!(err, DecryptionError::TimedOut { .. }), "{err:?}");
        assert!(err.retry());
        let msg = err.to_string();
        assert!(
            msg.starts_with("spec.manifests[0] (Secret s): decryption stopped"),
            "{msg}"
        );
        assert!(msg.contains("--source-timeout"), "{msg}");
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

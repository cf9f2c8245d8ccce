//! Which files a kustomize build may read decrypted: those Flux's kustomize-controller decrypts
//! before its build (its decryptor's `DecryptSources`), in every kustomization the build
//! reaches through `resources`, `components` and `bases` directories:
//!
//! - `secretGenerator[].files` (`key=path` or `path`), `secretGenerator[].envs` (and the
//!   deprecated `env`, which kustomize reads as one more `envs` entry);
//! - `patches[].path`, and the deprecated `patchesStrategicMerge` (file entries) and
//!   `patchesJson6902[].path`, which kustomize reads as patches (`kustomize edit fix` turns
//!   them into `patches` entries, which Flux decrypts).
//!
//! Field names are matched exactly as kustomize spells them. Everything else a build reads
//! stays as committed: a SOPS file under `configMapGenerator` becomes a ConfigMap of
//! ciphertext, as with Flux, and an encrypted resource is decrypted after the build, as a
//! member (`crate::decryption`). The plaintext is written where kustomize reads the file, so a
//! file decrypted here must be named nowhere else: [`Scope::also_named`] finds any other
//! mention of it — any other string of a kustomization the build reaches or merely names
//! (whatever the field or its spelling), resolved from its directory, and any string of a
//! generator, transformer or validator config (inline, a file, or the resources of a directory
//! those fields name), matched by file name — and the build is refused naming both places,
//! since kustomize would read the plaintext there too. Pure: the tree in, the scope out.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::{
    kustomization::{Written, kustomization_for},
    kustomize::KustomizeError,
    tree::Tree,
};
use crate::api::KustomizeOverrides;

/// The files of one build that are decrypted before it, and every other file name it mentions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    /// Path in the tree → where it is read as a decrypted input (the first place), e.g.
    /// `ov/kustomization.yaml secretGenerator[0].envs`.
    pub decrypt: BTreeMap<String, String>,
    /// Path in the tree → the first kustomization that names it besides the decrypting
    /// fields (each string of a kustomization resolved from its directory).
    mentioned: BTreeMap<String, String>,
    /// File name (the last path component) → the first generator, transformer or validator
    /// config (or inline text) that mentions it (matched by name: a config's paths are
    /// resolved from whichever kustomization runs it).
    named: BTreeMap<String, String>,
}

impl Scope {
    /// Where else the file `path` (decrypted for the build) is named, if anywhere.
    pub fn also_named(&self, path: &str) -> Option<&str> {
        self.mentioned
            .get(path)
            .or_else(|| self.named.get(file_name(path)))
            .map(String::as_str)
    }
}

/// The decryption scope of the build of `dir` with `overrides` (see the module
/// documentation). The kustomizations were already checked ([`super::kustomization::reads`]);
/// one that does not parse is refused here too.
pub fn scope(
    tree: &Tree,
    dir: &str,
    overrides: Option<&KustomizeOverrides>,
) -> Result<Scope, KustomizeError> {
    let written = kustomization_for(tree, dir, overrides)?;
    let mut walk = Walk {
        tree,
        scope: Scope::default(),
        queue: vec![(dir.to_string(), Reach::BUILT)],
        seen: BTreeSet::new(),
    };
    while let Some((d, reach)) = walk.queue.pop() {
        if !walk.seen.insert((d.clone(), reach)) {
            continue;
        }
        let Some((file, k)) = kustomization(tree, &d, written.as_ref().filter(|_| d == dir))?
        else {
            continue;
        };
        walk.visit(&d, &file, k, reach);
    }
    Ok(walk.scope)
}

/// A kustomization's path and its mapping.
type Kustomization = (String, Map<String, Value>);

/// The kustomization of `dir` (`written` when the build uses a generated one): its path and
/// its mapping; `None` when the directory has none.
fn kustomization(
    tree: &Tree,
    dir: &str,
    written: Option<&Written>,
) -> Result<Option<Kustomization>, KustomizeError> {
    let (path, text) = match written {
        Some(w) => (w.path.clone(), w.text.clone()),
        None => match tree.kustomization_of(dir) {
            Some(path) => {
                let text = tree
                    .get(&path)
                    .map(|d| String::from_utf8_lossy(d).into_owned())
                    .unwrap_or_default();
                (path, text)
            }
            None => return Ok(None),
        },
    };
    let invalid = |cause: String| KustomizeError::Invalid {
        file: path.clone(),
        cause,
    };
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&text).map_err(|e| invalid(e.to_string()))?;
    match docs.into_iter().find(|d| !d.is_null()) {
        None => Ok(Some((path, Map::new()))),
        Some(Value::Object(k)) => Ok(Some((path, k))),
        Some(_) => Err(invalid("it is not a YAML mapping".into())),
    }
}

/// How a kustomization is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Reach {
    /// Through `resources`, `bases` and `components` from the build's directory: its
    /// decrypting entries are decrypted. Otherwise it is only named by some other string (a
    /// field spelled otherwise, say): only what it mentions is recorded.
    decrypts: bool,
    /// Through `generators`, `transformers` or `validators`: its resources are configs.
    config: bool,
}

impl Reach {
    const BUILT: Reach = Reach {
        decrypts: true,
        config: false,
    };
}

/// The walk over the kustomizations a build reaches.
struct Walk<'t> {
    tree: &'t Tree,
    scope: Scope,
    /// Directories to visit, and how they are reached.
    queue: Vec<(String, Reach)>,
    seen: BTreeSet<(String, Reach)>,
}

impl Walk<'_> {
    /// Records the decrypting entries of kustomization `k` (file `file` in `dir`), every other
    /// string it holds and those of the configs it names, and queues the directories it names.
    fn visit(&mut self, dir: &str, file: &str, mut k: Map<String, Value>, reach: Reach) {
        for (entry, at) in take_decrypting(&mut k) {
            if let Some(path) = resolve(dir, &entry).filter(|_| reach.decrypts) {
                let place = format!("{file} {at}");
                self.scope.decrypt.entry(path).or_insert(place);
            }
        }
        for field in ["resources", "bases", "components"] {
            for entry in strings_of(&k, field) {
                self.queue_dir(dir, entry, reach);
            }
        }
        for field in PLUGIN_FIELDS {
            for entry in strings_of(&k, field) {
                let config = Reach {
                    config: true,
                    ..reach
                };
                self.queue_dir(dir, entry, config);
                if let Some(text) = resolve(dir, entry).and_then(|p| self.text(&p)) {
                    self.mention_yaml(&text, &format!("{file} {field} config {entry}"));
                }
            }
        }
        if reach.config {
            for entry in strings_of(&k, "resources") {
                if let Some(text) = resolve(dir, entry).and_then(|p| self.text(&p)) {
                    self.mention_yaml(&text, &format!("{file} resources config {entry}"));
                }
            }
        }
        let rest = Value::Object(k);
        let mut strings = Vec::new();
        collect_strings(&rest, &mut strings);
        for s in strings {
            self.mention(s, file, Some(dir));
            let named = Reach {
                decrypts: false,
                config: false,
            };
            self.queue_dir(dir, s, named);
        }
    }

    /// Queues `entry` of the kustomization in `dir` when it names a directory of the tree.
    fn queue_dir(&mut self, dir: &str, entry: &str, reach: Reach) {
        if let Some(d) = resolve(dir, entry).filter(|d| self.tree.is_dir(d) && !d.is_empty()) {
            self.queue.push((d, reach));
        }
    }

    /// A file of the tree as text.
    fn text(&self, path: &str) -> Option<String> {
        let data = self.tree.get(path)?;
        Some(String::from_utf8_lossy(data).into_owned())
    }

    /// Records the files string `s` may name (each `=`-separated part, as in `key=path`):
    /// resolved from `dir` (a kustomization's string), or by file name (`None`: a config's);
    /// an inline config's strings when it spans lines.
    fn mention(&mut self, s: &str, place: &str, dir: Option<&str>) {
        if s.contains('\n') {
            self.mention_yaml(s, place);
            return;
        }
        for part in s.split('=').map(str::trim) {
            let (map, key) = match dir {
                Some(d) => match resolve(d, part) {
                    Some(path) => (&mut self.scope.mentioned, path),
                    None => continue,
                },
                None => (&mut self.scope.named, file_name(part).to_string()),
            };
            if !key.is_empty() {
                map.entry(key).or_insert_with(|| place.to_string());
            }
        }
    }

    /// Records the file names every string of YAML `text` may mention (nothing when it is not
    /// YAML: kustomize refuses it then).
    fn mention_yaml(&mut self, text: &str, place: &str) {
        let Ok(docs) = serde_saphyr::from_multiple::<Value>(text) else {
            return;
        };
        let mut strings = Vec::new();
        for doc in &docs {
            collect_strings(doc, &mut strings);
        }
        for s in strings.iter().filter(|s| !s.contains('\n')) {
            self.mention(s, place, None);
        }
    }
}

/// The fields whose entries name generator, transformer and validator configs.
const PLUGIN_FIELDS: [&str; 3] = ["generators", "transformers", "validators"];

/// Takes the decrypting entries out of `k` (so that what remains is every other mention):
/// `(the file's path as written, the entry's place)`.
fn take_decrypting(k: &mut Map<String, Value>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(Value::Array(generators)) = k.get_mut("secretGenerator") {
        for (i, g) in generators.iter_mut().enumerate() {
            let Value::Object(g) = g else { continue };
            for list in ["files", "envs", "env"] {
                for entry in take_strings(g, list) {
                    // `key=path`: the path (kustomize allows one `=`).
                    let path = entry.split_once('=').map_or(entry.as_str(), |(_, p)| p);
                    let at = format!("secretGenerator[{i}].{list}");
                    out.push((path.to_string(), at));
                }
            }
        }
    }
    for field in ["patches", "patchesJson6902"] {
        if let Some(Value::Array(patches)) = k.get_mut(field) {
            for (i, p) in patches.iter_mut().enumerate() {
                if let Value::Object(p) = p
                    && let Some(Value::String(path)) = p.remove("path")
                {
                    out.push((path, format!("{field}[{i}].path")));
                }
            }
        }
    }
    if let Some(Value::Array(patches)) = k.get_mut("patchesStrategicMerge") {
        patches.retain(|p| match p.as_str() {
            Some(path) if !path.contains('\n') => {
                out.push((path.to_string(), "patchesStrategicMerge".to_string()));
                false
            }
            _ => true,
        });
    }
    out
}

/// Takes list (or scalar) `field` of `m` out, as strings.
fn take_strings(m: &mut Map<String, Value>, field: &str) -> Vec<String> {
    match m.remove(field) {
        Some(Value::Array(a)) => a
            .into_iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        Some(Value::String(s)) => vec![s],
        Some(other) => {
            // Not a list of strings: kustomize refuses it; kept as a mention.
            m.insert(field.to_string(), other);
            vec![]
        }
        None => vec![],
    }
}

/// The strings of list `field` of `k` (a scalar counts as a one-entry list).
fn strings_of<'k>(k: &'k Map<String, Value>, field: &str) -> Vec<&'k str> {
    match k.get(field) {
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        Some(Value::String(s)) => vec![s.as_str()],
        _ => vec![],
    }
}

/// Every string value (not keys) of `v`, depth first.
fn collect_strings<'v>(v: &'v Value, out: &mut Vec<&'v str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(a) => a.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(m) => m.values().for_each(|v| collect_strings(v, out)),
        _ => {}
    }
}

/// The last component of a path.
fn file_name(path: &str) -> &str {
    path.trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(path)
}

/// `entry` joined to directory `dir`, normalised ([`super::kustomization::resolve`]); `None`
/// also when it is empty, spans lines or looks remote.
fn resolve(dir: &str, entry: &str) -> Option<String> {
    if entry.is_empty() || entry.contains('\n') || entry.contains("://") {
        return None;
    }
    super::kustomization::resolve(dir, entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> Tree {
        Tree::of(files)
    }

    fn decrypted(s: &Scope) -> Vec<&str> {
        s.decrypt.keys().map(String::as_str).collect()
    }

    #[test]
    fn secret_generator_inputs_and_patch_files_are_decrypted_in_every_reached_kustomization() {
        let t = tree(&[
            (
                "base/kustomization.yaml",
                "resources: [cm.yaml]\nsecretGenerator:\n- name: s\n  files: [token.txt, key=tls/key.pem]\n  envs: [db.env]\n  env: old.env\npatches:\n- path: p1.yaml\npatchesStrategicMerge: [p2.yaml]\npatchesJson6902:\n- path: p3.json\n  target: {kind: ConfigMap, name: cm}\n",
            ),
            ("base/cm.yaml", "x"),
            (
                "ov/kustomization.yaml",
                "resources: [../base]\ncomponents: [../comp]\nconfigMapGenerator:\n- name: c\n  envs: [app.env]\n  files: [conf.txt]\n",
            ),
            (
                "comp/kustomization.yaml",
                "kind: Component\nsecretGenerator:\n- name: t\n  envs: [comp.env]\n",
            ),
            (
                "other/kustomization.yaml",
                "secretGenerator:\n- name: u\n  envs: [u.env]\n",
            ),
        ]);
        let s = scope(&t, "ov", None).expect("scope");
        assert_eq!(
            decrypted(&s),
            [
                "base/db.env",
                "base/old.env",
                "base/p1.yaml",
                "base/p2.yaml",
                "base/p3.json",
                "base/tls/key.pem",
                "base/token.txt",
                "comp/comp.env",
            ]
        );
        assert_eq!(
            s.decrypt["base/db.env"],
            "base/kustomization.yaml secretGenerator[0].envs"
        );
        assert_eq!(
            s.decrypt["base/p3.json"],
            "base/kustomization.yaml patchesJson6902[0].path"
        );
        // configMapGenerator inputs are not decrypted; nor is anything of an unreached
        // kustomization.
        assert!(!s.decrypt.contains_key("ov/app.env") && !s.decrypt.contains_key("other/u.env"));
        // None of the decrypted files is named elsewhere.
        for path in s.decrypt.keys() {
            assert_eq!(s.also_named(path), None, "{path}");
        }
        assert_eq!(s.also_named("ov/app.env"), Some("ov/kustomization.yaml"));
    }

    #[test]
    fn field_names_are_matched_exactly() {
        let t = tree(&[(
            "kustomization.yaml",
            "SecretGenerator:\n- name: s\n  envs: [db.env]\nPatches:\n- path: p.yaml\n",
        )]);
        let s = scope(&t, "", None).expect("scope");
        assert!(s.decrypt.is_empty(), "{s:?}");
    }

    #[test]
    fn a_decrypted_file_named_anywhere_else_is_found() {
        let cases = [
            // The same file under configMapGenerator too.
            "secretGenerator:\n- name: s\n  envs: [db.env]\nconfigMapGenerator:\n- name: c\n  envs: [db.env]\n",
            // Under a spelling kustomize reads as configMapGenerator.
            "secretGenerator:\n- name: s\n  envs: [db.env]\nConfigMapGenerator:\n- name: c\n  files: [k=./db.env]\n",
            // As a resource.
            "secretGenerator:\n- name: s\n  files: [db.env]\nresources: [db.env]\n",
            // In an inline generator config.
            "secretGenerator:\n- name: s\n  envs: [db.env]\ngenerators:\n- |\n  apiVersion: builtin\n  kind: ConfigMapGenerator\n  metadata: {name: c}\n  envs: [db.env]\n",
            // In a generator config file.
            "secretGenerator:\n- name: s\n  envs: [db.env]\ngenerators: [gen.yaml]\n",
            // In the resources of a directory of generator configs.
            "secretGenerator:\n- name: s\n  envs: [db.env]\ngenerators: [gens]\n",
            // A patch file that is also a resource elsewhere.
            "patches:\n- path: db.env\nresources: [sub]\n",
        ];
        for k in cases {
            let t = tree(&[
                ("kustomization.yaml", k),
                ("db.env", "x"),
                (
                    "gen.yaml",
                    "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: c}\nenvs: [db.env]\n",
                ),
                ("gens/kustomization.yaml", "resources: [g.yaml]\n"),
                (
                    "gens/g.yaml",
                    "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: c}\nenvs: [../db.env]\n",
                ),
                ("sub/kustomization.yaml", "resources: [../db.env]\n"),
            ]);
            let s = scope(&t, "", None).expect("scope");
            assert_eq!(decrypted(&s), ["db.env"], "{k}");
            assert!(s.also_named("db.env").is_some(), "not found in {k}");
        }
    }

    #[test]
    fn a_generated_or_overridden_kustomization_is_the_one_read() {
        let t = tree(&[
            (
                "app/kustomization.yaml",
                "secretGenerator:\n- name: s\n  envs: [db.env]\n",
            ),
            ("app/db.env", "x"),
        ]);
        let o = KustomizeOverrides {
            name_prefix: Some("p-".into()),
            ..Default::default()
        };
        let s = scope(&t, "app", Some(&o)).expect("scope");
        assert_eq!(decrypted(&s), ["app/db.env"]);
        // A directory without a kustomization: the generated one lists its manifests only.
        let t = tree(&[("plain/a.yaml", "x"), ("plain/s.env", "x")]);
        assert!(scope(&t, "plain", None).expect("scope").decrypt.is_empty());
        // Outside the root: never resolved.
        assert_eq!(resolve("a", "../../x"), None);
        assert_eq!(resolve("a/b", "../c/./d"), Some("a/c/d".into()));
    }
}

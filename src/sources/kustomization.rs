//! Kustomizations as the build uses them, pure: the one generated over a source's `path` for
//! the set's `spec.kustomize` (as Flux's generator makes it: [`kustomization_for`]), and the
//! checks that refuse, before any build, what a build must not do ([`precheck`]): a field
//! kustomize v5.7.1 does not define as spelled (see [`super::kustomize_fields`]), anything
//! remote in any field that names something to load, paths outside the source's root, helm
//! charts, plugins other than kustomize's built-ins.

use std::{cell::RefCell, collections::BTreeSet};

use serde_json::{Map, Value};

pub use super::kustomize_fields::is_remote;
use super::{
    kustomize_error::KustomizeError,
    kustomize_fields::{
        FieldError, KUSTOMIZATION, Load, PLUGIN_KUSTOMIZATION, Shape, builtin, walk,
    },
    tree::Tree,
};
use crate::api::KustomizeOverrides;

/// A kustomization file to write into the copy: its path and text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub path: String,
    pub text: String,
}

/// The kustomization the build of `dir` uses when it is not the tree's own, as Flux's
/// generator makes it: `dir`'s own kustomization with `overrides` set (`namespace`,
/// `namePrefix`, `nameSuffix` replaced; `patches` and `components` appended; `images` merged
/// by name), or, when `dir` has none, one listing the manifest files and the directories
/// holding kustomizations ([`Tree::generated_resources`]). `None`: the tree's own is used as
/// it is.
pub fn kustomization_for(
    tree: &Tree,
    dir: &str,
    overrides: Option<&KustomizeOverrides>,
) -> Result<Option<Written>, KustomizeError> {
    let existing = tree.kustomization_of(dir);
    let (path, mut k) = match &existing {
        Some(path) => {
            if overrides.is_none() {
                return Ok(None);
            }
            (path.clone(), read_kustomization(tree, path)?)
        }
        None => {
            let mut k = Map::new();
            k.insert(
                "apiVersion".into(),
                "kustomize.config.k8s.io/v1beta1".into(),
            );
            k.insert("kind".into(), "Kustomization".into());
            let resources = tree.generated_resources(dir);
            k.insert("resources".into(), resources.into());
            (super::tree::join(dir, "kustomization.yaml"), k)
        }
    };
    if let Some(o) = overrides {
        apply_overrides(&mut k, o)?;
    }
    let text =
        serde_json::to_string_pretty(&Value::Object(k)).map_err(|e| KustomizeError::Invalid {
            file: path.clone(),
            cause: e.to_string(),
        })?;
    Ok(Some(Written { path, text }))
}

/// Sets `o` on kustomization `k` as Flux's generator does.
fn apply_overrides(
    k: &mut Map<String, Value>,
    o: &KustomizeOverrides,
) -> Result<(), KustomizeError> {
    if let Some(ns) = &o.target_namespace {
        k.insert("namespace".into(), ns.clone().into());
    }
    if let Some(p) = &o.name_prefix {
        k.insert("namePrefix".into(), p.clone().into());
    }
    if let Some(s) = &o.name_suffix {
        k.insert("nameSuffix".into(), s.clone().into());
    }
    for p in &o.patches {
        let mut patch = Map::new();
        patch.insert("patch".into(), p.patch.clone().into());
        if let Some(t) = &p.target {
            let t = serde_json::to_value(t).unwrap_or_default();
            patch.insert("target".into(), t);
        }
        push(k, "patches", Value::Object(patch));
    }
    for c in &o.components {
        if is_remote(c) || c.starts_with('/') {
            return Err(KustomizeError::Component { entry: c.clone() });
        }
        push(k, "components", c.clone().into());
    }
    for image in &o.images {
        merge_image(k, image);
    }
    Ok(())
}

/// Appends `v` to list `field` of `k` (created when missing or not a list).
fn push(k: &mut Map<String, Value>, field: &str, v: Value) {
    let entry = k.entry(field).or_insert_with(|| Value::Array(vec![]));
    if !entry.is_array() {
        *entry = Value::Array(vec![]);
    }
    if let Value::Array(a) = entry {
        a.push(v);
    }
}

/// Merges an image override into `images` by name, as Flux does: `newName` replaces; `newTag`
/// and `digest` replace both together; an image not listed is appended.
fn merge_image(k: &mut Map<String, Value>, image: &crate::api::KustomizeImage) {
    let entry = k.entry("images").or_insert_with(|| Value::Array(vec![]));
    if !entry.is_array() {
        *entry = Value::Array(vec![]);
    }
    let Value::Array(images) = entry else {
        return;
    };
    let set = |m: &mut Map<String, Value>, key: &str, v: &Option<String>| match v {
        Some(v) if !v.is_empty() => {
            m.insert(key.into(), v.clone().into());
        }
        _ => {
            m.remove(key);
        }
    };
    let found = images
        .iter_mut()
        .filter_map(Value::as_object_mut)
        .find(|m| m.get("name").and_then(Value::as_str) == Some(image.name.as_str()));
    match found {
        Some(m) => {
            if image.new_name.as_ref().is_some_and(|n| !n.is_empty()) {
                set(m, "newName", &image.new_name);
            }
            let versioned = [&image.new_tag, &image.digest]
                .iter()
                .any(|v| v.as_ref().is_some_and(|v| !v.is_empty()));
            if versioned {
                set(m, "newTag", &image.new_tag);
                set(m, "digest", &image.digest);
            }
        }
        None => {
            let mut m = Map::new();
            m.insert("name".into(), image.name.clone().into());
            set(&mut m, "newName", &image.new_name);
            set(&mut m, "newTag", &image.new_tag);
            set(&mut m, "digest", &image.digest);
            images.push(Value::Object(m));
        }
    }
}

/// The kustomization file `path` of `tree`, parsed (a YAML mapping).
fn read_kustomization(tree: &Tree, path: &str) -> Result<Map<String, Value>, KustomizeError> {
    let invalid = |cause: String| KustomizeError::Invalid {
        file: path.to_string(),
        cause,
    };
    let data = tree.get(path).ok_or_else(|| invalid("missing".into()))?;
    let text = std::str::from_utf8(data).map_err(|_| invalid("not UTF-8 text".into()))?;
    parse_mapping(text).map_err(|e| invalid(e.to_string()))
}

/// Why a kustomization's text is not a kustomization.
#[derive(Debug, thiserror::Error)]
enum MappingError {
    #[error(transparent)]
    Yaml(#[from] serde_saphyr::Error),
    #[error("it is not a YAML mapping")]
    NotMapping,
}

/// A YAML text that must be one mapping (an empty text is an empty mapping).
fn parse_mapping(text: &str) -> Result<Map<String, Value>, MappingError> {
    match parse_docs(text)?.into_iter().find(|d| !d.is_null()) {
        None => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m),
        Some(_) => Err(MappingError::NotMapping),
    }
}

/// The documents of a YAML text, read strictly: a key given twice or a merge key (`<<`) is
/// refused, since kustomize's YAML reader (keeping the last of a key given twice, expanding
/// merges) might see what the check did not.
fn parse_docs(text: &str) -> Result<Vec<Value>, serde_saphyr::Error> {
    let options = serde_saphyr::options! {
        duplicate_keys: serde_saphyr::options::DuplicateKeyPolicy::Error,
        merge_keys: serde_saphyr::options::MergeKeyPolicy::Error,
    };
    serde_saphyr::from_multiple_with_options(text, options)
}

/// `entry` joined to directory `dir`, normalised; `None` when it is absolute or leaves the
/// root.
pub(super) fn resolve(dir: &str, entry: &str) -> Option<String> {
    if entry.starts_with('/') || entry.starts_with('\\') || entry.starts_with('~') {
        return None;
    }
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for part in entry.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// What a `resources`/`components`/`bases` entry is.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// A directory of the tree (its path).
    Dir(String),
    /// Anything else local (a file, or missing: kustomize reports that).
    Other,
}

/// The files of the tree a build reads (paths in the tree), as the kustomizations it reaches
/// name them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reads {
    /// Files named by `resources`, `bases` or `components` (manifests), and plugin
    /// configuration files.
    pub resources: BTreeSet<String>,
    /// Files read as inputs: patch files, generator `files`/`envs`, replacements,
    /// configurations, crds, openapi.
    pub inputs: BTreeSet<String>,
}

/// How a kustomization the build reaches is read.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
    /// Built: the one the build starts from, and those its resources and components name.
    Build,
    /// Its output are the plugin configurations of the kustomization in directory `loader`
    /// (named by its `generators`, `transformers` or `validators`), which resolves their
    /// files.
    Plugins { loader: String },
}

/// The context of one kustomization (or plugin configuration) being checked.
struct Checking<'a> {
    tree: &'a Tree,
    /// The file being checked (for messages).
    file: &'a str,
    /// The directory its entries are relative to.
    dir: &'a str,
    /// What the build reads, gathered while checking.
    reads: &'a RefCell<Reads>,
}

impl Checking<'_> {
    fn remote(&self, field: &str, entry: &str) -> KustomizeError {
        KustomizeError::Remote {
            file: self.file.into(),
            field: field.into(),
            entry: entry.into(),
        }
    }

    fn outside(&self, field: &str, entry: &str) -> KustomizeError {
        KustomizeError::OutsideRoot {
            file: self.file.into(),
            field: field.into(),
            entry: entry.into(),
        }
    }

    fn invalid(&self, file: &str, cause: String) -> KustomizeError {
        KustomizeError::Invalid {
            file: file.into(),
            cause,
        }
    }

    /// The error of `walk` on this file; `role` says which fields were allowed.
    fn field_error(&self, e: FieldError, role: &Role) -> KustomizeError {
        let file = self.file.to_string();
        match e {
            FieldError::Unknown { at, .. } if at == "sops" => KustomizeError::Encrypted { file },
            FieldError::Unknown { at, key, .. }
                if matches!(role, Role::Plugins { .. }) && is_field(&KUSTOMIZATION, &key) =>
            {
                KustomizeError::PluginDirectory { file, at }
            }
            FieldError::Unknown { at, reads_as, .. } => KustomizeError::Field {
                file,
                at,
                reads_as: reads_as.map(str::to_string),
            },
            FieldError::Shape { at, expected } => KustomizeError::Shape {
                file,
                at,
                expected: expected.into(),
            },
            FieldError::Helm { at } => KustomizeError::Helm { file, field: at },
        }
    }

    /// Classifies a `resources`/`components`/`bases` entry (or a plugin entry naming a file
    /// or directory).
    fn target(&self, field: &str, entry: &str) -> Result<Target, KustomizeError> {
        if is_remote(entry) {
            return Err(self.remote(field, entry));
        }
        let Some(path) = resolve(self.dir, entry) else {
            return Err(self.outside(field, entry));
        };
        if self.tree.is_dir(&path) && !self.tree.is_file(&path) {
            return Ok(Target::Dir(path));
        }
        if self.tree.is_file(&path) {
            self.reads.borrow_mut().resources.insert(path);
            return Ok(Target::Other);
        }
        // Not in the tree: `gitlab.example.com/org/repo` is a remote reference.
        let host_like = entry
            .split('/')
            .next()
            .is_some_and(|first| first.contains('.') && first != "." && first != "..")
            && entry.contains('/');
        if host_like {
            return Err(self.remote(field, entry));
        }
        Ok(Target::Other)
    }

    /// Checks an entry naming a file read as an input (`load`: [`Load::File`],
    /// [`Load::KeyFile`], [`Load::PatchOrFile`]): not remote (the whole entry, and for
    /// `key=path` the path after the first `=`), inside the root.
    fn input(&self, load: Load, field: &str, entry: &str) -> Result<(), KustomizeError> {
        let file = match load {
            Load::KeyFile => entry.split_once('=').map(|(_, f)| f).unwrap_or(entry),
            Load::PatchOrFile if is_inline(entry) => return Ok(()),
            _ => entry,
        };
        if is_remote(entry) || is_remote(file) {
            return Err(self.remote(field, entry));
        }
        let path = resolve(self.dir, file).ok_or_else(|| self.outside(field, entry))?;
        if self.tree.is_file(&path) {
            self.reads.borrow_mut().inputs.insert(path);
        }
        Ok(())
    }
}

/// Whether `key` is a field of struct `shape`, spelled exactly.
fn is_field(shape: &Shape, key: &str) -> bool {
    matches!(shape, Shape::Struct(fields) if fields.iter().any(|(name, _)| *name == key))
}

/// Whether a strategic-merge patch or plugin entry is given inline (several lines, or a YAML
/// mapping or list) rather than as a file name.
fn is_inline(entry: &str) -> bool {
    entry.contains('\n')
        || parse_docs(entry).is_ok_and(|docs| docs.iter().any(|d| d.is_object() || d.is_array()))
}

/// Refuses what a build must not do (see the module documentation), before it runs: every
/// kustomization reachable from `dir` (whose own is `written` when generated), and every
/// plugin configuration they name, is checked. Returns the files of the tree the build reads.
pub fn precheck(
    tree: &Tree,
    dir: &str,
    written: Option<&Written>,
) -> Result<Reads, KustomizeError> {
    let reads = RefCell::new(Reads::default());
    let mut seen = BTreeSet::new();
    let mut queue = vec![(dir.to_string(), Role::Build)];
    while let Some((d, role)) = queue.pop() {
        if !seen.insert((d.clone(), role.clone())) {
            continue;
        }
        let Some((file, docs)) = kustomization_docs(tree, &d, written.filter(|_| d == dir))? else {
            continue;
        };
        let c = Checking {
            tree,
            file: &file,
            dir: &d,
            reads: &reads,
        };
        for k in &docs {
            queue.extend(check_kustomization(&c, k, &role)?);
        }
    }
    Ok(reads.into_inner())
}

/// The kustomization of directory `d` (`written` when given) and its documents (kustomize
/// reads the first; every one is checked); `None` when it has none.
fn kustomization_docs(
    tree: &Tree,
    d: &str,
    written: Option<&Written>,
) -> Result<Option<(String, Vec<Value>)>, KustomizeError> {
    let (file, text) = match written {
        Some(w) => (w.path.clone(), w.text.clone()),
        None => {
            let Some(file) = tree.kustomization_of(d) else {
                return Ok(None);
            };
            let data = tree.get(&file).unwrap_or_default();
            match std::str::from_utf8(data) {
                Ok(text) => (file, text.to_string()),
                Err(_) => {
                    return Err(KustomizeError::Invalid {
                        file,
                        cause: "not UTF-8 text".into(),
                    });
                }
            }
        }
    };
    let docs = parse_docs(&text).map_err(|e| KustomizeError::Invalid {
        file: file.clone(),
        cause: e.to_string(),
    })?;
    Ok(Some((file, docs)))
}

/// The files of `tree` the build of `dir` with `overrides` reads ([`precheck`]).
pub fn reads(
    tree: &Tree,
    dir: &str,
    overrides: Option<&KustomizeOverrides>,
) -> Result<Reads, KustomizeError> {
    let written = kustomization_for(tree, dir, overrides)?;
    precheck(tree, dir, written.as_ref())
}

/// Checks one kustomization document read in `role`: its fields against kustomize's, every
/// entry naming something to load. Returns the directories it includes (to check next).
fn check_kustomization(
    c: &Checking<'_>,
    k: &Value,
    role: &Role,
) -> Result<Vec<(String, Role)>, KustomizeError> {
    if !k.is_object() && !k.is_null() {
        return Err(c.invalid(c.file, "it is not a YAML mapping".into()));
    }
    let shape = match role {
        Role::Build => &KUSTOMIZATION,
        Role::Plugins { .. } => &PLUGIN_KUSTOMIZATION,
    };
    let mut named = Vec::new();
    walk(shape, k, "", &mut named).map_err(|e| c.field_error(e, role))?;
    let mut next = Vec::new();
    for n in named {
        match (n.load, role) {
            (Load::Resource | Load::Component, _) => match c.target(&n.at, n.entry)? {
                Target::Dir(d) => next.push((d, role.clone())),
                Target::Other => {
                    if let Role::Plugins { loader } = role {
                        plugin_file(c, &n.at, n.entry, loader)?;
                    }
                }
            },
            (Load::Plugin, _) => next.extend(check_plugin(c, &n.at, n.entry)?),
            (load, _) => c.input(load, &n.at, n.entry)?,
        }
    }
    Ok(next)
}

/// Checks a `generators`/`transformers`/`validators` entry: its configurations (the entry
/// itself when inline, else the file it names) must be kustomize built-ins, checked as their
/// plugins read them. An entry naming a directory (a kustomization whose output are the
/// configurations) is returned, to be checked as such.
fn check_plugin(
    c: &Checking<'_>,
    field: &str,
    entry: &str,
) -> Result<Option<(String, Role)>, KustomizeError> {
    // An entry that is not YAML is neither a file name nor a configuration the check can
    // read as kustomize's reader might.
    let docs = parse_docs(entry)
        .map_err(|e| c.invalid(c.file, format!("{field} entry {entry:?}: {e}")))?;
    if is_inline(entry) {
        check_configs(c, (field, entry), c.file, &docs, c.dir)?;
        return Ok(None);
    }
    match c.target(field, entry)? {
        Target::Dir(d) => Ok(Some((
            d,
            Role::Plugins {
                loader: c.dir.to_string(),
            },
        ))),
        Target::Other => plugin_file(c, field, entry, c.dir).map(|()| None),
    }
}

/// Checks the plugin configuration file `entry` names (relative to `c`'s directory), whose
/// files are relative to directory `loader`.
fn plugin_file(
    c: &Checking<'_>,
    field: &str,
    entry: &str,
    loader: &str,
) -> Result<(), KustomizeError> {
    let Some(path) = resolve(c.dir, entry) else {
        return Err(c.outside(field, entry));
    };
    let Some(data) = c.tree.get(&path) else {
        return Ok(());
    };
    let text = std::str::from_utf8(data).map_err(|_| c.invalid(&path, "not UTF-8 text".into()))?;
    let docs = parse_docs(text).map_err(|e| c.invalid(&path, e.to_string()))?;
    check_configs(c, (field, entry), &path, &docs, loader)
}

/// Checks plugin configurations `docs`, of file `source` (`c`'s own when inline), named by
/// `(field, entry)` of `c`'s kustomization: each a kustomize built-in (`apiVersion: builtin`,
/// a kind v5.7.1 has, no KRM function annotation), its fields spelled as that built-in's, the
/// files it names inputs relative to directory `loader`.
fn check_configs(
    c: &Checking<'_>,
    (field, entry): (&str, &str),
    source: &str,
    docs: &[Value],
    loader: &str,
) -> Result<(), KustomizeError> {
    let at = Checking {
        file: source,
        dir: loader,
        ..*c
    };
    // Inline, the configuration's fields stand under the entry.
    let prefix = if source == c.file { field } else { "" };
    for doc in docs.iter().filter(|d| !d.is_null()) {
        let Some(config) = doc.as_object() else {
            let cause =
                format!("{field} entry {entry:?}: a plugin configuration must be a mapping");
            return Err(c.invalid(source, cause));
        };
        let shape = builtin_shape(c, field, entry, config)?;
        let mut named = Vec::new();
        walk(shape, doc, prefix, &mut named).map_err(|e| at.field_error(e, &Role::Build))?;
        for n in named {
            at.input(n.load, &n.at, n.entry)?;
        }
    }
    Ok(())
}

/// The shape of plugin configuration `config`: refused unless it is a kustomize v5.7.1
/// built-in.
fn builtin_shape(
    c: &Checking<'_>,
    field: &str,
    entry: &str,
    config: &Map<String, Value>,
) -> Result<&'static Shape, KustomizeError> {
    let api = config
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = config.get("kind").and_then(Value::as_str).unwrap_or("");
    let annotations = config
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object);
    let function = annotations.is_some_and(|a| {
        a.contains_key("config.kubernetes.io/function") || a.contains_key("config.k8s.io/function")
    });
    let shape = builtin(kind).filter(|_| api == "builtin" && !function);
    shape.ok_or_else(|| KustomizeError::Plugin {
        file: c.file.into(),
        field: field.into(),
        entry: entry.lines().next().unwrap_or_default().into(),
        what: if function {
            format!("a KRM function, {kind}")
        } else if api == "builtin" {
            format!("builtin/{kind}, not a built-in of kustomize v5.7.1")
        } else {
            format!("{api}/{kind}")
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{KustomizeImage, KustomizePatch, KustomizeSelector};

    fn tree(files: &[(&str, &str)]) -> Tree {
        Tree::of(files)
    }

    fn check(files: &[(&str, &str)], dir: &str) -> Result<(), KustomizeError> {
        let t = tree(files);
        let w = kustomization_for(&t, dir, None)?;
        precheck(&t, dir, w.as_ref()).map(|_| ())
    }

    #[test]
    fn reads_are_the_resources_and_inputs_the_reached_kustomizations_name() {
        let t = tree(&[
            (
                "base/kustomization.yaml",
                "resources: [secret.yaml, cm.yaml]\n",
            ),
            ("base/secret.yaml", "x"),
            ("base/cm.yaml", "x"),
            ("base/other.yaml", "x"),
            (
                "ov/kustomization.yaml",
                "resources: [../base]\npatches: [{path: patch.yaml}]\nsecretGenerator: [{name: s, envs: [s.env], files: [k=key.bin]}]\n",
            ),
            ("ov/patch.yaml", "x"),
            ("ov/s.env", "x"),
            ("ov/key.bin", "x"),
            ("unrelated/secret.yaml", "x"),
        ]);
        let r = reads(&t, "ov", None).expect("reads");
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(r.resources, set(&["base/secret.yaml", "base/cm.yaml"]));
        assert_eq!(r.inputs, set(&["ov/patch.yaml", "ov/s.env", "ov/key.bin"]));
    }
    #[test]
    fn remote_entries_are_recognised() {
        for remote in [
            "https://github.com/org/repo//deploy?ref=v1",
            "github.com/org/repo/deploy?ref=main",
            "git@github.com:org/repo.git",
            "git::https://example.com/r",
            "ssh://git@example.com/r",
            "gh:org/repo",
            "example.com/org/repo//path",
            "file:///etc",
        ] {
            assert!(is_remote(remote), "{remote}");
        }
        for local in ["../base", "deploy.yaml", "./a/b", "base"] {
            assert!(!is_remote(local), "{local}");
        }
    }

    #[test]
    fn remote_bases_are_refused_naming_file_and_entry() {
        let files = [
            ("ov/kustomization.yaml", "resources:\n- ../base\n"),
            (
                "base/kustomization.yaml",
                "resources:\n- cm.yaml\n- https://example.com/x.yaml\n",
            ),
            ("base/cm.yaml", "apiVersion: v1\n"),
        ];
        let err = check(&files, "ov").expect_err("remote");
        assert_eq!(
            err,
            KustomizeError::Remote {
                file: "base/kustomization.yaml".into(),
                field: "resources[1]".into(),
                entry: "https://example.com/x.yaml".into()
            }
        );
        assert!(
            err.to_string()
                .contains("base/kustomization.yaml: resources[1] entry")
        );
        // A host-like entry that is not in the tree is remote; one that is, is local.
        let files = [(
            "k/kustomization.yaml",
            "components: [gitlab.example.com/org/repo]\n",
        )];
        assert!(matches!(
            check(&files, "k"),
            Err(KustomizeError::Remote { .. })
        ));
        let files = [
            ("k/kustomization.yaml", "resources: [my.app/x.yaml]\n"),
            ("k/my.app/x.yaml", "apiVersion: v1\n"),
        ];
        assert_eq!(check(&files, "k"), Ok(()));
    }

    #[test]
    fn files_outside_the_root_are_refused() {
        for (field, k) in [
            ("resources[0]", "resources: [../../outside]\n"),
            ("resources[0]", "resources: [/etc/passwd]\n"),
            ("patches[0].path", "patches: [{path: ../../../x.yaml}]\n"),
            (
                "configMapGenerator[0].files[0]",
                "configMapGenerator: [{name: a, files: [k=../../s]}]\n",
            ),
            (
                "secretGenerator[0].envs[0]",
                "secretGenerator: [{name: a, envs: [/root/.env]}]\n",
            ),
            ("openapi.path", "openapi: {path: /schema.json}\n"),
        ] {
            let files = [("a/kustomization.yaml", k)];
            let err = check(&files, "a").expect_err(k);
            assert!(
                matches!(&err, KustomizeError::OutsideRoot { field: f, file, .. } if f == field && file == "a/kustomization.yaml"),
                "{k}: {err:?}"
            );
        }
        // Inside the root, above the kustomization: left to kustomize's load restrictor.
        let files = [("a/b/kustomization.yaml", "patches: [{path: ../p.yaml}]\n")];
        assert_eq!(check(&files, "a/b"), Ok(()));
    }

    #[test]
    fn helm_and_plugins_are_refused() {
        let files = [(
            "k/kustomization.yaml",
            "helmCharts:\n- name: x\n  repo: https://c\n",
        )];
        assert!(matches!(
            check(&files, "k"),
            Err(KustomizeError::Helm { .. })
        ));
        let files = [
            ("k/kustomization.yaml", "generators: [gen.yaml]\n"),
            (
                "k/gen.yaml",
                "apiVersion: example.com/v1\nkind: Exec\nmetadata:\n  name: x\n  annotations:\n    config.kubernetes.io/function: |\n      exec: {path: /bin/sh}\n",
            ),
        ];
        let err = check(&files, "k").expect_err("plugin");
        assert!(err.to_string().contains("k/kustomization.yaml: generators[0] entry \"gen.yaml\" is a kustomize plugin (a KRM function, Exec)"), "{err}");
        let files = [(
            "k/kustomization.yaml",
            "transformers:\n- |\n  apiVersion: someteam.example.com/v1\n  kind: ChartInflator\n",
        )];
        assert!(matches!(
            check(&files, "k"),
            Err(KustomizeError::Plugin { .. })
        ));
        // A generator directory is a kustomization: checked as one.
        let files = [
            ("k/kustomization.yaml", "generators: [../gens]\n"),
            (
                "gens/kustomization.yaml",
                "resources: [https://example.com/g.yaml]\n",
            ),
        ];
        assert!(matches!(
            check(&files, "k"),
            Err(KustomizeError::Remote { .. })
        ));
        // Built-ins are allowed.
        let files = [
            ("k/kustomization.yaml", "transformers: [t.yaml]\n"),
            (
                "k/t.yaml",
                "apiVersion: builtin\nkind: PrefixSuffixTransformer\nmetadata: {name: p}\nprefix: x-\nfieldSpecs: [{path: metadata/name}]\n",
            ),
        ];
        assert_eq!(check(&files, "k"), Ok(()));
    }

    /// What a refusal names: the file, and where in it (the field path or key).
    fn names(err: &KustomizeError) -> (String, String) {
        match err {
            KustomizeError::Remote { file, field, .. }
            | KustomizeError::OutsideRoot { file, field, .. }
            | KustomizeError::Helm { file, field }
            | KustomizeError::Plugin { file, field, .. } => (file.clone(), field.clone()),
            KustomizeError::Field { file, at, .. }
            | KustomizeError::Shape { file, at, .. }
            | KustomizeError::PluginDirectory { file, at } => (file.clone(), at.clone()),
            KustomizeError::Encrypted { file } => (file.clone(), String::new()),
            KustomizeError::Invalid { file, cause } => (file.clone(), cause.clone()),
            other => panic!("unexpected {other}"),
        }
    }

    const U: &str = "http://127.0.0.1:9/x";

    /// An attack: the files (`URL` standing for a loopback URL), and the file and the field
    /// its refusal names.
    type Case = (
        &'static [(&'static str, &'static str)],
        &'static str,
        &'static str,
    );

    const K: &str = "k/kustomization.yaml";
    const T: &str = "k/t.yaml";

    /// Each case is refused, naming the file and where in it.
    fn assert_refused(cases: &[Case]) {
        for (files, file, at) in cases {
            let texts: Vec<(&str, String)> = files
                .iter()
                .map(|(p, t)| (*p, t.replace("URL", U)))
                .collect();
            let files: Vec<(&str, &str)> = texts.iter().map(|(p, t)| (*p, t.as_str())).collect();
            let err = check(&files, "k").expect_err(&format!("{files:?}"));
            assert_eq!(
                names(&err),
                (file.to_string(), at.to_string()),
                "{files:?}: {err}"
            );
        }
    }

    /// In the kustomization's own fields, every spelling.
    const FIELD_CASES: [Case; 33] = [
        (
            &[(K, "patches:\n- path: URL/patch?a=b\n")],
            K,
            "patches[0].path",
        ),
        (
            &[(K, "patches:\n- path: \"URL?a=b=c\"\n  target: {kind: X}\n")],
            K,
            "patches[0].path",
        ),
        (&[(K, "Resources: [URL/res.yaml]\n")], K, "Resources"),
        (&[(K, "RESOURCES: [URL]\n")], K, "RESOURCES"),
        (&[(K, "reſources: [URL]\n")], K, "reſources"),
        (
            &[(K, "\u{212A}ind: Kustomization\nresources: [URL]\n")],
            K,
            "\u{212A}ind",
        ),
        (&[(K, "patches:\n- Path: URL\n")], K, "patches[0].Path"),
        (
            &[(K, "openapi:\n  path: URL/schema?x=y\n")],
            K,
            "openapi.path",
        ),
        (&[(K, "openAPI:\n  path: URL\n")], K, "openAPI"),
        (
            &[(K, "resources: [\"HTTPS://127.0.0.1/x\"]\n")],
            K,
            "resources[0]",
        ),
        (&[(K, "bases: [URL]\n")], K, "bases[0]"),
        // YAML tags are read as kustomize's reader reads them (a binary is decoded).
        (
            &[(K, "resources:\n- !!binary aHR0cDovLzEyNy4wLjAuMTo5L3g=\n")],
            K,
            "resources[0]",
        ),
        (&[(K, "resources: [!custom URL]\n")], K, "resources[0]"),
        (&[(K, "\"re\\u017Fources\": [a.yaml]\n")], K, "reſources"),
        (&[(K, "components: [URL]\n")], K, "components[0]"),
        (
            &[(K, "components: [git@127.0.0.1:org/repo]\n")],
            K,
            "components[0]",
        ),
        (
            &[(K, "resources: [github.com/org/repo]\n")],
            K,
            "resources[0]",
        ),
        (&[(K, "crds: [URL]\n")], K, "crds[0]"),
        (&[(K, "configurations: [URL]\n")], K, "configurations[0]"),
        (
            &[(K, "replacements:\n- path: URL\n")],
            K,
            "replacements[0].path",
        ),
        (
            &[(K, "patchesStrategicMerge: [URL]\n")],
            K,
            "patchesStrategicMerge[0]",
        ),
        (
            &[(K, "patchesJson6902:\n- path: URL\n  target: {kind: X}\n")],
            K,
            "patchesJson6902[0].path",
        ),
        (
            &[(K, "configMapGenerator:\n- name: c\n  files: [key=URL]\n")],
            K,
            "configMapGenerator[0].files[0]",
        ),
        (
            &[(K, "configMapGenerator:\n- name: c\n  files: [URL]\n")],
            K,
            "configMapGenerator[0].files[0]",
        ),
        (
            &[(K, "secretGenerator:\n- name: c\n  envs: [URL]\n")],
            K,
            "secretGenerator[0].envs[0]",
        ),
        (
            &[(K, "secretGenerator:\n- name: c\n  env: URL\n")],
            K,
            "secretGenerator[0].env",
        ),
        (
            &[(K, "configMapGenerator:\n- name: c\n  Envs: [URL]\n")],
            K,
            "configMapGenerator[0].Envs",
        ),
        (&[(K, "generators: [URL]\n")], K, "generators[0]"),
        (&[(K, "validators: [URL]\n")], K, "validators[0]"),
        (&[(K, "transformers: [URL]\n")], K, "transformers[0]"),
        (
            &[(K, "helmCharts: [{name: x, repo: URL}]\n")],
            K,
            "helmCharts",
        ),
        (&[(K, "patches: {path: URL}\n")], K, "patches"),
        (
            &[(K, "configMapGenerator:\n- name: c\n  files: [../../URL]\n")],
            K,
            "configMapGenerator[0].files[0]",
        ),
    ];

    /// In plugin configurations (a file, inline as a block or one flow line, in a directory
    /// of them) and in the kustomizations a build reaches.
    const PLUGIN_CASES: [Case; 13] = [
        (
            &[
                (K, "transformers: [t.yaml]\n"),
                (
                    T,
                    "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npath: URL\n",
                ),
            ],
            T,
            "path",
        ),
        (
            &[
                (K, "transformers: [t.yaml]\n"),
                (
                    T,
                    "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\nPath: URL\n",
                ),
            ],
            T,
            "Path",
        ),
        (
            &[(
                K,
                "transformers:\n- |\n  apiVersion: builtin\n  kind: ValueAddTransformer\n  metadata: {name: v}\n  targetFilePath: URL\n",
            )],
            K,
            "transformers[0].targetFilePath",
        ),
        (
            &[(
                K,
                "transformers:\n- '{apiVersion: builtin, kind: PatchJson6902Transformer, metadata: {name: j}, path: \"URL\"}'\n",
            )],
            K,
            "transformers[0].path",
        ),
        (
            &[(
                K,
                "generators:\n- |\n  apiVersion: builtin\n  kind: ConfigMapGenerator\n  metadata: {name: c}\n  files: [k=URL]\n",
            )],
            K,
            "generators[0].files[0]",
        ),
        (
            &[(
                K,
                "transformers:\n- |\n  apiVersion: builtin\n  kind: PatchStrategicMergeTransformer\n  metadata: {name: c}\n  paths: [URL]\n",
            )],
            K,
            "transformers[0].paths[0]",
        ),
        (
            &[(
                K,
                "transformers:\n- |\n  apiVersion: builtin\n  kind: ReplacementTransformer\n  metadata: {name: c}\n  replacements: [{path: URL}]\n",
            )],
            K,
            "transformers[0].replacements[0].path",
        ),
        (
            &[(
                K,
                "transformers:\n- |\n  apiVersion: builtin\n  kind: HelmChartInflationGenerator\n  metadata: {name: c}\n  chartRepoUrl: URL\n",
            )],
            K,
            "transformers[0]",
        ),
        (
            &[
                (K, "transformers: [../t]\n"),
                ("t/kustomization.yaml", "resources: [t.yaml]\n"),
                (
                    "t/t.yaml",
                    "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npath: URL\n",
                ),
            ],
            "t/t.yaml",
            "path",
        ),
        (
            &[
                (K, "transformers: [../t]\n"),
                (
                    "t/kustomization.yaml",
                    "resources: [t.yaml]\npatches: [{path: p.yaml}]\n",
                ),
                (
                    "t/t.yaml",
                    "apiVersion: builtin\nkind: PrefixTransformer\nmetadata: {name: p}\nprefix: x-\n",
                ),
            ],
            "t/kustomization.yaml",
            "patches",
        ),
        (
            &[
                (K, "transformers: [../t]\n"),
                ("t/kustomization.yaml", "resources: [URL]\n"),
            ],
            "t/kustomization.yaml",
            "resources[0]",
        ),
        (
            &[
                (K, "resources: [../base]\ncomponents: [../c]\n"),
                ("base/kustomization.yaml", "resources: []\n"),
                (
                    "c/kustomization.yaml",
                    "kind: Component\npatches: [{path: URL}]\n",
                ),
            ],
            "c/kustomization.yaml",
            "patches[0].path",
        ),
        (
            &[
                (K, "validators: [v.yaml]\n"),
                (
                    "k/v.yaml",
                    "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: c}\nenvs: [URL]\n---\napiVersion: builtin\nkind: PrefixTransformer\nmetadata: {name: p}\nprefix: x-\n",
                ),
            ],
            "k/v.yaml",
            "envs[0]",
        ),
    ];

    #[test]
    fn urls_are_refused_in_every_field_that_loads_and_every_spelling() {
        assert_refused(&FIELD_CASES);
    }

    #[test]
    fn urls_are_refused_in_plugins_and_reached_kustomizations() {
        assert_refused(&PLUGIN_CASES);
    }

    #[test]
    fn urls_that_are_data_are_not_refused() {
        let files = [
            (
                "k/kustomization.yaml",
                "resources: [cm.yaml]\ncommonAnnotations: {docs: \"https://example.com/runbook\"}\nlabels:\n- pairs: {team: a}\nimages:\n- {name: nginx, newName: registry.example.com/nginx}\nconfigMapGenerator:\n- name: c\n  literals: [url=https://example.com]\npatches:\n- patch: |-\n    apiVersion: v1\n    kind: ConfigMap\n    metadata: {name: cm, annotations: {link: \"https://example.com\"}}\n- path: p=1.yaml\npatchesStrategicMerge:\n- |-\n  apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: cm, annotations: {link: \"https://example.com\"}}\ntransformers:\n- |\n  apiVersion: builtin\n  kind: AnnotationsTransformer\n  metadata: {name: a}\n  annotations: {link: \"https://example.com\"}\n  fieldSpecs: [{path: metadata/annotations, create: true}]\nopenapi: {version: v1.21.2}\n",
            ),
            (
                "k/cm.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n",
            ),
            ("k/p=1.yaml", "x"),
        ];
        assert_eq!(check(&files, "k"), Ok(()));
        let r = reads(&tree(&files), "k", None).expect("reads");
        assert!(r.inputs.contains("k/p=1.yaml"), "{r:?}");
    }

    #[test]
    fn yaml_that_kustomize_might_read_otherwise_is_refused() {
        for text in [
            format!("resources: [a.yaml]\nresources: [{U}]\n"),
            format!("base: &b {{resources: [{U}]}}\n<<: *b\n"),
            "transformers: [\"`t.yaml\"]\n".to_string(),
            "transformers: [\"{apiVersion: builtin, kind: PatchTransformer, path: [\"]\n"
                .to_string(),
        ] {
            let files = [("k/kustomization.yaml", text.as_str())];
            assert!(
                matches!(check(&files, "k"), Err(KustomizeError::Invalid { .. })),
                "{text}"
            );
        }
        // A SOPS-encrypted kustomization or configuration: its values are not readable.
        let files = [(
            "k/kustomization.yaml",
            "resources:\n- ENC[AES256_GCM,data:x,type:str]\nsops: {version: 3.9.0}\n",
        )];
        assert_eq!(
            check(&files, "k"),
            Err(KustomizeError::Encrypted {
                file: "k/kustomization.yaml".into()
            })
        );
        let files = [
            ("k/kustomization.yaml", "transformers: [t.yaml]\n"),
            (
                "k/t.yaml",
                "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npath: ENC[AES256_GCM,data:x,type:str]\nsops: {version: 3.9.0}\n",
            ),
        ];
        assert!(matches!(
            check(&files, "k"),
            Err(KustomizeError::Encrypted { file }) if file == "k/t.yaml"
        ));
    }

    #[test]
    fn the_refusal_says_what_kustomize_would_read() {
        let files = [("k/kustomization.yaml", "Resources: [x.yaml]\n")];
        let err = check(&files, "k").expect_err("capitalised");
        assert_eq!(
            err.to_string(),
            "k/kustomization.yaml: Resources is not a field of kustomize v5.7.1 as spelled (kustomize would read it as \"resources\"); spell field names exactly (kustomize matches them ignoring case, so the check refuses any other spelling)"
        );
        let files = [("k/kustomization.yaml", "resourcez: [x.yaml]\n")];
        let err = check(&files, "k").expect_err("unknown");
        assert!(
            err.to_string().starts_with(
                "k/kustomization.yaml: resourcez is not a field of kustomize v5.7.1 as spelled;"
            ),
            "{err}"
        );
    }

    #[test]
    fn plugin_files_resolve_against_the_kustomization_that_names_them() {
        // A configuration in a plugin directory names its patch relative to the kustomization
        // that lists the directory (kustomize's loader), and it is read as an input.
        let files = [
            (
                "k/kustomization.yaml",
                "resources: [cm.yaml]\ntransformers: [../t]\n",
            ),
            ("k/cm.yaml", "x"),
            ("k/p.yaml", "x"),
            ("t/kustomization.yaml", "resources: [t.yaml, sub]\n"),
            (
                "t/t.yaml",
                "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npath: p.yaml\n",
            ),
            ("t/sub/kustomization.yaml", "resources: [s.yaml]\n"),
            (
                "t/sub/s.yaml",
                "apiVersion: builtin\nkind: PrefixTransformer\nmetadata: {name: s}\nprefix: x-\n",
            ),
        ];
        let r = reads(&tree(&files), "k", None).expect("reads");
        assert!(r.inputs.contains("k/p.yaml"), "{r:?}");
        assert!(
            r.resources.contains("t/t.yaml") && r.resources.contains("t/sub/s.yaml"),
            "{r:?}"
        );
        // An unknown built-in kind is refused.
        let files = [(
            "k/kustomization.yaml",
            "transformers:\n- |\n  apiVersion: builtin\n  kind: SortOrderTransformer\n  metadata: {name: s}\n",
        )];
        assert!(matches!(
            check(&files, "k"),
            Err(KustomizeError::Plugin { what, .. }) if what.contains("not a built-in")
        ));
    }

    #[test]
    fn overrides_are_set_as_flux_sets_them() {
        let t = tree(&[(
            "ov/kustomization.yaml",
            "resources: [../base]\nnamePrefix: old-\nimages:\n- {name: nginx, newTag: '1.0', digest: sha256:aa}\n- {name: redis, newName: r}\n",
        )]);
        let o = KustomizeOverrides {
            target_namespace: Some("prod".into()),
            name_prefix: Some("new-".into()),
            name_suffix: Some("-x".into()),
            patches: vec![KustomizePatch {
                patch: "- op: add\n  path: /x\n  value: 1\n".into(),
                target: Some(KustomizeSelector {
                    kind: Some("Deployment".into()),
                    ..Default::default()
                }),
            }],
            images: vec![
                KustomizeImage {
                    name: "nginx".into(),
                    new_tag: Some("2.0".into()),
                    ..Default::default()
                },
                KustomizeImage {
                    name: "busybox".into(),
                    new_name: Some("bb".into()),
                    ..Default::default()
                },
            ],
            components: vec!["../comp".into()],
            ..Default::default()
        };
        let w = kustomization_for(&t, "ov", Some(&o))
            .expect("ok")
            .expect("written");
        assert_eq!(w.path, "ov/kustomization.yaml");
        let k: Value = serde_json::from_str(&w.text).expect("json");
        assert_eq!(k["namespace"], "prod");
        assert_eq!(k["namePrefix"], "new-");
        assert_eq!(k["nameSuffix"], "-x");
        assert_eq!(k["resources"], serde_json::json!(["../base"]));
        assert_eq!(k["components"], serde_json::json!(["../comp"]));
        assert_eq!(
            k["patches"][0]["target"],
            serde_json::json!({"kind": "Deployment"})
        );
        assert_eq!(
            k["images"],
            serde_json::json!([
                {"name": "nginx", "newTag": "2.0"},
                {"name": "redis", "newName": "r"},
                {"name": "busybox", "newName": "bb"}
            ])
        );
        // No overrides: the tree's own kustomization is used as it is.
        assert_eq!(kustomization_for(&t, "ov", None), Ok(None));
        // A remote component is refused.
        let o = KustomizeOverrides {
            components: vec!["https://x/c".into()],
            ..Default::default()
        };
        assert!(matches!(
            kustomization_for(&t, "ov", Some(&o)),
            Err(KustomizeError::Component { .. })
        ));
    }

    #[test]
    fn a_kustomization_is_generated_where_there_is_none() {
        let t = tree(&[
            ("d/a.yaml", "apiVersion: v1\n"),
            ("d/apps/kustomization.yaml", "resources: [x.yaml]\n"),
            ("d/apps/x.yaml", "apiVersion: v1\n"),
        ]);
        let w = kustomization_for(&t, "d", None)
            .expect("ok")
            .expect("generated");
        assert_eq!(w.path, "d/kustomization.yaml");
        let k: Value = serde_json::from_str(&w.text).expect("json");
        assert_eq!(k["resources"], serde_json::json!(["./a.yaml", "./apps"]));
        assert_eq!(k["kind"], "Kustomization");
    }
}

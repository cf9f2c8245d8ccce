//! Kustomizations as the build uses them, pure: the one generated over a source's `path` for
//! the set's `spec.kustomize` (as Flux's generator makes it: [`kustomization_for`]), and the
//! checks that refuse, before any build, what a build must not do ([`precheck`]): remote
//! resources, paths outside the source's root, helm charts, plugins.

use std::{cell::RefCell, collections::BTreeSet};

use serde_json::{Map, Value};

use super::{kustomize_error::KustomizeError, tree::Tree};
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
    let docs: Vec<Value> = serde_saphyr::from_multiple(text)?;
    match docs.into_iter().find(|d| !d.is_null()) {
        None => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m),
        Some(_) => Err(MappingError::NotMapping),
    }
}

/// Whether a kustomization entry names something remote: a URL, a Git address, or a
/// kustomize repository reference (`host/org/repo//path?ref=…`).
pub fn is_remote(entry: &str) -> bool {
    let lower = entry.trim().to_ascii_lowercase();
    const PREFIXES: [&str; 9] = [
        "git::",
        "gh:",
        "git@",
        "github.com/",
        "github.com:",
        "s3::",
        "gcs::",
        "hg::",
        "file:",
    ];
    PREFIXES.iter().any(|p| lower.starts_with(p))
        || lower.contains("://")
        || lower.contains("?ref=")
        || lower.contains("?version=")
        || lower.contains("//")
}

/// `entry` joined to directory `dir`, normalised; `None` when it is absolute or leaves the
/// root.
fn resolve(dir: &str, entry: &str) -> Option<String> {
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
    /// Files named by `resources`, `bases` or `components` (manifests).
    pub resources: BTreeSet<String>,
    /// Files read as inputs: patch files, generator `files`/`envs`, replacements,
    /// configurations, crds, openapi.
    pub inputs: BTreeSet<String>,
}

/// The context of one kustomization being checked.
struct Checking<'a> {
    tree: &'a Tree,
    /// The kustomization file's path (for messages).
    file: &'a str,
    /// Its directory.
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

    /// Classifies a `resources`/`components`/`bases` entry.
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

    /// Checks a path field (a patch file, a generator input): not remote, inside the root.
    fn path(&self, field: &str, entry: &str) -> Result<(), KustomizeError> {
        let file = entry.rsplit_once('=').map(|(_, f)| f).unwrap_or(entry);
        if file.contains("://") {
            return Err(self.remote(field, entry));
        }
        let path = resolve(self.dir, file).ok_or_else(|| self.outside(field, entry))?;
        if self.tree.is_file(&path) {
            self.reads.borrow_mut().inputs.insert(path);
        }
        Ok(())
    }
}

/// Refuses what a build must not do (see the module documentation), before it runs: every
/// kustomization reachable from `dir` (whose own is `written` when generated) is checked.
/// Returns the files of the tree the build reads.
pub fn precheck(
    tree: &Tree,
    dir: &str,
    written: Option<&Written>,
) -> Result<Reads, KustomizeError> {
    let reads = RefCell::new(Reads::default());
    let mut seen = BTreeSet::new();
    let mut queue = vec![dir.to_string()];
    while let Some(d) = queue.pop() {
        if !seen.insert(d.clone()) {
            continue;
        }
        let (file, k) = match written.filter(|w| d == dir && Some(w.path.as_str()).is_some()) {
            Some(w) => (
                w.path.clone(),
                parse_mapping(&w.text).map_err(|e| KustomizeError::Invalid {
                    file: w.path.clone(),
                    cause: e.to_string(),
                })?,
            ),
            None => match tree.kustomization_of(&d) {
                Some(f) => {
                    let k = read_kustomization(tree, &f)?;
                    (f, k)
                }
                None => continue,
            },
        };
        let c = Checking {
            tree,
            file: &file,
            dir: &d,
            reads: &reads,
        };
        queue.extend(check_kustomization(&c, &k)?);
    }
    Ok(reads.into_inner())
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

/// The strings of list `field` of `k` (a scalar counts as a one-entry list).
fn strings<'k>(k: &'k Map<String, Value>, field: &str) -> Vec<&'k str> {
    match k.get(field) {
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        Some(Value::String(s)) => vec![s.as_str()],
        _ => vec![],
    }
}

/// Checks one kustomization; returns the directories it includes (to check next).
fn check_kustomization(
    c: &Checking<'_>,
    k: &Map<String, Value>,
) -> Result<Vec<String>, KustomizeError> {
    for field in ["helmCharts", "helmChartInflationGenerator", "helmGlobals"] {
        if k.get(field).is_some_and(|v| !v.is_null()) {
            return Err(KustomizeError::Helm {
                file: c.file.into(),
                field: field.into(),
            });
        }
    }
    let mut dirs = Vec::new();
    for field in ["resources", "bases", "components"] {
        for entry in strings(k, field) {
            if let Target::Dir(d) = c.target(field, entry)? {
                dirs.push(d);
            }
        }
    }
    for field in ["generators", "transformers", "validators"] {
        for entry in strings(k, field) {
            dirs.extend(check_plugin(c, field, entry)?);
        }
    }
    check_paths(c, k)?;
    Ok(dirs)
}

/// Refuses a generator/transformer/validator entry that is not a built-in: its config (the
/// entry itself when inline, else the file it names) declares a KRM function or an apiVersion
/// other than `builtin`. An entry naming a directory (a kustomization whose output are the
/// configs) is returned, to be checked as a kustomization.
fn check_plugin(
    c: &Checking<'_>,
    field: &str,
    entry: &str,
) -> Result<Option<String>, KustomizeError> {
    let text = if entry.contains('\n') || entry.trim_start().starts_with("apiVersion") {
        entry.to_string()
    } else {
        match c.target(field, entry)? {
            Target::Dir(d) => return Ok(Some(d)),
            Target::Other => {
                let Some(path) = resolve(c.dir, entry) else {
                    return Err(c.outside(field, entry));
                };
                match c.tree.get(&path) {
                    Some(d) => String::from_utf8_lossy(d).into_owned(),
                    None => return Ok(None),
                }
            }
        }
    };
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&text).map_err(|e| KustomizeError::Invalid {
            file: c.file.into(),
            cause: format!("{field} entry {entry:?}: {e}"),
        })?;
    for doc in docs.iter().filter_map(Value::as_object) {
        let api = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
        let annotations = doc
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(Value::as_object);
        let function = annotations.is_some_and(|a| {
            a.contains_key("config.kubernetes.io/function")
                || a.contains_key("config.k8s.io/function")
        });
        if function || api != "builtin" {
            let what = if function {
                format!("a KRM function, {kind}")
            } else {
                format!("{api}/{kind}")
            };
            return Err(KustomizeError::Plugin {
                file: c.file.into(),
                field: field.into(),
                entry: entry.lines().next().unwrap_or_default().into(),
                what,
            });
        }
    }
    Ok(None)
}

/// Checks the file paths a kustomization names besides its resources: patches, generator
/// inputs, replacements, configurations, crds, openapi.
fn check_paths(c: &Checking<'_>, k: &Map<String, Value>) -> Result<(), KustomizeError> {
    let objects = |field: &str| -> Vec<&Map<String, Value>> {
        match k.get(field) {
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_object).collect(),
            _ => vec![],
        }
    };
    for field in ["patchesStrategicMerge", "configurations", "crds"] {
        for entry in strings(k, field).into_iter().filter(|e| !e.contains('\n')) {
            c.path(field, entry)?;
        }
    }
    for field in ["patches", "patchesJson6902", "replacements"] {
        for o in objects(field) {
            if let Some(p) = o.get("path").and_then(Value::as_str) {
                c.path(field, p)?;
            }
        }
    }
    for field in ["configMapGenerator", "secretGenerator"] {
        for o in objects(field) {
            for list in ["files", "envs", "env"] {
                for entry in strings(o, list) {
                    c.path(&format!("{field}.{list}"), entry)?;
                }
            }
        }
    }
    if let Some(p) = k
        .get("openapi")
        .and_then(|o| o.get("path"))
        .and_then(Value::as_str)
    {
        c.path("openapi.path", p)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{KustomizeImage, KustomizePatch, KustomizeSelector};

    fn tree(files: &[(&str, &str)]) -> Tree {
        let mut t = Tree::new();
        for (p, text) in files {
            t.insert(p.to_string(), text.as_bytes().to_vec());
        }
        t
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
                field: "resources".into(),
                entry: "https://example.com/x.yaml".into()
            }
        );
        assert!(
            err.to_string()
                .contains("base/kustomization.yaml: resources entry")
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
            ("resources", "resources: [../../outside]\n"),
            ("resources", "resources: [/etc/passwd]\n"),
            ("patches", "patches: [{path: ../../../x.yaml}]\n"),
            (
                "configMapGenerator.files",
                "configMapGenerator: [{name: a, files: [k=../../s]}]\n",
            ),
            (
                "secretGenerator.envs",
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
        assert!(err.to_string().contains("k/kustomization.yaml: generators entry \"gen.yaml\" is a kustomize plugin (a KRM function, Exec)"), "{err}");
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

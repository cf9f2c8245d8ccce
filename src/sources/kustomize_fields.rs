//! What kustomize reads from a kustomization and from the configurations of its built-in
//! generators and transformers, as data: every field name it decodes into a struct, spelled as
//! it spells it, and which fields name something it loads (a file, a directory, a URL). Pure:
//! [`walk`] lists what a parsed document names, [`is_remote`] says whether an entry is remote.
//!
//! The source of truth is kustomize v5.7.1, which builds with the Go modules
//! `sigs.k8s.io/kustomize/api v0.20.1` and `sigs.k8s.io/kustomize/kyaml v0.20.1`:
//! `api/types/{kustomization,patch,replacement,replacementfield,selector,image,labels,
//! replica,var,sortoptions,objectmeta,typemeta,generatorargs,configmapargs,secretargs,
//! kvpairsources,generatoroptions,fieldspec,helmchartargs,iampolicygenerator}.go`,
//! `api/internal/builtins/*.go` (the built-in plugins' configurations) and
//! `kyaml/resid/{gvk,resid}.go`. Kustomize decodes a kustomization (and a built-in's
//! configuration) as JSON with Go's `encoding/json`, which matches a key to a field ignoring
//! case, with Unicode folding (`Resources`, `reſources` and `Kind` with a Kelvin sign all reach
//! the same field): so every key here must be spelled exactly, and anything else is refused.
//! Keys of maps (`commonLabels`, `openapi`, `patches[].options`, ...) are data, matched
//! exactly by kustomize, and are not checked.

use serde_json::Value;

/// What a field's value is.
#[derive(Debug)]
pub enum Shape {
    /// A Go struct: its fields, each by its exact JSON name.
    Struct(&'static [(&'static str, Shape)]),
    /// A list of values of one shape.
    List(&'static Shape),
    /// Data kustomize loads nothing from (strings, numbers, booleans, maps of data).
    Data,
    /// The `openapi` map (`map[string]string`): its `path` entry names a file.
    OpenApi,
    /// A string naming something kustomize loads.
    Names(Load),
    /// Refused whatever it holds: helm charts are not inflated.
    Helm,
}

/// What a field naming something loads, and how kustomize reads its entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Load {
    /// `resources`, `bases`: a manifest file, a directory with a kustomization, or a remote
    /// base (a URL or a Git address).
    Resource,
    /// `components`: a directory with a kustomization (kind Component).
    Component,
    /// A file read as it is: a patch, a replacement, a CRD, a transformer configuration, an
    /// env file, an OpenAPI schema. The whole entry is the path.
    File,
    /// A generator's `files` entry: `path` or `key=path` (the path after the first `=`).
    KeyFile,
    /// A strategic-merge patch: a file, or the patch itself inline.
    PatchOrFile,
    /// A generator, transformer or validator: a configuration file, a directory whose
    /// kustomization's output are configurations, or a configuration inline.
    Plugin,
}

use Shape::{Data, List, Names, Struct};

const FILE: Shape = Names(Load::File);
const FILES: Shape = List(&FILE);

/// `resid.Gvk` (kyaml): group, version, kind.
const FIELD_SPEC: Shape = Struct(&[
    ("group", Data),
    ("version", Data),
    ("kind", Data),
    ("path", Data),
    ("create", Data),
]);
const FIELD_SPECS: Shape = List(&FIELD_SPEC);

/// `types.Selector`: `resid.ResId` (gvk, name, namespace) and the two selectors.
const SELECTOR: Shape = Struct(&[
    ("group", Data),
    ("version", Data),
    ("kind", Data),
    ("name", Data),
    ("namespace", Data),
    ("annotationSelector", Data),
    ("labelSelector", Data),
]);

/// `types.Patch`, of `patches` and `patchesJson6902`.
const PATCH: Shape = Struct(&[
    ("path", FILE),
    ("patch", Data),
    ("target", SELECTOR),
    ("options", Data),
]);

const IMAGE: Shape = Struct(&[
    ("name", Data),
    ("newName", Data),
    ("tagSuffix", Data),
    ("newTag", Data),
    ("digest", Data),
]);

const LABEL: Shape = Struct(&[
    ("pairs", Data),
    ("includeSelectors", Data),
    ("includeTemplates", Data),
    ("fields", FIELD_SPECS),
]);

const REPLICA: Shape = Struct(&[("name", Data), ("count", Data)]);

const FIELD_OPTIONS: Shape = Struct(&[
    ("delimiter", Data),
    ("index", Data),
    ("encoding", Data),
    ("create", Data),
]);

const SOURCE_SELECTOR: Shape = Struct(&[
    ("group", Data),
    ("version", Data),
    ("kind", Data),
    ("name", Data),
    ("namespace", Data),
    ("fieldPath", Data),
    ("options", FIELD_OPTIONS),
]);

const TARGET_SELECTOR: Shape = Struct(&[
    ("select", SELECTOR),
    ("reject", List(&SELECTOR)),
    ("fieldPaths", Data),
    ("options", FIELD_OPTIONS),
]);

/// `types.ReplacementField`: a replacement inline, or the file holding it.
const REPLACEMENT_FIELD: Shape = Struct(&[
    ("source", SOURCE_SELECTOR),
    ("targets", List(&TARGET_SELECTOR)),
    ("sourceValue", Data),
    ("path", FILE),
]);

const VAR: Shape = Struct(&[
    ("name", Data),
    (
        "objref",
        Struct(&[
            ("apiVersion", Data),
            ("group", Data),
            ("version", Data),
            ("kind", Data),
            ("name", Data),
            ("namespace", Data),
        ]),
    ),
    ("fieldref", Struct(&[("fieldPath", Data)])),
]);

const SORT_OPTIONS: Shape = Struct(&[
    ("order", Data),
    (
        "legacySortOptions",
        Struct(&[("orderFirst", Data), ("orderLast", Data)]),
    ),
]);

const GENERATOR_OPTIONS: Shape = Struct(&[
    ("labels", Data),
    ("annotations", Data),
    ("disableNameSuffixHash", Data),
    ("immutable", Data),
]);

/// `types.ObjectMeta` of a kustomization.
const OBJECT_META: Shape = Struct(&[
    ("name", Data),
    ("namespace", Data),
    ("labels", Data),
    ("annotations", Data),
]);

/// `types.ConfigMapArgs` (`GeneratorArgs` with `KvPairSources` inline).
const CONFIG_MAP_ARGS: Shape = Struct(&[
    ("namespace", Data),
    ("name", Data),
    ("behavior", Data),
    ("literals", Data),
    ("files", List(&Names(Load::KeyFile))),
    ("envs", FILES),
    ("env", FILE),
    ("options", GENERATOR_OPTIONS),
]);

/// `types.SecretArgs`: `ConfigMapArgs`' fields and `type`.
const SECRET_ARGS: Shape = Struct(&[
    ("namespace", Data),
    ("name", Data),
    ("behavior", Data),
    ("literals", Data),
    ("files", List(&Names(Load::KeyFile))),
    ("envs", FILES),
    ("env", FILE),
    ("options", GENERATOR_OPTIONS),
    ("type", Data),
]);

const RESOURCES: Shape = List(&Names(Load::Resource));
const PLUGINS: Shape = List(&Names(Load::Plugin));

/// `types.Kustomization` (with `TypeMeta` inline), every field of v5.7.1.
pub const KUSTOMIZATION: Shape = Struct(&[
    ("kind", Data),
    ("apiVersion", Data),
    ("metadata", OBJECT_META),
    ("openapi", Shape::OpenApi),
    ("namePrefix", Data),
    ("nameSuffix", Data),
    ("namespace", Data),
    ("commonLabels", Data),
    ("labels", List(&LABEL)),
    ("commonAnnotations", Data),
    ("patchesStrategicMerge", List(&Names(Load::PatchOrFile))),
    ("patchesJson6902", List(&PATCH)),
    ("patches", List(&PATCH)),
    ("images", List(&IMAGE)),
    ("imageTags", List(&IMAGE)),
    ("replacements", List(&REPLACEMENT_FIELD)),
    ("replicas", List(&REPLICA)),
    ("vars", List(&VAR)),
    ("sortOptions", SORT_OPTIONS),
    ("resources", RESOURCES),
    ("components", List(&Names(Load::Component))),
    ("crds", FILES),
    ("bases", RESOURCES),
    ("configMapGenerator", List(&CONFIG_MAP_ARGS)),
    ("secretGenerator", List(&SECRET_ARGS)),
    ("helmGlobals", Shape::Helm),
    ("helmCharts", Shape::Helm),
    ("helmChartInflationGenerator", Shape::Helm),
    ("generatorOptions", GENERATOR_OPTIONS),
    ("configurations", FILES),
    ("generators", PLUGINS),
    ("transformers", PLUGINS),
    ("validators", PLUGINS),
    ("buildMetadata", Data),
]);

/// A kustomization whose output are plugin configurations (a directory named by
/// `generators`, `transformers` or `validators`): it may only list them, since anything that
/// transforms them (patches, replacements, labels with field specs, ...) could write a field
/// the check never saw.
pub const PLUGIN_KUSTOMIZATION: Shape = Struct(&[
    ("kind", Data),
    ("apiVersion", Data),
    ("metadata", OBJECT_META),
    ("resources", RESOURCES),
    ("bases", RESOURCES),
]);

/// The fields every plugin configuration carries (kyaml reads them exactly).
macro_rules! config {
    ($($field:expr),* $(,)?) => {
        Struct(&[("apiVersion", Data), ("kind", Data), ("metadata", Data), $($field),*])
    };
}

/// The generator and transformer configurations (`apiVersion: builtin`), by kind, as each
/// built-in plugin decodes its configuration (`api/internal/builtins/<kind>.go`, with
/// `sigs.k8s.io/yaml`, which matches names as `encoding/json` does). `SortOrderTransformer` is
/// not wired as a built-in in v5.7.1; helm's is [`Shape::Helm`].
pub static BUILTINS: [(&str, Shape); 18] = [
    (
        "AnnotationsTransformer",
        config!(("annotations", Data), ("fieldSpecs", FIELD_SPECS)),
    ),
    ("ConfigMapGenerator", CONFIG_MAP_CONFIG),
    ("SecretGenerator", SECRET_CONFIG),
    ("HashTransformer", config!()),
    (
        "IAMPolicyGenerator",
        config!(
            ("cloud", Data),
            (
                "kubernetesService",
                Struct(&[("name", Data), ("namespace", Data)])
            ),
            (
                "serviceAccount",
                Struct(&[("name", Data), ("projectId", Data)])
            ),
        ),
    ),
    (
        "ImageTagTransformer",
        config!(("imageTag", IMAGE), ("fieldSpecs", FIELD_SPECS)),
    ),
    (
        "LabelTransformer",
        config!(("labels", Data), ("fieldSpecs", FIELD_SPECS)),
    ),
    (
        "NamespaceTransformer",
        config!(
            ("fieldSpecs", FIELD_SPECS),
            ("unsetOnly", Data),
            ("setRoleBindingSubjects", Data),
        ),
    ),
    (
        "PatchJson6902Transformer",
        config!(("target", SELECTOR), ("path", FILE), ("jsonOp", Data)),
    ),
    (
        "PatchStrategicMergeTransformer",
        config!(
            ("paths", List(&Names(Load::PatchOrFile))),
            ("patches", Data),
        ),
    ),
    (
        "PatchTransformer",
        config!(
            ("path", FILE),
            ("patch", Data),
            ("target", SELECTOR),
            ("options", Data),
        ),
    ),
    (
        "PrefixSuffixTransformer",
        config!(
            ("prefix", Data),
            ("suffix", Data),
            ("fieldSpecs", FIELD_SPECS),
        ),
    ),
    (
        "PrefixTransformer",
        config!(("prefix", Data), ("fieldSpecs", FIELD_SPECS)),
    ),
    (
        "SuffixTransformer",
        config!(("suffix", Data), ("fieldSpecs", FIELD_SPECS)),
    ),
    (
        "ReplicaCountTransformer",
        config!(("replica", REPLICA), ("fieldSpecs", FIELD_SPECS)),
    ),
    ("ValueAddTransformer", VALUE_ADD_CONFIG),
    (
        "ReplacementTransformer",
        config!(("replacements", List(&REPLACEMENT_FIELD))),
    ),
    ("HelmChartInflationGenerator", Shape::Helm),
];

/// `ConfigMapGeneratorPlugin`: `ObjectMeta` as `metadata`, `ConfigMapArgs` inline.
const CONFIG_MAP_CONFIG: Shape = config!(
    ("namespace", Data),
    ("name", Data),
    ("behavior", Data),
    ("literals", Data),
    ("files", List(&Names(Load::KeyFile))),
    ("envs", FILES),
    ("env", FILE),
    ("options", GENERATOR_OPTIONS),
);

/// `SecretGeneratorPlugin`: `ObjectMeta` as `metadata`, `SecretArgs` inline.
const SECRET_CONFIG: Shape = config!(
    ("namespace", Data),
    ("name", Data),
    ("behavior", Data),
    ("literals", Data),
    ("files", List(&Names(Load::KeyFile))),
    ("envs", FILES),
    ("env", FILE),
    ("options", GENERATOR_OPTIONS),
    ("type", Data),
);

/// `ValueAddTransformerPlugin` and its `Target`s.
const VALUE_ADD_CONFIG: Shape = config!(
    ("value", Data),
    (
        "targets",
        List(&Struct(&[
            ("selector", SELECTOR),
            ("fieldPath", Data),
            ("filePathPosition", Data),
        ]))
    ),
    ("targetFilePath", FILE),
);

/// The configuration of built-in generator or transformer `kind` ([`BUILTINS`]); `None`:
/// not a built-in of v5.7.1.
pub fn builtin(kind: &str) -> Option<&'static Shape> {
    BUILTINS
        .iter()
        .find(|(name, _)| *name == kind)
        .map(|(_, shape)| shape)
}

/// One entry of a field that names something kustomize loads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Named<'v> {
    /// Where it stands, e.g. `patches[2].path` or `openapi.path`.
    pub at: String,
    pub load: Load,
    pub entry: &'v str,
}

/// Why a document is refused by [`walk`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldError {
    /// A key that is not a field as spelled. `reads_as`: the field kustomize would decode it
    /// into (Go's case-insensitive, Unicode-folding match), if any.
    Unknown {
        at: String,
        key: String,
        reads_as: Option<&'static str>,
    },
    /// A value of the wrong kind (kustomize would refuse it too, but it is not walked).
    Shape { at: String, expected: &'static str },
    /// A helm field.
    Helm { at: String },
}

/// Walks `value` as `shape`, `at` naming where it stands (`""` at the top), and appends to
/// `out` the entries of every field that names something to load.
pub fn walk<'v>(
    shape: &Shape,
    value: &'v Value,
    at: &str,
    out: &mut Vec<Named<'v>>,
) -> Result<(), FieldError> {
    let wrong = |expected| FieldError::Shape {
        at: at.to_string(),
        expected,
    };
    match (shape, value) {
        (Shape::Helm, v) if v.is_null() => Ok(()),
        (Shape::Helm, _) => Err(FieldError::Helm { at: at.into() }),
        (Data, _) | (_, Value::Null) => Ok(()),
        (Struct(fields), Value::Object(map)) => {
            for (key, v) in map {
                let Some((_, shape)) = fields.iter().find(|(name, _)| name == key) else {
                    return Err(FieldError::Unknown {
                        at: join(at, key),
                        key: key.clone(),
                        reads_as: reads_as(fields, key),
                    });
                };
                walk(shape, v, &join(at, key), out)?;
            }
            Ok(())
        }
        (Struct(_), _) => Err(wrong("a mapping")),
        (List(item), Value::Array(items)) => {
            for (i, v) in items.iter().enumerate() {
                walk(item, v, &format!("{at}[{i}]"), out)?;
            }
            Ok(())
        }
        (List(_), _) => Err(wrong("a list")),
        (Shape::OpenApi, Value::Object(map)) => match map.get("path") {
            Some(v) => walk(&FILE, v, &join(at, "path"), out),
            None => Ok(()),
        },
        (Shape::OpenApi, _) => Err(wrong("a mapping")),
        (Names(load), Value::String(s)) => {
            out.push(Named {
                at: at.to_string(),
                load: *load,
                entry: s,
            });
            Ok(())
        }
        (Names(_), _) => Err(wrong("a string")),
    }
}

/// `at.key` (`key` at the top).
fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_string()
    } else {
        format!("{at}.{key}")
    }
}

/// The field of `fields` Go's `encoding/json` decodes `key` into when it is not spelled
/// exactly: the one equal to it under simple Unicode case folding.
fn reads_as(fields: &[(&'static str, Shape)], key: &str) -> Option<&'static str> {
    let folded = fold(key);
    fields
        .iter()
        .map(|(name, _)| *name)
        .find(|name| fold(name) == folded)
}

/// `s` folded as Go's `encoding/json` folds names: each character to the lower case of its
/// upper case (`ſ` to `s`, the Kelvin sign to `k`).
pub fn fold(s: &str) -> String {
    s.chars()
        .map(|c| {
            let upper = single(c.to_uppercase()).unwrap_or(c);
            single(upper.to_lowercase()).unwrap_or(upper)
        })
        .collect()
}

/// The one character of a case mapping, if it maps to one.
fn single(mut chars: impl Iterator<Item = char>) -> Option<char> {
    let c = chars.next()?;
    chars.next().is_none().then_some(c)
}

/// Whether an entry naming something to load is remote: a URL (`scheme://…`, or any
/// `scheme:` at its start, which Go's URL parser takes as one: `http:`, `https:`, `file:`,
/// `ssh:`, `git::`, `s3::`, `gh:`), a Git address (`user@host:…`, `github.com/…`,
/// `github.com:…`), a `//` (kustomize's repository/path separator, and `//host/…`), or a
/// kustomize repository query (`?ref=`, `?version=`). Leading white space is ignored.
pub fn is_remote(entry: &str) -> bool {
    let e = entry.trim_start();
    let lower = e.to_ascii_lowercase();
    lower.contains("://")
        || lower.contains("//")
        || lower.contains("?ref=")
        || lower.contains("?version=")
        || lower.starts_with("github.com/")
        || lower.starts_with("github.com:")
        || has_scheme(e)
        || has_user(e)
}

/// Whether `s` starts with a URL scheme and a colon (`ALPHA *(ALPHA / DIGIT / + / - / .) :`).
fn has_scheme(s: &str) -> bool {
    let mut chars = s.chars();
    if !chars.next().is_some_and(|c| c.is_ascii_alphabetic()) {
        return false;
    }
    for c in chars {
        match c {
            ':' => return true,
            c if c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.') => {}
            _ => return false,
        }
    }
    false
}

/// Whether `s` starts with a Git user name and `@` (`git@host:org/repo`), as kustomize's
/// repository parser reads one (`[a-zA-Z][a-zA-Z0-9-]*@`).
fn has_user(s: &str) -> bool {
    let mut chars = s.chars();
    if !chars.next().is_some_and(|c| c.is_ascii_alphabetic()) {
        return false;
    }
    for c in chars {
        match c {
            '@' => return true,
            c if c.is_ascii_alphanumeric() || c == '-' => {}
            _ => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn named(shape: &Shape, v: &Value) -> Result<Vec<(String, Load, String)>, FieldError> {
        let mut out = Vec::new();
        walk(shape, v, "", &mut out)?;
        Ok(out
            .into_iter()
            .map(|n| (n.at, n.load, n.entry.to_string()))
            .collect())
    }

    /// Every field name of [`KUSTOMIZATION`] at the top, as kustomize v5.7.1 defines them.
    const TOP: [&str; 34] = [
        "kind",
        "apiVersion",
        "metadata",
        "openapi",
        "namePrefix",
        "nameSuffix",
        "namespace",
        "commonLabels",
        "labels",
        "commonAnnotations",
        "patchesStrategicMerge",
        "patchesJson6902",
        "patches",
        "images",
        "imageTags",
        "replacements",
        "replicas",
        "vars",
        "sortOptions",
        "resources",
        "components",
        "crds",
        "bases",
        "configMapGenerator",
        "secretGenerator",
        "helmGlobals",
        "helmCharts",
        "helmChartInflationGenerator",
        "generatorOptions",
        "configurations",
        "generators",
        "transformers",
        "validators",
        "buildMetadata",
    ];

    #[test]
    fn the_top_level_fields_are_kustomizes_and_only_those() {
        let Struct(fields) = KUSTOMIZATION else {
            panic!("a struct")
        };
        let names: Vec<&str> = fields.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, TOP);
        for name in TOP {
            let v = json!({ name: null });
            assert_eq!(named(&KUSTOMIZATION, &v), Ok(vec![]), "{name}");
        }
    }

    #[test]
    fn a_top_level_key_not_spelled_exactly_is_refused_naming_what_kustomize_reads_it_as() {
        for (key, reads) in [
            ("Resources", Some("resources")),
            ("RESOURCES", Some("resources")),
            ("reſources", Some("resources")),
            ("\u{212A}ind", Some("kind")),
            ("ſortOptions", Some("sortOptions")),
            ("PatchesJSON6902", Some("patchesJson6902")),
            ("openAPI", Some("openapi")),
            ("apiversion", Some("apiVersion")),
            ("resource", None),
            ("sops", None),
            ("<<", None),
            (" resources", None),
        ] {
            let v = json!({ key: ["https://example.com/x.yaml"] });
            assert_eq!(
                named(&KUSTOMIZATION, &v),
                Err(FieldError::Unknown {
                    at: key.into(),
                    key: key.into(),
                    reads_as: reads
                }),
                "{key}"
            );
        }
    }

    /// One step from a value to a field inside it.
    #[derive(Clone, Debug)]
    enum Step {
        Key(&'static str),
        Item,
    }

    /// Every field of `shape`, at every depth: the steps to reach it.
    fn fields_of(shape: &'static Shape, prefix: &[Step], out: &mut Vec<Vec<Step>>) {
        match shape {
            Struct(fields) => {
                for (name, sub) in fields.iter() {
                    let mut path = prefix.to_vec();
                    path.push(Step::Key(name));
                    out.push(path.clone());
                    fields_of(sub, &path, out);
                }
            }
            List(item) => {
                let mut path = prefix.to_vec();
                path.push(Step::Item);
                fields_of(item, &path, out);
            }
            _ => {}
        }
    }

    /// A document holding `leaf` at `steps`, the last key spelled `last`; and where that is.
    fn document(steps: &[Step], last: &str, leaf: Value) -> (Value, String) {
        let mut v = leaf;
        for (i, step) in steps.iter().enumerate().rev() {
            v = match step {
                Step::Key(k) if i + 1 == steps.len() => json!({ last: v }),
                Step::Key(k) => json!({ *k: v }),
                Step::Item => json!([v]),
            };
        }
        let mut at = String::new();
        for (i, step) in steps.iter().enumerate() {
            match step {
                Step::Key(k) => {
                    let k = if i + 1 == steps.len() { last } else { k };
                    at = join(&at, k);
                }
                Step::Item => at.push_str("[0]"),
            }
        }
        (v, at)
    }

    /// Every field of the kustomization and of every built-in's configuration, at every depth:
    /// spelled exactly it is accepted; spelled otherwise (another case, the long s, the Kelvin
    /// sign) it is refused, naming where it stands and the field kustomize would read.
    #[test]
    fn every_field_at_every_depth_is_accepted_exactly_and_refused_otherwise() {
        let mut shapes: Vec<&'static Shape> = vec![&KUSTOMIZATION, &PLUGIN_KUSTOMIZATION];
        shapes.extend(BUILTINS.iter().map(|(_, s)| s));
        let mut checked = 0;
        for shape in shapes {
            let mut paths = Vec::new();
            fields_of(shape, &[], &mut paths);
            for steps in paths {
                let Some(Step::Key(name)) = steps.last() else {
                    continue;
                };
                let (v, _) = document(&steps, name, Value::Null);
                assert_eq!(named(shape, &v), Ok(vec![]), "{v}");
                let mut respelled = vec![format!("{}{}", name[..1].to_uppercase(), &name[1..])];
                respelled.push(name.to_uppercase());
                respelled.push(name.replace('s', "ſ").replace('k', "\u{212A}"));
                for other in respelled.into_iter().filter(|o| o != name) {
                    let (v, at) = document(&steps, &other, Value::Null);
                    assert_eq!(
                        named(shape, &v),
                        Err(FieldError::Unknown {
                            at,
                            key: other.clone(),
                            reads_as: Some(name)
                        }),
                        "{v}"
                    );
                    checked += 1;
                }
            }
        }
        // The kustomization alone has over a hundred fields at all depths.
        assert!(checked > 300, "{checked}");
    }

    #[test]
    fn every_field_naming_a_file_is_listed_whole() {
        let v = json!({
            "resources": ["a.yaml", "../base"],
            "bases": ["b"],
            "components": ["../c"],
            "crds": ["crd.json"],
            "configurations": ["conf.yaml"],
            "openapi": {"path": "schema.json", "version": "v1.21.2", "Path": "x"},
            "patchesStrategicMerge": ["sm.yaml"],
            "patchesJson6902": [{"path": "j=1.yaml", "target": {"kind": "X"}}],
            "patches": [{"path": "p?a=b.yaml"}, {"patch": "- op: add", "options": {"allowNameChange": true}}],
            "replacements": [{"path": "r.yaml"}, {"source": {"kind": "X", "options": {"delimiter": "/"}}, "targets": [{"select": {"kind": "Y"}, "reject": [{"name": "z"}], "fieldPaths": ["a"]}]}],
            "configMapGenerator": [{"name": "c", "files": ["k=v=w", "f"], "envs": ["e=1.env"], "env": "x.env", "literals": ["a=https://x"]}],
            "secretGenerator": [{"name": "s", "type": "Opaque", "files": ["s.bin"]}],
            "generators": ["g.yaml"],
            "transformers": ["t.yaml"],
            "validators": ["v.yaml"],
            "commonAnnotations": {"docs": "https://example.com/docs"},
            "commonLabels": {"Resources": "x"},
            "labels": [{"pairs": {"a": "b"}, "fields": [{"kind": "X", "path": "spec/x", "create": true}]}],
            "namePrefix": "https://",
            "buildMetadata": ["originAnnotations"],
            "images": [{"name": "a", "newName": "https://x", "tagSuffix": "-x"}],
            "vars": [{"name": "V", "objref": {"apiVersion": "v1", "kind": "X", "name": "x"}, "fieldref": {"fieldPath": "spec"}}],
        });
        let want = [
            ("bases[0]", Load::Resource, "b"),
            ("components[0]", Load::Component, "../c"),
            ("configMapGenerator[0].env", Load::File, "x.env"),
            ("configMapGenerator[0].envs[0]", Load::File, "e=1.env"),
            ("configMapGenerator[0].files[0]", Load::KeyFile, "k=v=w"),
            ("configMapGenerator[0].files[1]", Load::KeyFile, "f"),
            ("configurations[0]", Load::File, "conf.yaml"),
            ("crds[0]", Load::File, "crd.json"),
            ("generators[0]", Load::Plugin, "g.yaml"),
            ("openapi.path", Load::File, "schema.json"),
            ("patches[0].path", Load::File, "p?a=b.yaml"),
            ("patchesJson6902[0].path", Load::File, "j=1.yaml"),
            ("patchesStrategicMerge[0]", Load::PatchOrFile, "sm.yaml"),
            ("replacements[0].path", Load::File, "r.yaml"),
            ("resources[0]", Load::Resource, "a.yaml"),
            ("resources[1]", Load::Resource, "../base"),
            ("secretGenerator[0].files[0]", Load::KeyFile, "s.bin"),
            ("transformers[0]", Load::Plugin, "t.yaml"),
            ("validators[0]", Load::Plugin, "v.yaml"),
        ];
        let mut got = named(&KUSTOMIZATION, &v).expect("walks");
        got.sort();
        let mut want: Vec<(String, Load, String)> = want
            .iter()
            .map(|(a, l, e)| (a.to_string(), *l, e.to_string()))
            .collect();
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn helm_fields_and_wrong_shapes_are_refused() {
        for field in ["helmCharts", "helmGlobals", "helmChartInflationGenerator"] {
            let v = json!({ field: [{"name": "x"}] });
            assert_eq!(
                named(&KUSTOMIZATION, &v),
                Err(FieldError::Helm { at: field.into() })
            );
        }
        for (v, at, expected) in [
            (json!({"resources": "x.yaml"}), "resources", "a list"),
            (json!({"resources": [["x"]]}), "resources[0]", "a string"),
            (json!({"patches": {"path": "x"}}), "patches", "a list"),
            (json!({"patches": ["x"]}), "patches[0]", "a mapping"),
            (json!({"openapi": "x"}), "openapi", "a mapping"),
            (json!({"openapi": {"path": 1}}), "openapi.path", "a string"),
            (
                json!({"configMapGenerator": [{"env": ["a"]}]}),
                "configMapGenerator[0].env",
                "a string",
            ),
        ] {
            assert_eq!(
                named(&KUSTOMIZATION, &v),
                Err(FieldError::Shape {
                    at: at.into(),
                    expected
                }),
                "{v}"
            );
        }
        assert_eq!(named(&KUSTOMIZATION, &json!(null)), Ok(vec![]));
        assert_eq!(
            named(
                &KUSTOMIZATION,
                &json!({"resources": [null], "patches": [null]})
            ),
            Ok(vec![])
        );
    }

    /// A built-in's kind, configuration fields (JSON), and where the files it names stand.
    type BuiltinCase = (&'static str, &'static str, &'static [(&'static str, Load)]);

    const BUILTIN_FILES: [BuiltinCase; 17] = [
        (
            "PatchTransformer",
            r#"{"path": "p.yaml", "target": {"kind": "X"}, "options": {"a": true}}"#,
            &[("path", Load::File)],
        ),
        (
            "PatchJson6902Transformer",
            r#"{"path": "j.yaml", "jsonOp": "[]"}"#,
            &[("path", Load::File)],
        ),
        (
            "PatchStrategicMergeTransformer",
            r#"{"paths": ["a.yaml"], "patches": "x"}"#,
            &[("paths[0]", Load::PatchOrFile)],
        ),
        (
            "ValueAddTransformer",
            r#"{"value": "v", "targetFilePath": "t.yaml", "targets": [{"selector": {"kind": "X"}, "fieldPath": "a", "filePathPosition": 1}]}"#,
            &[("targetFilePath", Load::File)],
        ),
        (
            "ReplacementTransformer",
            r#"{"replacements": [{"path": "r.yaml"}]}"#,
            &[("replacements[0].path", Load::File)],
        ),
        (
            "ConfigMapGenerator",
            r#"{"name": "c", "files": ["k=f"], "envs": ["e"], "env": "x"}"#,
            &[
                ("env", Load::File),
                ("envs[0]", Load::File),
                ("files[0]", Load::KeyFile),
            ],
        ),
        (
            "SecretGenerator",
            r#"{"name": "s", "type": "t", "files": ["f"]}"#,
            &[("files[0]", Load::KeyFile)],
        ),
        (
            "LabelTransformer",
            r#"{"labels": {"a": "https://x"}, "fieldSpecs": [{"path": "x", "create": true}]}"#,
            &[],
        ),
        (
            "AnnotationsTransformer",
            r#"{"annotations": {"a": "https://x"}, "fieldSpecs": []}"#,
            &[],
        ),
        (
            "ImageTagTransformer",
            r#"{"imageTag": {"name": "a", "newTag": "1"}, "fieldSpecs": []}"#,
            &[],
        ),
        (
            "NamespaceTransformer",
            r#"{"fieldSpecs": [], "unsetOnly": true, "setRoleBindingSubjects": "none"}"#,
            &[],
        ),
        (
            "PrefixSuffixTransformer",
            r#"{"prefix": "a", "suffix": "b", "fieldSpecs": []}"#,
            &[],
        ),
        ("PrefixTransformer", r#"{"prefix": "a"}"#, &[]),
        ("SuffixTransformer", r#"{"suffix": "a"}"#, &[]),
        (
            "ReplicaCountTransformer",
            r#"{"replica": {"name": "a", "count": 2}}"#,
            &[],
        ),
        (
            "IAMPolicyGenerator",
            r#"{"cloud": "gke", "kubernetesService": {"name": "a", "namespace": "b"}, "serviceAccount": {"name": "a", "projectId": "p"}}"#,
            &[],
        ),
        ("HashTransformer", "{}", &[]),
    ];

    #[test]
    fn builtin_configurations_list_their_files() {
        for (kind, fields, want) in BUILTIN_FILES {
            let mut v: Value = serde_json::from_str(fields).expect(kind);
            v["apiVersion"] = json!("builtin");
            v["kind"] = json!(kind);
            v["metadata"] = json!({"name": "x", "annotations": {"a": "b"}});
            let shape = builtin(kind).expect(kind);
            let mut got: Vec<(String, Load)> = named(shape, &v)
                .expect(kind)
                .into_iter()
                .map(|(a, l, _)| (a, l))
                .collect();
            got.sort();
            let want: Vec<(String, Load)> = want.iter().map(|(a, l)| (a.to_string(), *l)).collect();
            assert_eq!(got, want, "{kind}");
        }
        // Every built-in but helm's is listed (helm is refused whatever it holds).
        assert_eq!(BUILTIN_FILES.len() + 1, BUILTINS.len());
        assert!(matches!(
            named(
                builtin("HelmChartInflationGenerator").expect("helm"),
                &json!({"chartName": "x"})
            ),
            Err(FieldError::Helm { .. })
        ));
        for kind in ["SortOrderTransformer", "patchTransformer", "Exec", ""] {
            assert!(builtin(kind).is_none(), "{kind}");
        }
    }

    #[test]
    fn a_plugin_directorys_kustomization_may_only_list_resources() {
        let v = json!({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["a.yaml", "sub"], "bases": ["b"]});
        assert_eq!(named(&PLUGIN_KUSTOMIZATION, &v).expect("walks").len(), 3);
        for field in [
            "patches",
            "replacements",
            "labels",
            "commonLabels",
            "namePrefix",
            "transformers",
            "configMapGenerator",
            "vars",
        ] {
            let v = json!({ field: [] });
            assert!(
                matches!(
                    named(&PLUGIN_KUSTOMIZATION, &v),
                    Err(FieldError::Unknown { .. })
                ),
                "{field}"
            );
        }
    }

    #[test]
    fn folding_is_gos() {
        assert_eq!(fold("ReSources"), "resources");
        assert_eq!(fold("reſources"), "resources");
        assert_eq!(fold("\u{212A}IND"), "kind");
        assert_ne!(fold("resource"), fold("resources"));
    }

    #[test]
    fn remote_entries_are_recognised_wherever_they_stand() {
        for remote in [
            "https://github.com/org/repo//deploy?ref=v1",
            "http://127.0.0.1:8080/patch?a=b",
            "HTTP://127.0.0.1/res.yaml",
            "  https://127.0.0.1/x",
            "http:127.0.0.1:8080/x",
            "http:/127.0.0.1/x",
            "https:\\\\127.0.0.1\\x",
            "github.com/org/repo/deploy?ref=main",
            "GitHub.com/org/repo",
            "github.com:org/repo",
            "git@github.com:org/repo.git",
            "deploy@127.0.0.1:repo",
            "git::https://example.com/r",
            "ssh://git@example.com/r",
            "gh:org/repo",
            "s3::https://bucket/x",
            "example.com/org/repo//path",
            "//127.0.0.1/x",
            "file:///etc",
            "file:x",
            "host/org/repo?ref=v1",
            "host/org/repo?version=v1",
            "a/b/../x?x=y://",
        ] {
            assert!(is_remote(remote), "{remote}");
        }
        for local in [
            "../base",
            "deploy.yaml",
            "./a/b",
            "base",
            "patch?a=b.yaml",
            "a=b.env",
            "my.app/x.yaml",
            "./http:x.yaml",
            "1http:x",
            "_git@x",
            "a b@c",
            "",
        ] {
            assert!(!is_remote(local), "{local}");
        }
    }
}

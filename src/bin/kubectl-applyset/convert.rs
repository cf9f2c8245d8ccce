//! `convert`: reads Flux objects (files with `-f`, or the cluster with `--from-cluster`),
//! converts them with the library's pure [`applyset_operator::convert`], and prints the sets
//! as a YAML stream on standard output (a `# converted from …` comment above each) and the
//! notes on standard error (`note:` for a choice made, `warning:` for a field dropped,
//! `error:` for a refused Kustomization). What each Kustomization writes (which decides
//! ApplySet or ClusterApplySet) is read from its `status.inventory` on the cluster; otherwise
//! the converted set is built offline, as `build` does, and the members' namespaces decide.
//! Exit 0, or 2 with `--strict` when a field was dropped or a Kustomization refused.

use std::path::{Path, PathBuf};

use applyset_operator::{
    applyset::ParentRef,
    convert::{self, Conversion, FluxRef, Input, Note, Set, Severity, Written},
    tenancy::Defaults,
};
use kube::Client;
use serde_json::Value;

use crate::{
    Global, conn,
    error::CliError,
    file::{File, SetDoc},
    render_file::Renderer,
};

/// The largest file read (a Flux repository's manifests are far smaller).
const MAX_FILE_BYTES: u64 = 8 << 20;
/// The most files a directory given to `-f` may hold (recursively).
const MAX_FILES: usize = 10_000;

/// What `convert` reads and how it reports.
pub struct Options {
    /// `-f PATH`: a file, a directory (recursively) or `-`.
    pub file: Option<PathBuf>,
    /// `--from-cluster [NAMESPACE | NAMESPACE/NAME]` (`""`: the context's namespace).
    pub from_cluster: Option<String>,
    /// `--service-account NAMESPACE/NAME`.
    pub service_account: Option<String>,
    pub strict: bool,
}

pub async fn run(g: &Global, opts: &Options) -> Result<u8, CliError> {
    let cluster_service_account = opts
        .service_account
        .as_deref()
        .map(applyset_operator::tenancy::parse_namespaced_name)
        .transpose()
        .map_err(|e| CliError::Usage(format!("--service-account: {e}")))?;
    let mut input = match (&opts.file, &opts.from_cluster) {
        (Some(path), _) => {
            let mut objects = read_path(path)?;
            let namespace = g.namespace.as_deref().unwrap_or("default");
            for o in &mut objects {
                if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut)
                    && meta
                        .get("namespace")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
                {
                    meta.insert("namespace".into(), Value::String(namespace.into()));
                }
            }
            Input {
                objects,
                ..Input::default()
            }
        }
        (None, Some(target)) => {
            let c = conn::connect(g).await?;
            let (namespace, name) = match target.split_once('/') {
                Some((ns, name)) => (ns.to_string(), Some(name)),
                None if target.is_empty() => (c.namespace.clone(), None),
                None => (target.clone(), None),
            };
            read_from_cluster(&c.client, &namespace, name).await?
        }
        (None, None) => return Err(CliError::Usage("give -f PATH or --from-cluster".into())),
    };
    input.cluster_service_account = cluster_service_account;
    let kustomizations = input
        .objects
        .iter()
        .filter(|o| convert::flux::read(o, "default").is_some_and(|o| o.id.kind == "Kustomization"))
        .count();
    if kustomizations == 0 {
        return Err(CliError::Usage(
            "no Flux Kustomization (kustomize.toolkit.fluxcd.io) was read".into(),
        ));
    }
    let first = convert::convert(&input);
    let mut notes = written_by_build(g, &mut input, &first).await;
    let conversion = convert::convert(&input);
    notes.extend(conversion.notes.iter().cloned());
    let stream = print(&conversion)?;
    print_notes(&notes);
    print!("{stream}");
    let fails = conversion.fails_strict();
    Ok(if opts.strict && fails {
        crate::EXIT_ERROR
    } else {
        0
    })
}

/// The notes on standard error: `note:`, `warning:` (a field dropped), `error:` (refused).
pub fn print_notes(notes: &[Note]) {
    for n in notes {
        let level = match n.severity {
            Severity::Info => "note",
            Severity::Dropped => "warning",
            Severity::Refused => "error",
        };
        eprintln!("{level}: {n}");
    }
}

/// The sets of `c` as a YAML stream, a `# converted from Kustomization ns/name (Kind
/// ns/name)` comment above each.
pub fn print(c: &Conversion) -> Result<String, CliError> {
    let mut out = String::new();
    for s in &c.sets {
        let value = match &s.set {
            Set::Namespaced(a) => serde_json::to_value(a),
            Set::Cluster(cs) => serde_json::to_value(cs),
        }
        .map_err(|e| CliError::Yaml(e.to_string()))?;
        out.push_str(&format!(
            "---\n# converted from {} ({})\n",
            s.from, s.source
        ));
        out.push_str(&crate::output::to_yaml(&value)?);
    }
    Ok(out)
}

/// The Flux documents of `path`: a file, every .yaml/.yml/.json file under a directory
/// (sorted), or standard input (`-`). A file that is not YAML is skipped with a warning (a
/// repository holds templates too); documents that are not objects are left out.
pub fn read_path(path: &Path) -> Result<Vec<Value>, CliError> {
    if path.as_os_str() == "-" {
        let text = std::io::read_to_string(std::io::stdin())
            .map_err(|e| CliError::File(format!("reading standard input: {e}")))?;
        return parse(&text, "-").map_err(CliError::File);
    }
    let files = if path.is_dir() {
        let mut files = Vec::new();
        walk(path, &mut files)?;
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut out = Vec::new();
    let single = files.len() == 1 && !path.is_dir();
    for f in &files {
        let shown = f.display().to_string();
        let size = std::fs::metadata(f).map_err(|e| CliError::File(format!("{shown}: {e}")))?;
        if size.len() > MAX_FILE_BYTES {
            return Err(CliError::File(format!(
                "{shown}: larger than {MAX_FILE_BYTES} bytes; convert its Flux objects from a smaller file"
            )));
        }
        let text =
            std::fs::read_to_string(f).map_err(|e| CliError::File(format!("{shown}: {e}")))?;
        match parse(&text, &shown) {
            Ok(docs) => out.extend(docs),
            Err(e) if single => return Err(CliError::File(e)),
            Err(e) => eprintln!("warning: {e}: skipped"),
        }
    }
    Ok(out)
}

/// The files under `dir` ending in .yaml, .yml or .json (at most [`MAX_FILES`]).
fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), CliError> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| CliError::File(format!("{}: {e}", dir.display())))?;
    for entry in entries {
        let entry = entry.map_err(|e| CliError::File(format!("{}: {e}", dir.display())))?;
        let p = entry.path();
        let kind = entry
            .file_type()
            .map_err(|e| CliError::File(format!("{}: {e}", p.display())))?;
        if kind.is_dir() {
            walk(&p, files)?;
        } else if kind.is_file()
            && p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        {
            files.push(p);
            if files.len() > MAX_FILES {
                return Err(CliError::File(format!(
                    "{}: more than {MAX_FILES} files; give a smaller directory",
                    dir.display()
                )));
            }
        }
    }
    Ok(())
}

/// The documents of a multi-document YAML (or JSON) text, read as kubectl reads YAML.
fn parse(text: &str, shown: &str) -> Result<Vec<Value>, String> {
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    options.legacy_octal_numbers = true;
    let docs: Vec<Value> = serde_saphyr::from_str_multiple_with_options(text, options)
        .map_err(|e| format!("{shown}: not YAML: {e}"))?;
    Ok(docs.into_iter().filter(Value::is_object).collect())
}

/// The Kustomizations of `namespace` (or the one named `name`), the sources they reference,
/// and what each writes from its `status.inventory` ([`convert::cluster::read`]).
pub async fn read_from_cluster(
    client: &Client,
    namespace: &str,
    name: Option<&str>,
) -> Result<Input, CliError> {
    convert::cluster::read(client, namespace, name)
        .await
        .map_err(|e| CliError::Api {
            doing: e.doing,
            error: e.error,
        })
}

/// For each set of `first` whose Kustomization has no `written` yet: builds it offline as
/// `build` does (as an ApplySet allowed to write anywhere, so the build says where its
/// members go) and records the members' namespaces; a set that cannot be built offline gets
/// a note and is decided from its spec.
async fn written_by_build(g: &Global, input: &mut Input, first: &Conversion) -> Vec<Note> {
    let mut notes = Vec::new();
    let docs: Vec<(FluxRef, SetDoc)> = first
        .sets
        .iter()
        .filter(|s| !input.written.contains_key(&s.from))
        .map(|s| (s.from.clone(), probe(s)))
        .collect();
    if docs.is_empty() {
        return notes;
    }
    let (froms, sets): (Vec<FluxRef>, Vec<SetDoc>) = docs.into_iter().unzip();
    let file = File {
        path: "converted".into(),
        sets,
        crds: Vec::new(),
    };
    let defaults = Defaults {
        allow_cross_namespace: true,
        ..Defaults::default()
    };
    let keys = crate::age_keys::local_keys(g.sops_age_key_file.as_deref())
        .ok()
        .flatten();
    let renderer =
        Renderer::new(&file, None, defaults, g.kustomize_binary.clone()).with_age_keys(keys);
    for (from, doc) in froms.into_iter().zip(&file.sets) {
        match renderer.render(&file, doc).await {
            Ok(r) => {
                let namespaces = r.set.members.iter().map(|m| m.reference.namespace.clone()).collect();
                input.written.insert(from, Written { namespaces, from: "a build of the converted set".into() });
            }
            Err(e) => notes.push(Note {
                object: from,
                field: String::new(),
                severity: Severity::Info,
                why: format!("what it writes could not be known from a build of the converted set ({e}); its scope is decided from its spec"),
            }),
        }
    }
    notes
}

/// The set of `s` as an ApplySet to build (in the Kustomization's namespace, with no
/// ServiceAccount namespace, which only a ClusterApplySet has).
fn probe(s: &convert::Converted) -> SetDoc {
    let mut spec = match &s.set {
        Set::Namespaced(a) => a.spec.clone(),
        Set::Cluster(cs) => cs.spec.0.clone(),
    };
    spec.service_account_namespace = None;
    spec.service_account_name = None;
    SetDoc {
        parent: ParentRef::applyset(&s.from.namespace, &s.from.name),
        spec,
        line: 0,
        manifest_lines: Vec::new(),
        source_lines: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn multi_document_yaml_keeps_objects_only() {
        let docs = parse(
            "a: 1\n---\n# comment\n---\n- x\n---\nkind: K\nmode: 0644\n",
            "f",
        )
        .expect("yaml");
        assert_eq!(
            docs,
            vec![json!({"a": 1}), json!({"kind": "K", "mode": 420})]
        );
        assert!(
            parse("a: [", "f")
                .expect_err("not yaml")
                .starts_with("f: not YAML")
        );
    }
}

//! `convert`: reads Flux objects (files with `-f`, or the cluster with `--from-cluster`),
//! converts them with the library's pure [`applyset_operator::convert`], and prints the sets
//! as a YAML stream on standard output (a `# converted from …` comment above each) and the
//! notes on standard error (`note:` for a choice made, `warning:` for a field dropped,
//! `error:` for a refused Kustomization). What each Kustomization writes (which decides
//! ApplySet or ClusterApplySet) is read from its `status.inventory` on the cluster; otherwise
//! the converted set is built offline, as `build` does, and the members' namespaces decide.
//! Exit 0, or 2 with `--strict` when a field was dropped or a Kustomization refused.

use std::{
    io::Read,
    path::{Path, PathBuf},
};

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

/// The largest file read, standard input included (a Flux repository's manifests are far
/// smaller).
const MAX_FILE_BYTES: u64 = 8 << 20;
/// The most bytes read from all the files of a directory given to `-f`, together.
const MAX_TOTAL_BYTES: u64 = 64 << 20;
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
    /// `--handover` (with `--timeout`): hand the one Kustomization of `--from-cluster` over.
    pub handover: crate::handover::HandoverArgs,
}

pub async fn run(g: &Global, opts: &Options) -> Result<u8, CliError> {
    let cluster_service_account = opts
        .service_account
        .as_deref()
        .map(applyset_operator::tenancy::parse_namespaced_name)
        .transpose()
        .map_err(|e| CliError::Usage(format!("--service-account: {e}")))?;
    let (mut input, client) = read_input(g, opts).await?;
    input.cluster_service_account = cluster_service_account;
    // A Kustomization a handover suspended (one stopped before its end) is converted as it
    // was before, with or without --handover.
    let mut notes = if client.is_some() {
        restore_handed_over(&mut input.objects)
    } else {
        Vec::new()
    };
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
    notes.extend(written_by_build(g, &mut input, &first).await);
    let conversion = convert::convert(&input);
    notes.extend(conversion.notes.iter().cloned());
    let stream = print(&conversion)?;
    print_notes(&notes);
    print!("{stream}");
    if opts.handover.handover
        && let Some(client) = &client
    {
        let from = opts.from_cluster.as_deref().unwrap_or_default();
        return crate::handover::after_convert(client, from, &opts.handover, &conversion).await;
    }
    let fails = conversion.fails_strict();
    Ok(if opts.strict && fails {
        crate::EXIT_ERROR
    } else {
        0
    })
}

/// The Flux objects of `-f` (with `-n`'s namespace, else `default`, where they name none), or
/// of `--from-cluster` with the client that read them.
async fn read_input(g: &Global, opts: &Options) -> Result<(Input, Option<Client>), CliError> {
    match (&opts.file, &opts.from_cluster) {
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
            let input = Input {
                objects,
                ..Input::default()
            };
            Ok((input, None))
        }
        (None, Some(target)) => {
            let c = conn::connect(g).await?;
            let (namespace, name) = match target.split_once('/') {
                Some((ns, name)) => (ns.to_string(), Some(name)),
                None if target.is_empty() => (c.namespace.clone(), None),
                None => (target.clone(), None),
            };
            let input = read_from_cluster(&c.client, &namespace, name).await?;
            Ok((input, Some(c.client)))
        }
        (None, None) => Err(CliError::Usage("give -f PATH or --from-cluster".into())),
    }
}

/// Puts back the `spec.suspend` and `spec.deletionPolicy` a handover recorded on each
/// Kustomization it suspended ([`crate::handover::checks::restore_original`]), with a note
/// for each: the Kustomization is still suspended on the cluster.
fn restore_handed_over(objects: &mut [Value]) -> Vec<Note> {
    let mut notes = Vec::new();
    for o in objects {
        let Some(id) = convert::flux::read(o, "default")
            .filter(|f| f.id.kind == "Kustomization")
            .map(|f| f.id)
        else {
            continue;
        };
        let Some(original) = crate::handover::checks::recorded(o) else {
            continue;
        };
        crate::handover::checks::restore_original(o);
        notes.push(Note {
            object: id,
            field: String::new(),
            severity: Severity::Info,
            why: format!(
                "suspended by a handover that did not finish (annotation {}); converted as it was before it: suspend {}, deletionPolicy {}",
                crate::handover::checks::ANNOTATION_ORIGINAL,
                original.suspend,
                original.deletion_policy.as_deref().unwrap_or("not set"),
            ),
        });
    }
    notes
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
/// repository holds templates too); documents that are not objects are left out. Each file
/// (and standard input) is read up to [`MAX_FILE_BYTES`], a directory's files up to
/// [`MAX_TOTAL_BYTES`] together, both counted while reading.
pub fn read_path(path: &Path) -> Result<Vec<Value>, CliError> {
    let limits = Limits {
        file: MAX_FILE_BYTES,
        total: MAX_TOTAL_BYTES,
    };
    if path.as_os_str() == "-" {
        let text = read_stdin(std::io::stdin().lock(), limits.file)?;
        return parse(&text, "-").map_err(CliError::File);
    }
    if !path.is_dir() {
        let text = read_file(path, limits.file, limits.total)?;
        return parse(&text, &path.display().to_string()).map_err(CliError::File);
    }
    let mut files = Vec::new();
    walk(path, &mut files)?;
    files.sort();
    read_files(path, &files, limits)
}

/// How much is read: per file (standard input included), and in all.
#[derive(Clone, Copy, Debug)]
struct Limits {
    file: u64,
    total: u64,
}

/// The documents of the `files` found under `dir`, at most `limits.file` bytes each and
/// `limits.total` together; a file that is not YAML is skipped with a warning.
fn read_files(dir: &Path, files: &[PathBuf], limits: Limits) -> Result<Vec<Value>, CliError> {
    let mut out = Vec::new();
    let mut total = 0u64;
    for f in files {
        let left = limits.total - total;
        let text = read_file(f, limits.file, left).map_err(|e| match e {
            ReadError::Total => CliError::File(format!(
                "{}: its files total more than {} bytes ({} MiB), the most convert reads from a directory; give a smaller directory",
                dir.display(),
                limits.total,
                limits.total >> 20
            )),
            e => e.into(),
        })?;
        total += text.len() as u64;
        let shown = f.display().to_string();
        match parse(&text, &shown) {
            Ok(docs) => out.extend(docs),
            Err(e) => eprintln!("warning: {e}: skipped"),
        }
    }
    Ok(out)
}

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    /// An I/O error or a file over its limit (the message names the file and the limit).
    #[error("{0}")]
    File(String),
    /// The file would take the files read together over their limit.
    #[error("over the limit of the files read together")]
    Total,
}

impl From<ReadError> for CliError {
    fn from(e: ReadError) -> Self {
        CliError::File(e.to_string())
    }
}

/// The text of the file `f`: at most `limit` bytes, and at most `left` (the budget left of
/// the files read together: [`ReadError::Total`] beyond), counted while reading.
fn read_file(f: &Path, limit: u64, left: u64) -> Result<String, ReadError> {
    let shown = f.display();
    let file = std::fs::File::open(f).map_err(|e| ReadError::File(format!("{shown}: {e}")))?;
    let bytes = read_limited(file, limit.min(left))
        .map_err(|e| ReadError::File(format!("{shown}: {e}")))?;
    match bytes {
        Some(b) => String::from_utf8(b)
            .map_err(|e| ReadError::File(format!("{shown}: not UTF-8 text: {e}"))),
        None if left < limit => Err(ReadError::Total),
        None => Err(ReadError::File(format!(
            "{shown}: larger than {limit} bytes ({} MiB), the most convert reads from a file; convert its Flux objects from a smaller file",
            limit >> 20
        ))),
    }
}

/// Standard input's text, at most `limit` bytes.
fn read_stdin(r: impl std::io::Read, limit: u64) -> Result<String, CliError> {
    let bytes = read_limited(r, limit)
        .map_err(|e| CliError::File(format!("reading standard input: {e}")))?
        .ok_or_else(|| {
            CliError::File(format!(
                "standard input: larger than {limit} bytes ({} MiB), the most convert reads; convert its Flux objects in parts, or from files",
                limit >> 20
            ))
        })?;
    String::from_utf8(bytes)
        .map_err(|e| CliError::File(format!("standard input: not UTF-8 text: {e}")))
}

/// At most `limit` bytes of `r` (reading one byte more to know): `None` when there are more.
fn read_limited(r: impl std::io::Read, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    r.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= limit).then_some(bytes))
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

    #[test]
    fn a_read_stops_one_byte_past_its_limit() {
        let read = |text: &str, limit| read_limited(text.as_bytes(), limit).expect("read");
        assert_eq!(read("abcd", 4), Some(b"abcd".to_vec()));
        assert_eq!(read("", 0), Some(Vec::new()));
        assert_eq!(read("abcde", 4), None);
        assert_eq!(read("a", 0), None);
        // Reading stops at the limit and one byte: an endless input is not read to its end.
        assert_eq!(read_limited(std::io::repeat(b'x'), 16).expect("read"), None);
    }

    fn message(e: CliError) -> String {
        match e {
            CliError::File(m) => m,
            e => panic!("a file error: {e:?}"),
        }
    }

    #[test]
    fn standard_input_over_its_limit_is_refused_naming_the_limit() {
        assert_eq!(
            read_stdin("kind: K\n".as_bytes(), 8).expect("within"),
            "kind: K\n"
        );
        let e = message(read_stdin("kind: K\n".as_bytes(), 7).expect_err("over"));
        assert!(e.starts_with("standard input: larger than 7 bytes"), "{e}");
        let e = message(read_stdin(std::io::repeat(b'x'), MAX_FILE_BYTES).expect_err("over"));
        assert!(e.contains("larger than 8388608 bytes (8 MiB)"), "{e}");
    }

    fn dir_of(files: &[(&str, usize)]) -> (tempfile::TempDir, Vec<PathBuf>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = files
            .iter()
            .map(|(name, size)| {
                let p = dir.path().join(name);
                std::fs::write(&p, format!("a: {}\n", "x".repeat(size - 4))).expect("write");
                p
            })
            .collect();
        (dir, paths)
    }

    #[test]
    fn a_file_over_its_limit_is_refused_while_read() {
        let (dir, files) = dir_of(&[("a.yaml", 10), ("b.yaml", 11)]);
        let e = message(
            read_file(&files[1], 10, 100)
                .map_err(CliError::from)
                .expect_err("over"),
        );
        assert!(e.contains("b.yaml: larger than 10 bytes"), "{e}");
        assert_eq!(read_file(&files[0], 10, 100).expect("within").len(), 10);
        let limits = Limits {
            file: 10,
            total: 100,
        };
        let e = message(read_files(dir.path(), &files, limits).expect_err("over"));
        assert!(e.contains("b.yaml: larger than 10 bytes"), "{e}");
    }

    #[test]
    fn the_files_of_a_directory_are_read_within_a_total() {
        let (dir, files) = dir_of(&[("a.yaml", 10), ("b.yaml", 10), ("c.yaml", 10)]);
        let docs = read_files(
            dir.path(),
            &files,
            Limits {
                file: 10,
                total: 30,
            },
        )
        .expect("within");
        assert_eq!(docs.len(), 3);
        let e = message(
            read_files(
                dir.path(),
                &files,
                Limits {
                    file: 10,
                    total: 25,
                },
            )
            .expect_err("over"),
        );
        assert!(
            e.contains("its files total more than 25 bytes")
                && e.contains("give a smaller directory"),
            "{e}"
        );
        assert!(e.starts_with(&dir.path().display().to_string()), "{e}");
        assert_eq!(MAX_TOTAL_BYTES, 64 << 20, "the limit docs/cli.md gives");
    }

    fn kustomization(annotations: Value) -> Value {
        json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
               "metadata": {"name": "apps", "namespace": "flux", "annotations": annotations},
               "spec": {"suspend": true, "deletionPolicy": "Orphan", "interval": "1m"}})
    }

    #[test]
    fn a_kustomization_suspended_by_a_handover_is_restored_with_a_note() {
        let original = crate::handover::checks::ANNOTATION_ORIGINAL;
        let mut objects = vec![
            kustomization(json!({original: r#"{"suspend":false,"deletionPolicy":null}"#})),
            kustomization(json!({original: r#"{"suspend":true,"deletionPolicy":"Delete"}"#})),
            kustomization(json!({})),
        ];
        let notes = restore_handed_over(&mut objects);
        assert_eq!(
            objects[0]["spec"],
            json!({"suspend": false, "interval": "1m"})
        );
        assert_eq!(
            objects[1]["spec"],
            json!({"suspend": true, "deletionPolicy": "Delete", "interval": "1m"})
        );
        assert_eq!(
            objects[2]["spec"],
            json!({"suspend": true, "deletionPolicy": "Orphan", "interval": "1m"}),
            "no record: as read"
        );
        let shown: Vec<String> = notes.iter().map(ToString::to_string).collect();
        assert_eq!(shown.len(), 2, "{shown:?}");
        assert!(shown[0].starts_with("Kustomization flux/apps: suspended by a handover that did not finish (annotation applyset.dev/handover-original); converted as it was before it: suspend false, deletionPolicy not set"), "{shown:?}");
        assert!(
            shown[1].ends_with("suspend true, deletionPolicy Delete"),
            "{shown:?}"
        );
        assert!(notes.iter().all(|n| n.severity == Severity::Info));
    }
}

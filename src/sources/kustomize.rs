//! Kustomize builds of source directories, with the upstream `kustomize` binary, confined to
//! the source's root.
//!
//! The build never runs on the operator's own files or with its environment:
//! - **Checked first** ([`precheck`]): every kustomization reachable from the built directory
//!   (through `resources`, `bases`, `components`) is read, and refused, naming the file and
//!   the entry, when it names a remote base or resource (a URL, `git@…`, `github.com/…`), a
//!   path that is absolute or leaves the source's root, `helmCharts`, or a generator,
//!   transformer or validator that is not one of kustomize's built-ins (a plugin, an exec or
//!   container KRM function).
//! - **A private copy**: the tree (minus what `.sourceignore` leaves out) is written to a fresh
//!   directory of mode 0700 under the sources' scratch directory, removed after the build; the
//!   generated kustomization (see [`kustomization_for`]) is written into the copy only.
//! - **Kustomize's own restrictions**: `--load-restrictor LoadRestrictionsRootOnly` (files
//!   such as patches and generator inputs must lie under the kustomization that names them),
//!   no `--enable-helm`, no `--enable-alpha-plugins`, no `--enable-exec`.
//! - **No credentials, no network**: the child's environment is empty but for `HOME` and
//!   `TMPDIR` (the copy), an empty `PATH` (no `git` to clone with) and every proxy variable
//!   pointing at a closed loopback port.
//! - **Bounded**: at most `concurrency` builds at once, a time limit, the output read within
//!   a cap and taken from the sources' memory budget as it arrives, and the child's data
//!   segment capped with `RLIMIT_DATA` (measured: kustomize 5.7.1 needs about 100 MiB to start;
//!   `RLIMIT_AS` cannot be used, since the Go runtime reserves some 800 MiB of address space
//!   at start and fails below that).

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use serde_json::{Map, Value};
use tokio::io::AsyncReadExt as _;

use super::{memory, tree::Tree};
use crate::api::KustomizeOverrides;

/// Where every proxy variable of the child points: a loopback port nothing listens on (the
/// discard port), so any network attempt fails at once.
const CLOSED_PROXY: &str = "http://127.0.0.1:9";

/// The lines of kustomize's error output shown in a message.
const ERROR_LINES: usize = 6;

/// How kustomize builds run (`--kustomize-binary`, `--kustomize-concurrency`,
/// `--kustomize-memory-mib`).
#[derive(Clone, Debug)]
pub struct Settings {
    /// The binary; default: `kustomize` beside the running executable, else on `PATH`.
    pub binary: Option<PathBuf>,
    /// Builds at once, operator-wide.
    pub concurrency: usize,
    /// The child's data segment limit in bytes (`RLIMIT_DATA`).
    pub memory: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            binary: None,
            concurrency: 2,
            memory: 512 << 20,
        }
    }
}

/// Why a build was refused or failed. Each names the file (relative to the source's root).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KustomizeError {
    #[error(
        "{file}: {field} entry {entry:?} is remote; remote bases and resources are not fetched (the build sends nothing to the network): vendor it into the source"
    )]
    Remote {
        file: String,
        field: String,
        entry: String,
    },
    #[error(
        "{file}: {field} entry {entry:?} is outside the source's root; a build may read only files of its source"
    )]
    OutsideRoot {
        file: String,
        field: String,
        entry: String,
    },
    #[error(
        "{file}: {field} is not supported: helm charts are not inflated by the build (render the chart into the source, or use a helm tool)"
    )]
    Helm { file: String, field: String },
    #[error(
        "{file}: {field} entry {entry:?} is a kustomize plugin ({what}); plugins and KRM functions are not run, only kustomize's built-in generators and transformers"
    )]
    Plugin {
        file: String,
        field: String,
        entry: String,
        what: String,
    },
    #[error("{file}: not a valid kustomization: {cause}")]
    Invalid { file: String, cause: String },
    #[error(
        "spec.kustomize.components entry {entry:?} must be a local path relative to the source's path"
    )]
    Component { entry: String },
    #[error("kustomize build of {dir} failed: {message}")]
    Build { dir: String, message: String },
    #[error(
        "kustomize build of {dir} did not finish within {after:?} (the build's share of --source-timeout); simplify the overlay"
    )]
    TimedOut { dir: String, after: Duration },
    #[error(
        "kustomize build of {dir} printed more than {limit} bytes (the limit, --source-max-unpacked-mib); refusing it"
    )]
    TooLarge { dir: String, limit: u64 },
    #[error("kustomize build of {dir}: its output exceeds the memory budget: {cause}")]
    Memory { dir: String, cause: String },
    #[error("kustomize build of {dir}: cannot run {binary}: {cause} (set --kustomize-binary)")]
    Binary {
        dir: String,
        binary: String,
        cause: String,
    },
    #[error("kustomize build of {dir}: preparing its private copy: {cause}")]
    Copy { dir: String, cause: String },
}

impl KustomizeError {
    /// Whether the error may go away by itself (retried as SourceFailed), rather than being
    /// the content's (ValidationFailed).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::TimedOut { .. } | Self::Memory { .. } | Self::Binary { .. } | Self::Copy { .. }
        )
    }
}

/// Runs builds: the settings, the permits and the count of builds.
pub struct Builder {
    settings: Settings,
    permits: tokio::sync::Semaphore,
    builds: AtomicU64,
    /// `applyset_kustomize_builds_total{result}`.
    counter: prometheus::IntCounterVec,
}

impl Builder {
    pub fn new(settings: Settings) -> Self {
        Self {
            permits: tokio::sync::Semaphore::new(settings.concurrency.max(1)),
            settings,
            builds: AtomicU64::new(0),
            counter: builds_counter(),
        }
    }

    /// The metric counting builds, `applyset_kustomize_builds_total{result}` (`built`,
    /// `failed`), for the operator's registry.
    pub fn collector(&self) -> Box<dyn prometheus::core::Collector> {
        Box::new(self.counter.clone())
    }

    /// Builds run so far (whatever their result).
    pub fn builds(&self) -> u64 {
        self.builds.load(Ordering::Relaxed)
    }

    fn counted(&self, ok: bool) {
        self.builds.fetch_add(1, Ordering::Relaxed);
        self.counter
            .with_label_values(&[if ok { "built" } else { "failed" }])
            .inc();
    }

    /// The binary to run: the configured one, else `kustomize` beside the running
    /// executable, else the first on `PATH`.
    pub fn binary(&self) -> PathBuf {
        if let Some(b) = &self.settings.binary {
            return b.clone();
        }
        let beside = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(|d| d.join("kustomize")))
            .filter(|p| p.is_file());
        beside
            .or_else(|| {
                std::env::var_os("PATH").and_then(|paths| {
                    std::env::split_paths(&paths)
                        .map(|d| d.join("kustomize"))
                        .find(|p| p.is_file())
                })
            })
            .unwrap_or_else(|| PathBuf::from("kustomize"))
    }

    /// Builds directory `dir` of `tree` (see the module documentation) and returns what
    /// kustomize printed. `job` says where and within what.
    pub async fn build(
        &self,
        job: Job<'_>,
        lease: &mut memory::Lease,
    ) -> Result<String, KustomizeError> {
        let dir = job.dir.to_string();
        let shown = if dir.is_empty() {
            ".".to_string()
        } else {
            dir.clone()
        };
        let written = kustomization_for(job.tree, &dir, job.overrides)?;
        precheck(job.tree, &dir, written.as_ref())?;
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|e| KustomizeError::Copy {
                dir: shown.clone(),
                cause: e.to_string(),
            })?;
        let copy = private_copy(job.work_dir, job.tree, written.as_ref()).map_err(|cause| {
            KustomizeError::Copy {
                dir: shown.clone(),
                cause,
            }
        })?;
        let run = Run {
            binary: self.binary(),
            root: copy.path().join(COPY_SOURCE),
            home: copy.path().join(COPY_HOME),
            dir: shown,
            memory: self.settings.memory,
            max_output: job.max_output,
            timeout: job.timeout,
        };
        let result = run.run(lease).await;
        self.counted(result.is_ok());
        result
    }
}

/// `applyset_kustomize_builds_total{result}`, both results present from the start.
fn builds_counter() -> prometheus::IntCounterVec {
    let opts = prometheus::Opts::new(
        "applyset_kustomize_builds_total",
        "Kustomize builds run, by result (built, failed); a source whose revision is cached is not built again",
    );
    // A constant name and label set: creating it cannot fail.
    let c = prometheus::IntCounterVec::new(opts, &["result"]).expect("valid metric");
    for r in ["built", "failed"] {
        c.with_label_values(&[r]);
    }
    c
}

/// One build: the tree and the directory to build, the set's overrides and the bounds.
pub struct Job<'a> {
    pub tree: &'a Tree,
    /// The directory (`""`: the root; no trailing `/`).
    pub dir: &'a str,
    pub overrides: Option<&'a KustomizeOverrides>,
    /// Where the private copy is made.
    pub work_dir: &'a Path,
    pub timeout: Duration,
    pub max_output: u64,
}

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
    parse_mapping(text).map_err(invalid)
}

/// A YAML text that must be one mapping (an empty text is an empty mapping).
fn parse_mapping(text: &str) -> Result<Map<String, Value>, String> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| e.to_string())?;
    match docs.into_iter().find(|d| !d.is_null()) {
        None => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m),
        Some(_) => Err("it is not a YAML mapping".into()),
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

/// The context of one kustomization being checked.
struct Checking<'a> {
    tree: &'a Tree,
    /// The kustomization file's path (for messages).
    file: &'a str,
    /// Its directory.
    dir: &'a str,
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
        resolve(self.dir, file)
            .map(|_| ())
            .ok_or_else(|| self.outside(field, entry))
    }
}

/// Refuses what a build must not do (see the module documentation), before it runs: every
/// kustomization reachable from `dir` (whose own is `written` when generated) is checked.
pub fn precheck(tree: &Tree, dir: &str, written: Option<&Written>) -> Result<(), KustomizeError> {
    let mut seen = BTreeSet::new();
    let mut queue = vec![dir.to_string()];
    while let Some(d) = queue.pop() {
        if !seen.insert(d.clone()) {
            continue;
        }
        let (file, k) = match written.filter(|w| d == dir && Some(w.path.as_str()).is_some()) {
            Some(w) => (
                w.path.clone(),
                parse_mapping(&w.text).map_err(|cause| KustomizeError::Invalid {
                    file: w.path.clone(),
                    cause,
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
        };
        queue.extend(check_kustomization(&c, &k)?);
    }
    Ok(())
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

/// The private copy's directory of the source's files.
const COPY_SOURCE: &str = "src";
/// The private copy's empty directory for the child's HOME and TMPDIR.
const COPY_HOME: &str = "home";

/// Writes `tree` (with `written` replacing or adding its kustomization) into `src/` of a fresh
/// private directory under `work_dir`, removed when the returned value drops.
fn private_copy(
    work_dir: &Path,
    tree: &Tree,
    written: Option<&Written>,
) -> Result<tempfile::TempDir, String> {
    std::fs::create_dir_all(work_dir).map_err(|e| format!("{}: {e}", work_dir.display()))?;
    let dir = tempfile::Builder::new()
        .prefix("kustomize-")
        .permissions(private_mode())
        .tempdir_in(work_dir)
        .map_err(|e| format!("{}: {e}", work_dir.display()))?;
    // The tree goes to `src/`; `home/` stays empty (the child's HOME and TMPDIR: nothing of
    // the source there, e.g. a kustomize plugin directory under `.config/`).
    let home = dir.path().join(COPY_HOME);
    std::fs::create_dir(&home).map_err(|e| format!("{}: {e}", home.display()))?;
    let src = dir.path().join(COPY_SOURCE);
    let write = |path: &str, data: &[u8]| -> Result<(), String> {
        // Every path is relative and stays inside the copy (a crafted Git tree may name an
        // entry `..`): anything else is refused, never written.
        if super::archive::clean_relative(path).as_deref() != Some(path) || path.is_empty() {
            return Err(format!(
                "{path:?} is not a clean relative path; refusing the tree"
            ));
        }
        let target = src.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{path}: {e}"))?;
        }
        std::fs::write(&target, data).map_err(|e| format!("{path}: {e}"))
    };
    for (path, data) in tree.files() {
        write(path, data)?;
    }
    if let Some(w) = written {
        // The generated one replaces whichever kustomization file the directory had.
        let dir_of = w.path.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
        if let Some(own) = tree.kustomization_of(dir_of) {
            std::fs::remove_file(src.join(own)).map_err(|e| format!("{}: {e}", w.path))?;
        }
        write(&w.path, w.text.as_bytes())?;
    }
    Ok(dir)
}

#[cfg(unix)]
fn private_mode() -> std::fs::Permissions {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::Permissions::from_mode(0o700)
}

/// A build ready to run.
struct Run {
    binary: PathBuf,
    /// The private copy of the source's files.
    root: PathBuf,
    /// The child's HOME and TMPDIR (empty).
    home: PathBuf,
    /// The directory to build, relative to the copy (`.` for the root).
    dir: String,
    memory: u64,
    max_output: u64,
    timeout: Duration,
}

impl Run {
    fn command(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.binary);
        cmd.arg("build")
            .arg(&self.dir)
            .arg("--load-restrictor")
            .arg("LoadRestrictionsRootOnly")
            .current_dir(&self.root)
            .env_clear()
            .env("HOME", &self.home)
            .env("TMPDIR", &self.home)
            .env("PATH", "")
            .env("GOMEMLIMIT", format!("{}", self.memory / 4 * 3))
            .env("GOTRACEBACK", "none")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        for var in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            cmd.env(var, CLOSED_PROXY);
        }
        cmd.env("NO_PROXY", "").env("no_proxy", "");
        let limit = self.memory as libc::rlim_t;
        // SAFETY: between fork and exec only setrlimit runs, which is async-signal-safe and
        // touches no memory of the parent.
        unsafe {
            cmd.pre_exec(move || {
                let r = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_DATA, &r) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }

    /// Runs the build within its bounds; the output is taken from `lease` as it arrives.
    async fn run(&self, lease: &mut memory::Lease) -> Result<String, KustomizeError> {
        let mut child = self.command().spawn().map_err(|e| KustomizeError::Binary {
            dir: self.dir.clone(),
            binary: self.binary.display().to_string(),
            cause: e.to_string(),
        })?;
        let stderr = child.stderr.take();
        let errors = tokio::spawn(async move {
            let mut buf = Vec::new();
            if let Some(mut s) = stderr {
                let _ = (&mut s).take(64 << 10).read_to_end(&mut buf).await;
                let _ = tokio::io::copy(&mut s, &mut tokio::io::sink()).await;
            }
            buf
        });
        let stdout = child.stdout.take();
        let work = async {
            let out = self.read_output(stdout, lease).await;
            if out.is_err() {
                let _ = child.start_kill();
            }
            let status = child.wait().await;
            (out, status)
        };
        let (out, status) = match tokio::time::timeout(self.timeout, work).await {
            Ok(r) => r,
            Err(_) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                return Err(KustomizeError::TimedOut {
                    dir: self.dir.clone(),
                    after: self.timeout,
                });
            }
        };
        let out = out?;
        let errors = errors.await.unwrap_or_default();
        match status {
            Ok(s) if s.success() => String::from_utf8(out).map_err(|_| KustomizeError::Build {
                dir: self.dir.clone(),
                message: "its output is not UTF-8".into(),
            }),
            Ok(s) => Err(KustomizeError::Build {
                dir: self.dir.clone(),
                message: failure_message(&errors, &self.root, s, self.memory),
            }),
            Err(e) => Err(KustomizeError::Binary {
                dir: self.dir.clone(),
                binary: self.binary.display().to_string(),
                cause: e.to_string(),
            }),
        }
    }

    /// Reads the build's output within `max_output` bytes, growing `lease` as it arrives.
    async fn read_output(
        &self,
        stdout: Option<tokio::process::ChildStdout>,
        lease: &mut memory::Lease,
    ) -> Result<Vec<u8>, KustomizeError> {
        let mut out = Vec::new();
        let Some(mut stdout) = stdout else {
            return Ok(out);
        };
        let mut chunk = vec![0u8; 64 << 10];
        loop {
            let n = stdout
                .read(&mut chunk)
                .await
                .map_err(|e| KustomizeError::Build {
                    dir: self.dir.clone(),
                    message: format!("reading its output: {e}"),
                })?;
            if n == 0 {
                return Ok(out);
            }
            if out.len() as u64 + n as u64 > self.max_output {
                return Err(KustomizeError::TooLarge {
                    dir: self.dir.clone(),
                    limit: self.max_output,
                });
            }
            lease
                .grow(n as u64)
                .await
                .map_err(|cause| KustomizeError::Memory {
                    dir: self.dir.clone(),
                    cause,
                })?;
            out.extend_from_slice(&chunk[..n]);
        }
    }
}

/// The first lines of kustomize's error output, with the private copy's path taken out (so
/// files are named relative to the source's root), and the exit status.
fn failure_message(
    stderr: &[u8],
    root: &Path,
    status: std::process::ExitStatus,
    memory: u64,
) -> String {
    let text = String::from_utf8_lossy(stderr);
    let root = format!("{}/", root.display());
    let lines: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(ERROR_LINES)
        .map(|l| l.replace(&root, ""))
        .collect();
    let mut msg = if lines.is_empty() {
        "kustomize printed nothing".to_string()
    } else {
        lines.join("; ")
    };
    msg.push_str(&format!(
        " ({status}; the build's memory is capped at {} MiB, --kustomize-memory-mib)",
        memory >> 20
    ));
    msg
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
        precheck(&t, dir, w.as_ref())
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

    #[test]
    fn the_child_gets_no_credentials_no_network_no_plugins() {
        let run = Run {
            binary: PathBuf::from("kustomize"),
            root: PathBuf::from("/w/src"),
            home: PathBuf::from("/w/home"),
            dir: "ov".into(),
            memory: 512 << 20,
            max_output: 1,
            timeout: Duration::from_secs(1),
        };
        let cmd = run.command();
        let std = cmd.as_std();
        let args: Vec<String> = std
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "build",
                "ov",
                "--load-restrictor",
                "LoadRestrictionsRootOnly"
            ]
        );
        assert_eq!(std.get_current_dir(), Some(Path::new("/w/src")));
        let envs: std::collections::BTreeMap<String, String> = std
            .get_envs()
            .filter_map(|(k, v)| {
                Some((
                    k.to_string_lossy().into_owned(),
                    v?.to_string_lossy().into_owned(),
                ))
            })
            .collect();
        for proxy in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "https_proxy"] {
            assert_eq!(
                envs.get(proxy).map(String::as_str),
                Some(CLOSED_PROXY),
                "{proxy}"
            );
        }
        assert_eq!(envs.get("PATH").map(String::as_str), Some(""));
        assert_eq!(envs.get("HOME").map(String::as_str), Some("/w/home"));
    }

    #[tokio::test]
    async fn the_child_sees_only_its_own_environment() {
        // The test process has cargo's variables; the child must see none of them.
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("kustomize");
        std::fs::write(&script, "#!/bin/sh\nexport -p\n").expect("script");
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let run = Run {
            binary: script,
            root: dir.path().to_path_buf(),
            home: dir.path().to_path_buf(),
            dir: ".".into(),
            memory: 512 << 20,
            max_output: 1 << 20,
            timeout: Duration::from_secs(10),
        };
        let budget = memory::MemoryBudget::new(1 << 20, Duration::from_secs(1));
        let out = run.run(&mut budget.lease()).await.expect("runs");
        assert!(
            out.contains(&format!("HTTPS_PROXY='{CLOSED_PROXY}'")),
            "{out}"
        );
        assert!(!out.contains("CARGO"), "{out}");
    }

    #[test]
    fn the_copy_refuses_paths_that_leave_it() {
        let work = tempfile::tempdir().expect("tempdir");
        for bad in ["../x.yaml", "a/../../x.yaml", "/etc/x", "a//b", "./a"] {
            let mut t = Tree::new();
            t.insert(bad.into(), b"x".to_vec());
            let err = private_copy(work.path(), &t, None).expect_err(bad);
            assert!(err.contains("not a clean relative path"), "{bad}: {err}");
        }
        assert!(
            !work
                .path()
                .parent()
                .expect("parent")
                .join("x.yaml")
                .exists()
        );
        let mut t = Tree::new();
        t.insert("a/b.yaml".into(), b"x".to_vec());
        let copy = private_copy(work.path(), &t, None).expect("copy");
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(copy.path())
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        assert_eq!(
            std::fs::read(copy.path().join("src/a/b.yaml")).expect("file"),
            b"x"
        );
        let path = copy.path().to_path_buf();
        drop(copy);
        assert!(!path.exists(), "removed after the build");
    }

    #[test]
    fn failure_messages_name_files_relative_to_the_root() {
        use std::os::unix::process::ExitStatusExt as _;
        let msg = failure_message(
            b"Error: accumulating resources: '/tmp/w/kustomize-1/ov/x.yaml': missing\n\n",
            Path::new("/tmp/w/kustomize-1"),
            std::process::ExitStatus::from_raw(256),
            512 << 20,
        );
        assert!(
            msg.starts_with("Error: accumulating resources: 'ov/x.yaml': missing"),
            "{msg}"
        );
        assert!(msg.contains("512 MiB, --kustomize-memory-mib"), "{msg}");
    }
}

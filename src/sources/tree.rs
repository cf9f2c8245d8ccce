//! The whole file tree of a source revision (a Git commit, an HTTP bundle, an OCI artifact),
//! and what the set reads from it.
//!
//! A kustomize overlay reads `../../base`, `.env` and `.properties` files and the binary
//! inputs of generators, so a directory source keeps every file of the revision, not only
//! the manifests under its `path`. Files matched by a `.sourceignore` at the root (gitignore
//! syntax, as Flux's source-controller reads it) are left out before anything else looks at
//! the tree.
//!
//! [`Tree::plan`] decides how the `path` is read, as Flux does:
//! - `path` holds a kustomization (`kustomization.yaml`, `.yml` or `Kustomization`): it is
//!   built, and its output is the source's manifests;
//! - otherwise, when a directory under `path` holds one, or the set has `spec.kustomize`
//!   overrides, a kustomization is generated at `path` listing the plain manifest files and
//!   the directories holding kustomizations (not descending into those), and built;
//! - otherwise the plain manifest files (`.yaml`, `.yml`, `.json`) under `path` are read as
//!   they are, sorted by path, without kustomize.

use std::collections::{BTreeMap, BTreeSet};

use super::SourceFile;

/// The file names kustomize recognises as a kustomization, in its order of preference.
pub const KUSTOMIZATION_NAMES: [&str; 3] =
    ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// The ignore file read at the root of a source.
pub const SOURCEIGNORE: &str = ".sourceignore";

/// Why a tree cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TreeError {
    /// A manifest file read as plain manifests is not UTF-8.
    #[error("file {path} is not UTF-8 text; manifests must be UTF-8")]
    NotUtf8 { path: String },
}

/// Every regular file of a source revision, by path relative to the source's root.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tree {
    files: BTreeMap<String, Vec<u8>>,
}

/// How a source's `path` is read.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// The plain manifest files under `path`, sorted by path.
    Plain(Vec<SourceFile>),
    /// A kustomize build of directory `dir` (`""` for the root, else without a trailing
    /// `/`); `kustomization` is the path of its own kustomization file, `None` when one is
    /// generated (Flux's rule: the manifest files and the directories holding
    /// kustomizations).
    Build {
        dir: String,
        kustomization: Option<String>,
    },
}

impl Tree {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) file `path` (relative, `/`-separated, already checked not to leave
    /// the root).
    pub fn insert(&mut self, path: String, data: Vec<u8>) {
        self.files.insert(path, data);
    }

    /// A tree of `files` (path, text), for tests.
    #[cfg(test)]
    pub fn of(files: &[(&str, &str)]) -> Tree {
        let mut t = Tree::new();
        for (p, text) in files {
            t.insert(p.to_string(), text.as_bytes().to_vec());
        }
        t
    }

    pub fn get(&self, path: &str) -> Option<&[u8]> {
        self.files.get(path).map(Vec::as_slice)
    }

    /// Whether `path` is a file of the tree.
    pub fn is_file(&self, path: &str) -> bool {
        self.files.contains_key(path)
    }

    /// Whether `dir` (`""`: the root) is a directory of the tree: some file lies under it.
    pub fn is_dir(&self, dir: &str) -> bool {
        if dir.is_empty() {
            return true;
        }
        let prefix = format!("{dir}/");
        self.files
            .range(prefix.clone()..)
            .next()
            .is_some_and(|(p, _)| p.starts_with(&prefix))
    }

    /// The files, by path.
    pub fn files(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.files.iter().map(|(p, d)| (p.as_str(), d.as_slice()))
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The bytes of all files.
    pub fn bytes(&self) -> u64 {
        self.files.values().map(|d| d.len() as u64).sum()
    }

    /// Removes the files a `.sourceignore` at the root matches (gitignore syntax: `#`
    /// comments, `!` negations, `/` anchors, `dir/` for directories, `**`); a file under an
    /// ignored directory is ignored. The `.sourceignore` itself stays.
    pub fn apply_sourceignore(&mut self) {
        let Some(text) = self.files.get(SOURCEIGNORE) else {
            return;
        };
        let ignore = Ignore::parse(text);
        self.files
            .retain(|path, _| path == SOURCEIGNORE || !ignore.ignores(path));
    }

    /// The kustomization file of directory `dir` (`""`: the root), if it has one.
    pub fn kustomization_of(&self, dir: &str) -> Option<String> {
        KUSTOMIZATION_NAMES
            .iter()
            .map(|name| join(dir, name))
            .find(|p| self.files.contains_key(p))
    }

    /// How directory `prefix` (see [`super::paths::directory_prefix`]: `""` or `dir/`) is read;
    /// `overrides` says whether the set has `spec.kustomize` (which always builds).
    pub fn plan(&self, prefix: &str, overrides: bool) -> Result<Plan, TreeError> {
        let dir = prefix.trim_end_matches('/');
        if let Some(k) = self.kustomization_of(dir) {
            return Ok(Plan::Build {
                dir: dir.to_string(),
                kustomization: Some(k),
            });
        }
        if overrides || !self.kustomization_dirs(dir).is_empty() {
            return Ok(Plan::Build {
                dir: dir.to_string(),
                kustomization: None,
            });
        }
        self.manifest_files(prefix).map(Plan::Plain)
    }

    /// The manifest files (`.yaml`, `.yml`, `.json`) under `prefix`, sorted by path; each must
    /// be UTF-8.
    pub fn manifest_files(&self, prefix: &str) -> Result<Vec<SourceFile>, TreeError> {
        let mut files = Vec::new();
        for (path, data) in self.files.range(prefix.to_string()..) {
            if !path.starts_with(prefix) {
                break;
            }
            if !super::paths::is_manifest_file(path) {
                continue;
            }
            let text = String::from_utf8(data.clone())
                .map_err(|_| TreeError::NotUtf8 { path: path.clone() })?;
            files.push(SourceFile {
                path: path.clone(),
                text,
            });
        }
        Ok(files)
    }

    /// The directories strictly under `dir` that hold a kustomization, outermost only (a
    /// kustomization's own subdirectories are its business).
    pub fn kustomization_dirs(&self, dir: &str) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = BTreeSet::new();
        for path in self.files.keys() {
            let Some(rest) = under(dir, path) else {
                continue;
            };
            let Some((sub, name)) = rest.rsplit_once('/') else {
                continue;
            };
            if !KUSTOMIZATION_NAMES.contains(&name) {
                continue;
            }
            let found = join(dir, sub);
            if !out.iter().any(|o| found.starts_with(&format!("{o}/"))) {
                out.retain(|o| !o.starts_with(&format!("{found}/")));
                out.insert(found);
            }
        }
        out
    }

    /// The resources of the kustomization generated for `dir` (Flux's rule): every manifest
    /// file under `dir` that is not inside a directory holding a kustomization, and those
    /// directories, as paths relative to `dir` (`./a.yaml`, `./apps`), sorted.
    pub fn generated_resources(&self, dir: &str) -> Vec<String> {
        let dirs = self.kustomization_dirs(dir);
        let mut out: Vec<String> = Vec::new();
        for path in self.files.keys() {
            let Some(rest) = under(dir, path) else {
                continue;
            };
            let inside = dirs.iter().any(|d| path.starts_with(&format!("{d}/")));
            if inside || !super::paths::is_manifest_file(path) || rest.starts_with('.') {
                continue;
            }
            out.push(format!("./{rest}"));
        }
        for d in &dirs {
            if let Some(rest) = under(dir, &format!("{d}/")) {
                out.push(format!("./{}", rest.trim_end_matches('/')));
            }
        }
        out.sort();
        out
    }
}

/// `dir/name`, or `name` for the root.
pub fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// `path` relative to `dir` when it lies under it.
fn under<'p>(dir: &str, path: &'p str) -> Option<&'p str> {
    if dir.is_empty() {
        return Some(path);
    }
    path.strip_prefix(dir)?.strip_prefix('/')
}

/// The patterns of a `.sourceignore`, matched with gitoxide's gitignore implementation.
struct Ignore {
    search: gix_ignore::Search,
}

impl Ignore {
    fn parse(text: &[u8]) -> Self {
        let mut search = gix_ignore::Search::default();
        // Reading from a buffer cannot fail; a failure would leave no patterns.
        let _ = search.add_patterns_buffer(
            text,
            SOURCEIGNORE,
            None,
            gix_ignore::search::Ignore::default(),
        );
        Self { search }
    }

    /// Whether `path` (a file) is ignored: the last pattern matching it or one of its
    /// directories (outermost first: git does not descend into an ignored directory) is
    /// not a negation.
    fn ignores(&self, path: &str) -> bool {
        use gix::bstr::ByteSlice as _;
        let case = gix_ignore::glob::pattern::Case::Sensitive;
        for (i, _) in path.match_indices('/') {
            if self.matched(path.as_bytes()[..i].as_bstr(), true, case) {
                return true;
            }
        }
        self.matched(path.as_bytes().as_bstr(), false, case)
    }

    fn matched(
        &self,
        path: &gix::bstr::BStr,
        is_dir: bool,
        case: gix_ignore::glob::pattern::Case,
    ) -> bool {
        self.search
            .pattern_matching_relative_path(path, Some(is_dir), case)
            .is_some_and(|m| !m.pattern.is_negative())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(paths: &[&str]) -> Tree {
        let mut t = Tree::new();
        for p in paths {
            t.insert(p.to_string(), b"apiVersion: v1\n".to_vec());
        }
        t
    }

    #[test]
    fn sourceignore_leaves_out_what_it_matches() {
        let mut t = tree(&[
            "deploy/a.yaml",
            "deploy/secret.enc.yaml",
            "docs/x.yaml",
            "deploy/keep/b.yaml",
            "ci/pipeline.yml",
            "deploy/ci/c.yaml",
            "notes.md",
        ]);
        t.insert(
            SOURCEIGNORE.into(),
            b"# comment\n*.enc.yaml\n/docs/\n/ci\n*.md\n!keep.md\n".to_vec(),
        );
        t.apply_sourceignore();
        let left: Vec<&str> = t.files().map(|(p, _)| p).collect();
        assert_eq!(
            left,
            [
                ".sourceignore",
                "deploy/a.yaml",
                "deploy/ci/c.yaml",
                "deploy/keep/b.yaml"
            ]
        );
        // A negation brings a file back; a directory pattern covers everything under it.
        let mut t = tree(&["a/x.yaml", "a/y.yaml", "b/deep/z.yaml"]);
        t.insert(SOURCEIGNORE.into(), b"a/*\n!a/y.yaml\nb/\n".to_vec());
        t.apply_sourceignore();
        let left: Vec<&str> = t.files().map(|(p, _)| p).collect();
        assert_eq!(left, [".sourceignore", "a/y.yaml"]);
    }

    #[test]
    fn plain_manifests_are_read_as_they_are() {
        let t = tree(&[
            "deploy/a.yaml",
            "deploy/n/b.json",
            "deploy/README.md",
            "other/c.yaml",
        ]);
        let Ok(Plan::Plain(files)) = t.plan("deploy/", false) else {
            panic!("plain");
        };
        let names: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(names, ["deploy/a.yaml", "deploy/n/b.json"]);
        let mut bad = tree(&[]);
        bad.insert("x.yaml".into(), vec![0xff, 0xfe]);
        assert_eq!(
            bad.plan("", false),
            Err(TreeError::NotUtf8 {
                path: "x.yaml".into()
            })
        );
    }

    #[test]
    fn a_kustomization_at_the_path_is_built() {
        let t = tree(&[
            "base/kustomization.yaml",
            "overlays/prod/Kustomization",
            "x.yaml",
        ]);
        assert_eq!(
            t.plan("overlays/prod/", false),
            Ok(Plan::Build {
                dir: "overlays/prod".into(),
                kustomization: Some("overlays/prod/Kustomization".into())
            })
        );
        // With overrides, plain manifests are built through a generated kustomization.
        let t = tree(&["deploy/a.yaml"]);
        assert_eq!(
            t.plan("deploy/", true),
            Ok(Plan::Build {
                dir: "deploy".into(),
                kustomization: None
            })
        );
    }

    #[test]
    fn kustomizations_below_the_path_are_generated_over_as_flux_does() {
        let t = tree(&[
            "clusters/a.yaml",
            "clusters/.hidden.yaml",
            "clusters/apps/kustomization.yaml",
            "clusters/apps/inner/kustomization.yaml",
            "clusters/apps/d.yaml",
            "clusters/infra/x/kustomization.yml",
            "clusters/plain/b.yml",
            "clusters/plain/c.txt",
            "elsewhere/kustomization.yaml",
        ]);
        assert_eq!(
            t.plan("clusters/", false),
            Ok(Plan::Build {
                dir: "clusters".into(),
                kustomization: None
            })
        );
        assert_eq!(
            t.generated_resources("clusters"),
            ["./a.yaml", "./apps", "./infra/x", "./plain/b.yml"]
        );
        assert_eq!(
            t.kustomization_dirs(""),
            BTreeSet::from([
                "clusters/apps".to_string(),
                "clusters/infra/x".to_string(),
                "elsewhere".to_string()
            ])
        );
        assert!(t.is_dir("clusters/apps") && !t.is_dir("clusters/a.yaml") && t.is_dir(""));
    }
}

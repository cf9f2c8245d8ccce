//! Reading the files of a fetched commit from the object database: only the subtree at the
//! source's `path` is walked (or every file, for a kustomize build), every entry counted
//! against the entry limit and every object's size, read from its header before it is
//! inflated, against the unpacked-size limit ([`TreeBudget`]); memory is reserved for each
//! file before it is read.

use std::sync::atomic::{AtomicBool, Ordering};

use super::{Outcome, Scope, chain};
use crate::sources::{Limits, tree::Tree};

/// What the tree walk may still read: bytes of inflated objects (trees and blobs) and tree
/// entries.
#[derive(Clone)]
struct TreeBudget {
    bytes: u64,
    entries: usize,
    limits: Limits,
}

impl TreeBudget {
    /// Takes an object of `size` bytes (from its header, before it is inflated).
    fn take_bytes(&mut self, size: u64, what: &str) -> Result<(), String> {
        if size > self.bytes {
            return Err(format!(
                "the files under the path exceed {} bytes (the operator's --source-max-unpacked-mib) at {what} ({size} bytes); refusing them",
                self.limits.max_unpacked
            ));
        }
        self.bytes -= size;
        Ok(())
    }

    fn take_entry(&mut self) -> Result<(), String> {
        if self.entries == 0 {
            return Err(format!(
                "more than {} entries under the path (the operator's --source-max-entries); refusing them",
                self.limits.max_entries
            ));
        }
        self.entries -= 1;
        Ok(())
    }
}

/// What a walk of the object database checks as it goes.
pub(super) struct Walk<'a> {
    /// Set when the fetch is no longer wanted.
    pub(super) interrupt: &'a AtomicBool,
    /// Takes memory for a file before it is read (the operator's memory budget).
    pub(super) reserve: &'a mut dyn FnMut(u64) -> Result<(), String>,
}

/// The files of `scope` of the fetched commit `wanted`, read from the object database within
/// the unpacked-size and entry limits.
pub(super) fn read_commit(
    repo: &gix::Repository,
    wanted: gix::ObjectId,
    scope: &Scope,
    limits: &Limits,
    mut walk: Walk<'_>,
) -> Result<Outcome, String> {
    let commit = repo
        .find_object(wanted)
        .map_err(|e| format!("the fetched object {wanted} is missing: {}", chain(&e)))?
        .peel_to_commit()
        .map_err(|e| format!("{wanted} is not a commit: {}", chain(&e)))?;
    let commit_id = commit.id.to_string();
    let root = commit
        .tree_id()
        .map_err(|e| format!("reading the tree of {commit_id}: {}", chain(&e)))?
        .detach();
    let mut budget = TreeBudget {
        bytes: limits.max_unpacked,
        entries: limits.max_entries,
        limits: limits.clone(),
    };
    let tree = read_tree(repo, root, scope, &commit_id, &mut budget, &mut walk)?;
    Ok(Outcome::Fetched {
        commit: commit_id,
        tree,
    })
}

/// Loads tree `id`, its size taken from the budget (from the header, before inflating it).
fn load_tree<'r>(
    repo: &'r gix::Repository,
    id: gix::ObjectId,
    what: &str,
    budget: &mut TreeBudget,
) -> Result<gix::Tree<'r>, String> {
    let header = repo
        .find_header(id)
        .map_err(|e| format!("reading the tree {what}: {}", chain(&e)))?;
    budget.take_bytes(header.size(), what)?;
    repo.find_tree(id)
        .map_err(|e| format!("reading the tree {what}: {}", chain(&e)))
}

/// The files of `scope` in tree `root`: walks down to the directory at the prefix; when a
/// kustomization lies under it (or `scope.build`), every file of the commit, else the
/// manifest files under the prefix and the root's `.sourceignore`. Every entry (of any kind)
/// and the size of every object read count against the budget, each blob's size checked from
/// its header before it is inflated. A prefix that does not exist (or is not a directory) is
/// an error. A symbolic link to a manifest under the prefix is refused; other links, and
/// submodules, are left out.
fn read_tree(
    repo: &gix::Repository,
    root: gix::ObjectId,
    scope: &Scope,
    commit: &str,
    budget: &mut TreeBudget,
    walk: &mut Walk<'_>,
) -> Result<Tree, String> {
    let prefix = scope.prefix.as_str();
    let dir = prefix.trim_end_matches('/');
    let id = find_directory(repo, root, dir, commit, budget)?;
    let whole = scope.build || has_kustomization(repo, id, dir, budget, walk.interrupt)?;
    let (start, start_dir) = if whole { (root, "") } else { (id, dir) };
    let mut tree = Tree::new();
    let mut queue = std::collections::VecDeque::from([(start, start_dir.to_string())]);
    while let Some((id, dir)) = queue.pop_front() {
        if walk.interrupt.load(Ordering::Relaxed) {
            return Err("interrupted".into());
        }
        let loaded = load_tree(repo, id, &format!("{dir:?}"), budget)?;
        for entry in loaded.iter() {
            let entry = entry.map_err(|e| format!("reading the tree {dir:?}: {}", chain(&e)))?;
            budget.take_entry()?;
            let path = crate::sources::tree::join(&dir, &String::from_utf8_lossy(entry.filename()));
            let mode = entry.mode();
            if mode.is_tree() {
                queue.push_back((entry.object_id(), path));
                continue;
            }
            let manifest =
                crate::sources::paths::is_manifest_file(&path) && path.starts_with(prefix);
            if !whole && !manifest {
                continue;
            }
            if mode.is_link() && manifest {
                return Err(format!(
                    "{path} is a symbolic link; links are not followed, declare the manifest as a file"
                ));
            }
            if !mode.is_blob() {
                continue;
            }
            let data = read_blob(repo, entry.object_id(), &path, budget, walk.reserve)?;
            tree.insert(path, data);
        }
    }
    if !whole {
        let top = load_tree(repo, root, "of the root", budget)?;
        if let Some(e) = top.find_entry(crate::sources::tree::SOURCEIGNORE)
            && e.mode().is_blob()
        {
            let data = read_blob(
                repo,
                e.object_id(),
                crate::sources::tree::SOURCEIGNORE,
                budget,
                walk.reserve,
            )?;
            tree.insert(crate::sources::tree::SOURCEIGNORE.into(), data);
        }
    }
    Ok(tree)
}

/// Whether a kustomization file lies in tree `id` (directory `dir`) or below; the walk
/// counts against a copy of the budget (it bounds this walk without being charged twice).
fn has_kustomization(
    repo: &gix::Repository,
    id: gix::ObjectId,
    dir: &str,
    budget: &TreeBudget,
    interrupt: &AtomicBool,
) -> Result<bool, String> {
    let mut budget = budget.clone();
    let mut queue = std::collections::VecDeque::from([(id, dir.to_string())]);
    while let Some((id, dir)) = queue.pop_front() {
        if interrupt.load(Ordering::Relaxed) {
            return Err("interrupted".into());
        }
        let loaded = load_tree(repo, id, &format!("{dir:?}"), &mut budget)?;
        for entry in loaded.iter() {
            let entry = entry.map_err(|e| format!("reading the tree {dir:?}: {}", chain(&e)))?;
            budget.take_entry()?;
            let name = String::from_utf8_lossy(entry.filename()).into_owned();
            if entry.mode().is_tree() {
                queue.push_back((entry.object_id(), crate::sources::tree::join(&dir, &name)));
            } else if crate::sources::tree::KUSTOMIZATION_NAMES.contains(&name.as_str()) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// The id of the tree of directory `dir` (no trailing `/`; `""` for the root) under tree
/// `root`, each tree on the way loaded within the budget. An error says which component is
/// missing or is not a directory.
fn find_directory(
    repo: &gix::Repository,
    root: gix::ObjectId,
    dir: &str,
    commit: &str,
    budget: &mut TreeBudget,
) -> Result<gix::ObjectId, String> {
    let mut id = root;
    let mut walked = String::new();
    for component in dir.split('/').filter(|c| !c.is_empty()) {
        let tree = load_tree(repo, id, &format!("of {walked:?}"), budget)?;
        if !walked.is_empty() {
            walked.push('/');
        }
        walked.push_str(component);
        let detail = |what: &str| {
            if walked == dir {
                String::new()
            } else {
                format!(" ({walked} {what})")
            }
        };
        let entry = tree.find_entry(component).ok_or_else(|| {
            format!(
                "path {dir} does not exist at commit {commit}{}; fix path",
                detail("is missing")
            )
        })?;
        if !entry.mode().is_tree() {
            return Err(format!(
                "path {dir} is not a directory at commit {commit}{}; fix path",
                detail("is not a directory")
            ));
        }
        id = entry.object_id();
    }
    Ok(id)
}

/// The content of blob `oid` (the file at `path`), its size taken from the budget and
/// reserved with `reserve` (the memory budget; from the header, before it is inflated).
fn read_blob(
    repo: &gix::Repository,
    oid: gix::ObjectId,
    path: &str,
    budget: &mut TreeBudget,
    reserve: &mut dyn FnMut(u64) -> Result<(), String>,
) -> Result<Vec<u8>, String> {
    let header = repo
        .find_header(oid)
        .map_err(|e| format!("reading {path}: {}", chain(&e)))?;
    budget.take_bytes(header.size(), path)?;
    reserve(header.size())?;
    let mut blob = repo
        .find_object(oid)
        .map_err(|e| format!("reading {path}: {}", chain(&e)))?;
    Ok(std::mem::take(&mut blob.data))
}

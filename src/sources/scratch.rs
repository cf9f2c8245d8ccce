//! The scratch directory of the sources (Git needs a repository on disk): one `run-<random>/`
//! per process under the configured directory, locked while in use and removed when the
//! sources go; stale ones (of killed processes, which may hold ssh keys) are removed at
//! startup without touching those of live processes.

use std::{path::PathBuf, time::Duration};

/// The scratch directory of one [`super::Sources`]: `run-<random>/` under the configured directory,
/// holding a locked `.lock` file while in use. It is removed when the `Sources` goes, and at
/// startup every `run-*` directory whose lock nobody holds (left by a killed process: it may
/// hold ssh keys) is removed, without touching the directories of live processes that share
/// the configured directory.
pub(super) struct WorkDir {
    pub(super) path: PathBuf,
    /// Held (locked) while this directory is in use; `None` when the directory could not be
    /// prepared (fetches then create what they need and report errors themselves).
    _lock: Option<std::fs::File>,
    _dir: Option<tempfile::TempDir>,
}

/// `run-*` directories without a `.lock` file are removed only when older than this (one may
/// be between its creation and its lock).
const UNLOCKED_GRACE: Duration = Duration::from_secs(600);
/// Scratch directories of earlier versions (`git-*` directly in the configured directory) are
/// removed when older than this (a fetch never takes as long).
const LEGACY_GRACE: Duration = Duration::from_secs(3600);

impl WorkDir {
    pub(super) fn prepare(base: PathBuf) -> Self {
        clean_stale(&base);
        let made = std::fs::create_dir_all(&base)
            .and_then(|()| {
                tempfile::Builder::new()
                    .prefix("run-")
                    .rand_bytes(8)
                    .tempdir_in(&base)
            })
            .and_then(|dir| {
                let lock = std::fs::File::create(dir.path().join(".lock"))?;
                lock.try_lock().map_err(std::io::Error::other)?;
                Ok((dir, lock))
            });
        match made {
            Ok((dir, lock)) => Self {
                path: dir.path().to_path_buf(),
                _lock: Some(lock),
                _dir: Some(dir),
            },
            Err(e) => {
                tracing::warn!(dir = %base.display(), error = %e, "cannot prepare the sources' scratch directory; git sources will fail until it is writable");
                Self {
                    path: base.join("run-unlocked"),
                    _lock: None,
                    _dir: None,
                }
            }
        }
    }
}

fn older_than(meta: &std::fs::Metadata, age: Duration) -> bool {
    meta.modified()
        .ok()
        .and_then(|m| m.elapsed().ok())
        .is_some_and(|e| e > age)
}

/// Removes scratch directories nobody uses any more (see [`WorkDir`]).
fn clean_stale(base: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        if !meta.is_dir() {
            continue;
        }
        let path = entry.path();
        let stale = if name.starts_with("run-") {
            match std::fs::File::open(path.join(".lock")) {
                // Locked by a live process: in use. Unlocked: its process is gone.
                Ok(f) => f.try_lock().is_ok(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    older_than(&meta, UNLOCKED_GRACE)
                }
                Err(_) => false,
            }
        } else {
            name.starts_with("git-") && older_than(&meta, LEGACY_GRACE)
        };
        if stale {
            match std::fs::remove_dir_all(&path) {
                Ok(()) => {
                    tracing::info!(dir = %path.display(), "removed a stale source scratch directory")
                }
                Err(e) => {
                    tracing::warn!(dir = %path.display(), error = %e, "cannot remove a stale source scratch directory")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_scratch_directories_are_removed_live_ones_kept() {
        let base = tempfile::tempdir().expect("tempdir");
        let live = WorkDir::prepare(base.path().to_path_buf());
        assert!(live.path.join(".lock").exists());
        // A directory left by a dead process: its lock file exists but nobody holds it.
        let dead = base.path().join("run-dead");
        std::fs::create_dir_all(&dead).expect("mkdir");
        std::fs::write(dead.join(".lock"), b"").expect("lock file");
        std::fs::write(dead.join("identity"), b"key").expect("key");
        // A fresh directory without a lock (being created) is kept.
        let fresh = base.path().join("run-fresh");
        std::fs::create_dir_all(&fresh).expect("mkdir");
        let other = WorkDir::prepare(base.path().to_path_buf());
        assert!(!dead.exists(), "the dead process's directory is removed");
        assert!(live.path.exists(), "a live one is kept");
        assert!(fresh.exists(), "one being created is kept");
        assert_ne!(live.path, other.path);
        let (lp, op) = (live.path.clone(), other.path.clone());
        drop(live);
        drop(other);
        assert!(
            !lp.exists() && !op.exists(),
            "removed when the Sources goes"
        );
    }
}

//! Kustomize builds of source directories, with the upstream `kustomize` binary, confined to
//! the source's root.
//!
//! The build never runs on the operator's own files or with its environment:
//! - **Checked first** ([`precheck`], in [`super::kustomization`]): every kustomization reachable from the built directory
//!   (through `resources`, `bases`, `components`, plugin directories) and every plugin
//!   configuration is read, and refused, naming the file and the field, when a key is not a
//!   field of kustomize v5.7.1 spelled exactly ([`super::kustomize_fields`]), an entry of any
//!   field that names something to load is remote (a URL, `git@…`, `github.com/…`) or a path
//!   that is absolute or leaves the source's root, for `helmCharts`, or for a generator,
//!   transformer or validator that is not one of kustomize's built-ins (a plugin, an exec or
//!   container KRM function).
//! - **A private copy**: the tree (minus what `.sourceignore` leaves out) is written to a fresh
//!   directory of mode 0700 under the sources' scratch directory, removed after the build; the
//!   generated kustomization ([`kustomization_for`]) is written into the copy only.
//! - **Kustomize's own restrictions**: `--load-restrictor LoadRestrictionsRootOnly` (files
//!   such as patches and generator inputs must lie under the kustomization that names them),
//!   no `--enable-helm`, no `--enable-alpha-plugins`, no `--enable-exec`.
//! - **No credentials, no network**: the child's environment is empty but for `HOME` and
//!   `TMPDIR` (the copy), an empty `PATH` (no `git` to clone with) and every proxy variable
//!   pointing at a closed loopback port (Go sends no loopback request through a proxy: the
//!   check above is what keeps it off loopback); and, where the platform allows one, an empty
//!   network namespace ([`super::kustomize_sandbox`], `--kustomize-network-sandbox`).
//! - **Bounded and fair**: at most `concurrency` builds at once, shared between namespaces
//!   ([`crate::fair::BuildSlots`]: round robin, the last free slot kept for a namespace with
//!   no build running); the wait for a slot counts toward the set's sources' deadline
//!   (`--source-timeout`, [`BuildScope`]) and the build's time limit is what is left of it
//!   (at most its share); the output read within
//!   a cap and taken from the sources' memory budget as it arrives, and the child's data
//!   segment capped with `RLIMIT_DATA` (measured: kustomize 5.7.1 needs about 100 MiB to start;
//!   `RLIMIT_AS` cannot be used, since the Go runtime reserves some 800 MiB of address space
//!   at start and fails below that).

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use tokio::io::AsyncReadExt as _;

pub use super::kustomize_error::KustomizeError;
pub use super::kustomize_sandbox::NetworkSandbox;
use super::{
    kustomization::{Written, kustomization_for, precheck},
    kustomize_sandbox, memory,
    paths::clean_relative,
    tree::Tree,
};
use crate::{api::KustomizeOverrides, fair::BuildSlots};

/// Where every proxy variable of the child points: a loopback port nothing listens on (the
/// discard port), so any network attempt fails at once.
const CLOSED_PROXY: &str = "http://127.0.0.1:9";

/// The lines of kustomize's error output shown in a message.
const ERROR_LINES: usize = 6;

/// How kustomize builds run (`--kustomize-binary`, `--kustomize-concurrency`,
/// `--kustomize-memory-mib`, `--kustomize-network-sandbox`).
#[derive(Clone, Debug)]
pub struct Settings {
    /// The binary; default: `kustomize` beside the running executable, else on `PATH`.
    pub binary: Option<PathBuf>,
    /// Builds at once, operator-wide.
    pub concurrency: usize,
    /// The child's data segment limit in bytes (`RLIMIT_DATA`).
    pub memory: u64,
    /// Whether the child runs in an empty network namespace, where the platform allows one.
    pub network_sandbox: NetworkSandbox,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            binary: None,
            concurrency: 2,
            memory: 512 << 20,
            network_sandbox: NetworkSandbox::default(),
        }
    }
}

/// Why the private copy could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A path that is absolute, has `.`, `..` or empty components (a crafted Git tree may
    /// name an entry `..`).
    #[error("{path:?} is not a clean relative path")]
    Unclean { path: String },
}

/// Runs builds: the settings, the slots and the count of builds.
pub struct Builder {
    settings: Settings,
    slots: BuildSlots,
    /// `applyset_kustomize_builds_total{result}`.
    counter: crate::metrics::KustomizeBuilds,
}

impl Builder {
    pub fn new(settings: Settings) -> Self {
        Self {
            slots: BuildSlots::new(settings.concurrency),
            settings,
            counter: crate::metrics::KustomizeBuilds::default(),
        }
    }

    /// The count of builds, `applyset_kustomize_builds_total{result}`, for the operator's
    /// registry.
    pub fn counter(&self) -> &crate::metrics::KustomizeBuilds {
        &self.counter
    }

    /// The build slots (`--kustomize-concurrency`), shared between namespaces.
    pub fn slots(&self) -> &BuildSlots {
        &self.slots
    }

    fn counted(&self, ok: bool) {
        self.counter.counted(ok);
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
        let asked = tokio::time::Instant::now();
        let _slot = self.slot(&job, &shown).await?;
        let waited = asked.elapsed();
        // What is left of the sources' deadline once the build has its slot, at most the
        // build's own share.
        let left = job
            .scope
            .deadline
            .saturating_duration_since(tokio::time::Instant::now());
        let copy = private_copy(job.work_dir, job.tree, written.as_ref(), job.replace).map_err(
            |e| match e {
                CopyError::Unclean { path } => KustomizeError::Unclean { path },
                io => KustomizeError::Copy {
                    dir: shown.clone(),
                    cause: io.to_string(),
                },
            },
        )?;
        let run = Run {
            binary: self.binary(),
            root: copy.path().join(COPY_SOURCE),
            home: copy.path().join(COPY_HOME),
            dir: shown,
            memory: self.settings.memory,
            max_output: job.max_output,
            timeout: job.timeout.min(left),
            sandbox: kustomize_sandbox::flags(self.settings.network_sandbox),
        };
        let result = run.run(lease).await.map_err(|e| match e {
            // Cut short by the deadline, not by the build's own share: it waited.
            KustomizeError::TimedOut { dir, after } if after < job.timeout => {
                KustomizeError::LateStart {
                    dir,
                    waited,
                    after,
                    slots: self.slots.slots(),
                }
            }
            other => other,
        });
        self.counted(result.is_ok());
        result
    }

    /// A build slot for `job`'s namespace, in turn, waited for until the sources' deadline.
    async fn slot(
        &self,
        job: &Job<'_>,
        shown: &str,
    ) -> Result<crate::fair::BuildSlot, KustomizeError> {
        let asked = tokio::time::Instant::now();
        let wait = self.slots.acquire(&job.scope.namespace);
        tokio::time::timeout_at(job.scope.deadline, wait)
            .await
            .map_err(|_| KustomizeError::SlotWait {
                dir: shown.to_string(),
                waited: asked.elapsed(),
                slots: self.slots.slots(),
            })
    }
}

/// What a build is for: the namespace of the set it is built for (the build slots are
/// shared between namespaces; `""`: a ClusterApplySet) and the deadline of that set's
/// sources (`--source-timeout`), which the wait for a slot counts toward.
#[derive(Clone, Debug)]
pub struct BuildScope {
    pub namespace: Arc<str>,
    pub deadline: tokio::time::Instant,
}

impl BuildScope {
    /// Builds for `namespace` (`""`: cluster-scoped) within `timeout` from now.
    pub fn new(namespace: &str, timeout: Duration) -> Self {
        BuildScope {
            namespace: namespace.into(),
            deadline: tokio::time::Instant::now() + timeout,
        }
    }
}

tokio::task_local! {
    /// The scope of the builds the current task runs (the set whose sources it reads).
    static SCOPE: BuildScope;
}

/// Runs `read` (a set's source reads) with `scope` as the scope of the builds it runs.
pub async fn within<F: std::future::Future>(scope: BuildScope, read: F) -> F::Output {
    SCOPE.scope(scope, read).await
}

/// The scope [`within`] set for the current task, if any.
pub fn current_scope() -> Option<BuildScope> {
    SCOPE.try_with(Clone::clone).ok()
}

/// One build: the tree and the directory to build, the set's overrides and the bounds.
pub struct Job<'a> {
    pub tree: &'a Tree,
    /// The directory (`""`: the root; no trailing `/`).
    pub dir: &'a str,
    pub overrides: Option<&'a KustomizeOverrides>,
    /// Where the private copy is made.
    pub work_dir: &'a Path,
    /// The build's own time limit (its share of `--source-timeout`), cut to what is left of
    /// the scope's deadline once it has a slot.
    pub timeout: Duration,
    /// Whose build it is, and until when its set's sources may be read.
    pub scope: BuildScope,
    pub max_output: u64,
    /// Files written into the private copy in place of the tree's (the decrypted SOPS inputs
    /// of a set with spec.decryption); removed with the copy when the build ends.
    pub replace: Option<&'a std::collections::BTreeMap<String, Vec<u8>>>,
}

/// The private copy's directory of the source's files.
const COPY_SOURCE: &str = "src";
/// The private copy's empty directory for the child's HOME and TMPDIR.
const COPY_HOME: &str = "home";

/// Writes `tree` (with `written` replacing or adding its kustomization, and the files of
/// `replace` in place of the tree's) into `src/` of a fresh private directory (mode 0700) under
/// `work_dir`, removed when the returned value drops.
fn private_copy(
    work_dir: &Path,
    tree: &Tree,
    written: Option<&Written>,
    replace: Option<&std::collections::BTreeMap<String, Vec<u8>>>,
) -> Result<tempfile::TempDir, CopyError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| CopyError::Io { path, source }
    };
    std::fs::create_dir_all(work_dir).map_err(io(work_dir))?;
    let dir = tempfile::Builder::new()
        .prefix("kustomize-")
        .permissions(private_mode())
        .tempdir_in(work_dir)
        .map_err(io(work_dir))?;
    // The tree goes to `src/`; `home/` stays empty (the child's HOME and TMPDIR: nothing of
    // the source there, e.g. a kustomize plugin directory under `.config/`).
    let home = dir.path().join(COPY_HOME);
    std::fs::create_dir(&home).map_err(io(&home))?;
    let src = dir.path().join(COPY_SOURCE);
    let write = |path: &str, data: &[u8]| -> Result<(), CopyError> {
        // Every path is relative and stays inside the copy: anything else is refused, never
        // written.
        if clean_relative(path).as_deref() != Some(path) || path.is_empty() {
            return Err(CopyError::Unclean { path: path.into() });
        }
        let target = src.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&target, data).map_err(io(&target))
    };
    for (path, data) in tree.files() {
        match replace.and_then(|r| r.get(path)) {
            Some(replaced) => write(path, replaced)?,
            None => write(path, data)?,
        }
    }
    if let Some(w) = written {
        // The generated one replaces whichever kustomization file the directory had.
        let dir_of = w.path.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
        if let Some(own) = tree.kustomization_of(dir_of) {
            let own = src.join(own);
            std::fs::remove_file(&own).map_err(io(&own))?;
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
    /// The namespaces the child creates before exec (an empty network namespace).
    sandbox: Option<libc::c_int>,
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
        let sandbox = self.sandbox;
        // SAFETY: between fork and exec only setrlimit and unshare run, which are
        // async-signal-safe and touch no memory of the parent.
        unsafe {
            cmd.pre_exec(move || {
                let r = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_DATA, &r) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                sandbox.map_or(Ok(()), kustomize_sandbox::enter)
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
            sandbox: None,
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
            sandbox: None,
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
            let err = private_copy(work.path(), &t, None, None).expect_err(bad);
            assert!(
                matches!(&err, CopyError::Unclean { path } if path == bad),
                "{bad}: {err}"
            );
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
        let copy = private_copy(work.path(), &t, None, None).expect("copy");
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
    fn replaced_files_are_written_in_place_of_the_trees_and_go_with_the_copy() {
        let work = tempfile::tempdir().expect("tempdir");
        let mut t = Tree::new();
        t.insert("ov/s.env".into(), b"A=ENC[...]\nsops_mac=m\n".to_vec());
        t.insert("ov/plain.env".into(), b"B=c\n".to_vec());
        let replace = [("ov/s.env".to_string(), b"A=secret\n".to_vec())].into();
        let copy = private_copy(work.path(), &t, None, Some(&replace)).expect("copy");
        let src = copy.path().join("src/ov");
        assert_eq!(
            std::fs::read(src.join("s.env")).expect("file"),
            b"A=secret\n"
        );
        assert_eq!(
            std::fs::read(src.join("plain.env")).expect("file"),
            b"B=c\n"
        );
        let path = copy.path().to_path_buf();
        drop(copy);
        assert!(!path.exists(), "the plaintext goes with the copy");
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

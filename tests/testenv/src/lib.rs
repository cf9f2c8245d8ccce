//! A real Kubernetes control plane on loopback: etcd, kube-apiserver and
//! kube-controller-manager, built from published Go modules by `build-kube.sh`.
//!
//! [`ControlPlane::start`] starts the three processes on free loopback ports, writes an admin
//! kubeconfig and waits for `/readyz`. Cleanup never depends on destructors running: every
//! control plane has a small guard process that reads the PIDs of the processes it must stop
//! from a pipe. When the process that owns the control plane ends — normally, by a panic, or by
//! SIGKILL — the pipe closes, and the guard stops the processes and removes the state
//! directory. [`ControlPlane::stop`] (also run on drop) does the same synchronously.
//!
//! [`ControlPlane::restart_apiserver`] kills kube-apiserver alone and starts it again with the
//! same flags, port and serving certificate, against the same etcd and its data (a fault the
//! model-based test injects).

use std::{
    fs,
    io::Write,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

/// Environment variable naming a directory that already holds the binaries.
pub const BIN_DIR_ENV: &str = "APPLYSET_TESTENV_BIN";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "building the control-plane binaries failed ({0}); run tests/testenv/build-kube.sh to see why"
    )]
    Build(String),
    #[error(
        "control-plane binary {0} is missing; run tests/testenv/build-kube.sh or set {BIN_DIR_ENV}"
    )]
    MissingBinary(PathBuf),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{process} did not become ready within {timeout:?}; its log is {log}")]
    NotReady {
        process: &'static str,
        timeout: Duration,
        log: PathBuf,
    },
    #[error("{0} is not running, so it cannot be restarted")]
    NotRunning(&'static str),
    #[error("{process} exited early with {status}; its log is {log}")]
    Exited {
        process: &'static str,
        status: std::process::ExitStatus,
        log: PathBuf,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

fn io<T>(what: impl Into<String>, r: std::io::Result<T>) -> Result<T> {
    r.map_err(|source| Error::Io {
        what: what.into(),
        source,
    })
}

/// Directory of this crate (where `build-kube.sh` and the Go modules live).
pub fn testenv_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding etcd, kube-apiserver, kube-controller-manager and kubectl:
/// `$APPLYSET_TESTENV_BIN` if set, otherwise whatever `build-kube.sh` prints (it builds on a
/// cache miss and returns at once on a hit).
pub fn binaries() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os(BIN_DIR_ENV).filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let script = testenv_dir().join("build-kube.sh");
    let out = io(
        format!("running {}", script.display()),
        Command::new("bash")
            .arg(&script)
            .stderr(Stdio::inherit())
            .output(),
    )?;
    if !out.status.success() {
        return Err(Error::Build(out.status.to_string()));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = stdout.lines().last().unwrap_or_default().trim();
    if dir.is_empty() {
        return Err(Error::Build("no directory printed".into()));
    }
    Ok(PathBuf::from(dir))
}

/// Options for [`ControlPlane::start`].
#[derive(Clone, Debug)]
pub struct Options {
    /// Directory with the binaries (see [`binaries`]).
    pub bin_dir: PathBuf,
    /// Where state (etcd data, certificates, logs, kubeconfig) goes. A fresh temporary
    /// directory when `None`. Removed when the control plane stops.
    pub state_dir: Option<PathBuf>,
    /// Start kube-controller-manager (garbage collector, namespace and service-account
    /// controllers).
    pub controller_manager: bool,
    /// How long each process may take to become ready.
    pub ready_timeout: Duration,
    /// Run kube-apiserver with API priority and fairness and these limits of requests in
    /// flight (which it shares between its priority levels). `None` (the default): no
    /// priority and fairness and no limit, so that no request is ever throttled.
    pub priority_and_fairness: Option<Inflight>,
}

/// kube-apiserver's limits of requests in flight (`--max-requests-inflight`,
/// `--max-mutating-requests-inflight`); with priority and fairness their sum is the
/// concurrency its priority levels share by their `nominalConcurrencyShares`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inflight {
    pub readonly: u32,
    pub mutating: u32,
}

impl Options {
    pub fn new(bin_dir: PathBuf) -> Self {
        Self {
            bin_dir,
            state_dir: None,
            controller_manager: true,
            ready_timeout: Duration::from_secs(90),
            priority_and_fairness: None,
        }
    }
}

/// A running control plane. Stopped on [`ControlPlane::stop`], on drop, and — through the
/// guard process — when the owning process dies.
pub struct ControlPlane {
    dir: PathBuf,
    kubeconfig: PathBuf,
    server: String,
    token: String,
    bin_dir: PathBuf,
    /// The etcd client URL kube-apiserver uses (kept for [`ControlPlane::restart_apiserver`]).
    etcd_url: String,
    /// kube-apiserver's secure port (the same after a restart).
    api_port: u16,
    /// Priority and fairness, as started (the same after a restart).
    priority_and_fairness: Option<Inflight>,
    children: Vec<(&'static str, Child)>,
    guard: Option<(Child, ChildStdin)>,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("dir", &self.dir)
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

const GUARD_SCRIPT: &str = r#"
trap '' INT HUP TERM
dir=$1
pids=
# A line "PID" adds a process to stop; "-PID" forgets one that ended (a restarted process).
while read -r p; do
  case $p in
    -*) keep=; for q in $pids; do [ "$q" = "${p#-}" ] || keep="$keep $q"; done; pids=$keep ;;
    *) pids="$pids $p" ;;
  esac
done
# The state is thrown away, so there is nothing to shut down gracefully.
[ -n "$pids" ] && kill -KILL $pids 2>/dev/null
i=0
while [ $i -lt 100 ]; do
  alive=
  for p in $pids; do
    state=$(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null) || continue
    [ "$state" = Z ] || alive=1
  done
  [ -z "$alive" ] && break
  i=$((i+1)); sleep 0.05
done
rm -rf "$dir"
"#;

/// How many times [`ControlPlane::start`] tries a start whose process exited early.
pub const START_ATTEMPTS: u32 = 3;

fn free_port() -> Result<u16> {
    let l = io("binding a loopback port", TcpListener::bind("127.0.0.1:0"))?;
    Ok(io("reading the bound port", l.local_addr())?.port())
}

fn random_hex(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    let mut f = io("opening /dev/urandom", fs::File::open("/dev/urandom"))?;
    io(
        "reading /dev/urandom",
        std::io::Read::read_exact(&mut f, &mut buf),
    )?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

impl ControlPlane {
    /// Starts etcd, kube-apiserver and (optionally) kube-controller-manager and waits until
    /// the API server answers `/readyz`. A port found free may be taken before the process
    /// binds it (by another test's control plane, or the local end of any connection): that
    /// process exits early, and the whole start is tried again on new ports, at most
    /// [`START_ATTEMPTS`] times.
    pub fn start(opts: &Options) -> Result<Self> {
        let mut attempt = 1;
        loop {
            match Self::start_once(opts) {
                Err(e @ Error::Exited { .. }) if attempt < START_ATTEMPTS => {
                    eprintln!("testenv: {e}; starting again on new ports");
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    fn start_once(opts: &Options) -> Result<Self> {
        for b in [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kubectl",
        ] {
            let p = opts.bin_dir.join(b);
            if !p.is_file() {
                return Err(Error::MissingBinary(p));
            }
        }
        let dir = match &opts.state_dir {
            Some(d) => d.clone(),
            None => std::env::temp_dir().join(format!("applyset-testenv-{}", random_hex(6)?)),
        };
        io(
            format!("creating {}", dir.display()),
            fs::create_dir_all(dir.join("pki")),
        )?;
        let dir = io("resolving the state directory", dir.canonicalize())?;

        // The guard first: from here on, whatever happens to this process, what it started
        // is stopped and the state directory removed.
        let mut guard_child = io(
            "starting the cleanup guard",
            Command::new("sh")
                .arg("-c")
                .arg(GUARD_SCRIPT)
                .arg("guard")
                .arg(&dir)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn(),
        )?;
        let guard_stdin = guard_child.stdin.take();
        let mut cp = ControlPlane {
            kubeconfig: dir.join("kubeconfig"),
            dir,
            server: String::new(),
            token: random_hex(16)?,
            bin_dir: opts.bin_dir.clone(),
            etcd_url: String::new(),
            api_port: 0,
            priority_and_fairness: opts.priority_and_fairness,
            children: Vec::new(),
            guard: guard_stdin.map(|s| (guard_child, s)),
        };
        if let Err(e) = cp.launch(opts) {
            // The state directory goes with `cp`: say what the process said first.
            if let Error::Exited { log, .. } = &e {
                let text = fs::read_to_string(log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(5).collect();
                for line in tail.iter().rev() {
                    eprintln!("testenv: {line}");
                }
            }
            return Err(e);
        }
        Ok(cp)
    }

    fn spawn(&mut self, name: &'static str, cmd: &mut Command) -> Result<()> {
        let log = self.dir.join(format!("{name}.log"));
        // Appended to: a restarted process keeps the log of its earlier run.
        let out = io(
            format!("opening {}", log.display()),
            fs::OpenOptions::new().create(true).append(true).open(&log),
        )?;
        let err = io("duplicating a log handle", out.try_clone())?;
        let child = io(
            format!("starting {name}"),
            cmd.stdin(Stdio::null()).stdout(out).stderr(err).spawn(),
        )?;
        if let Some((_, stdin)) = &mut self.guard {
            // If the guard is gone the synchronous stop still covers this child.
            let _ = writeln!(stdin, "{}", child.id());
            let _ = stdin.flush();
        }
        self.children.push((name, child));
        Ok(())
    }

    fn launch(&mut self, opts: &Options) -> Result<()> {
        let d = self.dir.clone();
        let pki = d.join("pki");
        let sa_key = pki.join("sa.key");
        let status = io(
            "generating the service-account key with openssl",
            Command::new("openssl")
                .args([
                    "ecparam",
                    "-name",
                    "prime256v1",
                    "-genkey",
                    "-noout",
                    "-out",
                ])
                .arg(&sa_key)
                .stderr(Stdio::null())
                .status(),
        )?;
        if !status.success() {
            return Err(Error::Build(format!(
                "openssl ecparam exited with {status}"
            )));
        }
        io(
            "writing the token file",
            fs::write(
                d.join("tokens.csv"),
                format!("{},admin,admin,\"system:masters\"\n", self.token),
            ),
        )?;

        let (etcd_port, peer_port, api_port) = (free_port()?, free_port()?, free_port()?);
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let bin = self.bin_dir.clone();
        self.spawn(
            "etcd",
            Command::new(bin.join("etcd"))
                .arg(format!("--data-dir={}", d.join("etcd").display()))
                .arg(format!("--listen-client-urls={etcd_url}"))
                .arg(format!("--advertise-client-urls={etcd_url}"))
                .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"))
                .arg(format!(
                    "--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"
                ))
                .arg(format!(
                    "--initial-cluster=default=http://127.0.0.1:{peer_port}"
                ))
                .arg("--unsafe-no-fsync=true")
                .arg("--quota-backend-bytes=8589934592")
                // Room for an ApplySet of thousands of inline members (benchmarks).
                .arg("--max-request-bytes=10485760")
                .arg("--log-level=warn"),
        )?;

        self.server = format!("https://127.0.0.1:{api_port}");
        self.etcd_url = etcd_url;
        self.api_port = api_port;
        let mut apiserver = self.apiserver_command();
        self.spawn("kube-apiserver", &mut apiserver)?;
        self.wait_apiserver_ready(opts.ready_timeout)?;

        if opts.controller_manager {
            let ca = self.ca_file();
            let kcm_kubeconfig = self.kubeconfig.clone();
            self.spawn(
                "kube-controller-manager",
                Command::new(bin.join("kube-controller-manager"))
                    .arg(format!("--kubeconfig={}", kcm_kubeconfig.display()))
                    .arg("--leader-elect=false")
                    .arg("--secure-port=0")
                    .arg("--controllers=garbage-collector-controller,namespace-controller,serviceaccount-controller")
                    .arg(format!("--service-account-private-key-file={}", sa_key.display()))
                    .arg(format!("--root-ca-file={}", ca.display()))
                    .arg("--kube-api-qps=200")
                    .arg("--kube-api-burst=400")
                    .arg("--concurrent-gc-syncs=5")
                    .arg("--concurrent-namespace-syncs=5"),
            )?;
            // Fail early if it exits at once (bad flags); readiness shows in behaviour.
            thread::sleep(Duration::from_millis(300));
            self.check_alive()?;
        }
        Ok(())
    }

    /// The kube-apiserver command line: the same on every start of this control plane.
    fn apiserver_command(&self) -> Command {
        let d = &self.dir;
        let pki = d.join("pki");
        let sa_key = pki.join("sa.key");
        let mut cmd = Command::new(self.bin_dir.join("kube-apiserver"));
        cmd.arg(format!("--etcd-servers={}", self.etcd_url))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={}", self.api_port))
            .arg("--advertise-address=127.0.0.1")
            .arg("--endpoint-reconciler-type=none")
            // The serving certificate is generated on the first start and reused afterwards,
            // so the kubeconfig's CA stays valid across restarts.
            .arg(format!("--cert-dir={}", pki.display()))
            .arg("--service-cluster-ip-range=10.0.0.0/24")
            .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
            .arg(format!("--service-account-key-file={}", sa_key.display()))
            .arg(format!(
                "--service-account-signing-key-file={}",
                sa_key.display()
            ))
            .arg("--authorization-mode=RBAC")
            .arg(format!(
                "--token-auth-file={}",
                d.join("tokens.csv").display()
            ))
            .arg("--allow-privileged=true")
            .arg("--disable-admission-plugins=ServiceAccount")
            .arg("--v=0");
        match self.priority_and_fairness {
            Some(limits) => cmd
                .arg(format!("--max-requests-inflight={}", limits.readonly))
                .arg(format!(
                    "--max-mutating-requests-inflight={}",
                    limits.mutating
                )),
            None => cmd
                .arg("--max-requests-inflight=0")
                .arg("--max-mutating-requests-inflight=0")
                .arg("--enable-priority-and-fairness=false"),
        };
        cmd
    }

    /// Waits until kube-apiserver has written its serving certificate and the kubeconfig
    /// (first start) and answers `/readyz`.
    fn wait_apiserver_ready(&mut self, timeout: Duration) -> Result<()> {
        let ca = self.ca_file();
        self.wait_until("kube-apiserver", timeout, || ca.is_file())?;
        io(
            "writing the kubeconfig",
            fs::write(
                &self.kubeconfig,
                kubeconfig_yaml(&self.server, &ca, &self.token),
            ),
        )?;
        let kubectl = self.kubectl();
        let kc = self.kubeconfig.clone();
        self.wait_until("kube-apiserver", timeout, || {
            Command::new(&kubectl)
                .arg(format!("--kubeconfig={}", kc.display()))
                .args(["get", "--raw=/readyz", "--request-timeout=5s"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
    }

    /// Kills kube-apiserver (SIGKILL, no graceful shutdown) and starts it again with the same
    /// flags, on the same port, against the same etcd, whose data is kept; returns once it
    /// answers `/readyz` again (within `ready_timeout`). Clients see refused connections
    /// meanwhile and their watches end. etcd and kube-controller-manager keep running.
    pub fn restart_apiserver(&mut self, ready_timeout: Duration) -> Result<()> {
        let i = self
            .children
            .iter()
            .position(|(name, _)| *name == "kube-apiserver")
            .ok_or(Error::NotRunning("kube-apiserver"))?;
        let (_, mut old) = self.children.remove(i);
        let _ = old.kill();
        let _ = old.wait();
        // The guard must not signal that PID any more: it may be reused by then.
        if let Some((_, stdin)) = &mut self.guard {
            let _ = writeln!(stdin, "-{}", old.id());
            let _ = stdin.flush();
        }
        let mut apiserver = self.apiserver_command();
        self.spawn("kube-apiserver", &mut apiserver)?;
        self.wait_apiserver_ready(ready_timeout)?;
        self.check_alive()
    }

    fn check_alive(&mut self) -> Result<()> {
        for (name, child) in &mut self.children {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(Error::Exited {
                    process: name,
                    status,
                    log: self.dir.join(format!("{name}.log")),
                });
            }
        }
        Ok(())
    }

    fn wait_until(
        &mut self,
        process: &'static str,
        timeout: Duration,
        mut ready: impl FnMut() -> bool,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if ready() {
                return Ok(());
            }
            self.check_alive()?;
            if Instant::now() > deadline {
                return Err(Error::NotReady {
                    process,
                    timeout,
                    log: self.dir.join(format!("{process}.log")),
                });
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Path of the admin kubeconfig (group `system:masters`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }
    /// `https://127.0.0.1:<port>`.
    pub fn server(&self) -> &str {
        &self.server
    }
    /// The admin bearer token.
    pub fn token(&self) -> &str {
        &self.token
    }
    /// The CA bundle that signs the API server's serving certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("pki").join("apiserver.crt")
    }
    /// The state directory (removed on stop).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// The kubectl binary that matches the server.
    pub fn kubectl(&self) -> PathBuf {
        self.bin_dir.join("kubectl")
    }
    /// PIDs of the processes this control plane started (the guard included).
    pub fn pids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.children.iter().map(|(_, c)| c.id()).collect();
        if let Some((g, _)) = &self.guard {
            v.push(g.id());
        }
        v
    }

    /// The PID of the process this control plane started as `name` (`etcd`, `kube-apiserver`,
    /// `kube-controller-manager`), if it did.
    pub fn pid(&self, name: &str) -> Option<u32> {
        self.children
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| c.id())
    }

    /// Stops every process (SIGKILL: the state is discarded) and removes the state directory.
    pub fn stop(&mut self) {
        // Closing the guard's stdin makes it stop the processes and remove the directory;
        // waiting for it makes this synchronous.
        if let Some((mut guard, stdin)) = self.guard.take() {
            drop(stdin);
            let _ = guard.wait();
        }
        for (_, child) in &mut self.children {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
        self.children.clear();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An admin kubeconfig for `server`, trusting `ca`, authenticating with `token`.
pub fn kubeconfig_yaml(server: &str, ca: &Path, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: testenv\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: admin\n  user:\n    token: {token}\ncontexts:\n- name: testenv\n  context:\n    cluster: testenv\n    user: admin\n    namespace: default\ncurrent-context: testenv\n",
        ca.display()
    )
}

//! Running the real `applyset-operator` binary in tests: a guard that kills it even when the
//! test panics, free loopback ports, and a minimal HTTP GET for its endpoints.
#![allow(dead_code)]

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// `(status code, body)` of `GET http://127.0.0.1:<port><path>`, or None if nothing listens.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let code = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}

/// The value of an unlabelled or labelled sample in Prometheus text, e.g.
/// `applyset_reconciles_total{result="success"}`.
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.trim().parse().ok())
        })
}

/// The operator binary the process tests run: `APPLYSET_OPERATOR_BIN` when set (`make test`
/// sets it to the release build, the binary users run), else this build's.
pub fn operator_binary() -> PathBuf {
    std::env::var_os("APPLYSET_OPERATOR_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_applyset-operator")))
}

/// What the operator logs once it serves its health and metrics ports (src/main.rs).
const SERVING: &str = "serving /healthz, /readyz and /metrics";
/// What it logs when one of them is taken (src/main.rs).
const PORT_TAKEN: &str = "cannot listen on the health or metrics address";
/// How long [`OperatorProcess::start`] waits for a process to serve its ports or exit.
const SERVE_WAIT: Duration = Duration::from_secs(30);
/// How many processes [`OperatorProcess::start`] starts at most, each on other ports.
const START_ATTEMPTS: usize = 5;

/// A running operator process, killed on drop.
pub struct OperatorProcess {
    pub child: Child,
    pub metrics_port: u16,
    pub health_port: u16,
    pub log: PathBuf,
}

impl OperatorProcess {
    /// Starts the operator on free loopback ports, and waits until it serves them or exits.
    /// Another process can take a port between [`free_port`] and the operator's bind (tests
    /// run side by side): such a process exits at once, having done nothing, and the
    /// operator starts again on other ports.
    pub fn start(kubeconfig: &Path, extra_args: &[&str], log_name: &str) -> OperatorProcess {
        let mut attempt = 1;
        loop {
            let mut p = Self::spawn(kubeconfig, extra_args, log_name);
            if attempt == START_ATTEMPTS || !p.lost_a_port() {
                return p;
            }
            eprintln!("operator {log_name}: another process took its port; started again");
            attempt += 1;
        }
    }

    /// Whether the process exited because a port it was given was taken. Polls its log until
    /// it serves its ports, or it exits, or [`SERVE_WAIT`] passed (then: no).
    fn lost_a_port(&mut self) -> bool {
        let deadline = Instant::now() + SERVE_WAIT;
        while Instant::now() < deadline {
            if self.log().contains(SERVING) {
                return false;
            }
            if let Ok(Some(_)) = self.child.try_wait() {
                return self.log().contains(PORT_TAKEN);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn spawn(kubeconfig: &Path, extra_args: &[&str], log_name: &str) -> OperatorProcess {
        let (metrics_port, health_port) = (free_port(), free_port());
        let log =
            std::env::temp_dir().join(format!("applyset-op-{}-{log_name}.log", std::process::id()));
        let out = std::fs::File::create(&log).expect("log file");
        let child = Command::new(operator_binary())
            .arg("run")
            .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
            .arg(format!("--health-addr=127.0.0.1:{health_port}"))
            // The tests' sets reconcile every few seconds (the default minimum is 10 s).
            .arg("--min-interval=1s")
            .args(extra_args)
            .env("KUBECONFIG", kubeconfig)
            .env(
                "RUST_LOG",
                std::env::var("APPLYSET_TEST_OPERATOR_LOG")
                    .unwrap_or_else(|_| "info,kube=warn".into()),
            )
            .env_remove("POD_NAME")
            .env_remove("POD_NAMESPACE")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log handle"))
            .stderr(out)
            .spawn()
            .expect("start applyset-operator");
        OperatorProcess {
            child,
            metrics_port,
            health_port,
            log,
        }
    }

    pub fn metrics(&self) -> Option<String> {
        http_get(self.metrics_port, "/metrics")
            .filter(|(c, _)| *c == 200)
            .map(|(_, b)| b)
    }

    pub fn readyz(&self) -> Option<(u16, String)> {
        http_get(self.health_port, "/readyz")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A field of the process's `/proc/<pid>/status` in MiB (`VmRSS`: resident now; `VmHWM`:
    /// the peak); 0 when it cannot be read.
    pub fn status_mib(&self, field: &str) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kib| kib / 1024)
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("pid")
    }

    /// SIGTERM (graceful) via the kill command.
    pub fn terminate(&self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status();
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

//! The operator under test, a process of its own: started, its metrics read, stopped.

use super::*;

pub struct OperatorProc {
    child: Child,
    metrics_port: u16,
}

impl Drop for OperatorProc {
    /// SIGTERM first, so that an operator built with `--features dhat-heap` writes its heap
    /// profile (dhat-heap.json) as it exits; killed after 30 s.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> Res<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let code = buf.split_whitespace().nth(1)?.parse().ok()?;
    Some((
        code,
        buf.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default(),
    ))
}

impl OperatorProc {
    pub async fn start(
        binary: &Path,
        kubeconfig: &Path,
        concurrency: Option<u16>,
        extra_args: &[String],
        log: &Path,
    ) -> Res<OperatorProc> {
        let (metrics_port, health_port) = (free_port()?, free_port()?);
        let out = std::fs::File::create(log).map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(binary);
        cmd.arg("run")
            .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
            .arg(format!("--health-addr=127.0.0.1:{health_port}"))
            // The periodic resync is measured with interval 2s (the default minimum is 10s).
            .arg("--min-interval=1s")
            // The single set of 5000 members is inline: about 590 KiB of JSON, over the
            // default 512 KiB (a user would put so many in a source).
            .arg("--max-inline-manifests-kib=1024")
            .env("KUBECONFIG", kubeconfig)
            .env(
                "RUST_LOG",
                std::env::var("BENCH_OPERATOR_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        if let Some(c) = concurrency {
            cmd.arg(format!("--concurrency={c}"));
        }
        cmd.args(extra_args);
        let child = cmd
            .spawn()
            .map_err(|e| format!("starting {}: {e}", binary.display()))?;
        let p = OperatorProc {
            child,
            metrics_port,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while http_get(health_port, "/readyz").map(|(c, _)| c) != Some(200) {
            if Instant::now() > deadline {
                return Err(format!(
                    "operator not ready within 60 s; see {}",
                    log.display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(p)
    }

    pub fn metrics(&self) -> String {
        http_get(self.metrics_port, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default()
    }

    /// (all requests, write requests, reconciles) the operator has counted.
    pub fn counters(&self) -> (f64, f64, f64) {
        let m = self.metrics();
        let mut all = 0.0;
        let mut writes = 0.0;
        let mut reconciles = 0.0;
        for line in m.lines().filter(|l| !l.starts_with('#')) {
            let v: f64 = line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            if line.starts_with("applyset_api_requests_total{") {
                all += v;
                if ["POST", "PUT", "PATCH", "DELETE"]
                    .iter()
                    .any(|w| line.contains(&format!("\"{w}\"")))
                {
                    writes += v;
                }
            } else if line.starts_with("applyset_reconciles_total{") {
                reconciles += v;
            }
        }
        (all, writes, reconciles)
    }

    /// The API server's answers 403 (forbidden) to the operator so far.
    pub fn forbidden(&self) -> f64 {
        self.metrics()
            .lines()
            .filter(|l| l.starts_with("rest_client_requests_total{") && l.contains("code=\"403\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    pub fn peak_rss_mib(&self) -> f64 {
        status_mib(self.child.id(), "VmHWM")
    }
}

/// A field of `/proc/<pid>/status` in MiB (NaN when the process or the field is gone).
pub fn status_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// The peak RSS (MiB) of a control plane's kube-apiserver and etcd so far (NaN for one it
/// did not start).
pub fn plane_peak_rss_mib(cp: &ControlPlane) -> (f64, f64) {
    let of = |name: &str| {
        cp.pid(name)
            .map_or(f64::NAN, |pid| status_mib(pid, "VmHWM"))
    };
    (of("kube-apiserver"), of("etcd"))
}

//! The `kubectl-applyset` plugin binary run as a process: offline, or against the control
//! plane of this test binary (`--kubeconfig`); `KUBECONFIG` is always removed, so the plugin
//! reaches no other cluster. Its output is collected whole, stdin is null.
#![allow(dead_code)]

use std::process::Output;

use super::cluster;

/// The plugin binary.
pub const PLUGIN: &str = env!("CARGO_BIN_EXE_kubectl-applyset");

/// Runs the plugin with `args` (without waiting on the runtime's threads: the operator of the
/// test runs on the same runtime).
pub async fn plugin(args: &[&str]) -> Output {
    tokio::process::Command::new(PLUGIN)
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("run kubectl-applyset")
}

/// Runs the plugin against the test cluster.
pub async fn on_cluster(args: &[&str]) -> Output {
    let kubeconfig = format!("--kubeconfig={}", cluster().kubeconfig().display());
    let mut all = vec![kubeconfig.as_str()];
    all.extend_from_slice(args);
    plugin(&all).await
}

/// The exit code, stdout and stderr of a process, for assertion messages.
pub fn shown(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

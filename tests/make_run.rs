//! `make run` touches only a cluster it was told to use: `hack/run.sh --decide` (the choice
//! the script acts on) with a home directory holding a kubeconfig.

use std::{path::Path, process::Command};

/// What `hack/run.sh --decide` chooses with `HOME` at `home` and the environment `env`
/// (KUBECONFIG and CONTEXT unset unless given).
fn decide(home: &Path, env: &[(&str, &str)]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/run.sh");
    let out = Command::new("bash")
        .arg(script)
        .arg("--decide")
        .env("HOME", home)
        .env_remove("KUBECONFIG")
        .env_remove("CONTEXT")
        .envs(env.iter().copied())
        .output()
        .expect("run hack/run.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_string()
}

#[test]
fn make_run_uses_the_local_control_plane_unless_told_otherwise() {
    let home = tempfile::tempdir().expect("tempdir");
    let kube = home.path().join(".kube");
    std::fs::create_dir_all(&kube).expect("mkdir");
    std::fs::write(
        kube.join("config"),
        "apiVersion: v1\nkind: Config\ncurrent-context: prod\ncontexts:\n- name: prod\n  context: {cluster: prod, user: admin}\nclusters:\n- name: prod\n  cluster: {server: 'https://prod.example.com'}\nusers:\n- name: admin\n  user: {token: x}\n",
    )
    .expect("kubeconfig");
    // A kubeconfig in the home directory alone is not used (on main it was).
    assert_eq!(decide(home.path(), &[]), "local");
    assert_eq!(decide(home.path(), &[("KUBECONFIG", "")]), "local");
    assert_eq!(
        decide(home.path(), &[("KUBECONFIG", "/some/kubeconfig")]),
        "kubeconfig /some/kubeconfig"
    );
    assert_eq!(
        decide(home.path(), &[("CONTEXT", "current")]),
        "context current"
    );
    assert_eq!(decide(home.path(), &[("CONTEXT", "prod")]), "context prod");
}

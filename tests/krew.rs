//! The plugin installs like other kubectl plugins: the archive and krew manifest that `make
//! dist` makes (hack/dist.sh, here over the test build of the plugin) install with krew
//! itself — `krew install --manifest=… --archive=…`, krew built from its Go module
//! (tests/testenv/build-krew.sh), offline, in a KREW_ROOT of its own — and the installed
//! plugin runs. A manifest whose sha256 does not match the archive is refused.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

const PLUGIN: &str = env!("CARGO_BIN_EXE_kubectl-applyset");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// krew: `APPLYSET_KREW` (what `make test` passes), else built (or found in the cache).
fn krew() -> PathBuf {
    if let Ok(k) = std::env::var("APPLYSET_KREW") {
        return PathBuf::from(k);
    }
    let out = Command::new(root().join("tests/testenv/build-krew.sh"))
        .output()
        .expect("build-krew.sh");
    assert!(
        out.status.success(),
        "build-krew.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(dir.lines().last().unwrap_or_default()).join("krew")
}

fn shown(o: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs hack/dist.sh over the test build of the plugin into `out`; the archive's path.
fn dist(out: &Path) -> PathBuf {
    let o = Command::new(root().join("hack/dist.sh"))
        .arg(out)
        .env("DIST_BIN", PLUGIN)
        .output()
        .expect("hack/dist.sh");
    assert!(o.status.success(), "hack/dist.sh: {}", shown(&o));
    std::fs::read_dir(out)
        .expect("out")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".tar.gz"))
        .expect("an archive")
}

/// `krew install` with a KREW_ROOT (and HOME) of its own under `dir`, no update check.
fn krew_install(dir: &Path, manifest: &Path, archive: &Path) -> Output {
    Command::new(krew())
        .arg("install")
        .arg(format!("--manifest={}", manifest.display()))
        .arg(format!("--archive={}", archive.display()))
        .env("KREW_ROOT", dir.join("krew"))
        .env("HOME", dir)
        .env("KREW_NO_UPGRADE_CHECK", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("krew")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("applyset-krew-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch");
    d
}

#[test]
fn the_dist_manifest_and_archive_install_with_krew() {
    let dir = scratch("ok");
    let archive = dist(&dir.join("dist"));
    let manifest = dir.join("dist/applyset.yaml");
    let text = std::fs::read_to_string(&manifest).expect("manifest");
    assert!(!text.contains('@'), "placeholders left:\n{text}");
    let out = krew_install(&dir, &manifest, &archive);
    assert!(out.status.success(), "krew install: {}", shown(&out));
    let installed = dir.join("krew/bin/kubectl-applyset");
    let v = Command::new(&installed)
        .arg("--version")
        .output()
        .expect("run the installed plugin");
    assert!(v.status.success(), "{}", shown(&v));
    let version = String::from_utf8_lossy(&v.stdout);
    assert!(
        version.starts_with(concat!(
            "kubectl-applyset ",
            env!("CARGO_PKG_VERSION"),
            " (commit "
        )),
        "{version}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The broken example: the same manifest with another sha256 is refused, nothing installed.
#[test]
fn a_manifest_whose_sha256_does_not_match_is_refused() {
    let dir = scratch("bad");
    let archive = dist(&dir.join("dist"));
    let manifest = dir.join("dist/applyset.yaml");
    let text = std::fs::read_to_string(&manifest).expect("manifest");
    let sha = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("sha256: "))
        .expect("a sha256")
        .to_string();
    std::fs::write(&manifest, text.replace(&sha, &"0".repeat(64))).expect("write");
    let out = krew_install(&dir, &manifest, &archive);
    assert!(
        !out.status.success(),
        "krew installed a mismatching archive: {}",
        shown(&out)
    );
    assert!(!dir.join("krew/bin/kubectl-applyset").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

//! The real `sops` and `age-keygen` (built by tests/testenv/build-sops.sh; `make test` passes
//! their paths in APPLYSET_SOPS and APPLYSET_AGE_KEYGEN): fixtures are encrypted at test time.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The directory holding both binaries: beside `$APPLYSET_SOPS`, or what build-sops.sh prints
/// (it builds them on a cache miss and answers at once on a hit).
fn tools_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(p) = std::env::var_os("APPLYSET_SOPS").filter(|p| !p.is_empty()) {
            let path = PathBuf::from(p);
            return path.parent().map(Path::to_path_buf).unwrap_or_default();
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testenv/build-sops.sh");
        let out = Command::new("bash")
            .arg(script)
            .stderr(Stdio::inherit())
            .output()
            .expect("run build-sops.sh");
        assert!(out.status.success(), "build-sops.sh failed: {}", out.status);
        let stdout = String::from_utf8_lossy(&out.stdout);
        PathBuf::from(stdout.lines().last().unwrap_or_default().trim())
    })
}

pub fn sops_bin() -> PathBuf {
    std::env::var_os("APPLYSET_SOPS")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| tools_dir().join("sops"))
}

pub fn age_keygen_bin() -> PathBuf {
    std::env::var_os("APPLYSET_AGE_KEYGEN")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| tools_dir().join("age-keygen"))
}

/// An age key made by the real age-keygen: the key file's text and its public recipient.
pub struct AgeKey {
    pub text: String,
    pub recipient: String,
}

pub fn age_keygen(dir: &Path, name: &str) -> AgeKey {
    let path = dir.join(name);
    let out = Command::new(age_keygen_bin())
        .arg("-o")
        .arg(&path)
        .output()
        .expect("run age-keygen");
    assert!(
        out.status.success(),
        "age-keygen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&path).expect("read the key");
    let recipient = text
        .lines()
        .find_map(|l| l.strip_prefix("# public key: "))
        .expect("age-keygen writes the public key")
        .to_string();
    AgeKey { text, recipient }
}

/// `sops encrypt --age RECIPIENT ARGS… FILE` of `plain` written as `dir/name`, run in `dir`
/// with no configuration file: the encrypted text.
pub fn sops_encrypt(
    dir: &Path,
    name: &str,
    plain: &[u8],
    recipient: &str,
    args: &[&str],
) -> Vec<u8> {
    let path = dir.join(name);
    std::fs::write(&path, plain).expect("write the plaintext");
    let out = Command::new(sops_bin())
        .current_dir(dir)
        .env_remove("SOPS_AGE_KEY_FILE")
        .env_remove("SOPS_AGE_KEY")
        .args(["encrypt", "--age", recipient])
        .args(args)
        .arg(&path)
        .output()
        .expect("run sops");
    assert!(
        out.status.success(),
        "sops encrypt: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_file(&path).expect("remove the plaintext");
    out.stdout
}

/// `sops decrypt` of `encrypted` (as `dir/name`) with the key in `key_text`: the plaintext, as
/// the real sops prints it.
pub fn sops_decrypt(dir: &Path, name: &str, encrypted: &[u8], key_text: &str) -> Vec<u8> {
    let path = dir.join(name);
    std::fs::write(&path, encrypted).expect("write the encrypted file");
    let out = Command::new(sops_bin())
        .current_dir(dir)
        .env("SOPS_AGE_KEY", key_text)
        .env_remove("SOPS_AGE_KEY_FILE")
        .args(["decrypt"])
        .arg(&path)
        .output()
        .expect("run sops");
    assert!(
        out.status.success(),
        "sops decrypt: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

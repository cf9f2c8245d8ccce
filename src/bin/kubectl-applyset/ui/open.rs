//! `--open`: starts the default browser on the sign-in URL without putting its token on a
//! command line (where any local user could read it in the process list). The URL is written
//! into a page that moves on to it (a meta refresh), in a file readable by the user only
//! (0600) inside a private temporary directory (0700); the browser opener (`xdg-open`, `open`
//! on macOS) is started with that file's path only. The file is removed once the token was
//! used, or after a minute.

use std::{
    io::Write,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use tempfile::TempDir;

use super::App;

/// How long the file waits for the sign-in before it is removed anyway.
const KEEP: Duration = Duration::from_secs(60);

/// Why the browser could not be started.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("writing the page that opens the view in {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("starting {opener}: {source}")]
    Spawn {
        opener: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// The program that opens a file in the default browser.
fn opener() -> &'static str {
    if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    }
}

/// The page that moves on to `url` (a URL made of URL-safe characters; escaped all the same).
pub fn page(url: &str) -> String {
    let url = url
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta http-equiv=\"refresh\" content=\"0;url={url}\">\
<title>kubectl applyset ui</title></head>\
<body><p><a href=\"{url}\">Open kubectl applyset ui</a></p></body></html>\n"
    )
}

/// Writes the page for `url` into a new private directory: the directory (removed when
/// dropped) and the file's path.
pub fn write(url: &str) -> Result<(TempDir, PathBuf), OpenError> {
    let failed = |path: &Path, source| OpenError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = tempfile::Builder::new()
        .prefix("applyset-ui-")
        .tempdir()
        .map_err(|e| failed(&std::env::temp_dir(), e))?;
    let path = dir.path().join("open.html");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .map_err(|e| failed(dir.path(), e))?;
        options.mode(0o600);
    }
    let mut file = options.open(&path).map_err(|e| failed(&path, e))?;
    file.write_all(page(url).as_bytes())
        .map_err(|e| failed(&path, e))?;
    Ok((dir, path))
}

/// Opens `url` in the default browser through a private file, removed once `app`'s token was
/// used or after a minute.
pub fn open(app: &Arc<App>, url: &str) -> Result<(), OpenError> {
    let (dir, path) = write(url)?;
    let opener = opener();
    let mut child = tokio::process::Command::new(opener)
        .arg(&path)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(false)
        .spawn()
        .map_err(|source| OpenError::Spawn { opener, source })?;
    // Reaped when it ends (xdg-open returns once the browser has the file).
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    let app = Arc::clone(app);
    tokio::spawn(async move {
        tokio::select! {
            () = app.sessions.logged_in.notified() => {}
            () = tokio::time::sleep(KEEP) => {}
        }
        drop(dir);
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_moves_on_to_the_url() {
        let p = page("http://127.0.0.1:8080/login?token=abc_-");
        assert!(
            p.contains(
                r#"<meta http-equiv="refresh" content="0;url=http://127.0.0.1:8080/login?token=abc_-">"#
            ),
            "{p}"
        );
        assert!(page("a\"<>&").contains("a&quot;&lt;&gt;&amp;"));
    }

    #[cfg(unix)]
    #[test]
    fn the_file_is_private_and_goes_with_its_directory() {
        use std::os::unix::fs::PermissionsExt as _;
        let (dir, path) = write("http://127.0.0.1:1/login?token=t").expect("written");
        let mode = |p: &Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(dir.path()), 0o700);
        assert!(
            std::fs::read_to_string(&path)
                .expect("read")
                .contains("token=t")
        );
        let kept = dir.path().to_path_buf();
        drop(dir);
        assert!(!kept.exists());
    }
}

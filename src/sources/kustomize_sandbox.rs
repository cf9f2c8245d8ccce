//! An empty network namespace for the kustomize child, where the platform allows one
//! (`--kustomize-network-sandbox`): defence in depth behind the pre-build check
//! ([`super::kustomization::precheck`]), which is what keeps builds off the network
//! everywhere. In a new network namespace the child has only a loopback interface, down: every
//! connection fails, loopback included.
//!
//! Creating one takes `CAP_SYS_ADMIN` (root outside a pod), or an unprivileged user namespace
//! around it; in a pod with the RuntimeDefault seccomp profile and no added capability both are
//! refused (`EPERM`), and builds run without it. Whether it works is found once, by a forked
//! child that tries.

use std::sync::OnceLock;

/// Whether kustomize builds run in an empty network namespace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum NetworkSandbox {
    /// When the platform allows it (found once; logged either way).
    #[default]
    Auto,
    /// Never: the pre-build check alone.
    Off,
}

/// The namespaces the child creates before it runs kustomize (the flags of `unshare(2)`), for
/// `mode`; `None`: none (off, or the platform refuses them).
pub fn flags(mode: NetworkSandbox) -> Option<libc::c_int> {
    static FOUND: OnceLock<Option<libc::c_int>> = OnceLock::new();
    match mode {
        NetworkSandbox::Off => None,
        NetworkSandbox::Auto => *FOUND.get_or_init(find),
    }
}

/// The first of a new network namespace, or new user and network namespaces, that a child of
/// this process may create; logged once.
#[cfg(target_os = "linux")]
fn find() -> Option<libc::c_int> {
    let mut refused = 0;
    for (flags, what) in [
        (libc::CLONE_NEWNET, "a new network namespace"),
        (
            libc::CLONE_NEWUSER | libc::CLONE_NEWNET,
            "new user and network namespaces",
        ),
    ] {
        match try_in_child(flags) {
            Ok(()) => {
                tracing::info!("kustomize builds run in {what}: they cannot reach any network");
                return Some(flags);
            }
            Err(errno) => refused = errno,
        }
    }
    tracing::warn!(
        cause = %std::io::Error::from_raw_os_error(refused),
        "kustomize builds run without a network sandbox (the platform refuses new network namespaces, e.g. a pod's RuntimeDefault seccomp profile): the pre-build check alone keeps them off the network"
    );
    None
}

#[cfg(not(target_os = "linux"))]
fn find() -> Option<libc::c_int> {
    tracing::warn!(
        "kustomize builds run without a network sandbox (not Linux): the pre-build check alone keeps them off the network"
    );
    None
}

/// Whether a child forked from this process may create namespaces `flags`: the child tries,
/// and exits with 0 or the error number.
#[cfg(target_os = "linux")]
fn try_in_child(flags: libc::c_int) -> Result<(), i32> {
    // SAFETY: the forked child calls only async-signal-safe functions (unshare, _exit) and
    // touches no memory of the parent; the parent waits for it by its pid.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return Err(errno());
        }
        if pid == 0 {
            let code = if libc::unshare(flags) == 0 {
                0
            } else {
                *libc::__errno_location()
            };
            libc::_exit(code);
        }
        let mut status = 0;
        while libc::waitpid(pid, &mut status, 0) < 0 {
            if errno() != libc::EINTR {
                return Err(errno());
            }
        }
        match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
            (true, 0) => Ok(()),
            (true, code) => Err(code),
            (false, _) => Err(libc::ECHILD),
        }
    }
}

#[cfg(target_os = "linux")]
fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Creates namespaces `flags` ([`flags`]) for the calling process: run in the child between
/// fork and exec, so async-signal-safe (one system call, no allocation).
pub fn enter(flags: libc::c_int) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    // SAFETY: unshare only changes the calling process's namespaces.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    #[cfg(not(target_os = "linux"))]
    let _ = flags;
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt as _;

    /// Runs `/bin/sh -c script` with namespaces `flags` created first; whether it succeeded.
    fn run(flags: Option<libc::c_int>, script: &str) -> bool {
        let mut cmd = std::process::Command::new("/bin/bash");
        cmd.arg("-c").arg(script);
        // SAFETY: enter is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || flags.map_or(Ok(()), enter));
        }
        cmd.status().expect("runs bash").success()
    }

    #[test]
    fn off_is_off_and_auto_is_found_once() {
        assert_eq!(flags(NetworkSandbox::Off), None);
        assert_eq!(flags(NetworkSandbox::Auto), flags(NetworkSandbox::Auto));
    }

    /// Where the platform allows the sandbox (root, or unprivileged user namespaces), a child
    /// in it cannot reach a server on the host's loopback, which one outside it reaches.
    #[test]
    fn a_sandboxed_child_reaches_no_loopback_server() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let port = listener.local_addr().expect("addr").port();
        let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port}");
        assert!(run(None, &connect), "reachable without the sandbox");
        let Some(found) = flags(NetworkSandbox::Auto) else {
            // The platform refuses it: the probe must agree with a direct attempt.
            assert!(try_in_child(libc::CLONE_NEWNET).is_err());
            return;
        };
        assert!(!run(Some(found), &connect), "reachable from the sandbox");
        assert!(run(Some(found), "true"), "the sandboxed child runs");
    }
}

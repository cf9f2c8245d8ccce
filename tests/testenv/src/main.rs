//! `testenv run --state-dir DIR [--kubeconfig PATH] [--no-controller-manager]`
//!
//! Starts the control plane, copies the admin kubeconfig to PATH once `/readyz` answers, and
//! stays in the foreground until it is killed; then its guard stops every process it started
//! and removes DIR (and PATH). `make cluster-up` runs it in the background (cluster.sh).
//!
//! `testenv bin-dir` prints the directory of the binaries (building them on a cache miss).

use std::{path::PathBuf, process::ExitCode, time::Duration};

use applyset_testenv::{ControlPlane, Options, binaries};

fn usage() -> ExitCode {
    eprintln!(
        "usage: testenv run --state-dir DIR [--kubeconfig PATH] [--no-controller-manager]\n       testenv bin-dir"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("bin-dir") => match binaries() {
            Ok(d) => {
                println!("{}", d.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("testenv: {e}");
                ExitCode::FAILURE
            }
        },
        Some("run") => run(&args[1..]),
        _ => usage(),
    }
}

fn run(args: &[String]) -> ExitCode {
    let mut state_dir = None;
    let mut kubeconfig_out: Option<PathBuf> = None;
    let mut kcm = true;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--state-dir" => state_dir = it.next().map(PathBuf::from),
            "--kubeconfig" => kubeconfig_out = it.next().map(PathBuf::from),
            "--no-controller-manager" => kcm = false,
            _ => return usage(),
        }
    }
    let Some(state_dir) = state_dir else {
        return usage();
    };
    let bin_dir = match binaries() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("testenv: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut opts = Options::new(bin_dir);
    opts.state_dir = Some(state_dir);
    opts.controller_manager = kcm;
    let cp = match ControlPlane::start(&opts) {
        Ok(cp) => cp,
        Err(e) => {
            eprintln!("testenv: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(out) = &kubeconfig_out {
        let copied = std::fs::read(cp.kubeconfig()).and_then(|b| std::fs::write(out, b));
        if let Err(e) = copied {
            eprintln!("testenv: writing {}: {e}", out.display());
            return ExitCode::FAILURE;
        }
    }
    println!(
        "testenv: control plane ready at {} (kubeconfig {})",
        cp.server(),
        cp.kubeconfig().display()
    );
    println!("testenv: pids {:?}", cp.pids());
    // Stay up until killed; the guard cleans up after us.
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

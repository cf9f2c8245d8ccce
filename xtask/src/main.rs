//! Repository tasks behind `make docs` and the docs checks of `make lint` and `make test`:
//!
//! - `cargo run -p xtask -- docs`: writes `docs/api.md` (from the CRD schema in
//!   `config/crd/applyset.dev.yaml`) and the chart's values table in `docs/operations.md`
//!   (from the comments of `charts/applyset-operator/values.yaml`).
//! - `cargo run -p xtask -- check`: fails when either is stale, when a link between the docs
//!   (README, CHANGELOG, docs/, examples/) is broken, when a production file under `src/` is
//!   over 800 lines ([`sizes`]), or when the kubectl plugin lists cluster objects itself
//!   ([`plugin_reads`]), or when a ui template turns escaping off or holds what its
//!   Content-Security-Policy forbids ([`ui_markup`]); it reports every failure, not only the first.
//! - `cargo run -p xtask -- links`: the link check alone.
//!
//! The same checks run as this crate's tests (`cargo test --workspace`, so `make test`).

mod api;
mod links;
mod plugin_reads;
mod sizes;
mod sources;
mod ui_markup;
mod values;

use std::{
    fmt,
    path::{Path, PathBuf},
    process::ExitCode,
};

/// The committed files the generators read and write, relative to the repository root.
pub const CRD: &str = "config/crd/applyset.dev.yaml";
pub const API_MD: &str = "docs/api.md";
pub const VALUES: &str = "charts/applyset-operator/values.yaml";
pub const OPERATIONS_MD: &str = "docs/operations.md";

/// What a task can fail with.
#[derive(Debug)]
pub enum Error {
    Io(PathBuf, std::io::Error),
    Api(api::ApiError),
    Values(values::ValuesError),
    /// A generated file differs from what the generator writes now.
    Stale(&'static str),
    Links(Vec<links::Broken>),
    /// Production files over the bound of [`sizes::MAX_LINES`].
    Oversized(Vec<sizes::Oversized>),
    /// Listings of cluster objects under `src/bin/`.
    Listings(Vec<plugin_reads::Listing>),
    /// Unescaped output or forbidden markup in the ui's templates.
    Markup(Vec<ui_markup::Found>),
    /// Several checks failed: each one's error.
    Several(Vec<Error>),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(p, e) => write!(f, "{}: {e}", p.display()),
            Error::Api(e) => write!(f, "{CRD}: {e}"),
            Error::Values(e) => write!(f, "{e}"),
            Error::Stale(file) => {
                write!(f, "{file} is stale: run `make docs` and commit the result")
            }
            Error::Links(broken) => {
                writeln!(f, "{} broken link(s) in the docs:", broken.len())?;
                for b in broken {
                    writeln!(f, "  {b}")?;
                }
                Ok(())
            }
            Error::Oversized(files) => {
                writeln!(
                    f,
                    "{} production file(s) over {} lines (the lines outside #[cfg(test)] modules; split each by concern):",
                    files.len(),
                    sizes::MAX_LINES
                )?;
                for o in files {
                    writeln!(f, "  {o}")?;
                }
                Ok(())
            }
            Error::Listings(found) => {
                writeln!(
                    f,
                    "{} listing(s) of cluster objects under {}/ (the plugin reads members and parents through the library, it lists nothing itself):",
                    found.len(),
                    plugin_reads::BIN_DIR
                )?;
                for l in found {
                    writeln!(f, "  {l}")?;
                }
                Ok(())
            }
            Error::Markup(found) => {
                writeln!(
                    f,
                    "{} construct(s) in the ui's templates that turn escaping off or that its Content-Security-Policy forbids (escape every value; scripts and styles go in ui/assets):",
                    found.len()
                )?;
                for m in found {
                    writeln!(f, "  {m}")?;
                }
                Ok(())
            }
            Error::Several(errors) => {
                for e in errors {
                    writeln!(f, "{e}")?;
                }
                Ok(())
            }
        }
    }
}

/// The repository root (this crate lives one directory down).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

pub fn read(root: &Path, rel: &str) -> Result<String, Error> {
    let p = root.join(rel);
    std::fs::read_to_string(&p).map_err(|e| Error::Io(p, e))
}

fn write(root: &Path, rel: &str, text: &str) -> Result<(), Error> {
    let p = root.join(rel);
    std::fs::write(&p, text).map_err(|e| Error::Io(p, e))
}

/// The generated files as the generators write them now: (path, content).
pub fn generated(root: &Path) -> Result<Vec<(&'static str, String)>, Error> {
    let api = api::render(&read(root, CRD)?).map_err(Error::Api)?;
    let table = values::render(&read(root, VALUES)?).map_err(Error::Values)?;
    let operations = values::splice(&read(root, OPERATIONS_MD)?, &table).map_err(Error::Values)?;
    Ok(vec![(API_MD, api), (OPERATIONS_MD, operations)])
}

/// Fails with [`Error::Stale`] for the first generated file that differs from `committed`.
pub fn check_current(
    generated: &[(&'static str, String)],
    committed: impl Fn(&str) -> Result<String, Error>,
) -> Result<(), Error> {
    for (path, text) in generated {
        if committed(path)? != *text {
            return Err(Error::Stale(path));
        }
    }
    Ok(())
}

/// Every check of `xtask check`, each run even when another failed.
fn check(root: &Path) -> Result<(), Error> {
    let results = [
        generated(root).and_then(|g| check_current(&g, |p| read(root, p))),
        links::check_repo(root),
        sizes::check_repo(root),
        plugin_reads::check_repo(root),
        ui_markup::check_repo(root),
    ];
    let mut errors: Vec<Error> = results.into_iter().filter_map(Result::err).collect();
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => Err(Error::Several(errors)),
    }
}

fn run(task: &str) -> Result<(), Error> {
    let root = root();
    match task {
        "docs" => {
            for (path, text) in generated(&root)? {
                write(&root, path, &text)?;
            }
            Ok(())
        }
        "check" => check(&root),
        "links" => links::check_repo(&root),
        _ => unreachable!("the task is checked by main"),
    }
}

fn main() -> ExitCode {
    let task = std::env::args().nth(1).unwrap_or_default();
    if !["docs", "check", "links"].contains(&task.as_str()) {
        eprintln!("usage: xtask docs|check|links");
        return ExitCode::from(2);
    }
    match run(&task) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask {task}: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_generated_docs_are_current() {
        let root = root();
        let generated = generated(&root).expect("generate");
        if let Err(e) = check_current(&generated, |p| read(&root, p)) {
            panic!("{e}");
        }
    }

    #[test]
    fn a_stale_generated_file_is_reported() {
        let generated = vec![(API_MD, "new text\n".to_string())];
        let e = check_current(&generated, |_| Ok("old text\n".to_string()));
        assert!(matches!(e, Err(Error::Stale(API_MD))), "{e:?}");
        let same = check_current(&generated, |_| Ok("new text\n".to_string()));
        assert!(same.is_ok());
    }

    #[test]
    fn the_links_between_the_docs_hold() {
        if let Err(e) = links::check_repo(&root()) {
            panic!("{e}");
        }
    }

    #[test]
    fn no_production_file_is_over_the_bound() {
        if let Err(e) = sizes::check_repo(&root()) {
            panic!("{e}");
        }
    }

    #[test]
    fn the_plugin_lists_no_cluster_objects_itself() {
        if let Err(e) = plugin_reads::check_repo(&root()) {
            panic!("{e}");
        }
    }

    #[test]
    fn the_ui_templates_escape_everything_and_keep_to_the_policy() {
        if let Err(e) = ui_markup::check_repo(&root()) {
            panic!("{e}");
        }
    }
}

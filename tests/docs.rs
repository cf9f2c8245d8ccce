//! Docs that cannot rot (docs/testing.md, "The docs checks"):
//! - every YAML block of README.md and docs/ that is an ApplySet or a ClusterApplySet — or a
//!   bare `spec:` of one — is accepted by the API server: a server-side dry-run apply with
//!   strict field validation, against the CRDs (their schema and CEL rules);
//! - the commands of docs/getting-started.md in the blocks marked `<!-- checked -->` run as
//!   written, in order, in one shell, against this binary's control plane;
//! - no tracked file cites a specification outside the repository or an issue number.
//!
//! Each check has a deliberately broken example that it must refuse.

mod support;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams},
};
use serde_json::Value;
use support::{cluster, test_namespace, wait_for};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown pages whose examples are checked: README.md and docs/*.md.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// A fenced block: its info string, its first line's number and its text; `checked` when the
/// line before the fence is `<!-- checked -->`.
struct Block {
    info: String,
    line: usize,
    text: String,
    checked: bool,
}

fn blocks(markdown: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    let mut previous = "";
    for (n, line) in markdown.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        match (&mut open, fence) {
            (None, true) => {
                open = Some(Block {
                    info: line.trim_start().trim_start_matches('`').trim().to_string(),
                    line: n + 2,
                    text: String::new(),
                    checked: previous.trim() == "<!-- checked -->",
                })
            }
            (Some(_), true) => out.extend(open.take()),
            (Some(b), false) => {
                b.text.push_str(line);
                b.text.push('\n');
            }
            (None, false) => {}
        }
        previous = line;
    }
    out
}

/// The ApplySets and ClusterApplySets of a YAML block, each with where it is. A bare `spec:`
/// (a block whose only key is `spec`) is taken as an ApplySet's.
fn sets_in(text: &str) -> Result<Vec<Value>, String> {
    let mut sets = Vec::new();
    for doc in text.split("\n---\n") {
        if doc.trim().is_empty() {
            continue;
        }
        let v: Value = serde_saphyr::from_str(doc).map_err(|e| e.to_string())?;
        let kind = v["kind"].as_str().unwrap_or_default();
        let group = v["apiVersion"].as_str().unwrap_or_default();
        let only_spec = v
            .as_object()
            .is_some_and(|o| o.len() == 1 && o.contains_key("spec"));
        if group.starts_with("applyset.dev/") && ["ApplySet", "ClusterApplySet"].contains(&kind) {
            sets.push(v);
        } else if only_spec {
            sets.push(serde_json::json!({
                "apiVersion": "applyset.dev/v1alpha1",
                "kind": "ApplySet",
                "metadata": {"name": "spec-fragment"},
                "spec": v["spec"],
            }));
        }
    }
    Ok(sets)
}

/// Installs the CRDs (the code's own), waiting until both are Established.
async fn install_crds(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in applyset_operator::api::crds() {
        let name = crd.metadata.name.clone().expect("name");
        let pp = PatchParams::apply("docs-test").force();
        crds.patch(&name, &pp, &Patch::Apply(&crd))
            .await
            .expect("install crd");
        wait_for("the CRD to be Established", Duration::from_secs(60), || {
            let (crds, name) = (crds.clone(), name.clone());
            async move {
                let c = crds.get(&name).await.ok()?;
                let established = c
                    .status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                established.then_some(())
            }
        })
        .await;
    }
}

/// The API server's verdict on one set: a server-side dry-run apply, strict about unknown
/// fields; a namespaced set is put in `namespace`.
async fn validate(client: &Client, namespace: &str, set: &Value) -> Result<(), String> {
    let kind = set["kind"].as_str().unwrap_or_default();
    let gvk = GroupVersionKind::gvk("applyset.dev", "v1alpha1", kind);
    let ar = ApiResource::from_gvk(&gvk);
    let mut obj: DynamicObject = serde_json::from_value(set.clone()).map_err(|e| e.to_string())?;
    let name = obj
        .metadata
        .name
        .clone()
        .unwrap_or_else(|| "unnamed".into());
    obj.metadata.name = Some(name.clone());
    let api: Api<DynamicObject> = if kind == "ApplySet" {
        obj.metadata.namespace = Some(namespace.to_string());
        Api::namespaced_with(client.clone(), namespace, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    let pp = PatchParams::apply("docs-test")
        .dry_run()
        .validation_strict();
    api.patch(&name, &pp, &Patch::Apply(&obj))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn every_applyset_example_in_the_docs_is_accepted_by_the_api_server() {
    let client = cluster().client().await;
    install_crds(&client).await;
    let ns = test_namespace(&client, "docs").await;
    let (mut checked, mut failures) = (0, Vec::new());
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("page");
        let rel = page
            .strip_prefix(root())
            .unwrap_or(&page)
            .display()
            .to_string();
        for b in blocks(&text).into_iter().filter(|b| b.info == "yaml") {
            let sets = match sets_in(&b.text) {
                Ok(sets) => sets,
                Err(e) => {
                    failures.push(format!("{rel}:{}: not YAML: {e}", b.line));
                    continue;
                }
            };
            for set in sets {
                checked += 1;
                if let Err(e) = validate(&client, &ns, &set).await {
                    failures.push(format!("{rel}:{}: {e}", b.line));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "examples the API server refuses:\n{}",
        failures.join("\n")
    );
    assert!(
        checked >= 5,
        "only {checked} ApplySet examples found: is the block parser broken?"
    );
}

/// The broken example: a set with a field the CRD does not have, and one with a mode it does
/// not allow. The same check must refuse both.
#[tokio::test]
async fn a_broken_applyset_example_is_refused() {
    let client = cluster().client().await;
    install_crds(&client).await;
    let ns = test_namespace(&client, "docs-broken").await;
    let md = "```yaml\napiVersion: applyset.dev/v1alpha1\nkind: ApplySet\nmetadata: {name: broken}\nspec:\n  prunee: true\n```\n\n```yaml\nspec:\n  mode: Sometimes\n```\n";
    let blocks = blocks(md);
    assert_eq!(blocks.len(), 2);
    for b in blocks {
        let sets = sets_in(&b.text).expect("YAML");
        assert_eq!(sets.len(), 1, "{}", b.text);
        let e = validate(&client, &ns, &sets[0]).await.expect_err("refused");
        assert!(e.contains("prunee") || e.contains("Sometimes"), "{e}");
    }
}

/// The commands of the blocks marked `<!-- checked -->`: lines starting with `$ ` (a line
/// ending in `\` continues on the next one); the other lines are output and are not compared.
fn checked_commands(markdown: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for b in blocks(markdown).into_iter().filter(|b| b.checked) {
        let mut pending: Option<(usize, String)> = None;
        for (i, line) in b.text.lines().enumerate() {
            let line_no = b.line + i;
            if let Some((n, mut cmd)) = pending.take() {
                cmd.push('\n');
                cmd.push_str(line);
                if line.ends_with('\\') {
                    pending = Some((n, cmd));
                } else {
                    out.push((n, cmd));
                }
            } else if let Some(cmd) = line.strip_prefix("$ ") {
                if cmd.ends_with('\\') {
                    pending = Some((line_no, cmd.to_string()));
                } else {
                    out.push((line_no, cmd.to_string()));
                }
            }
        }
    }
    out
}

/// Runs `commands` in one bash, in order, from the repository root, stopping at the first
/// that fails; background jobs are stopped at the end. Err: the output, and the line of the
/// command that failed.
fn run_commands(
    commands: &[(usize, String)],
    env: &[(&str, String)],
    timeout: Duration,
) -> Result<String, String> {
    use std::os::unix::process::CommandExt;
    let mut script =
        String::from("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n");
    for (line, cmd) in commands {
        script.push_str(&format!("echo '>>> line {line}' >&2\n{cmd}\n"));
    }
    let out = support::scratch("docs").join(format!(
        "commands-{}.log",
        commands.first().map_or(0, |c| c.0)
    ));
    let log = std::fs::File::create(&out).expect("log");
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(root())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .process_group(0)
        .spawn()
        .expect("bash");
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if Instant::now() > deadline {
            // The whole group: bash and what it started in the background.
            let _ = Command::new("kill")
                .arg("-KILL")
                .arg(format!("-{}", child.id()))
                .status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let output = std::fs::read_to_string(&out).unwrap_or_default();
    match status {
        Some(s) if s.success() => Ok(output),
        Some(s) => Err(format!(
            "{s}; output (the last `>>> line` names the command):\n{output}"
        )),
        None => Err(format!("timed out after {timeout:?}; output:\n{output}")),
    }
}

fn dir_of(p: &str) -> String {
    Path::new(p)
        .parent()
        .map(|d| d.display().to_string())
        .unwrap_or_default()
}

#[test]
fn the_getting_started_commands_run_as_written() {
    let page = std::fs::read_to_string(root().join("docs/getting-started.md")).expect("page");
    let commands = checked_commands(&page);
    assert!(
        commands.len() >= 10,
        "only {} checked commands found",
        commands.len()
    );
    let cp = cluster().control_plane();
    let path = format!(
        "{}:{}:{}",
        dir_of(&cp.kubectl().display().to_string()),
        dir_of(env!("CARGO_BIN_EXE_applyset-operator")),
        std::env::var("PATH").unwrap_or_default()
    );
    let env = [
        ("KUBECONFIG", cp.kubeconfig().display().to_string()),
        ("PATH", path),
        ("TMPDIR", support::scratch("docs").display().to_string()),
    ];
    if let Err(e) = run_commands(&commands, &env, Duration::from_secs(600)) {
        panic!("docs/getting-started.md: {e}");
    }
}

/// The broken example: the runner stops at the command that fails, and names its line.
#[test]
fn a_failing_command_of_a_checked_block_fails_the_check() {
    let md = "<!-- checked -->\n```console\n$ true\noutput that is not run\n$ false\n$ touch should-not-run\n```\n\n```console\n$ echo not checked\n```\n";
    let commands = checked_commands(md);
    assert_eq!(
        commands,
        [
            (3, "true".to_string()),
            (5, "false".to_string()),
            (6, "touch should-not-run".to_string())
        ]
    );
    let e = run_commands(&commands[..2], &[], Duration::from_secs(30)).expect_err("false fails");
    assert!(e.contains(">>> line 5"), "{e}");
}

/// What `git grep` finds in the tracked files of `repo` that a reader of the repository cannot
/// follow: a specification outside it, or an issue number (this file excepted: it names the
/// patterns).
fn unfollowable_references(repo: &Path) -> String {
    // Written in two pieces, so that this file does not match its own patterns.
    let patterns = [
        "-e",
        "\\.\\./shared/",
        "-e",
        concat!("SPEC", " §"),
        "-e",
        "issue [0-9]",
    ];
    let out = Command::new("git")
        .args(["grep", "-n"])
        .args(patterns)
        .args(["--", ".", ":!tests/docs.rs"])
        .current_dir(repo)
        .output()
        .expect("git grep");
    // git grep exits 1 when nothing matches, 0 when something does, more on an error.
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "git grep failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn no_reference_outside_the_repository_or_to_an_issue_number() {
    let found = unfollowable_references(&root());
    assert!(
        found.trim().is_empty(),
        "references that a reader of the repository cannot follow:\n{found}"
    );
}

/// The broken example: a repository whose tracked files cite each pattern once.
#[test]
fn a_reference_to_an_issue_or_an_outside_spec_is_found() {
    let repo = support::scratch("docs").join("refs-fixture");
    let _ = std::fs::remove_dir_all(&repo);
    std::fs::create_dir_all(&repo).expect("dir");
    let git = |args: &[&str]| {
        let s = Command::new("git")
            .args(args)
            .current_dir(&repo)
            .output()
            .expect("git");
        assert!(
            s.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&s.stderr)
        );
    };
    git(&["init", "-q"]);
    let text = concat!(
        "see ..",
        "/shared/docs/SPEC.md\nas SPEC",
        " §4 says\nfixed in issue 12\nfine: docs/design.md §4\n"
    );
    std::fs::write(repo.join("a.rs"), text).expect("write");
    git(&["add", "a.rs"]);
    let found = unfollowable_references(&repo);
    let _ = std::fs::remove_dir_all(&repo);
    assert_eq!(found.lines().count(), 3, "{found}");
    assert!(!found.contains("design.md"), "{found}");
}

/// The `--flags` of `args`' help text, without clap's own (`--help`, `--version`).
fn flags_of(bin: &str, args: &[&str]) -> Vec<String> {
    let out = Command::new(bin).args(args).output().expect("run --help");
    assert!(out.status.success(), "{bin} {args:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    let mut flags: Vec<String> = help
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| l.split([' ', ',', '=', '<']).find(|w| w.starts_with("--")))
        .map(|f| f.trim_end_matches([',', '.']).to_string())
        .filter(|f| f != "--help" && f != "--version")
        .collect();
    flags.dedup();
    flags
}

/// Every flag of the operator is in docs/operations.md, and every flag of each plugin
/// command in docs/cli.md: a new flag cannot go undocumented.
#[test]
fn every_flag_is_documented() {
    let operations = std::fs::read_to_string(root().join("docs/operations.md")).expect("page");
    let operator = env!("CARGO_BIN_EXE_applyset-operator");
    let missing: Vec<String> = flags_of(operator, &["run", "--help"])
        .into_iter()
        .filter(|f| !operations.contains(f.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "flags of `applyset-operator run` not in docs/operations.md: {missing:?}"
    );
    let cli = std::fs::read_to_string(root().join("docs/cli.md")).expect("page");
    let plugin = env!("CARGO_BIN_EXE_kubectl-applyset");
    for command in [
        "build",
        "diff",
        "tree",
        "get",
        "reconcile",
        "suspend",
        "resume",
        "ui",
        "completion",
    ] {
        let missing: Vec<String> = flags_of(plugin, &[command, "--help"])
            .into_iter()
            .filter(|f| !cli.contains(f.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "flags of `kubectl applyset {command}` not in docs/cli.md: {missing:?}"
        );
    }
}

/// The broken example: a flag the page does not name is found.
#[test]
fn an_undocumented_flag_is_found() {
    let operator = env!("CARGO_BIN_EXE_applyset-operator");
    let flags = flags_of(operator, &["run", "--help"]);
    assert!(flags.len() > 20, "{flags:?}");
    let page = "only --concurrency is documented here";
    let missing = flags.iter().filter(|f| !page.contains(f.as_str())).count();
    assert_eq!(missing, flags.len() - 1, "{flags:?}");
}

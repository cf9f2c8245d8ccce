//! End to end in a real browser: `kubectl applyset ui` driven in Debian's headless Chromium
//! through chromedriver (WebDriver, with fantoccini), against the real API server with the
//! operator in-process (docs/ui.md, docs/testing.md). The test logs in with the printed URL,
//! reads the sets page, follows the link of a failing set, finds its member tree (the member
//! the last reconcile could not apply first, failed with reason Conflict) and its dependsOn
//! graph in the DOM, clicks "Compute the diff" and finds the diff, then flips another set
//! through the API and sees the sets page change without a reload. chromedriver and Chromium
//! run in a process group the test kills when it ends, panics included. It saves screenshots under target/ui-screenshots/
//! (`make screenshots` points UI_SCREENSHOTS_DIR at docs/images/ui/ to refresh the committed
//! ones).
//!
//! Chromium refuses to run as root with its sandbox; these machines run tests as root, so the
//! harness (only) passes `--no-sandbox`. Without chromedriver the test is skipped with a
//! message, except under CI (`CI` set), where it must run (`make deps` installs it).

mod support;

use std::{
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::{
    operator::*,
    process,
    ui::{Req, UiProcess},
};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";
/// How long the page may take to show something (a login, a navigation, a live change).
const SHOWN: Duration = Duration::from_secs(20);
/// The namespace of the sets, a fixed name so that the screenshots read well (this test
/// binary has a control plane of its own).
const NS: &str = "shop";

/// chromedriver on a loopback port, in a process group of its own that the Chromium it starts
/// joins: on drop (the end of the test, or a panic anywhere in it) the whole group is killed,
/// so no chromedriver nor Chromium outlives the test.
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    /// Starts chromedriver on a free port (another is tried if the port was taken meanwhile)
    /// and waits until its `/status` says it is ready (it speaks HTTP/1.1 only).
    async fn start(log: &Path) -> Driver {
        for _ in 0..3 {
            let port = process::free_port();
            let child = Command::new(CHROMEDRIVER)
                .process_group(0)
                .arg(format!("--port={port}"))
                .arg(format!("--log-path={}", log.display()))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start chromedriver");
            let mut d = Driver { child, port };
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = d.child.try_wait() {
                    break;
                }
                let status = Req::new(port, "GET", "/status")
                    .header("Host", &format!("127.0.0.1:{port}"))
                    .try_send()
                    .await;
                if status.is_some_and(|r| r.status == 200 && r.body.contains("\"ready\":true")) {
                    return d;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            d.kill_group();
        }
        panic!(
            "chromedriver did not become ready; its log: {}",
            log.display()
        );
    }
}

impl Driver {
    /// Kills chromedriver's process group (chromedriver and the Chromium it started), then
    /// reaps chromedriver.
    fn kill_group(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.kill_group();
    }
}

/// Where the screenshots go: `$UI_SCREENSHOTS_DIR`, else target/ui-screenshots.
fn screenshots_dir() -> PathBuf {
    let dir = std::env::var_os("UI_SCREENSHOTS_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ui-screenshots"));
    std::fs::create_dir_all(&dir).expect("the screenshots directory");
    dir
}

/// Whether the browser is here; under CI it must be.
fn browser_present() -> bool {
    let present = Path::new(CHROMEDRIVER).exists() && Path::new(CHROMIUM).exists();
    if !present && std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
        panic!("{CHROMEDRIVER} and {CHROMIUM} are required under CI: run `make deps`");
    }
    if !present {
        eprintln!(
            "SKIPPED ui_browser: {CHROMEDRIVER} or {CHROMIUM} is missing; `make deps` installs Debian's chromium and chromium-driver"
        );
    }
    present
}

/// A WebDriver session of headless Chromium with a profile of its own.
async fn browser(driver: &Driver, profile: &Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1400,1000", "--hide-scrollbars", "--force-device-scale-factor=1",
                     "--lang=en-US", format!("--user-data-dir={}", profile.display())]
        }),
    );
    ClientBuilder::new(HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .unwrap_or_else(|e| panic!("a Chromium session through chromedriver: {e}"))
}

/// The sets the screenshots show, in every state, with the operator running: `postgres`
/// failing (a field another manager owns), `orders-api` and `storefront` waiting on it
/// (dependsOn, two levels), `redis`, `payments` (after redis) and `monitoring` Ready,
/// `batch-jobs` suspended.
async fn shop(h: &Harness) -> Vec<(Parent, &'static str)> {
    ssa(
        &h.client,
        &configmap_ar(),
        Some(NS),
        "dba-console",
        configmap("postgres-config", json!({"max_connections": "100"})),
    )
    .await;
    let db_secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "postgres-credentials"},
        "type": "Opaque", "stringData": {"username": "app", "password": "not-shown"}});
    let specs = [
        (
            "redis",
            json!({"manifests": [service("redis"), deployment("redis")]}),
            "ready",
        ),
        (
            "postgres",
            json!({"adoptExisting": true, "manifests": [
                configmap("postgres-config", json!({"max_connections": "200"})),
                db_secret, service("postgres"), deployment("postgres")]}),
            "failing",
        ),
        (
            "orders-api",
            json!({"dependsOn": [{"name": "postgres"}],
                "manifests": [service("orders-api"), deployment("orders-api")]}),
            "waiting",
        ),
        (
            "storefront",
            json!({"dependsOn": [{"name": "orders-api"}],
                "manifests": [service("storefront"), deployment("storefront")]}),
            "waiting",
        ),
        (
            "payments",
            json!({"dependsOn": [{"name": "redis"}],
                "manifests": [service("payments"), deployment("payments")]}),
            "ready",
        ),
        (
            "monitoring",
            json!({"manifests": [configmap("dashboards", json!({"k": "v"}))]}),
            "ready",
        ),
        (
            "batch-jobs",
            json!({"suspend": true, "manifests": [configmap("schedules", json!({"nightly": "0 2 * * *"}))]}),
            "suspended",
        ),
    ];
    let mut sets = Vec::new();
    for (name, spec, state) in specs {
        let p = h.applyset(name);
        p.create(spec).await;
        sets.push((p, state));
    }
    for (p, state) in &sets {
        match *state {
            "ready" => {
                p.wait_ready().await;
            }
            "failing" => {
                p.wait_ready_reason(Some("False"), "Conflict").await;
            }
            "waiting" => {
                p.wait_ready_reason(Some("False"), "DependencyNotReady")
                    .await;
            }
            _ => {}
        }
    }
    sets
}

/// A harness whose namespace is [`NS`].
async fn shop_harness() -> Harness {
    let client = support::cluster().client().await;
    ensure_crds(&client).await;
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": NS}})).expect("namespace");
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create the namespace");
    Harness {
        client,
        ns: NS.into(),
        label: unique("ui-browser"),
    }
}

#[tokio::test]
async fn the_view_in_a_real_browser() {
    if !browser_present() {
        return;
    }
    let shots = screenshots_dir();
    let work = tempfile::tempdir().expect("tempdir");
    let h = shop_harness().await;
    let op = h.start_operator();
    let sets = shop(&h).await;
    let ui = UiProcess::start(&[]).await;
    let log = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ui-screenshots");
    std::fs::create_dir_all(&log).expect("target/ui-screenshots");
    let driver = Driver::start(&log.join("chromedriver.log")).await;
    let c = browser(&driver, work.path()).await;
    let walked = walk(&c, &ui, &h, &shots).await;
    if let Err(e) = &walked {
        if let Ok(png) = c.screenshot().await {
            let _ = std::fs::write(log.join("failure.png"), png);
        }
        let source = c.source().await.unwrap_or_default();
        let _ = c.clone().close().await;
        panic!(
            "{e}\n--- the page (screenshot target/ui-screenshots/failure.png, chromedriver log target/ui-screenshots/chromedriver.log):\n{source}\n--- the ui printed:\n{}",
            ui.output()
        );
    }
    let opened = open_flag(&c, work.path()).await;
    if let Err(e) = &opened {
        let source = c.source().await.unwrap_or_default();
        let _ = c.clone().close().await;
        panic!("{e}\n--- the page:\n{source}");
    }
    c.close().await.expect("end the browser session");
    drop(sets);
    stop(op).await;
}

/// The walk through the view; an error says which step failed.
async fn walk(c: &Client, ui: &UiProcess, h: &Harness, shots: &Path) -> Result<(), String> {
    let css = |s: &'static str| Locator::Css(s);
    c.goto(&ui.url)
        .await
        .map_err(|e| format!("open {}: {e}", ui.url))?;
    // The login page moves on to the sets page, with the session cookie.
    let rows = [
        ("postgres", "failing"),
        ("orders-api", "waiting"),
        ("storefront", "waiting"),
        ("batch-jobs", "suspended"),
        ("redis", "ready"),
        ("payments", "ready"),
        ("monitoring", "ready"),
    ];
    for (name, state) in rows {
        let sel = format!("#row-{NS}--{name}.state-{state}");
        c.wait()
            .at_most(SHOWN)
            .for_element(Locator::Css(&sel))
            .await
            .map_err(|e| format!("the sets page shows {sel}: {e}"))?;
    }
    let url = c.current_url().await.map_err(|e| e.to_string())?;
    if url.path() != "/" || url.query().is_some_and(|q| q.contains("token")) {
        return Err(format!("after the login the browser is at {url}, not /"));
    }
    wait_live(c).await?;
    save(c, shots, "sets.png").await?;

    // Follow the failing set's link.
    c.find(css("#row-shop--postgres a.set-link"))
        .await
        .map_err(|e| format!("the failing set's link: {e}"))?
        .click()
        .await
        .map_err(|e| format!("click the failing set's link: {e}"))?;
    for sel in [
        "#set-state.state-failing",
        "#members .member-tree",
        "#members li.member",
        "#graph svg",
        "#graph g.node[data-set=\"shop/orders-api\"]",
        "#events li.event",
        "#diff #diff-load",
    ] {
        c.wait()
            .at_most(SHOWN)
            .for_element(Locator::Css(sel))
            .await
            .map_err(|e| format!("the failing set's page has {sel}: {e}"))?;
    }
    let url = c.current_url().await.map_err(|e| e.to_string())?;
    if url.path() != "/sets/shop/postgres" {
        return Err(format!("the link led to {url}"));
    }
    failed_member(c).await?;
    wait_live(c).await?;
    diff_on_click(c).await?;
    // The whole page in one picture: the window as tall as the document (at most 2400).
    let height = c
        .execute("return document.documentElement.scrollHeight;", vec![])
        .await
        .map_err(|e| format!("the page's height: {e}"))?
        .as_u64()
        .unwrap_or(1000)
        .clamp(1000, 2400);
    c.set_window_size(1400, u32::try_from(height).unwrap_or(2400) + 100)
        .await
        .map_err(|e| format!("resize the window: {e}"))?;
    save(c, shots, "set.png").await?;
    let graph = c
        .find(css("#graph"))
        .await
        .map_err(|e| format!("#graph: {e}"))?;
    c.execute("document.getElementById('graph').scrollIntoView();", vec![])
        .await
        .map_err(|e| format!("scroll to the graph: {e}"))?;
    let png = graph
        .screenshot()
        .await
        .map_err(|e| format!("the graph's screenshot: {e}"))?;
    std::fs::write(shots.join("graph.png"), png).map_err(|e| e.to_string())?;
    c.set_window_size(1400, 1000)
        .await
        .map_err(|e| format!("resize the window back: {e}"))?;

    // Back on the sets page, flip another set through the API: the row changes in place.
    c.find(css("#home"))
        .await
        .map_err(|e| format!("#home: {e}"))?
        .click()
        .await
        .map_err(|e| format!("click #home: {e}"))?;
    c.wait()
        .at_most(SHOWN)
        .for_element(css("#row-shop--monitoring.state-ready"))
        .await
        .map_err(|e| format!("the sets page again: {e}"))?;
    wait_live(c).await?;
    let marker = c
        .execute("window.__marker = 42; return window.__marker;", vec![])
        .await
        .map_err(|e| format!("set the marker: {e}"))?;
    if marker != json!(42) {
        return Err(format!("the marker reads {marker}"));
    }
    let t = Instant::now();
    h.applyset("monitoring")
        .patch_spec(json!({"suspend": true}))
        .await;
    c.wait()
        .at_most(SHOWN)
        .every(Duration::from_millis(50))
        .for_element(css("#row-shop--monitoring.state-suspended"))
        .await
        .map_err(|e| {
            format!("the flipped set's row turns state-suspended without a reload: {e}")
        })?;
    eprintln!(
        "ui browser: the suspended set's row changed in {:?}",
        t.elapsed()
    );
    let marker = c
        .execute("return window.__marker;", vec![])
        .await
        .map_err(|e| format!("read the marker: {e}"))?;
    if marker != json!(42) {
        return Err(format!(
            "the page was reloaded (the marker set before the change reads {marker})"
        ));
    }
    Ok(())
}

/// The member the last reconcile could not apply (`status.failures`): the ConfigMap another
/// manager owns a field of, failed with reason Conflict, first in the tree.
async fn failed_member(c: &Client) -> Result<(), String> {
    let sel = "#members li.member.health-failed[data-member=\"/ConfigMap/shop/postgres-config\"]";
    let row = c
        .wait()
        .at_most(SHOWN)
        .for_element(Locator::Css(sel))
        .await
        .map_err(|e| format!("the failing set's tree has {sel}: {e}"))?;
    let text = row.text().await.map_err(|e| format!("{sel}'s text: {e}"))?;
    if !text.contains("Conflict") {
        return Err(format!("{sel} does not say Conflict: {text}"));
    }
    let first = c
        .find(Locator::Css("#members li.member"))
        .await
        .map_err(|e| format!("the tree's first member: {e}"))?
        .attr("data-member")
        .await
        .map_err(|e| format!("the first member's data-member: {e}"))?;
    match first.as_deref() {
        Some("/ConfigMap/shop/postgres-config") => Ok(()),
        other => Err(format!(
            "the failed member is not first in the tree: {other:?}"
        )),
    }
}

/// The diff is computed only on a click of `#diff-load`: nothing before, then the diff
/// (`pre.diff`, the test's admin has every right it needs) in `#diff-body`.
async fn diff_on_click(c: &Client) -> Result<(), String> {
    let before = c
        .find_all(Locator::Css("#diff-body *"))
        .await
        .map_err(|e| format!("#diff-body before the click: {e}"))?;
    if !before.is_empty() {
        return Err("#diff-body has content before the click".into());
    }
    c.find(Locator::Css("#diff-load"))
        .await
        .map_err(|e| format!("#diff-load: {e}"))?
        .click()
        .await
        .map_err(|e| format!("click #diff-load: {e}"))?;
    c.wait()
        .at_most(Duration::from_secs(60))
        .for_element(Locator::Css(
            "#diff-body pre.diff, #diff-body .diff-unavailable",
        ))
        .await
        .map_err(|e| format!("the diff comes after the click: {e}"))?;
    if c.find(Locator::Css("#diff-body pre.diff")).await.is_err() {
        let said = match c.find(Locator::Css("#diff-body")).await {
            Ok(e) => e.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        return Err(format!("the diff of shop/postgres is unavailable: {said}"));
    }
    Ok(())
}

/// `--open`: the ui hands the opener (a stand-in `xdg-open` on its PATH that records its
/// arguments) the path of a private file, never the token; that file, opened in the browser
/// as `file://`, leads through the login to the sets page with a session (the SameSite=Strict
/// cookie works after a navigation that began on another origin).
async fn open_flag(c: &Client, work: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    let bin = work.join("bin");
    std::fs::create_dir_all(&bin).map_err(|e| e.to_string())?;
    let args = work.join("xdg-open-args");
    let opener = bin.join("xdg-open");
    std::fs::write(
        &opener,
        format!("#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\n", args.display()),
    )
    .map_err(|e| e.to_string())?;
    std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| e.to_string())?;
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let ui = UiProcess::start_env(
        support::cluster().kubeconfig(),
        &["--open"],
        &[("PATH", path.as_str()), ("DISPLAY", ":0")],
    )
    .await;
    let deadline = Instant::now() + SHOWN;
    let argv = loop {
        if let Ok(a) = std::fs::read_to_string(&args)
            && !a.is_empty()
        {
            break a;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "--open did not start the opener; the ui printed:\n{}",
                ui.output()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    if argv.contains(&ui.token) {
        return Err(format!(
            "the opener was given the token on its command line: {argv}"
        ));
    }
    let file = PathBuf::from(
        argv.lines()
            .next()
            .unwrap_or_default()
            .trim_start_matches("file://"),
    );
    let mode = std::fs::metadata(&file)
        .map_err(|e| format!("the opener's file {}: {e}", file.display()))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(format!(
            "{} is readable by others: {mode:o}",
            file.display()
        ));
    }
    c.goto(&format!("file://{}", file.display()))
        .await
        .map_err(|e| format!("open {}: {e}", file.display()))?;
    c.wait()
        .at_most(SHOWN)
        .for_element(Locator::Css(&format!("#row-{NS}--postgres")))
        .await
        .map_err(|e| format!("--open's file leads to the sets page with a session: {e}"))?;
    let url = c.current_url().await.map_err(|e| e.to_string())?;
    if url.as_str() != format!("{}/", ui.origin()) {
        return Err(format!("after --open's file the browser is at {url}"));
    }
    wait_live(c).await
}

/// Waits until the page's live stream is open (`#live-status.live-on`).
async fn wait_live(c: &Client) -> Result<(), String> {
    c.wait()
        .at_most(SHOWN)
        .for_element(Locator::Css("#live-status.live-on"))
        .await
        .map(|_| ())
        .map_err(|e| format!("the live stream opens (#live-status.live-on): {e}"))
}

async fn save(c: &Client, dir: &Path, name: &str) -> Result<(), String> {
    let png = c
        .screenshot()
        .await
        .map_err(|e| format!("screenshot {name}: {e}"))?;
    std::fs::write(dir.join(name), png).map_err(|e| format!("write {name}: {e}"))
}

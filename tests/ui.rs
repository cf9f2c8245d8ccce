//! End to end: `kubectl applyset ui` over HTTP against the real API server, with the operator
//! in-process so the sets' statuses are real (docs/ui.md). The ui runs as a process (port 0,
//! the port and token read from the URL it prints); requests are raw HTTP/1.1 so the tests set
//! `Host`, `Origin`, `Sec-Fetch-Site` and `Cookie` exactly.
//!
//! - every page of sets in several states (Ready, failing with a conflict, waiting on
//!   dependsOn, suspended, with a pruned member): ids, classes, links, the member tree with
//!   the failed member, the graph, the diff on a click (its fragment fetched);
//! - the one-time token and the session cookie; 401 without it, 403 with a wrong token;
//! - a foreign `Host` refused on every route; a foreign `Origin` or a cross-site
//!   `Sec-Fetch-Site` refused for actions and the live stream, and nothing changed;
//! - the security headers on every answer, no CORS headers;
//! - tenant strings (annotations in `#metadata`, a status message, an event message, source
//!   URLs) rendered
//!   as inert text; Secret values (members and values substituted from Secrets) never shown;
//! - actions only with `--allow-actions`, done as the user (a refusal shown as such);
//! - the live stream reports a set whose Ready flips within 2 s;
//! - a user whose RBAC hides a namespace sees none of its sets.

mod support;

use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::json;
use support::{operator::*, ui::*};

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
const SCRIPT: &str = "<script>alert(1)</script>";
const IMG: &str = "\"><img src=x onerror=alert(1)>";
/// How long the ui's cache may take to show a change made through the API.
const SEEN: Duration = Duration::from_secs(20);

fn key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

/// Asserts the headers every answer carries, each exactly once, and no CORS header.
fn assert_security_headers(r: &Resp, what: &str, asset: bool) {
    let once = |name: &str, want: &str| {
        assert_eq!(
            r.all(name),
            vec![want],
            "{what}: header {name} exactly once, exactly {want:?}; answer:\n{}",
            r.show()
        );
    };
    once("content-security-policy", CSP);
    once("referrer-policy", "no-referrer");
    once("x-content-type-options", "nosniff");
    once("x-frame-options", "DENY");
    let cache = r.all("cache-control");
    if asset {
        assert!(
            cache.len() == 1 && cache[0].contains("immutable"),
            "{what}: an asset is cached as immutable; answer:\n{}",
            r.show()
        );
    } else {
        once("cache-control", "no-store");
    }
    let cors: Vec<_> = r
        .headers
        .iter()
        .filter(|(n, _)| n.to_ascii_lowercase().starts_with("access-control-"))
        .collect();
    assert!(cors.is_empty(), "{what}: no CORS headers, found {cors:?}");
}

/// Asserts the row of `key` on a sets page has class `state-<state>`, shows `word` and links
/// to the set's page; returns the row.
fn assert_row<'a>(body: &'a str, key: &str, state: &str, word: &str) -> &'a str {
    let id = row_id(key);
    let tag = tag_by_id(body, &id).unwrap_or_else(|| panic!("no row #{id} on the page:\n{body}"));
    assert!(
        has_class(tag, "set-row") && has_class(tag, &format!("state-{state}")),
        "row #{id} has classes set-row state-{state}: {tag}"
    );
    assert_eq!(
        attr(tag, "data-set"),
        Some(key),
        "row #{id} data-set: {tag}"
    );
    let row = element_by_id(body, &id).expect("the row's element");
    assert!(
        row.contains(&format!("<td class=\"state\">{word}</td>")),
        "row #{id} shows the state {word}: {row}"
    );
    let (ns, name) = key.split_once('/').expect("a namespaced key");
    assert!(
        row.contains(&format!("href=\"/sets/{ns}/{name}\"")) && row.contains("class=\"set-link\""),
        "row #{id} links to the set's page with a.set-link: {row}"
    );
    row
}

/// Whether the page has a row for `key` with class `state-<state>`.
fn row_in_state(body: &str, key: &str, state: &str) -> bool {
    tag_by_id(body, &row_id(key)).is_some_and(|t| has_class(t, &format!("state-{state}")))
}

/// The sets of [`states_fixture`].
struct States {
    ready: Parent,
    failing: Parent,
    waiting: Parent,
    suspended: Parent,
    pruned: Parent,
}

/// Sets in every state the view shows, with the operator running: Ready; failing with a
/// field conflict; waiting on the failing one (dependsOn); suspended; Ready after pruning a
/// member.
async fn states_fixture(h: &Harness) -> States {
    let ns = h.ns.as_str();
    ssa(
        &h.client,
        &configmap_ar(),
        Some(ns),
        "someone-else",
        configmap("shared", json!({"key": "x"})),
    )
    .await;
    let s = States {
        ready: h.applyset("ready"),
        failing: h.applyset("failing"),
        waiting: h.applyset("waiting"),
        suspended: h.applyset("suspended"),
        pruned: h.applyset("pruned"),
    };
    s.ready
        .create(json!({"manifests": [configmap("ready-cm", json!({"k": "v"}))]}))
        .await;
    s.failing
        .create(json!({"adoptExisting": true,
            "manifests": [configmap("shared", json!({"key": "y"})), configmap("failing-cm", json!({"k": "v"}))]}))
        .await;
    s.waiting
        .create(json!({"dependsOn": [{"name": "failing"}],
            "manifests": [configmap("waiting-cm", json!({"k": "v"}))]}))
        .await;
    s.suspended
        .create(
            json!({"suspend": true, "manifests": [configmap("suspended-cm", json!({"k": "v"}))]}),
        )
        .await;
    s.pruned
        .create(json!({"manifests": [configmap("kept", json!({"k": "v"})), configmap("gone", json!({"k": "v"}))]}))
        .await;
    s.ready.wait_ready().await;
    s.pruned.wait_ready().await;
    s.pruned
        .patch_spec(json!({"manifests": [configmap("kept", json!({"k": "v"}))]}))
        .await;
    s.pruned
        .wait_until("summary.pruned >= 1 and Ready", DEADLINE, |_, st| {
            let st = st?;
            (st.summary.as_ref()?.pruned >= 1 && condition(st, "Ready")?.status == "True")
                .then_some(())
        })
        .await;
    s.failing.wait_ready_reason(Some("False"), "Conflict").await;
    s.waiting
        .wait_ready_reason(Some("False"), "DependencyNotReady")
        .await;
    s
}

/// The sets page lists sets in every state with their words, classes and links, the summary
/// and the waiting set's dependency; filters narrow it; each set's page has every section,
/// the member tree, the dependsOn graph both ways, the events and the diff fragment; an
/// unknown set is a 404.
#[tokio::test]
async fn pages_show_sets_in_every_state() {
    let h = Harness::new("ui-pages").await;
    let op = h.start_operator();
    let s = states_fixture(&h).await;
    let ns = h.ns.as_str();
    let ui = UiProcess::start(&[]).await;
    let cookie = ui.login().await;
    ui.wait_ready(&cookie).await;

    let filter = format!("/?ns={ns}");
    let body = ui
        .wait_page("every set in its state", &filter, &cookie, SEEN, |b| {
            row_in_state(b, &key(ns, "ready"), "ready")
                && row_in_state(b, &key(ns, "failing"), "failing")
                && row_in_state(b, &key(ns, "waiting"), "waiting")
                && row_in_state(b, &key(ns, "suspended"), "suspended")
                && row_in_state(b, &key(ns, "pruned"), "ready")
        })
        .await;
    for id in [
        "summary",
        "count-total",
        "count-ready",
        "count-failing",
        "count-waiting",
        "count-suspended",
        "filter",
        "sets",
        "sets-body",
        "pager",
        "top",
        "watched",
        "live-status",
    ] {
        assert!(
            tag_by_id(&body, id).is_some(),
            "the sets page has #{id}:\n{body}"
        );
    }
    for live in ["summary", "sets-body"] {
        let tag = tag_by_id(&body, live).expect("present");
        assert!(
            tag.contains(" data-live"),
            "#{live} carries data-live: {tag}"
        );
    }
    assert!(
        body.contains("data-live-src=\"/live?page=sets\""),
        "the sets page listens to /live?page=sets"
    );
    assert_row(&body, &key(ns, "ready"), "ready", "Ready");
    assert_row(&body, &key(ns, "failing"), "failing", "Failing");
    assert_row(&body, &key(ns, "suspended"), "suspended", "Suspended");
    let pruned = assert_row(&body, &key(ns, "pruned"), "ready", "Ready");
    assert!(
        pruned.contains("<td class=\"num members\">1</td>")
            && pruned.contains("<td class=\"num pruned\">1</td>"),
        "the pruned set's row counts 1 member and 1 pruned: {pruned}"
    );
    let waiting = assert_row(&body, &key(ns, "waiting"), "waiting", "Waiting");
    assert!(
        waiting.contains(&format!("waiting for {ns}/failing")),
        "the waiting row names its dependency: {waiting}"
    );
    // Default order: failing first, Ready last.
    let at = |k: &str| {
        body.find(&format!("id=\"{}\"", row_id(&key(ns, k))))
            .expect("row")
    };
    assert!(
        at("failing") < at("waiting")
            && at("waiting") < at("suspended")
            && at("suspended") < at("ready"),
        "failing, waiting, suspended, then ready"
    );

    // Filters: by state, and by a substring of the name.
    let failing_only = ui
        .get(&format!("/?ns={ns}&state=failing"))
        .cookie(&cookie)
        .send()
        .await;
    assert_eq!(failing_only.status, 200, "{}", failing_only.show());
    assert!(tag_by_id(&failing_only.body, &row_id(&key(ns, "failing"))).is_some());
    assert!(tag_by_id(&failing_only.body, &row_id(&key(ns, "ready"))).is_none());
    // The summary bar still counts the namespace's sets in every state.
    for (id, n) in [("count-total", 5), ("count-ready", 2), ("count-failing", 1)] {
        assert_eq!(
            element_by_id(&failing_only.body, id).map(inner_text),
            Some(n.to_string()),
            "#{id} under the state filter counts the whole namespace: {}",
            failing_only.body
        );
    }
    let searched = ui
        .get(&format!("/?ns={ns}&q=prun"))
        .cookie(&cookie)
        .send()
        .await;
    assert!(tag_by_id(&searched.body, &row_id(&key(ns, "pruned"))).is_some());
    assert!(tag_by_id(&searched.body, &row_id(&key(ns, "waiting"))).is_none());

    // The failing set's page: every section, its members, the graph with its dependent,
    // a warning event, and the diff's place.
    let path = format!("/sets/{ns}/failing");
    let page = ui
        .wait_page(
            "a warning event on the failing set's page",
            &path,
            &cookie,
            SEEN,
            |b| element_by_id(b, "events").is_some_and(|e| e.contains("type-Warning")),
        )
        .await;
    for id in [
        "header",
        "set-state",
        "conditions",
        "source",
        "plan",
        "members",
        "graph",
        "graph-svg",
        "events",
        "diff",
    ] {
        assert!(
            tag_by_id(&page, id).is_some(),
            "the set page has #{id}:\n{page}"
        );
    }
    for live in [
        "header",
        "conditions",
        "source",
        "plan",
        "members",
        "graph",
        "events",
    ] {
        let tag = tag_by_id(&page, live).expect("present");
        assert!(
            tag.contains(" data-live"),
            "#{live} carries data-live: {tag}"
        );
    }
    assert!(
        tag_by_id(&page, "actions").is_none(),
        "no actions without --allow-actions"
    );
    assert!(has_class(
        tag_by_id(&page, "set-state").expect("state"),
        "state-failing"
    ));
    let conditions = element_by_id(&page, "conditions").expect("conditions");
    assert!(
        conditions.contains("class=\"condition"),
        "condition rows: {conditions}"
    );
    assert!(
        conditions.contains("Conflict"),
        "the Conflict reason shows: {conditions}"
    );
    let members = element_by_id(&page, "members").expect("members");
    assert!(
        members.contains("class=\"member-tree\""),
        "the member tree: {members}"
    );
    // The conflicting object was never applied: it is not the set's.
    assert!(
        members.contains(&format!("ConfigMap/{ns}/failing-cm\"")),
        "member failing-cm in the tree (data-member): {members}"
    );
    assert!(
        members.contains("health-"),
        "members carry their health: {members}"
    );
    // The member the last reconcile could not apply (status.failures): failed, its reason
    // Conflict, listed first.
    let shared = format!("data-member=\"/ConfigMap/{ns}/shared\"");
    let at_shared = members
        .find(&shared)
        .unwrap_or_else(|| panic!("the conflicting member shared in the tree: {members}"));
    let shared_row = &members[members[..at_shared].rfind("<li").expect("li")..];
    let shared_row = &shared_row[..shared_row.find("</li>").expect("</li>")];
    assert!(
        shared_row.contains("health-failed")
            && shared_row.contains("<span class=\"health\">Conflict</span>"),
        "the conflicting member is failed with reason Conflict: {shared_row}"
    );
    assert!(
        at_shared
            < members
                .find(&format!("ConfigMap/{ns}/failing-cm\""))
                .expect("failing-cm"),
        "the failure comes first: {members}"
    );
    let graph = element_by_id(&page, "graph").expect("graph");
    assert!(
        graph.contains(&format!("data-set=\"{}\"", key(ns, "waiting")))
            && graph.contains(&format!("href=\"/sets/{ns}/waiting\"")),
        "the graph shows the dependent set, linked: {graph}"
    );
    let diff = tag_by_id(&page, "diff").expect("diff");
    let diff_src = attr(diff, "data-src").expect("#diff[data-src]").to_string();
    assert_eq!(diff_src, format!("/sets/{ns}/failing/diff"));
    let diff_section = element_by_id(&page, "diff").expect("#diff");
    assert!(
        diff_section.contains("<button id=\"diff-load\" type=\"button\">")
            && diff_section.contains("<div id=\"diff-body\"></div>")
            && !diff_section.contains("<pre"),
        "the diff waits for a click: {diff_section}"
    );
    assert!(
        page.contains(&format!("data-live-src=\"/live?set={ns}%2Ffailing\"")),
        "the set page listens to its own key, query-encoded"
    );
    // The fragment the click fetches: the failing set's diff (the admin has every right).
    let frag = ui.get(&diff_src).cookie(&cookie).send().await;
    assert_eq!(frag.status, 200, "{}", frag.show());
    assert!(
        frag.body.contains("<pre class=\"diff\">"),
        "the failing set's diff: {}",
        frag.body
    );

    // The waiting set's graph shows its dependency in its state.
    let page = ui
        .get(&format!("/sets/{ns}/waiting"))
        .cookie(&cookie)
        .send()
        .await;
    assert_eq!(page.status, 200, "{}", page.show());
    assert!(has_class(
        tag_by_id(&page.body, "set-state").expect("state"),
        "state-waiting"
    ));
    let graph = element_by_id(&page.body, "graph").expect("graph");
    let node = graph
        .find(&format!("data-set=\"{}\"", key(ns, "failing")))
        .map(|at| &graph[graph[..at].rfind('<').expect("tag")..at])
        .unwrap_or_else(|| panic!("the graph has the dependency's node: {graph}"));
    assert!(
        node.contains("node") && node.contains("state-failing"),
        "the dependency's node carries its state: {node}"
    );

    // The other states' pages.
    for (set, state) in [
        (&s.ready, "ready"),
        (&s.suspended, "suspended"),
        (&s.pruned, "ready"),
    ] {
        let r = ui
            .get(&format!("/sets/{ns}/{}", set.name))
            .cookie(&cookie)
            .send()
            .await;
        assert_eq!(r.status, 200, "{}", r.show());
        let tag = tag_by_id(&r.body, "set-state").expect("#set-state");
        assert!(
            has_class(tag, &format!("state-{state}")),
            "{}: {tag}",
            set.name
        );
    }

    // The diff fragment: no layout, a diff (the admin has every right the diff needs).
    let frag = ui
        .get(&format!("/sets/{ns}/ready/diff"))
        .cookie(&cookie)
        .send()
        .await;
    assert_eq!(frag.status, 200, "{}", frag.show());
    assert!(
        !frag.body.contains("<html"),
        "a fragment, not a page: {}",
        frag.body
    );
    assert!(
        frag.body.contains("<pre class=\"diff\">"),
        "the admin sees the diff: {}",
        frag.body
    );

    for missing in [format!("/sets/{ns}/nope"), "/clustersets/nope".to_string()] {
        let r = ui.get(&missing).cookie(&cookie).send().await;
        assert_eq!(r.status, 404, "{missing}: {}", r.show());
        assert!(
            r.body.contains("not found or not visible to you"),
            "{}",
            r.body
        );
    }
    stop(op).await;
}

/// The printed token is exchanged once for an HttpOnly, SameSite=Strict session cookie;
/// a wrong, missing or used token is 403; a page without the cookie is 401 and says where
/// the URL is; a forged cookie is 401 too.
#[tokio::test]
async fn the_token_is_one_time_and_sets_a_strict_cookie() {
    let ui = UiProcess::start(&[]).await;
    let r = ui.get("/").send().await;
    assert_eq!(r.status, 401, "no cookie: {}", r.show());
    assert!(
        r.body
            .contains("open the URL printed by kubectl applyset ui"),
        "the 401 page says what to do: {}",
        r.body
    );
    for bad in ["/login?token=wrong", "/login", "/login?token="] {
        let r = ui.get(bad).send().await;
        assert_eq!(r.status, 403, "{bad}: {}", r.show());
        assert!(r.header("set-cookie").is_none(), "{bad} sets no cookie");
    }
    let r = ui.get(&format!("/login?token={}", ui.token)).send().await;
    assert_eq!(r.status, 200, "{}", r.show());
    let set_cookie = r.header("set-cookie").expect("Set-Cookie").to_string();
    let parts: Vec<&str> = set_cookie.split(';').map(str::trim).collect();
    let (name, value) = parts[0].split_once('=').expect("name=value");
    assert_eq!(name, format!("applyset-ui-{}", ui.port), "{set_cookie}");
    assert!(
        value.len() >= 32,
        "a session id of at least 32 characters: {set_cookie}"
    );
    assert_ne!(value, ui.token, "the session is not the token");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(parts.contains(&attribute), "{attribute} in {set_cookie}");
    }
    assert!(
        r.body
            .contains("<meta http-equiv=\"refresh\" content=\"0;url=/\">")
            && r.body.contains("href=\"/\""),
        "the login page moves on to /: {}",
        r.body
    );
    let again = ui.get(&format!("/login?token={}", ui.token)).send().await;
    assert_eq!(again.status, 403, "the token works once: {}", again.show());
    assert!(again.header("set-cookie").is_none());

    let cookie = parts[0];
    let r = ui.get("/").cookie(cookie).send().await;
    assert_eq!(r.status, 200, "with the cookie: {}", r.show());
    let forged = format!(
        "applyset-ui-{}=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        ui.port
    );
    let r = ui.get("/").cookie(&forged).send().await;
    assert_eq!(r.status, 401, "a forged session: {}", r.show());
    let other_port = format!("applyset-ui-{}={value}", ui.port.wrapping_add(1));
    let r = ui.get("/").cookie(&other_port).send().await;
    assert_eq!(r.status, 401, "another port's cookie name: {}", r.show());
}

/// A foreign `Host` (DNS rebinding: another name, or another port) is refused on every
/// route, the login included (the token stays usable), and the assets; `localhost:PORT` is
/// the ui's own.
#[tokio::test]
async fn a_foreign_host_is_refused_everywhere() {
    let ui = UiProcess::start(&[]).await;
    let other = format!("127.0.0.1:{}", ui.port.wrapping_add(1));
    let evil = format!("evil.example:{}", ui.port);
    let login = format!("/login?token={}", ui.token);
    for host in [evil.as_str(), other.as_str(), "evil.example"] {
        let r = ui.get(&login).header("Host", host).send().await;
        assert_eq!(r.status, 403, "Host {host} on /login: {}", r.show());
        assert!(r.header("set-cookie").is_none());
    }
    let cookie = ui.login().await;
    let page = ui.get("/").cookie(&cookie).send().await;
    assert_eq!(page.status, 200, "{}", page.show());
    let css = asset_path(&page.body, "<link rel=\"stylesheet\" href=\"");
    let js = asset_path(&page.body, "<script src=\"");
    for path in [
        "/",
        "/readyz",
        "/live?page=sets",
        "/sets/default/x",
        css.as_str(),
        js.as_str(),
    ] {
        for host in [evil.as_str(), other.as_str()] {
            let r = ui
                .get(path)
                .header("Host", host)
                .cookie(&cookie)
                .send()
                .await;
            assert_eq!(r.status, 403, "Host {host} on {path}: {}", r.show());
        }
    }
    let local = format!("localhost:{}", ui.port);
    let r = ui
        .get("/")
        .header("Host", &local)
        .cookie(&cookie)
        .send()
        .await;
    assert_eq!(r.status, 200, "Host {local} is the ui's own: {}", r.show());
    for path in [css.as_str(), js.as_str()] {
        let r = ui.get(path).send().await;
        assert_eq!(r.status, 200, "{path} needs no cookie: {}", r.show());
        assert_security_headers(&r, path, true);
    }
}

/// The path of an asset the page links (`prefix` ends just before it).
fn asset_path(body: &str, prefix: &str) -> String {
    let at = body
        .find(prefix)
        .unwrap_or_else(|| panic!("{prefix} in the page:\n{body}"))
        + prefix.len();
    let end = at + body[at..].find('"').expect("closing quote");
    let path = body[at..end].to_string();
    assert!(path.starts_with("/assets/"), "{path}");
    path
}

/// Every answer (pages, fragment, 401, 403, 404, login, readyz, the live stream) carries the
/// security headers exactly, and no CORS header even to a foreign Origin.
#[tokio::test]
async fn every_answer_carries_the_security_headers() {
    let h = Harness::new("ui-headers").await;
    let set = h.applyset("plain");
    set.create(json!({"manifests": [configmap("plain-cm", json!({"k": "v"}))]}))
        .await;
    let ui = UiProcess::start(&[]).await;
    let r = ui.get("/").send().await;
    assert_security_headers(&r, "401", false);
    let r = ui.get("/login?token=wrong").send().await;
    assert_security_headers(&r, "403 login", false);
    let r = ui.get(&format!("/login?token={}", ui.token)).send().await;
    assert_security_headers(&r, "login", false);
    let cookie = r.session_cookie().expect("cookie");
    ui.wait_ready(&cookie).await;
    let set_page = format!("/sets/{}/plain", h.ns);
    ui.wait_page("the set", &set_page, &cookie, SEEN, |_| true)
        .await;
    for path in [
        "/".to_string(),
        "/?state=failing&sort=age&page=2".to_string(),
        "/readyz".to_string(),
        set_page.clone(),
        format!("{set_page}/diff"),
        format!("/sets/{}/nope", h.ns),
    ] {
        let r = ui
            .get(&path)
            .cookie(&cookie)
            .header("Origin", "http://evil.example")
            .send()
            .await;
        assert_security_headers(&r, &path, false);
    }
    let r = ui
        .get(&set_page)
        .header("Host", "evil.example")
        .cookie(&cookie)
        .send()
        .await;
    assert_security_headers(&r, "403 foreign host", false);
    let live = ui.live("/live?page=sets", &cookie).await;
    assert_eq!(live.status, 200);
    let r = Resp {
        status: live.status,
        headers: live.headers.clone(),
        body: String::new(),
    };
    assert_security_headers(&r, "/live", false);
    assert!(
        live.header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream")),
        "the live stream is text/event-stream: {:?}",
        live.headers
    );
}

/// Tenant strings render as inert text everywhere: annotations, a status message, an event
/// message, a `javascript:` source URL (text, never a link) and an http URL (a link, its
/// quotes escaped); Secret values — of a Secret member and substituted from a Secret into a
/// ConfigMap — appear in no page nor in the diff, the Secret's keys do.
#[tokio::test]
async fn tenant_strings_are_inert_and_secret_values_never_shown() {
    let h = Harness::new("ui-hostile").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let hostile = h.applyset("hostile");
    hostile
        .create_with(
            json!({}),
            json!({"note": SCRIPT, "link": IMG}),
            json!({"manifests": [configmap(SCRIPT, json!({"k": "v"}))]}),
        )
        .await;
    let hostile_img = h.applyset("hostile-img");
    hostile_img
        .create(json!({"manifests": [configmap(&format!("x{IMG}"), json!({"k": "v"}))]}))
        .await;
    let sources = h.applyset("hostile-sources");
    sources
        .create(json!({"sources": [
            {"git": {"url": format!("javascript:alert(1)//{SCRIPT}"), "ref": {"branch": "main"}}},
            {"http": {"url": format!("http://127.0.0.1:9/{IMG}")}}
        ]}))
        .await;
    // The tenant strings really are in the status and an event (preconditions).
    hostile
        .wait_until("a Ready message carrying the script", DEADLINE, |_, st| {
            condition(st?, "Ready")?
                .message
                .contains(SCRIPT)
                .then_some(())
        })
        .await;
    hostile_img
        .wait_until("a Ready message carrying the img", DEADLINE, |_, st| {
            condition(st?, "Ready")?
                .message
                .contains("<img src=x onerror=alert(1)>")
                .then_some(())
        })
        .await;
    let reason = ready(&hostile.status().await.expect("status"))
        .reason
        .clone();
    event_note(&h.client, ns, &reason, SCRIPT).await;

    // Secrets: a Secret member, and a ConfigMap member with a value substituted from a
    // Secret; then both changed behind the set's back (the operator stopped) so the diff
    // shows them.
    let member_secret = "member-secret-Z7q";
    let substituted = "subst-from-secret-Q9w";
    let live_secret = "live-secret-W4e";
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    ssa(
        &h.client,
        &secret_ar(),
        Some(ns),
        "test",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-creds"},
            "stringData": {"db_password": substituted}}),
    )
    .await;
    let secretive = h.applyset("secretive");
    secretive
        .create(json!({
        "postBuild": {"substituteFrom": [{"kind": "Secret", "name": "db-creds"}]},
        "manifests": [
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "api-token"},
             "type": "Opaque", "data": {"token": b64(member_secret)}},
            configmap("app-config", json!({"password": "${db_password}", "mode": "a"}))
        ]}))
        .await;
    secretive.wait_ready().await;
    let cm = must_get(&h.client, &configmap_ar(), Some(ns), "app-config").await;
    assert_eq!(
        cm.data["data"]["password"], substituted,
        "the substitution happened"
    );
    stop(op).await;
    let drift = |ar: kube::api::ApiResource, name: &'static str, data: serde_json::Value| {
        let api = dyn_api(&h.client, &ar, Some(ns));
        async move {
            api.patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({ "data": data })),
            )
            .await
            .unwrap_or_else(|e| panic!("changing {name}: {e}"));
        }
    };
    drift(configmap_ar(), "app-config", json!({"mode": "b"})).await;
    drift(secret_ar(), "api-token", json!({"token": b64(live_secret)})).await;

    let ui = UiProcess::start(&[]).await;
    let cookie = ui.login().await;
    ui.wait_ready(&cookie).await;
    let list = ui
        .wait_page(
            "the hostile sets",
            &format!("/?ns={ns}"),
            &cookie,
            SEEN,
            |b| {
                ["hostile", "hostile-img", "hostile-sources", "secretive"]
                    .iter()
                    .all(|n| tag_by_id(b, &row_id(&key(ns, n))).is_some())
            },
        )
        .await;
    let hostile_page = ui
        .wait_page(
            "the hostile event",
            &format!("/sets/{ns}/hostile"),
            &cookie,
            SEEN,
            |b| element_by_id(b, "events").is_some_and(|e| e.contains("alert(1)")),
        )
        .await;
    let mut pages = vec![("/".to_string(), list)];
    pages.push((format!("/sets/{ns}/hostile"), hostile_page));
    for name in ["hostile-img", "hostile-sources", "secretive"] {
        let path = format!("/sets/{ns}/{name}");
        let r = ui.get(&path).cookie(&cookie).send().await;
        assert_eq!(r.status, 200, "{path}: {}", r.show());
        pages.push((path, r.body));
    }
    let secret_diff = ui
        .wait_page(
            "the secretive set's diff",
            &format!("/sets/{ns}/secretive/diff"),
            &cookie,
            SEEN,
            |b| b.contains("app-config"),
        )
        .await;
    for name in ["hostile", "hostile-img", "hostile-sources"] {
        let path = format!("/sets/{ns}/{name}/diff");
        let r = ui.get(&path).cookie(&cookie).send().await;
        pages.push((path, r.body));
    }
    pages.push((format!("/sets/{ns}/secretive/diff"), secret_diff.clone()));

    for (path, body) in &pages {
        assert_inert(path, body);
        for value in [member_secret, substituted, live_secret] {
            for shown in [value.to_string(), b64(value)] {
                assert!(
                    !body.contains(&shown),
                    "{path} shows a Secret's value {shown:?}:\n{body}"
                );
            }
        }
    }
    let escaped_script = [
        "&#60;script&#62;alert(1)&#60;/script&#62;",
        "&lt;script&gt;alert(1)&lt;/script&gt;",
    ];
    let shows = |body: &str, forms: &[&str]| forms.iter().any(|f| body.contains(f));
    let page_of = |p: &str| &pages.iter().find(|(path, _)| path == p).expect("page").1;
    let hostile_page = page_of(&format!("/sets/{ns}/hostile"));
    assert!(
        shows(
            element_by_id(hostile_page, "conditions").unwrap_or(""),
            &escaped_script
        ),
        "the Ready message shows, escaped: {hostile_page}"
    );
    assert!(
        shows(
            element_by_id(hostile_page, "events").unwrap_or(""),
            &escaped_script
        ),
        "the event message shows, escaped: {hostile_page}"
    );
    let metadata = element_by_id(hostile_page, "metadata").expect("#metadata");
    assert!(
        shows(metadata, &escaped_script)
            && shows(
                metadata,
                &[
                    "&#34;&#62;&#60;img src=x onerror=alert(1)&#62;",
                    "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"
                ]
            ),
        "both annotations show, escaped, in #metadata: {metadata}"
    );
    assert!(
        !metadata.contains("last-applied-configuration"),
        "the last-applied annotation is left out: {metadata}"
    );
    let sources_page = page_of(&format!("/sets/{ns}/hostile-sources"));
    let source = element_by_id(sources_page, "source").expect("#source");
    assert!(
        shows(
            source,
            &[
                "javascript:alert(1)//&#60;script&#62;",
                "javascript:alert(1)//&lt;script&gt;"
            ]
        ),
        "the javascript: URL shows as text: {source}"
    );
    assert!(
        source.contains("href=\"http://127.0.0.1:9/&#34;&#62;&#60;img")
            || source.contains("href=\"http://127.0.0.1:9/&quot;&gt;&lt;img"),
        "the http URL is a link, its quotes escaped: {source}"
    );
    let secretive_page = page_of(&format!("/sets/{ns}/secretive"));
    let members = element_by_id(secretive_page, "members").expect("#members");
    assert!(
        members.contains(">api-token<") && members.contains("(keys: token)"),
        "the Secret member shows its name and keys: {members}"
    );
    let token_row = members
        .split("</li>")
        .find(|r| r.contains(">api-token<"))
        .expect("api-token row");
    assert!(
        !token_row.contains("class=\"message\""),
        "a Secret member shows no health message: {token_row}"
    );
    assert!(
        secret_diff.contains("<pre class=\"diff\">") && secret_diff.contains("mode"),
        "the diff shows the drift of the ConfigMap: {secret_diff}"
    );
}

/// No raw markup from a tenant string: no `<script>alert`, no `<img`, no `onerror=` outside
/// escaped text, no `javascript:` link.
fn assert_inert(path: &str, body: &str) {
    let lower = body.to_ascii_lowercase();
    assert!(
        !lower.contains("<script>alert"),
        "{path}: a raw <script>alert:\n{body}"
    );
    assert!(!lower.contains("<img"), "{path}: a raw <img:\n{body}");
    assert!(
        !lower.contains("href=\"javascript:"),
        "{path}: a javascript: link:\n{body}"
    );
    assert!(
        !lower.contains("href='javascript:"),
        "{path}: a javascript: link:\n{body}"
    );
    for (at, _) in lower.match_indices("onerror=") {
        let before = &lower[..at];
        assert!(
            before.ends_with("&#60;img src=x ") || before.ends_with("&lt;img src=x "),
            "{path}: onerror= outside escaped text at {at}:\n{body}"
        );
    }
}

/// Actions: 404 without `--allow-actions`; with it, a foreign Origin or a cross-site
/// `Sec-Fetch-Site` is 403 and changes nothing; a same-origin suspend, resume and reconcile
/// are done (the spec and the request annotation change).
#[tokio::test]
async fn actions_need_the_flag_and_the_same_origin() {
    let h = Harness::new("ui-actions").await;
    let ns = h.ns.as_str();
    let set = h.applyset("acted");
    set.create(json!({"manifests": [configmap("acted-cm", json!({"k": "v"}))]}))
        .await;
    let suspend = format!("/sets/{ns}/acted/suspend");

    let plain = UiProcess::start(&[]).await;
    let cookie = plain.login().await;
    plain.wait_ready(&cookie).await;
    for action in ["suspend", "resume", "reconcile"] {
        let r = plain
            .req("POST", &format!("/sets/{ns}/acted/{action}"))
            .cookie(&cookie)
            .header("Origin", &plain.origin())
            .header("Sec-Fetch-Site", "same-origin")
            .form("")
            .send()
            .await;
        assert_eq!(
            r.status,
            404,
            "{action} without --allow-actions: {}",
            r.show()
        );
    }
    drop(plain);

    let ui = UiProcess::start(&["--allow-actions"]).await;
    let cookie = ui.login().await;
    ui.wait_ready(&cookie).await;
    let page = ui
        .wait_page(
            "the set's page",
            &format!("/sets/{ns}/acted"),
            &cookie,
            SEEN,
            |_| true,
        )
        .await;
    let actions = element_by_id(&page, "actions").expect("#actions with --allow-actions");
    for action in ["reconcile", "suspend", "resume"] {
        assert!(
            actions.contains(&format!("action=\"/sets/{ns}/acted/{action}\"")),
            "a form for {action}: {actions}"
        );
    }
    assert!(
        tag_by_id(&page, "action-result").is_some(),
        "#action-result"
    );
    let generation = set.live().await.metadata.generation;
    let other_port = format!("http://127.0.0.1:{}", ui.port.wrapping_add(1));
    let refused = [
        ("Origin", "http://evil.example"),
        ("Origin", other_port.as_str()),
        ("Origin", "null"),
        ("Sec-Fetch-Site", "cross-site"),
        ("Sec-Fetch-Site", "same-site"),
    ];
    for (name, value) in refused {
        let r = ui
            .req("POST", &suspend)
            .cookie(&cookie)
            .header(name, value)
            .form("")
            .send()
            .await;
        assert_eq!(r.status, 403, "{name}: {value}: {}", r.show());
        assert_security_headers(&r, "refused action", false);
    }
    let r = ui
        .req("POST", &suspend)
        .header("Origin", &ui.origin())
        .form("")
        .send()
        .await;
    assert_eq!(r.status, 401, "an action without the cookie: {}", r.show());
    let live = set.live().await;
    assert_eq!(
        live.metadata.generation, generation,
        "no refused action changed the set"
    );
    assert_ne!(live.data["spec"]["suspend"], json!(true), "not suspended");

    let same_origin = |path: String| {
        ui.req("POST", &path)
            .cookie(&cookie)
            .header("Origin", &ui.origin())
            .header("Sec-Fetch-Site", "same-origin")
            .form("")
    };
    let r = same_origin(suspend.clone()).send().await;
    assert_eq!(r.status, 200, "suspend: {}", r.show());
    assert!(
        r.body
            .contains(&format!("done: suspended ApplySet {ns}/acted")),
        "the answer says what was done: {}",
        r.body
    );
    set.wait_until("spec.suspend true", DEADLINE, |o, _| {
        (o.data["spec"]["suspend"] == json!(true)).then_some(())
    })
    .await;
    // Without Origin and Sec-Fetch-Site (a client that sends neither) it is done too.
    let r = ui
        .req("POST", &format!("/sets/{ns}/acted/resume"))
        .cookie(&cookie)
        .form("")
        .send()
        .await;
    assert_eq!(r.status, 200, "resume: {}", r.show());
    set.wait_until("spec.suspend false", DEADLINE, |o, _| {
        (o.data["spec"]["suspend"] != json!(true)).then_some(())
    })
    .await;
    let r = same_origin(format!("/sets/{ns}/acted/reconcile"))
        .send()
        .await;
    assert_eq!(r.status, 200, "reconcile: {}", r.show());
    set.wait_until("the reconcile request annotation", DEADLINE, |o, _| {
        o.metadata
            .annotations
            .as_ref()?
            .contains_key("applyset.dev/reconcile-requested-at")
            .then_some(())
    })
    .await;
    let r = same_origin(format!("/sets/{ns}/acted/explode"))
        .send()
        .await;
    assert_eq!(r.status, 404, "an unknown action: {}", r.show());
}

/// The live stream: refused with a foreign Origin or a cross-site Sec-Fetch-Site; otherwise
/// a set whose Ready condition flips (written through the status subresource: Ready, then
/// failing) is reported as `changed` with its key within 2 s of the write's answer, on the
/// sets page's stream and on the set's own.
#[tokio::test]
async fn the_live_stream_reports_a_change_within_two_seconds() {
    let h = Harness::new("ui-live").await;
    let ns = h.ns.as_str();
    let a = h.applyset("flip");
    a.create(json!({"manifests": [configmap("flip-cm", json!({"k": "v"}))]}))
        .await;
    let b = h.applyset("flop");
    b.create(json!({"manifests": [configmap("flop-cm", json!({"k": "v"}))]}))
        .await;
    let ui = UiProcess::start(&[]).await;
    let cookie = ui.login().await;
    ui.wait_ready(&cookie).await;
    ui.wait_page("both sets", &format!("/?ns={ns}"), &cookie, SEEN, |body| {
        tag_by_id(body, &row_id(&key(ns, "flip"))).is_some()
            && tag_by_id(body, &row_id(&key(ns, "flop"))).is_some()
    })
    .await;

    for (name, value) in [
        ("Origin", "http://evil.example"),
        (
            "Origin",
            &format!("http://127.0.0.1:{}", ui.port.wrapping_add(1)),
        ),
        ("Sec-Fetch-Site", "cross-site"),
    ] {
        let r = ui
            .get("/live?page=sets")
            .cookie(&cookie)
            .header(name, value)
            .send()
            .await;
        assert_eq!(r.status, 403, "/live with {name}: {value}: {}", r.show());
    }
    let r = ui.get("/live?page=sets").send().await;
    assert_eq!(r.status, 401, "/live without the cookie: {}", r.show());

    let mut sets_stream = LiveStream::open(
        ui.get("/live?page=sets")
            .cookie(&cookie)
            .header("Origin", &ui.origin())
            .header("Sec-Fetch-Site", "same-origin"),
    )
    .await;
    assert_eq!(sets_stream.status, 200);
    let mut set_stream = ui
        .live(&format!("/live?set={}", key(ns, "flop")), &cookie)
        .await;
    assert_eq!(set_stream.status, 200);

    set_ready(&a, "True", "Applied").await;
    let t = Instant::now();
    let seen = sets_stream
        .wait_for("changed", &key(ns, "flip"), SEEN)
        .await;
    let took = t.elapsed();
    assert!(
        seen.is_some(),
        "no `changed` {} on /live?page=sets within {SEEN:?}",
        key(ns, "flip")
    );
    eprintln!("ui live: the sets page's stream reported the change in {took:?}");
    assert!(
        took <= Duration::from_secs(2),
        "reported in {took:?}, over 2 s"
    );

    set_ready(&b, "False", "ApplyFailed").await;
    let t = Instant::now();
    let seen = set_stream.wait_for("changed", &key(ns, "flop"), SEEN).await;
    let took = t.elapsed();
    assert!(
        seen.is_some(),
        "no `changed` on the set's own stream within {SEEN:?}"
    );
    eprintln!("ui live: the set page's stream reported the change in {took:?}");
    assert!(
        took <= Duration::from_secs(2),
        "reported in {took:?}, over 2 s"
    );
    // The pages show the new state.
    ui.wait_page(
        "flip ready, flop failing",
        &format!("/?ns={ns}"),
        &cookie,
        SEEN,
        |body| {
            row_in_state(body, &key(ns, "flip"), "ready")
                && row_in_state(body, &key(ns, "flop"), "failing")
        },
    )
    .await;
}

/// Writes the set's status through its status subresource: observed at its generation, Ready
/// `status` for `reason` (no operator runs: the test is the writer).
async fn set_ready(set: &Parent, status: &str, reason: &str) {
    let generation = set.live().await.metadata.generation.unwrap_or(1);
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    set.api()
        .patch_status(
            &set.name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {
                "observedGeneration": generation,
                "conditions": [{"type": "Ready", "status": status, "reason": reason,
                    "message": format!("written by the test: {reason}"),
                    "lastTransitionTime": now, "observedGeneration": generation}]
            }})),
        )
        .await
        .unwrap_or_else(|e| panic!("writing {}'s status: {e}", set.name));
}

/// A user whose RBAC lets them read ApplySets in namespace A only sees A's sets and none of
/// B's (not on the list, B's set page a 404), the page says what it watches, the diff says
/// which right is missing, and an action the RBAC forbids is shown as the API server's
/// refusal, the set unchanged.
#[tokio::test]
async fn a_user_sees_only_what_rbac_lets_them_read() {
    let h = Harness::new("ui-rbac-a").await;
    let a = h.ns.clone();
    let b = h.extra_namespace("ui-rbac-b").await;
    let in_a = h.applyset("visible");
    in_a.create(json!({"manifests": [configmap("visible-cm", json!({"k": "v"}))]}))
        .await;
    let in_b = Parent {
        namespace: Some(b.clone()),
        ..h.applyset("hidden")
    };
    in_b.create(json!({"manifests": [configmap("hidden-cm", json!({"k": "v"}))]}))
        .await;
    create_rbac(
        &h,
        &a,
        &[
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "viewer"}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "applyset-viewer"},
                "rules": [
                    {"apiGroups": ["applyset.dev"], "resources": ["applysets"], "verbs": ["get", "list", "watch"]},
                    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["get", "list", "watch"]},
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}
                ]}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "applyset-viewer"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "applyset-viewer"},
                "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": a}]}),
        ],
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = service_account_kubeconfig(dir.path(), &a, "viewer");
    let ui = UiProcess::start_with(&kubeconfig, &["--allow-actions", "--namespaces", &a]).await;
    let cookie = ui.login().await;
    ui.wait_ready(&cookie).await;
    let list = ui
        .wait_page("A's set", "/", &cookie, SEEN, |body| {
            tag_by_id(body, &row_id(&key(&a, "visible"))).is_some()
        })
        .await;
    assert!(
        tag_by_id(&list, &row_id(&key(&b, "hidden"))).is_none(),
        "B's set is not listed"
    );
    assert!(
        !list.contains(&b),
        "nothing of namespace {b} on the page:\n{list}"
    );
    let watched = element_by_id(&list, "watched").expect("#watched");
    assert!(watched.contains(&a), "#watched names {a}: {watched}");
    let r = ui.get(&format!("/?ns={b}")).cookie(&cookie).send().await;
    assert!(
        !r.body.contains(&format!("{b}/hidden")),
        "not by a filter either"
    );
    let r = ui
        .get(&format!("/sets/{b}/hidden"))
        .cookie(&cookie)
        .send()
        .await;
    assert_eq!(r.status, 404, "B's set page: {}", r.show());
    assert!(
        r.body.contains("not found or not visible to you"),
        "{}",
        r.body
    );
    let r = ui
        .get(&format!("/sets/{a}/visible"))
        .cookie(&cookie)
        .send()
        .await;
    assert_eq!(r.status, 200, "A's set page: {}", r.show());
    let diff = ui
        .get(&format!("/sets/{a}/visible/diff"))
        .cookie(&cookie)
        .send()
        .await;
    assert_eq!(diff.status, 200, "{}", diff.show());
    // The viewer may not patch (the dry-run's verb): the diff says so, naming the right.
    assert!(
        diff.body.contains("class=\"diff-unavailable\"") && diff.body.contains("patch"),
        "a viewer without the diff's rights is told why: {}",
        diff.body
    );

    let generation = in_a.live().await.metadata.generation;
    let r = ui
        .req("POST", &format!("/sets/{a}/visible/suspend"))
        .cookie(&cookie)
        .header("Origin", &ui.origin())
        .header("Sec-Fetch-Site", "same-origin")
        .form("")
        .send()
        .await;
    assert_eq!(r.status, 403, "the API server's refusal: {}", r.show());
    assert!(
        r.body.contains("refused") && r.body.contains("forbidden"),
        "the refusal is shown: {}",
        r.body
    );
    let live = in_a.live().await;
    assert_eq!(live.metadata.generation, generation, "the set is unchanged");
    assert_ne!(live.data["spec"]["suspend"], json!(true));
}

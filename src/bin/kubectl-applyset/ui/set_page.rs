//! A set's page (`/sets/{ns}/{name}`, `/clustersets/{name}`): its state, labels and
//! annotations (the last-applied annotation left out), conditions, source (with when the
//! attempted revision was first read), last plan (`status.plan`), member tree (joined with
//! `status.failures`), dependsOn graph, events (the conditions' history) and a place for the
//! live diff, computed only when the user clicks its button (app.js fetches `…/diff` into
//! `#diff-body`). The set must be in the view's cache (else a 404 "not found or not visible
//! to you"); the parent, its members and its recent events are read once per change of the set
//! and shared by every viewer for a few seconds ([`reads`]). Every tenant string reaches the
//! HTML through the template's escaping.

mod graph;
mod reads;

use std::collections::BTreeMap;

use applyset_operator::{
    api::{ApplySetStatus, MemberFailure, MemberRef},
    applyset::{ParentKind, ParentRef},
    view::{EventRow, SetSummary, SourceView, State},
};
use askama::Template;
use axum::{
    extract::{Path, State as Extract},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use k8s_openapi::{apimachinery::pkg::apis::meta::v1::ObjectMeta, jiff::Timestamp};

use super::{
    AppState, Chrome, html, key, live_src,
    members::{self, NamespaceGroup},
    set_href as href, word,
};
use crate::sets::age;
use graph::GraphView;

pub async fn applyset(
    Extract(app): Extract<AppState>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    page(&app, ParentRef::applyset(namespace, name)).await
}

pub async fn clusterset(Extract(app): Extract<AppState>, Path(name): Path<String>) -> Response {
    page(&app, ParentRef::cluster(name)).await
}

pub async fn applyset_diff(
    Extract(app): Extract<AppState>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    super::diff::fragment(&app, ParentRef::applyset(namespace, name)).await
}

pub async fn clusterset_diff(
    Extract(app): Extract<AppState>,
    Path(name): Path<String>,
) -> Response {
    super::diff::fragment(&app, ParentRef::cluster(name)).await
}

/// One condition of the set.
pub struct ConditionRow {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    /// Its lastTransitionTime (RFC 3339) and how long ago.
    pub since: String,
    pub ago: String,
}

/// One source of the set.
pub struct SourceRow {
    pub kind: &'static str,
    pub location: String,
    /// The location as a link: only an `http` or `https` URL.
    pub link: Option<String>,
    pub path: String,
    pub reference: String,
}

/// The set's last plan (`status.plan`).
pub struct PlanView {
    pub create: Vec<String>,
    pub update: Vec<String>,
    pub prune: Vec<String>,
    /// `member: why`.
    pub skip: Vec<String>,
    pub unchanged: i64,
    pub truncated: bool,
}

/// One event.
pub struct EventView {
    pub kind: String,
    pub reason: String,
    pub note: String,
    pub ago: String,
    pub count: i64,
}

#[derive(Template)]
#[template(path = "set.html")]
pub struct SetPage {
    pub chrome: Chrome,
    pub key: String,
    pub kind: &'static str,
    pub name: String,
    pub namespace: String,
    pub state: &'static str,
    pub state_word: &'static str,
    pub ready_message: String,
    pub waiting_for: String,
    pub suspended: bool,
    pub plan_only: bool,
    pub deleting: bool,
    /// Why the parent could not be read (the page shows the cached summary only).
    pub read_error: String,
    pub conditions: Vec<ConditionRow>,
    pub sources: Vec<SourceRow>,
    pub applied: String,
    pub attempted: String,
    /// When the attempted revision was first read (`lastAttemptedRevisionTime`, RFC 3339)
    /// and how long ago; empty when not recorded.
    pub attempted_since: String,
    pub attempted_ago: String,
    /// The set's labels and annotations (`name`, `value`), the last-applied annotation left
    /// out.
    pub labels: Vec<(String, String)>,
    pub annotations: Vec<(String, String)>,
    pub plan: Option<PlanView>,
    pub members: Vec<NamespaceGroup>,
    pub member_count: usize,
    pub members_error: String,
    pub members_truncated: bool,
    pub graph: GraphView,
    pub events: Vec<EventView>,
    pub events_error: String,
    pub diff_src: String,
    pub actions: bool,
    pub action_base: String,
}

#[derive(Template)]
#[template(path = "set_missing.html")]
pub struct Missing {
    pub chrome: Chrome,
    pub key: String,
}

/// The page of `parent`.
async fn page(app: &AppState, parent: ParentRef) -> Response {
    let snapshot = app.cache.snapshot();
    let set_key = key(&parent);
    let chrome = app.chrome(live_src(&parent));
    let Some(summary) = snapshot.get(&parent).cloned() else {
        return missing(chrome, set_key);
    };
    let read = reads::of(
        &app.client,
        &parent,
        &summary.uid,
        &summary.resource_version,
    )
    .await;
    let mut view = SetPage::of(chrome, &summary, app.allow_actions);
    view.graph = graph::drawn(snapshot.clone(), parent.clone()).await;
    let mut failures: &[MemberFailure] = &[];
    match &read.parent {
        Ok(Some(p)) => {
            view.with_status(p.status());
            view.with_metadata(p.meta());
            failures = p.status().map_or(&[], |s| s.failures.as_slice());
        }
        Ok(None) => return missing(view.chrome, set_key),
        Err(e) => view.read_error = e.clone(),
    }
    match &read.members {
        Ok(list) => {
            view.members = members::group(list, failures);
            view.member_count = view
                .members
                .iter()
                .flat_map(|g| &g.kinds)
                .map(|k| k.rows.len())
                .sum();
        }
        Err(e) => view.members_error = e.clone(),
    }
    match &read.events {
        Ok(rows) => view.events = events_shown(rows.clone()),
        Err(e) => view.events_error = e.clone(),
    }
    html(&view)
}

fn missing(chrome: Chrome, key: String) -> Response {
    let mut r = html(&Missing { chrome, key });
    *r.status_mut() = StatusCode::NOT_FOUND;
    r.into_response()
}

impl SetPage {
    /// The page from the cached summary alone (the parts the parent adds left empty).
    fn of(chrome: Chrome, s: &SetSummary, actions: bool) -> SetPage {
        let p = &s.parent;
        let (kind, namespace) = match p.kind {
            ParentKind::ApplySet => ("ApplySet", p.namespace.clone().unwrap_or_default()),
            ParentKind::ClusterApplySet => ("ClusterApplySet", String::new()),
        };
        let waiting_for = match &s.waiting_for {
            Some((dep, why)) => format!("waiting for {}: {why}", key(dep)),
            None => String::new(),
        };
        SetPage {
            chrome,
            key: key(p),
            kind,
            name: p.name.clone(),
            namespace,
            state: s.state.as_str(),
            state_word: word(s.state),
            ready_message: s.ready.as_ref().map(|r| r.2.clone()).unwrap_or_default(),
            waiting_for,
            suspended: s.suspended,
            plan_only: s.plan_only,
            deleting: s.state == State::Deleting,
            read_error: String::new(),
            conditions: Vec::new(),
            sources: s.sources.iter().map(source_row).collect(),
            applied: s.last_applied_revision.clone().unwrap_or_default(),
            attempted: s.last_attempted_revision.clone().unwrap_or_default(),
            attempted_since: String::new(),
            attempted_ago: String::new(),
            labels: Vec::new(),
            annotations: Vec::new(),
            plan: None,
            members: Vec::new(),
            member_count: 0,
            members_error: String::new(),
            members_truncated: false,
            graph: GraphView::default(),
            events: Vec::new(),
            events_error: String::new(),
            diff_src: format!("{}/diff", href(p)),
            actions,
            action_base: href(p),
        }
    }

    /// What the live parent's status adds: every condition, the revisions, the last plan.
    fn with_status(&mut self, status: Option<&ApplySetStatus>) {
        let Some(status) = status else {
            return;
        };
        let now = Timestamp::now();
        self.conditions = status
            .conditions
            .iter()
            .map(|c| ConditionRow {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                since: c.last_transition_time.0.to_string(),
                ago: age(now, c.last_transition_time.0),
            })
            .collect();
        self.applied = status.last_applied_revision.clone().unwrap_or_default();
        self.attempted = status.last_attempted_revision.clone().unwrap_or_default();
        if let Some(t) = &status.last_attempted_revision_time {
            self.attempted_since = t.0.to_string();
            self.attempted_ago = age(now, t.0);
        }
        self.members_truncated = status.members_truncated;
        self.plan = status.plan.as_ref().map(|plan| PlanView {
            create: plan.create.iter().map(member_label).collect(),
            update: plan.update.iter().map(member_label).collect(),
            prune: plan.prune.iter().map(member_label).collect(),
            skip: plan
                .skip
                .iter()
                .map(|s| format!("{}: {}", member_label(&s.member), s.reason))
                .collect(),
            unchanged: plan.unchanged,
            truncated: plan.truncated,
        });
    }
}

impl SetPage {
    /// The set's labels and annotations, the last-applied annotation left out.
    fn with_metadata(&mut self, meta: &ObjectMeta) {
        let pairs = |m: &Option<BTreeMap<String, String>>| -> Vec<(String, String)> {
            m.iter()
                .flatten()
                .filter(|(k, _)| k.as_str() != LAST_APPLIED)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        self.labels = pairs(&meta.labels);
        self.annotations = pairs(&meta.annotations);
    }
}

/// The annotation `kubectl apply` keeps the last applied object in (not shown).
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// `Kind[.group] [namespace/]name`.
fn member_label(m: &MemberRef) -> String {
    let kind = match m.group.is_empty() {
        true => m.kind.clone(),
        false => format!("{}.{}", m.kind, m.group),
    };
    match &m.namespace {
        Some(ns) => format!("{kind} {ns}/{}", m.name),
        None => format!("{kind} {}", m.name),
    }
}

/// A source as shown: its location a link only when it is an `http` or `https` URL.
fn source_row(s: &SourceView) -> SourceRow {
    SourceRow {
        kind: s.kind,
        location: s.location.clone(),
        link: web_url(&s.location).then(|| s.location.clone()),
        path: s.path.clone().unwrap_or_default(),
        reference: s.reference.clone().unwrap_or_default(),
    }
}

/// Whether `location` is an `http` or `https` URL (case ignored), and nothing else
/// (`javascript:`, `data:`, `ssh://`, a name).
fn web_url(location: &str) -> bool {
    let lower = location.trim_start().to_ascii_lowercase();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"));
    rest.is_some_and(|r| !r.is_empty()) && location.trim_start() == location
}

/// The events, warnings first, then newest first.
fn events_shown(mut rows: Vec<EventRow>) -> Vec<EventView> {
    let now = Timestamp::now();
    rows.sort_by(|a, b| {
        let warning = |e: &EventRow| e.kind != "Warning";
        warning(a)
            .cmp(&warning(b))
            .then(b.last_seen.cmp(&a.last_seen))
    });
    rows.into_iter()
        .map(|e| EventView {
            ago: e.last_seen.map(|t| age(now, t)).unwrap_or_default(),
            kind: e.kind,
            reason: e.reason,
            note: e.note,
            count: e.count,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_and_https_urls_are_links() {
        for ok in [
            "https://github.com/org/repo.git",
            "http://host/x",
            "HTTPS://Host",
        ] {
            assert!(web_url(ok), "{ok}");
        }
        for not in [
            "javascript:alert(1)",
            "JavaScript:alert(1)",
            "data:text/html,<script>",
            "ssh://git@host/r.git",
            "oci://registry/app",
            "https://",
            " https://host",
            "my-configmap",
            "//host/x",
        ] {
            assert!(!web_url(not), "{not}");
        }
    }

    #[test]
    fn events_show_warnings_first_then_newest() {
        let row = |kind: &str, reason: &str, secs: i64| EventRow {
            kind: kind.into(),
            reason: reason.into(),
            note: String::new(),
            last_seen: Timestamp::from_second(secs).ok(),
            count: 1,
        };
        let shown = events_shown(vec![
            row("Normal", "old", 1),
            row("Warning", "w-old", 2),
            row("Normal", "new", 5),
            row("Warning", "w-new", 4),
        ]);
        let reasons: Vec<&str> = shown.iter().map(|e| e.reason.as_str()).collect();
        assert_eq!(reasons, ["w-new", "w-old", "new", "old"]);
    }

    const HOSTILE: &str = "<script>alert(1)</script>\"><img src=x onerror=alert(2)>";

    fn hostile_page() -> SetPage {
        let chrome = Chrome {
            css: "/assets/0/app.css",
            js: "/assets/0/app.js",
            live_src: "/live?set=team/web".into(),
            watched: "ApplySets of every namespace".into(),
            actions: true,
        };
        let node = graph::GraphNode {
            href: "/sets/team/web".into(),
            key: HOSTILE.into(),
            class: "state-failing focus".into(),
            label: HOSTILE.into(),
            scope: HOSTILE.into(),
            x: 16,
            y: 16,
            width: 200,
            height: 36,
            text_x: 24,
            scope_y: 29,
            label_y: 45,
        };
        SetPage {
            chrome,
            key: "team/web".into(),
            kind: "ApplySet",
            name: "web".into(),
            namespace: "team".into(),
            state: "failing",
            state_word: "Failing",
            ready_message: HOSTILE.into(),
            waiting_for: String::new(),
            suspended: false,
            plan_only: false,
            deleting: false,
            read_error: String::new(),
            conditions: vec![ConditionRow {
                type_: "Ready".into(),
                status: "False".into(),
                reason: "Conflict".into(),
                message: HOSTILE.into(),
                since: "2026-01-01T00:00:00Z".into(),
                ago: "5m".into(),
            }],
            sources: vec![source_row(&SourceView {
                kind: "git",
                location: format!("javascript:alert(3)//{HOSTILE}"),
                path: Some(HOSTILE.into()),
                reference: None,
            })],
            applied: String::new(),
            attempted: HOSTILE.into(),
            attempted_since: "2026-01-01T00:00:00Z".into(),
            attempted_ago: "3m".into(),
            labels: vec![("team".into(), HOSTILE.into())],
            annotations: vec![(HOSTILE.into(), HOSTILE.into())],
            plan: None,
            members: Vec::new(),
            member_count: 0,
            members_error: String::new(),
            members_truncated: false,
            graph: graph::GraphView {
                nodes: vec![node],
                edges: Vec::new(),
                width: 232,
                height: 68,
                left_out: 3,
                edges_left_out: 2,
            },
            events: vec![EventView {
                kind: "Warning".into(),
                reason: "ApplyFailed".into(),
                note: HOSTILE.into(),
                ago: "1m".into(),
                count: 2,
            }],
            events_error: String::new(),
            diff_src: "/sets/team/web/diff".into(),
            actions: true,
            action_base: "/sets/team/web".into(),
        }
    }

    #[test]
    fn tenant_strings_render_as_inert_text() {
        let body = hostile_page().render().expect("renders");
        assert!(!body.contains("<script>alert"), "{body}");
        assert!(!body.contains("<img"), "{body}");
        assert!(
            body.contains("&#60;script&#62;alert(1)") || body.contains("&lt;script&gt;alert(1)"),
            "{body}"
        );
        assert!(
            !body.contains("href=\"javascript:"),
            "a javascript: URL is no link: {body}"
        );
        assert!(!body.contains(" style="), "{body}");
        for part in [
            "<svg id=\"graph-svg\"",
            "class=\"node state-failing focus\"",
            "3 more not drawn",
            "class=\"event type-Warning\"",
            "data-src=\"/sets/team/web/diff\"",
            "<button id=\"diff-load\" type=\"button\">Compute the diff</button>",
            "<div id=\"diff-body\"></div>",
            "<dl id=\"metadata\">",
            "revision first read <time datetime=\"2026-01-01T00:00:00Z\"",
            "action=\"/sets/team/web/resume\"",
        ] {
            assert!(body.contains(part), "{part} in {body}");
        }
    }

    #[test]
    fn metadata_leaves_the_last_applied_annotation_out() {
        let mut page = hostile_page();
        let meta = ObjectMeta {
            labels: Some(BTreeMap::from([("team".into(), "a".into())])),
            annotations: Some(BTreeMap::from([
                (LAST_APPLIED.into(), "{\"big\": 1}".into()),
                ("note".into(), "hello".into()),
            ])),
            ..ObjectMeta::default()
        };
        page.with_metadata(&meta);
        assert_eq!(page.labels, [("team".to_string(), "a".to_string())]);
        assert_eq!(
            page.annotations,
            [("note".to_string(), "hello".to_string())]
        );
        page.with_metadata(&ObjectMeta::default());
        assert!(page.labels.is_empty() && page.annotations.is_empty());
    }

    #[test]
    fn member_labels() {
        let m = MemberRef {
            group: "apps".into(),
            kind: "Deployment".into(),
            namespace: Some("team-a".into()),
            name: "web".into(),
        };
        assert_eq!(member_label(&m), "Deployment.apps team-a/web");
    }
}

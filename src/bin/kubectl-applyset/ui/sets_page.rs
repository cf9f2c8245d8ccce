//! The sets page (`GET /`): every watched set with its state, filtered, sorted and paged, and
//! the summary bar; `GET /readyz` says whether the cache has listed.
//!
//! Query: `ns` (a namespace, `cluster` for ClusterApplySets, empty: all), `q` (a substring of
//! the set's KEY `namespace/name` or `cluster/name`, case ignored), `state` (`ready`,
//! `failing`, `waiting`, `suspended`, `reconciling`, `deleting`; empty: all), `sort` (`name`,
//! `namespace`, `state`, `members` (most first), `age` (newest first); default `state`:
//! Failing, Waiting, Reconciling, Deleting, Suspended, Ready, then by namespace and name),
//! `page` (1-based, [`PAGE_SIZE`] rows a page; clamped to the pages there are). Unknown values
//! mean "no filter" / the default. The summary bar counts every set of the namespace and
//! search filters by state, the state filter not applied (so that filtering on one state keeps
//! the fleet's picture); the pager counts the filtered list. Only the
//! rows of the page shown are turned into text: no work per set beyond a
//! filter test and a sort of references.

use std::{cmp::Ordering, sync::Arc};

use applyset_operator::{
    applyset::ParentKind,
    view::{SetSummary, State},
};
use askama::Template;
use axum::{
    extract::{Query, State as Extract},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;

use super::{AppState, Chrome, html, key, key_id, set_href, word};
use crate::sets::age;

/// Rows on a page.
pub const PAGE_SIZE: usize = 100;

/// The page's query, as sent (every field optional).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct SetsQuery {
    pub ns: String,
    pub q: String,
    pub state: String,
    pub sort: String,
    pub page: String,
}

/// The orders of the list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sort {
    /// Failing first (the default).
    State,
    Name,
    Namespace,
    /// Most members first.
    Members,
    /// Newest first.
    Age,
}

/// Which namespace the list is limited to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    All,
    /// ClusterApplySets only.
    Cluster,
    /// ApplySets of one namespace.
    Namespace(String),
}

/// The query, understood.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    pub scope: Scope,
    /// Lower-cased; empty: every set.
    pub q: String,
    pub state: Option<State>,
    pub sort: Sort,
    /// 1-based, before clamping.
    pub page: usize,
}

/// Every state, in the default order (failing first).
pub const STATES: [State; 6] = [
    State::Failing,
    State::Waiting,
    State::Reconciling,
    State::Deleting,
    State::Suspended,
    State::Ready,
];

/// A state's rank in the default order.
fn rank(state: State) -> usize {
    STATES
        .iter()
        .position(|s| *s == state)
        .unwrap_or(STATES.len())
}

impl Wanted {
    /// What `query` asks for.
    pub fn from_query(query: &SetsQuery) -> Wanted {
        let scope = match query.ns.trim() {
            "" => Scope::All,
            "cluster" => Scope::Cluster,
            ns => Scope::Namespace(ns.to_string()),
        };
        let state = STATES
            .into_iter()
            .find(|s| s.as_str() == query.state.trim());
        let sort = match query.sort.trim() {
            "name" => Sort::Name,
            "namespace" => Sort::Namespace,
            "members" => Sort::Members,
            "age" => Sort::Age,
            _ => Sort::State,
        };
        Wanted {
            scope,
            q: query.q.trim().to_lowercase(),
            state,
            sort,
            page: query.page.trim().parse().unwrap_or(1).max(1),
        }
    }
}

/// The namespace part of a set's KEY: its namespace, or `cluster`.
fn key_namespace(s: &SetSummary) -> &str {
    match s.parent.kind {
        ParentKind::ApplySet => s.parent.namespace.as_deref().unwrap_or(""),
        ParentKind::ClusterApplySet => "cluster",
    }
}

/// Whether `q` is a substring of `namespace/name` (both lower-case, as Kubernetes names are).
pub fn key_contains(namespace: &str, name: &str, q: &str) -> bool {
    match q.split_once('/') {
        None => namespace.contains(q) || name.contains(q),
        Some((before, after)) => {
            !after.contains('/') && namespace.ends_with(before) && name.starts_with(after)
        }
    }
}

/// Whether set `s` passes the filters of `w`.
/// Whether `s` passes the namespace and search filters of `w` (the summary bar's scope; the
/// state filter is [`Wanted::state`]).
fn in_scope(s: &SetSummary, w: &Wanted) -> bool {
    let scope = match &w.scope {
        Scope::All => true,
        Scope::Cluster => s.parent.kind == ParentKind::ClusterApplySet,
        Scope::Namespace(ns) => {
            s.parent.kind == ParentKind::ApplySet && s.parent.namespace.as_deref() == Some(ns)
        }
    };
    scope && (w.q.is_empty() || key_contains(key_namespace(s), &s.parent.name, &w.q))
}

/// The sets' own order: kind, namespace, name.
fn by_ref(a: &SetSummary, b: &SetSummary) -> Ordering {
    (a.parent.kind, &a.parent.namespace, &a.parent.name).cmp(&(
        b.parent.kind,
        &b.parent.namespace,
        &b.parent.name,
    ))
}

/// The order `sort` puts two sets in.
fn order(sort: Sort, a: &SetSummary, b: &SetSummary) -> Ordering {
    let first = match sort {
        Sort::State => rank(a.state).cmp(&rank(b.state)),
        Sort::Name => a.parent.name.cmp(&b.parent.name),
        Sort::Namespace => Ordering::Equal,
        Sort::Members => b.members.cmp(&a.members),
        // Newest first; sets without a creation time last.
        Sort::Age => match (a.created, b.created) {
            (Some(x), Some(y)) => y.cmp(&x),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        },
    };
    first.then_with(|| by_ref(a, b))
}

/// How many sets of the namespace and search filters are in each state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub total: usize,
    pub ready: usize,
    pub failing: usize,
    pub waiting: usize,
    pub suspended: usize,
    pub reconciling: usize,
    pub deleting: usize,
}

impl Counts {
    fn add(&mut self, state: State) {
        self.total += 1;
        let n = match state {
            State::Ready => &mut self.ready,
            State::Failing => &mut self.failing,
            State::Waiting => &mut self.waiting,
            State::Suspended => &mut self.suspended,
            State::Reconciling => &mut self.reconciling,
            State::Deleting => &mut self.deleting,
        };
        *n += 1;
    }
}

/// One page of the filtered, sorted list.
#[derive(Debug)]
pub struct Listing<'a> {
    /// The rows of the page.
    pub rows: Vec<&'a Arc<SetSummary>>,
    /// The sets of the namespace and search filters, by state (the state filter not
    /// applied: the bar keeps the whole picture).
    pub counts: Counts,
    /// The rows of the filtered list, every filter applied (before paging).
    pub listed: usize,
    /// The page shown (1-based) and how many there are (at least 1).
    pub page: usize,
    pub pages: usize,
    /// The 1-based position of the page's first row in the list.
    pub first: usize,
}

/// The page `w` asks for of `sets`: filtered, counted, sorted, paged. References only: no
/// summary is copied.
pub fn select<'a>(sets: &'a [Arc<SetSummary>], w: &Wanted) -> Listing<'a> {
    let mut counts = Counts::default();
    let mut kept: Vec<&'a Arc<SetSummary>> = sets
        .iter()
        .filter(|s| in_scope(s, w))
        .inspect(|s| counts.add(s.state))
        .filter(|s| w.state.is_none_or(|state| s.state == state))
        .collect();
    kept.sort_by(|a, b| order(w.sort, a, b));
    let pages = kept.len().div_ceil(PAGE_SIZE).max(1);
    let page = w.page.min(pages);
    let start = (page - 1) * PAGE_SIZE;
    let end = kept.len().min(start + PAGE_SIZE);
    let rows = kept.get(start..end).map(<[_]>::to_vec).unwrap_or_default();
    Listing {
        rows,
        counts,
        listed: kept.len(),
        page,
        pages,
        first: start + 1,
    }
}

/// A revision made short for a table cell: the first source's revision (else the rendered
/// digest), its hash cut to 12 digits: `git:main@sha1:0123456789ab`.
pub fn short_revision(revision: &str) -> String {
    let mut parts = revision.split("; ");
    let digest = parts.next().unwrap_or("");
    let first = parts.next().unwrap_or(digest);
    match first.rsplit_once(':') {
        Some((head, hash)) if hash.len() > 12 && hash.chars().all(|c| c.is_ascii_hexdigit()) => {
            format!("{head}:{}", &hash[..12])
        }
        _ => first.to_string(),
    }
}

/// A row of the table, as text (tenant data: the template escapes it).
pub struct Row {
    pub key: String,
    pub id: String,
    pub state: &'static str,
    pub word: &'static str,
    pub name: String,
    pub href: String,
    /// The namespace, or empty for a ClusterApplySet.
    pub namespace: String,
    pub cluster: bool,
    pub reason: String,
    pub message: String,
    pub healthy: String,
    pub members: i64,
    pub pruned: i64,
    pub source: String,
    pub source_more: usize,
    pub revision: String,
    pub revision_full: String,
    pub suspended: bool,
    pub last_reconcile: String,
    pub age: String,
}

/// The reason and text of the message cell: `waiting for KEY: why` when waiting, else
/// Ready's reason and message.
fn message_of(s: &SetSummary) -> (String, String) {
    if let Some((dep, why)) = &s.waiting_for {
        let text = if why.is_empty() {
            format!("waiting for {}", key(dep))
        } else {
            format!("waiting for {}: {why}", key(dep))
        };
        let reason = s.ready.as_ref().map(|r| r.1.clone()).unwrap_or_default();
        return (reason, text);
    }
    match &s.ready {
        Some((_, reason, message)) => (reason.clone(), message.clone()),
        None => (String::new(), String::new()),
    }
}

/// Healthy's status and reason, and Stalled / Reconciling when set.
fn healthy_of(s: &SetSummary) -> String {
    let mut words: Vec<String> = Vec::new();
    if let Some((status, reason)) = &s.healthy {
        words.push(if reason.is_empty() {
            status.clone()
        } else {
            format!("{status} ({reason})")
        });
    }
    if s.stalled {
        words.push("Stalled".into());
    }
    if s.reconciling {
        words.push("Reconciling".into());
    }
    words.join(" · ")
}

impl Row {
    /// The row of `s`, `now`.
    pub fn of(s: &SetSummary, now: Timestamp) -> Row {
        let (reason, message) = message_of(s);
        let source = s.sources.first().map(|src| match &src.path {
            Some(path) if !path.is_empty() => format!("{} {} {path}", src.kind, src.location),
            _ => format!("{} {}", src.kind, src.location),
        });
        let revision = s
            .last_applied_revision
            .as_deref()
            .or(s.last_attempted_revision.as_deref())
            .unwrap_or("");
        let k = key(&s.parent);
        Row {
            id: key_id(&k),
            key: k,
            state: s.state.as_str(),
            word: word(s.state),
            name: s.parent.name.clone(),
            href: set_href(&s.parent),
            namespace: s.parent.namespace.clone().unwrap_or_default(),
            cluster: s.parent.kind == ParentKind::ClusterApplySet,
            reason,
            message,
            healthy: healthy_of(s),
            members: s.members,
            pruned: s.pruned,
            source: source.unwrap_or_else(|| "inline manifests".into()),
            source_more: s.sources.len().saturating_sub(1),
            revision: short_revision(revision),
            revision_full: revision.to_string(),
            suspended: s.suspended,
            last_reconcile: s
                .last_reconcile
                .map(|t| format!("{} ago", age(now, t)))
                .unwrap_or_default(),
            age: s.created.map(|t| age(now, t)).unwrap_or_default(),
        }
    }
}

/// A link of the pager: its text and target (none when it would lead nowhere).
pub struct PagerLink {
    pub id: &'static str,
    pub text: &'static str,
    pub href: Option<String>,
}

/// The query string of `query` at `page` (empty fields left out).
pub fn page_href(query: &SetsQuery, page: usize) -> String {
    let mut s = url::form_urlencoded::Serializer::new(String::new());
    for (name, value) in [
        ("ns", &query.ns),
        ("q", &query.q),
        ("state", &query.state),
        ("sort", &query.sort),
    ] {
        if !value.trim().is_empty() {
            s.append_pair(name, value.trim());
        }
    }
    if page > 1 {
        s.append_pair("page", &page.to_string());
    }
    let q = s.finish();
    if q.is_empty() {
        "/".into()
    } else {
        format!("/?{q}")
    }
}

/// The pager's links for page `page` of `pages`.
pub fn pager(query: &SetsQuery, page: usize, pages: usize) -> Vec<PagerLink> {
    let to = |target: usize, go: bool| go.then(|| page_href(query, target));
    vec![
        PagerLink {
            id: "page-first",
            text: "« first",
            href: to(1, page > 1),
        },
        PagerLink {
            id: "page-prev",
            text: "‹ previous",
            href: to(page.saturating_sub(1), page > 1),
        },
        PagerLink {
            id: "page-next",
            text: "next ›",
            href: to(page + 1, page < pages),
        },
        PagerLink {
            id: "page-last",
            text: "last »",
            href: to(pages, page < pages),
        },
    ]
}

/// An option of a select: value, label, selected.
pub struct Choice {
    pub value: String,
    pub label: String,
    pub selected: bool,
}

fn choices(values: &[(&str, &str)], current: &str) -> Vec<Choice> {
    values
        .iter()
        .map(|(value, label)| Choice {
            value: (*value).to_string(),
            label: (*label).to_string(),
            selected: *value == current.trim(),
        })
        .collect()
}

#[derive(Template)]
#[template(path = "sets.html")]
struct SetsPage {
    chrome: Chrome,
    listed: bool,
    errors: Vec<String>,
    counts: Counts,
    /// Rows of the filtered list.
    total: usize,
    rows: Vec<Row>,
    q: String,
    namespaces: Vec<Choice>,
    states: Vec<Choice>,
    sorts: Vec<Choice>,
    page: usize,
    pages: usize,
    first: usize,
    last: usize,
    pager: Vec<PagerLink>,
    /// Why the table is empty, when it is.
    empty: Option<&'static str>,
}

/// The namespace filter's choices: all, the namespaces of the cached ApplySets, and the
/// ClusterApplySets when watched.
fn namespace_choices(sets: &[Arc<SetSummary>], cluster_sets: bool, current: &str) -> Vec<Choice> {
    let mut names: Vec<&str> = sets
        .iter()
        .filter(|s| s.parent.kind == ParentKind::ApplySet)
        .filter_map(|s| s.parent.namespace.as_deref())
        .collect();
    names.dedup();
    names.sort_unstable();
    names.dedup();
    let mut values: Vec<(&str, &str)> = vec![("", "all namespaces")];
    values.extend(names.iter().map(|n| (*n, *n)));
    if cluster_sets {
        values.push(("cluster", "ClusterApplySets"));
    }
    choices(&values, current)
}

/// `GET /`.
pub async fn page(Extract(app): Extract<AppState>, Query(query): Query<SetsQuery>) -> Response {
    let wanted = Wanted::from_query(&query);
    let snapshot = app.cache.snapshot();
    let listing = select(&snapshot.sets, &wanted);
    let now = Timestamp::now();
    let listed = app.cache.is_ready();
    let empty = match (listing.rows.is_empty(), snapshot.sets.is_empty(), listed) {
        (false, _, _) => None,
        (true, _, false) => Some("Listing the sets…"),
        (true, true, true) => Some("No sets found in what you may watch."),
        (true, false, true) => Some("No set matches the filter."),
    };
    let mut states: Vec<(&str, &str)> = vec![("", "every state")];
    states.extend(STATES.iter().map(|s| (s.as_str(), word(*s))));
    let sorts = [
        ("", "failing first"),
        ("name", "name"),
        ("namespace", "namespace"),
        ("members", "members"),
        ("age", "newest"),
    ];
    let page = SetsPage {
        chrome: app.chrome("/live?page=sets".into()),
        listed,
        errors: app.cache.errors(),
        rows: listing.rows.iter().map(|s| Row::of(s, now)).collect(),
        q: query.q.clone(),
        namespaces: namespace_choices(&snapshot.sets, app.cache.watched().cluster_sets, &query.ns),
        states: choices(&states, &query.state),
        sorts: choices(&sorts, &query.sort),
        page: listing.page,
        pages: listing.pages,
        first: listing.first,
        last: listing.first + listing.rows.len() - 1,
        pager: pager(&query, listing.page, listing.pages),
        counts: listing.counts,
        total: listing.listed,
        empty,
    };
    html(&page)
}

/// `GET /readyz`: `ready N` (N sets cached) once every watch has listed, else 503.
pub async fn readyz(Extract(app): Extract<AppState>) -> Response {
    if app.cache.is_ready() {
        format!("ready {}\n", app.cache.snapshot().sets.len()).into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "listing\n").into_response()
    }
}

#[cfg(test)]
mod tests;

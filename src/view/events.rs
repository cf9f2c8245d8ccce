//! The recent events of one set (events.k8s.io/v1, `regarding` the parent by UID): warnings
//! first, newest first, bounded.
//!
//! The operator records a set's events in the set's namespace, and a ClusterApplySet's in
//! [`CLUSTER_EVENTS_NAMESPACE`]. They are listed by `regarding.uid` (a field selector the
//! API server serves), from its watch cache, a page of [`PAGE`] at a time, at most
//! [`MAX_PAGES`] pages (events live an hour on a default API server: a set has far fewer).

use k8s_openapi::{api::events::v1::Event, jiff::Timestamp};
use kube::{Api, Client, api::ListParams};

use crate::applyset::ParentRef;

/// Where the operator records the events of cluster-scoped parents (kube's convention for
/// events about cluster-scoped objects).
pub const CLUSTER_EVENTS_NAMESPACE: &str = "default";
/// Events asked for per request.
pub const PAGE: u32 = 200;
/// Requests at most per call.
pub const MAX_PAGES: usize = 5;

/// One event as a view shows it (tenant data: shown as text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRow {
    /// `Normal` or `Warning`.
    pub kind: String,
    pub reason: String,
    pub note: String,
    pub last_seen: Option<Timestamp>,
    pub count: i64,
}

impl EventRow {
    /// The row of `e`: its type (Normal when unset), reason and note; how often it happened
    /// (its series' count, else the deprecated count, else once) and when last (the series'
    /// last observation, else the event time, else the deprecated last timestamp).
    pub fn of(e: &Event) -> EventRow {
        let series = e.series.as_ref();
        EventRow {
            kind: e.type_.clone().unwrap_or_else(|| "Normal".to_string()),
            reason: e.reason.clone().unwrap_or_default(),
            note: e.note.clone().unwrap_or_default(),
            last_seen: series
                .map(|s| s.last_observed_time.0)
                .or_else(|| e.event_time.as_ref().map(|t| t.0))
                .or_else(|| e.deprecated_last_timestamp.as_ref().map(|t| t.0)),
            count: series
                .map(|s| i64::from(s.count))
                .or_else(|| e.deprecated_count.map(i64::from))
                .unwrap_or(1),
        }
    }

    fn is_warning(&self) -> bool {
        self.kind == "Warning"
    }
}

/// `rows` in the order a view shows them, at most `limit`: warnings first, then newest
/// first (an event without a time last).
pub fn ordered(mut rows: Vec<EventRow>, limit: usize) -> Vec<EventRow> {
    rows.sort_by_key(|r| std::cmp::Reverse((r.is_warning(), r.last_seen)));
    rows.truncate(limit);
    rows
}

/// The namespace the operator records `parent`'s events in.
pub fn namespace_of(parent: &ParentRef) -> &str {
    parent
        .effective_namespace()
        .unwrap_or(CLUSTER_EVENTS_NAMESPACE)
}

/// At most `limit` recent events about `parent` (whose UID is `uid`).
pub async fn recent(
    client: &Client,
    parent: &ParentRef,
    uid: &str,
    limit: usize,
) -> kube::Result<Vec<EventRow>> {
    recent_in_pages(client, parent, uid, limit, PAGE).await
}

/// [`recent`], asking for `page` events a request (at most [`MAX_PAGES`] requests).
pub async fn recent_in_pages(
    client: &Client,
    parent: &ParentRef,
    uid: &str,
    limit: usize,
    page: u32,
) -> kube::Result<Vec<EventRow>> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace_of(parent));
    let selector = format!("regarding.uid={uid}");
    let first = ListParams::default().fields(&selector).limit(page.max(1));
    // The first page from the API server's watch cache (a view needs no quorum read); the
    // next ones at the version its continue token carries.
    let mut params = first.clone().match_any();
    let mut rows = Vec::new();
    for _ in 0..MAX_PAGES {
        let listed = api.list(&params).await?;
        rows.extend(listed.items.iter().map(EventRow::of));
        match listed.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = first.clone().continue_token(&token),
            None => break,
        }
    }
    Ok(ordered(rows, limit))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::{
        api::events::v1::EventSeries,
        apimachinery::pkg::apis::meta::v1::{MicroTime, Time},
    };

    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn row(kind: &str, reason: &str, last_seen: Option<&str>) -> EventRow {
        EventRow {
            kind: kind.into(),
            reason: reason.into(),
            note: String::new(),
            last_seen: last_seen.map(at),
            count: 1,
        }
    }

    #[test]
    fn an_event_is_read_from_its_series_or_its_own_fields() {
        let mut e = Event {
            type_: Some("Warning".into()),
            reason: Some("ApplyFailed".into()),
            note: Some("it broke".into()),
            event_time: Some(MicroTime(at("2026-01-01T00:00:00Z"))),
            deprecated_count: Some(4),
            ..Event::default()
        };
        let r = EventRow::of(&e);
        assert_eq!(
            (r.kind.as_str(), r.reason.as_str(), r.note.as_str()),
            ("Warning", "ApplyFailed", "it broke")
        );
        assert_eq!(
            (r.count, r.last_seen),
            (4, Some(at("2026-01-01T00:00:00Z")))
        );
        e.series = Some(EventSeries {
            count: 9,
            last_observed_time: MicroTime(at("2026-01-02T00:00:00Z")),
        });
        let r = EventRow::of(&e);
        assert_eq!(
            (r.count, r.last_seen),
            (9, Some(at("2026-01-02T00:00:00Z")))
        );
        let old = Event {
            deprecated_last_timestamp: Some(Time(at("2025-01-01T00:00:00Z"))),
            ..Event::default()
        };
        let r = EventRow::of(&old);
        assert_eq!((r.kind.as_str(), r.count), ("Normal", 1));
        assert_eq!(r.last_seen, Some(at("2025-01-01T00:00:00Z")));
    }

    #[test]
    fn warnings_come_first_then_the_newest() {
        let rows = vec![
            row("Normal", "old", Some("2026-01-01T00:00:00Z")),
            row("Warning", "warn-old", Some("2026-01-01T00:00:00Z")),
            row("Normal", "new", Some("2026-01-03T00:00:00Z")),
            row("Normal", "untimed", None),
            row("Warning", "warn-new", Some("2026-01-02T00:00:00Z")),
        ];
        let reasons = |rows: Vec<EventRow>| rows.into_iter().map(|r| r.reason).collect::<Vec<_>>();
        assert_eq!(
            reasons(ordered(rows.clone(), 10)),
            ["warn-new", "warn-old", "new", "old", "untimed"]
        );
        assert_eq!(reasons(ordered(rows, 3)), ["warn-new", "warn-old", "new"]);
    }

    #[test]
    fn a_cluster_sets_events_are_in_the_default_namespace() {
        assert_eq!(namespace_of(&ParentRef::applyset("team", "web")), "team");
        assert_eq!(namespace_of(&ParentRef::cluster("infra")), "default");
    }
}

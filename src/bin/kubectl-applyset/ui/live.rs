//! The live stream (`GET /live`, server-sent events): the cache's changes, filtered for the
//! page that listens. `?page=sets`: every change of a set's summary (what the sets page
//! shows); `?set=KEY`: every change of that set (its plan, members, conditions), and the
//! summary changes of the sets of its dependsOn neighbourhood (the sets its graph draws, as
//! they were or are now: a set that joined or left it changes the graph too; the
//! neighbourhood is found again once per snapshot, not per change). Each is `event: changed`
//! with the set's KEY as data; a listener that fell behind the feed gets `event: reload` (its
//! page reloads). A keep-alive comment every 15 s. No API call per listener: every listener
//! reads the one cache.

use std::{convert::Infallible, time::Duration};

use applyset_operator::{
    applyset::ParentRef,
    view::{Change, SetCache, deps::Near, graph::MAX_NODES},
};
use axum::{
    extract::{Query, State},
    http::StatusCode,
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
};
use serde::Deserialize;
use tokio::sync::broadcast::{Receiver, error::RecvError};

use super::{AppState, key, parse_key};

/// How often a comment keeps the stream open through idle proxies and tells the browser the
/// server is there.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// `/live`'s query: `page=sets` or `set=KEY`.
#[derive(Deserialize)]
pub struct LiveQuery {
    page: Option<String>,
    set: Option<String>,
}

/// What a listener follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Focus {
    /// Every set (the sets page).
    All,
    /// One set and its neighbourhood (a set's page).
    Set(ParentRef),
}

impl Focus {
    /// The focus a query names, if it names one.
    pub fn of(page: Option<&str>, set: Option<&str>) -> Option<Focus> {
        match (page, set) {
            (Some("sets"), None) => Some(Focus::All),
            (None, Some(k)) => parse_key(k).map(Focus::Set),
            _ => None,
        }
    }
}

/// One listener: its feed and what it follows (the sets page: no neighbourhood).
struct Listener {
    changes: Receiver<Change>,
    cache: SetCache,
    near: Option<Near>,
}

impl Listener {
    fn new(cache: SetCache, focus: Focus) -> Listener {
        let changes = cache.subscribe();
        let near = match focus {
            Focus::All => None,
            Focus::Set(set) => Some(Near::new(set, MAX_NODES, &cache.snapshot())),
        };
        Listener {
            changes,
            cache,
            near,
        }
    }

    /// Whether this listener's page shows what `change` changed.
    fn hears(&mut self, change: &Change) -> bool {
        match &mut self.near {
            None => change.summary_changed,
            Some(near) => near.concerns(change, || self.cache.snapshot()),
        }
    }

    /// The next event for this listener; `None` when the feed closed.
    async fn next(&mut self) -> Option<Event> {
        loop {
            match self.changes.recv().await {
                Ok(change) => {
                    if self.hears(&change) {
                        return Some(Event::default().event("changed").data(key(&change.parent)));
                    }
                }
                Err(RecvError::Lagged(_)) => {
                    return Some(Event::default().event("reload").data("lagged"));
                }
                Err(RecvError::Closed) => return None,
            }
        }
    }
}

/// `GET /live?page=sets` or `GET /live?set=KEY`.
pub async fn stream(State(app): State<AppState>, Query(query): Query<LiveQuery>) -> Response {
    let Some(focus) = Focus::of(query.page.as_deref(), query.set.as_deref()) else {
        return (
            StatusCode::BAD_REQUEST,
            "ask for /live?page=sets or /live?set=NAMESPACE/NAME (cluster/NAME for a ClusterApplySet)",
        )
            .into_response();
    };
    let listener = Listener::new(app.cache.clone(), focus);
    let events = futures::stream::unfold(listener, |mut l| async move {
        let event = l.next().await?;
        Some((Ok::<Event, Infallible>(event), l))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_names_the_sets_page_or_one_set() {
        assert_eq!(Focus::of(Some("sets"), None), Some(Focus::All));
        assert_eq!(
            Focus::of(None, Some("team/web")),
            Some(Focus::Set(ParentRef::applyset("team", "web")))
        );
        assert_eq!(
            Focus::of(None, Some("cluster/infra")),
            Some(Focus::Set(ParentRef::cluster("infra")))
        );
        assert_eq!(Focus::of(None, None), None);
        assert_eq!(Focus::of(Some("other"), None), None);
        assert_eq!(Focus::of(Some("sets"), Some("team/web")), None);
        assert_eq!(Focus::of(None, Some("web")), None);
        assert_eq!(Focus::of(None, Some("a/b/c")), None);
    }
}

//! The live stream (`GET /live`, server-sent events): the cache's changes, filtered for the
//! page that listens. `?page=sets`: every change; `?set=KEY`: changes of that set and of the
//! sets of its dependsOn neighbourhood (as it is after the change, or was before it: a set
//! that joined or left it changes the graph too). Each is `event: changed` with the set's KEY
//! as data; a listener that fell behind the feed gets `event: reload` (its page reloads).
//! A keep-alive comment every 15 s. No API call per listener: every listener reads the one
//! cache.

use std::{collections::HashSet, convert::Infallible, time::Duration};

use applyset_operator::{applyset::ParentRef, view::SetCache};
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

/// How many sets around the focus count as its neighbourhood (as many as its graph draws).
pub const NEIGHBOURHOOD_LIMIT: usize = 60;

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

/// Whether a change of `changed` concerns a listener of `focus` whose neighbourhood was
/// `before` and is `after` the change.
pub fn concerns(
    focus: &Focus,
    changed: &ParentRef,
    before: &HashSet<ParentRef>,
    after: &HashSet<ParentRef>,
) -> bool {
    match focus {
        Focus::All => true,
        Focus::Set(set) => set == changed || before.contains(changed) || after.contains(changed),
    }
}

/// One listener: its feed, what it follows and the neighbourhood last seen.
struct Listener {
    changes: Receiver<applyset_operator::view::Change>,
    cache: SetCache,
    focus: Focus,
    near: HashSet<ParentRef>,
}

/// The sets around `focus` now (none for the sets page: it follows everything).
fn neighbourhood(cache: &SetCache, focus: &Focus) -> HashSet<ParentRef> {
    match focus {
        Focus::All => HashSet::new(),
        Focus::Set(set) => cache
            .snapshot()
            .deps
            .neighbourhood(set, NEIGHBOURHOOD_LIMIT)
            .sets
            .into_iter()
            .collect(),
    }
}

impl Listener {
    /// The next event for this listener; `None` when the feed closed.
    async fn next(&mut self) -> Option<Event> {
        loop {
            match self.changes.recv().await {
                Ok(change) => {
                    let after = neighbourhood(&self.cache, &self.focus);
                    let hit = concerns(&self.focus, &change.parent, &self.near, &after);
                    self.near = after;
                    if hit {
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
    let listener = Listener {
        changes: app.cache.subscribe(),
        near: neighbourhood(&app.cache, &focus),
        cache: app.cache.clone(),
        focus,
    };
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

    #[test]
    fn a_set_page_hears_its_set_and_its_neighbourhood_before_and_after() {
        let web = ParentRef::applyset("team", "web");
        let db = ParentRef::applyset("team", "db");
        let gone = ParentRef::applyset("team", "gone");
        let joined = ParentRef::cluster("joined");
        let other = ParentRef::applyset("elsewhere", "x");
        let before: HashSet<_> = [web.clone(), db.clone(), gone.clone()].into();
        let after: HashSet<_> = [web.clone(), db.clone(), joined.clone()].into();
        let focus = Focus::Set(web.clone());
        for heard in [&web, &db, &gone, &joined] {
            assert!(concerns(&focus, heard, &before, &after), "{heard}");
        }
        assert!(!concerns(&focus, &other, &before, &after));
        // Even with no neighbourhood known, the set itself is heard.
        assert!(concerns(&focus, &web, &HashSet::new(), &HashSet::new()));
        // The sets page hears everything.
        assert!(concerns(
            &Focus::All,
            &other,
            &HashSet::new(),
            &HashSet::new()
        ));
    }
}

//! What a set's page reads from the API server besides the view's cache: the parent (once),
//! its members with their health, and its recent events; shared by every viewer of the set
//! for a few seconds and keyed by the resourceVersion the cache has for it, so that many
//! viewers, and every page refresh the live stream causes, make one set of reads per change
//! of the set (and at most one per [`TTL`]). Concurrent viewers wait for the same reads.

use std::{
    collections::HashMap,
    sync::{Arc, LazyLock},
    time::{Duration, Instant},
};

use applyset_operator::{
    applyset::ParentRef,
    parent::AnyParent,
    view::{EventRow, events},
};
use kube::Client;
use parking_lot::Mutex;
use tokio::sync::OnceCell;

use super::super::members;
use crate::tree::Assessed;

/// How long one set of reads serves every viewer.
pub const TTL: Duration = Duration::from_secs(5);

/// Events read at most.
const EVENTS: usize = 20;

/// One set's reads.
pub struct Reads {
    /// The parent (`None`: it is gone), or why it could not be read.
    pub parent: Result<Option<AnyParent>, String>,
    /// Its members (none when the parent could not be read), or why they could not be listed.
    pub members: Result<Vec<Assessed>, String>,
    pub events: Result<Vec<EventRow>, String>,
}

/// Reads by set ID: the resourceVersion they were made for, when, and the reads (made once).
type Entries = HashMap<String, (String, Instant, Arc<OnceCell<Arc<Reads>>>)>;

static READS: LazyLock<Mutex<Entries>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// The reads of `parent` (UID `uid`, at resourceVersion `rv` in the view's cache), made as
/// the user (`client`) or shared from the last [`TTL`].
pub async fn of(client: &Client, parent: &ParentRef, uid: &str, rv: &str) -> Arc<Reads> {
    let cell = {
        let mut entries = READS.lock();
        entries.retain(|_, (_, at, _)| at.elapsed() < TTL);
        let id = parent.id();
        match entries.get(&id).filter(|(v, _, _)| v == rv) {
            Some((_, _, cell)) => cell.clone(),
            None => {
                let cell = Arc::new(OnceCell::new());
                entries.insert(id, (rv.to_string(), Instant::now(), cell.clone()));
                cell
            }
        }
    };
    cell.get_or_init(|| async { Arc::new(read(client, parent, uid).await) })
        .await
        .clone()
}

/// The reads, made now: the parent, then its members and events at once.
async fn read(client: &Client, parent: &ParentRef, uid: &str) -> Reads {
    let events = async {
        events::recent(client, parent, uid, EVENTS)
            .await
            .map_err(|e| format!("listing its events: {e}"))
    };
    match AnyParent::get(client, parent).await {
        Ok(Some(p)) => {
            let (members, events) = tokio::join!(members::list(client, &p), events);
            Reads {
                parent: Ok(Some(p)),
                members,
                events,
            }
        }
        Ok(None) => Reads {
            parent: Ok(None),
            members: Ok(Vec::new()),
            events: Ok(Vec::new()),
        },
        Err(e) => Reads {
            parent: Err(format!("reading {parent}: {e}")),
            members: Ok(Vec::new()),
            events: events.await,
        },
    }
}

//! The recent events of one set (events.k8s.io/v1, `regarding` the parent by UID): warnings
//! first, newest first, bounded.

use k8s_openapi::jiff::Timestamp;
use kube::Client;

use crate::applyset::ParentRef;

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

/// At most `limit` recent events about `parent` (whose UID is `uid`).
pub async fn recent(
    client: &Client,
    parent: &ParentRef,
    uid: &str,
    limit: usize,
) -> kube::Result<Vec<EventRow>> {
    let _ = (client, parent, uid, limit);
    todo!("view::events::recent")
}

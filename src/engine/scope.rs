//! The per-set scope: everything about one parent that the engine's verbs need, computed
//! once per reconcile (the ID is a sha256; the field manager and selector derive from it).

use std::sync::Arc;

use kube::Client;
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::{
    applyset::{LABEL_PART_OF, ParentRef},
    fair::Worker,
    members::MemberWatches,
    tenancy::Identity,
    terminating::Terminating,
};

/// Objects per page of a LIST of members, unless the scope says otherwise (as `kubectl
/// --chunk-size` defaults to).
pub const DEFAULT_PAGE_SIZE: u32 = 500;

/// One parent's identity and the means to act on its members.
#[derive(Clone)]
pub struct SetScope {
    /// The parent (ApplySet or ClusterApplySet).
    pub parent: ParentRef,
    /// The ApplySet ID (`applyset-<hash>-v1`), the value of the members' `part-of` label.
    pub id: String,
    /// The field manager of member writes.
    pub manager: String,
    /// The label selector of the members: `part-of=<id>`.
    pub selector: String,
    /// The client every member request is made with: the operator's, or one impersonating
    /// `identity`.
    pub client: Client,
    /// Who the member requests are made as (for messages).
    pub identity: Identity,
    /// Requests in flight at once within this set (applies, lists, deletes).
    pub concurrency: usize,
    /// Objects per page of a LIST of members ([`DEFAULT_PAGE_SIZE`] unless set).
    pub page_size: u32,
    /// Shared bound on member writes in flight across sets, if any.
    writes: Option<Arc<Semaphore>>,
    /// Where unchanged members are recognised and successful applies recorded, if anywhere.
    watches: Option<Arc<MemberWatches>>,
    /// Namespaces known to be terminating (no apply is sent into them), if tracked.
    terminating: Option<Arc<Terminating>>,
    /// The reconcile's worker, given back while sources are read, if workers are shared.
    worker: Option<Arc<Worker>>,
    /// Under `--shards auto`: this replica's claim of the set (its members carry its bucket
    /// and epoch, see [`crate::shard::fence`]).
    pub fence: Option<crate::shard::fence::Fence>,
    /// Under `--shards auto`: this reconcile's proof of its claim, awaited before the first
    /// member write.
    pub first_write: Option<Arc<crate::shard::FirstWrite>>,
}

impl SetScope {
    /// The scope of `parent`, acting with `client` as the operator, without a shared write
    /// bound or watches.
    pub fn new(parent: ParentRef, client: Client, concurrency: usize) -> Self {
        let id = parent.id();
        let manager = parent.member_field_manager();
        let selector = format!("{LABEL_PART_OF}={id}");
        Self {
            parent,
            id,
            manager,
            selector,
            client,
            identity: Identity::Operator,
            concurrency: concurrency.max(1),
            page_size: DEFAULT_PAGE_SIZE,
            writes: None,
            watches: None,
            terminating: None,
            worker: None,
            fence: None,
            first_write: None,
        }
    }

    /// Acts as `identity`, with `client` (one that impersonates it).
    pub fn acting_as(mut self, identity: Identity, client: Client) -> Self {
        self.identity = identity;
        self.client = client;
        self
    }

    /// Lists members `page_size` objects a page (at least one).
    pub fn with_page_size(mut self, page_size: u32) -> Self {
        self.page_size = page_size.max(1);
        self
    }

    /// Bounds member writes by `writes`, shared with other sets.
    pub fn with_writes(mut self, writes: Arc<Semaphore>) -> Self {
        self.writes = Some(writes);
        self
    }

    /// Uses the member watches to skip unchanged members and record applies.
    pub fn with_watches(mut self, watches: Arc<MemberWatches>) -> Self {
        self.watches = Some(watches);
        self
    }

    /// Sends no apply into namespaces `terminating` knows terminating, and tells it of
    /// refusals.
    pub fn with_terminating(mut self, terminating: Arc<Terminating>) -> Self {
        self.terminating = Some(terminating);
        self
    }

    /// Reads sources as `worker`'s reconcile, giving it back meanwhile.
    pub fn with_worker(mut self, worker: Arc<Worker>) -> Self {
        self.worker = Some(worker);
        self
    }

    /// Marks member bodies with `fence`'s bucket and epoch; no member is written before
    /// `first_write` holds.
    pub fn with_fence(
        mut self,
        fence: crate::shard::fence::Fence,
        first_write: crate::shard::FirstWrite,
    ) -> Self {
        self.fence = Some(fence);
        self.first_write = Some(Arc::new(first_write));
        self
    }

    pub fn worker(&self) -> Option<&Worker> {
        self.worker.as_deref()
    }

    pub fn terminating(&self) -> Option<&Terminating> {
        self.terminating.as_deref()
    }

    pub fn watches(&self) -> Option<&MemberWatches> {
        self.watches.as_deref()
    }

    /// A permit of the shared bound on member writes, held while one write is in flight
    /// (`None` without a bound; a closed semaphore, which nothing closes, lifts it).
    pub(super) async fn write_permit(&self) -> Option<SemaphorePermit<'_>> {
        match &self.writes {
            Some(s) => s.acquire().await.ok(),
            None => None,
        }
    }
}

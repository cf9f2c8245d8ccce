//! The operator-wide memory budget for source content (`--source-memory-mib`): every byte a
//! source fetch holds in memory (a download as it is read, the manifest files unpacked from
//! an archive or read from a Git commit, the parsed manifests) is taken from one budget shared
//! by all concurrent fetches of all sets, and given back when the fetch fails or when its
//! result is dropped (at the end of the reconcile that read it).
//!
//! The budget is a semaphore whose permits are KiB. A fetch holds a [`Lease`] that grows as
//! it reads; a lease that cannot grow waits for others to give bytes back, and fails after
//! [`MemoryBudget::wait`] (a share of the sources' deadline) with a message naming the flag;
//! a single request larger than the whole budget fails at once. The content cache is bounded
//! on its own (see [`super::Cache`]); a cached source costs the budget nothing.
//!
//! Each set has a share of the budget besides (`--source-memory-per-set`, a [`SetShare`]):
//! the leases made while its sources are read ([`within_share`]) take from both, so one set
//! cannot hold more than its share, and a set over its share waits or fails alone.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

const KIB: u64 = 1024;

tokio::task_local! {
    /// The share of the set whose sources the current task reads.
    static SET_SHARE: SetShare;
}

/// One set's share of the budget (`--source-memory-per-set`), for one read of its sources.
#[derive(Clone, Debug)]
pub struct SetShare {
    sem: Arc<Semaphore>,
    total_kib: u64,
}

impl SetShare {
    /// A share of `bytes` (at least 1 MiB).
    pub fn new(bytes: u64) -> Self {
        let total_kib = (bytes / KIB)
            .max(1024)
            .min(Semaphore::MAX_PERMITS as u64 / 2);
        SetShare {
            sem: Arc::new(Semaphore::new(total_kib as usize)),
            total_kib,
        }
    }
}

/// Runs `read` with every lease made within it (on this task) also taken from `share`.
pub async fn within_share<F: std::future::Future>(share: SetShare, read: F) -> F::Output {
    SET_SHARE.scope(share, read).await
}

/// The budget (see the module documentation).
#[derive(Clone, Debug)]
pub struct MemoryBudget {
    sem: Arc<Semaphore>,
    total_kib: u64,
    wait: Duration,
    /// The most KiB held at once so far.
    peak_kib: Arc<AtomicU64>,
}

impl MemoryBudget {
    /// A budget of `bytes` (at least 1 MiB), a lease waiting at most `wait` for room.
    pub fn new(bytes: u64, wait: Duration) -> Self {
        let total_kib = (bytes / KIB)
            .max(1024)
            .min(Semaphore::MAX_PERMITS as u64 / 2);
        Self {
            sem: Arc::new(Semaphore::new(total_kib as usize)),
            total_kib,
            wait,
            peak_kib: Arc::default(),
        }
    }

    /// An empty lease on this budget (and on the share of the set whose sources the current
    /// task reads, if any: see [`within_share`]).
    pub fn lease(&self) -> Lease {
        let share = SET_SHARE.try_with(SetShare::clone).ok();
        self.lease_in(share)
    }

    fn lease_in(&self, share: Option<SetShare>) -> Lease {
        Lease {
            budget: self.clone(),
            permit: None,
            share: share.map(|s| (s, None)),
            bytes: 0,
        }
    }

    /// The whole budget in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.total_kib * KIB
    }

    /// The bytes no lease holds now.
    pub fn available_bytes(&self) -> u64 {
        self.sem.available_permits() as u64 * KIB
    }

    /// The most bytes held at once so far.
    pub fn peak_bytes(&self) -> u64 {
        self.peak_kib.load(Ordering::Relaxed) * KIB
    }

    /// The bytes leases hold now.
    pub fn held_bytes(&self) -> u64 {
        self.total_bytes() - self.available_bytes()
    }

    /// How long a lease waits for room before it fails.
    pub fn wait(&self) -> Duration {
        self.wait
    }
}

/// Bytes of a [`MemoryBudget`] held by one fetch (or its result); given back when dropped.
#[derive(Debug)]
pub struct Lease {
    budget: MemoryBudget,
    permit: Option<OwnedSemaphorePermit>,
    /// The set's share and what this lease holds of it (as many KiB as `permit`).
    share: Option<(SetShare, Option<OwnedSemaphorePermit>)>,
    /// The bytes the holder said it uses (the permits cover them, rounded up to KiB).
    bytes: u64,
}

/// KiB covering `bytes`.
fn kib_of(bytes: u64) -> u64 {
    bytes.div_ceil(KIB)
}

impl Lease {
    /// An empty lease on the same budget (and set share).
    pub fn empty(&self) -> Lease {
        self.budget
            .lease_in(self.share.as_ref().map(|(s, _)| s.clone()))
    }

    /// The bytes this lease holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    fn held_kib(&self) -> u64 {
        self.permit
            .as_ref()
            .map(|p| p.num_permits() as u64)
            .unwrap_or(0)
    }

    /// Makes the lease cover `more` bytes besides what it uses, from what it reserved ahead
    /// ([`Lease::reserve_ahead`]) first, else waiting for room at most
    /// [`MemoryBudget::wait`]; an error (naming `--source-memory-mib`) when the budget is too
    /// small for the total or has no room in time.
    pub async fn grow(&mut self, more: u64) -> Result<(), MemoryError> {
        let used = self.bytes.saturating_add(more);
        self.acquire_kib(kib_of(used), used).await?;
        self.bytes = used;
        Ok(())
    }

    /// Reserves room for `more` bytes besides what the lease uses, without using them yet:
    /// a fetch that knows how much it will need takes it at once (rather than growing step by
    /// step while holding what it has, which could leave fetches waiting on each other).
    pub async fn reserve_ahead(&mut self, more: u64) -> Result<(), MemoryError> {
        let total = self.bytes.saturating_add(more);
        self.acquire_kib(kib_of(total), total).await
    }

    /// Records that `bytes` the lease used were freed; their room stays reserved for what the
    /// holder reads next (given back by [`Lease::hold`] or when the lease is dropped).
    pub fn release(&mut self, bytes: u64) {
        self.bytes = self.bytes.saturating_sub(bytes);
    }

    /// Makes the lease use and hold exactly `bytes` (growing as [`Lease::grow`] does, or
    /// giving the rest, reserved room included, back).
    pub async fn hold(&mut self, bytes: u64) -> Result<(), MemoryError> {
        let want = kib_of(bytes);
        if want <= self.held_kib() {
            self.shrink_kib(want);
        } else {
            self.acquire_kib(want, bytes).await?;
        }
        self.bytes = bytes;
        Ok(())
    }

    /// Holds at least `want` KiB (`bytes` in all, for messages), acquiring the difference.
    async fn acquire_kib(&mut self, want: u64, bytes: u64) -> Result<(), MemoryError> {
        let held = self.held_kib();
        if want <= held {
            return Ok(());
        }
        let total = self.budget.total_kib;
        if want > total {
            return Err(MemoryError::TooLarge {
                mib: bytes >> 20,
                budget_mib: total / 1024,
            });
        }
        let need = want - held;
        // The set's share first: a set over it waits (or fails) without taking from others.
        let from_share = self.acquire_share(need, bytes).await?;
        let acquire = self.budget.sem.clone().acquire_many_owned(need as u32);
        match tokio::time::timeout(self.budget.wait, acquire).await {
            Ok(Ok(p)) => {
                match &mut self.permit {
                    Some(held) => held.merge(p),
                    None => self.permit = Some(p),
                }
                if let (Some((_, held)), Some(p)) = (&mut self.share, from_share) {
                    match held {
                        Some(h) => h.merge(p),
                        None => *held = Some(p),
                    }
                }
                let held = self.budget.total_kib - self.budget.sem.available_permits() as u64;
                self.budget.peak_kib.fetch_max(held, Ordering::Relaxed);
                Ok(())
            }
            Ok(Err(_)) => Err(MemoryError::Closed),
            Err(_) => Err(MemoryError::NoRoom {
                budget_mib: total / 1024,
                kib: need,
                wait: self.budget.wait,
            }),
        }
    }

    /// Takes `need` KiB of the set's share (none without a share); an error naming
    /// `--source-memory-per-set` when the share is too small for the lease's `bytes` or has no
    /// room in time.
    async fn acquire_share(
        &self,
        need: u64,
        bytes: u64,
    ) -> Result<Option<OwnedSemaphorePermit>, MemoryError> {
        let Some((share, held)) = &self.share else {
            return Ok(None);
        };
        let held = held.as_ref().map_or(0, |p| p.num_permits() as u64);
        if held + need > share.total_kib {
            return Err(MemoryError::OverShare {
                mib: bytes >> 20,
                share_mib: share.total_kib / 1024,
            });
        }
        let acquire = share.sem.clone().acquire_many_owned(need as u32);
        match tokio::time::timeout(self.budget.wait, acquire).await {
            Ok(Ok(p)) => Ok(Some(p)),
            Ok(Err(_)) => Err(MemoryError::Closed),
            Err(_) => Err(MemoryError::NoRoomInShare {
                share_mib: share.total_kib / 1024,
                kib: need,
                wait: self.budget.wait,
            }),
        }
    }

    /// Gives back all but `kib` KiB.
    fn shrink_kib(&mut self, kib: u64) {
        if let Some((_, Some(p))) = &mut self.share {
            let extra = (p.num_permits() as u64).saturating_sub(kib);
            if extra > 0 {
                drop(p.split(extra as usize));
            }
        }
        if kib == 0
            && let Some((_, held)) = &mut self.share
        {
            *held = None;
        }
        let Some(p) = &mut self.permit else {
            return;
        };
        let extra = (p.num_permits() as u64).saturating_sub(kib);
        if extra > 0 {
            // The split-off permits are dropped at once: given back to the budget.
            drop(p.split(extra as usize));
        }
        if kib == 0 {
            self.permit = None;
        }
    }

    /// [`Lease::grow`] from a blocking thread (unpacking, the Git tree walk) through `rt`.
    pub fn grow_blocking(
        &mut self,
        rt: &tokio::runtime::Handle,
        more: u64,
    ) -> Result<(), MemoryError> {
        rt.block_on(self.grow(more))
    }
}

/// Why a lease could not grow.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    /// More than the whole budget at once.
    #[error(
        "the source needs more than {mib} MiB in memory at once, more than the operator's whole memory budget for sources (--source-memory-mib={budget_mib}); raise --source-memory-mib or make the source smaller"
    )]
    TooLarge { mib: u64, budget_mib: u64 },
    /// The budget's semaphore is closed.
    #[error("the memory budget for sources is closed")]
    Closed,
    /// No room within the wait.
    #[error(
        "the operator's memory budget for sources (--source-memory-mib={budget_mib}) had no room for {kib} KiB more within {wait:?}: other sources hold it (raise --source-memory-mib, or read fewer large sources at once); retrying"
    )]
    NoRoom {
        budget_mib: u64,
        kib: u64,
        wait: Duration,
    },
    /// More than the set's share at once.
    #[error(
        "the set's sources need more than {mib} MiB in memory at once, more than a set's share of the memory budget for sources (--source-memory-per-set={share_mib}); raise it or make the sources smaller"
    )]
    OverShare { mib: u64, share_mib: u64 },
    /// No room in the set's share within the wait.
    #[error(
        "the set's share of the memory budget for sources (--source-memory-per-set={share_mib}) had no room for {kib} KiB more within {wait:?}: its other sources hold it; retrying"
    )]
    NoRoomInShare {
        share_mib: u64,
        kib: u64,
        wait: Duration,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(mib: u64, wait_ms: u64) -> MemoryBudget {
        MemoryBudget::new(mib << 20, Duration::from_millis(wait_ms))
    }

    #[tokio::test]
    async fn leases_take_and_give_back() {
        let b = budget(2, 50);
        assert_eq!(b.total_bytes(), 2 << 20);
        let mut a = b.lease();
        a.grow(1).await.expect("1 byte");
        assert_eq!(b.available_bytes(), (2 << 20) - 1024, "rounded up to 1 KiB");
        a.grow(1023).await.expect("the same KiB");
        assert_eq!(b.available_bytes(), (2 << 20) - 1024);
        a.grow(1 << 20).await.expect("1 MiB more");
        assert_eq!(a.bytes(), (1 << 20) + 1024);
        a.hold(4096).await.expect("shrink");
        assert_eq!(b.available_bytes(), (2 << 20) - 4096);
        drop(a);
        assert_eq!(b.available_bytes(), 2 << 20, "given back when dropped");
        assert_eq!(b.peak_bytes(), (1 << 20) + 1024);
        assert_eq!(b.held_bytes(), 0);
    }

    #[tokio::test]
    async fn a_lease_waits_for_room_then_fails_naming_the_flag() {
        let b = budget(2, 100);
        let mut a = b.lease();
        a.grow(2 << 20).await.expect("the whole budget");
        let mut c = b.lease();
        let started = std::time::Instant::now();
        let e = c.grow(1).await.expect_err("no room").to_string();
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert!(e.contains("--source-memory-mib=2"), "{e}");
        assert!(e.contains("had no room"), "{e}");
        assert_eq!(c.bytes(), 0);
        // Room given back is taken by a waiting lease.
        let b2 = b.clone();
        let waiter = tokio::spawn(async move {
            let mut c = b2.lease();
            c.grow(1 << 20).await.map(|()| c)
        });
        a.hold(512 << 10).await.expect("shrink");
        let c = waiter.await.expect("task").expect("room");
        assert_eq!(c.bytes(), 1 << 20);
        assert_eq!(b.available_bytes(), (2 << 20) - (512 << 10) - (1 << 20));
    }

    #[tokio::test]
    async fn reserved_room_is_used_first() {
        let b = budget(4, 50);
        let mut a = b.lease();
        a.reserve_ahead(2 << 20).await.expect("reserve");
        assert_eq!(a.bytes(), 0);
        assert_eq!(b.held_bytes(), 2 << 20);
        a.grow(1 << 20).await.expect("from the reserve");
        a.grow(1 << 20).await.expect("from the reserve");
        assert_eq!(b.held_bytes(), 2 << 20, "nothing more taken");
        a.grow(1024).await.expect("beyond the reserve");
        assert_eq!(b.held_bytes(), (2 << 20) + 1024);
        // Freed bytes stay reserved for the next use.
        a.release(1 << 20);
        a.grow(1 << 20).await.expect("from the freed room");
        assert_eq!(b.held_bytes(), (2 << 20) + 1024);
        // `hold` gives back what is not used, reserve included.
        a.reserve_ahead(1 << 20).await.expect("reserve");
        a.hold(4096).await.expect("hold");
        assert_eq!(b.held_bytes(), 4096);
        assert_eq!(a.bytes(), 4096);
    }

    #[tokio::test]
    async fn more_than_the_whole_budget_fails_at_once() {
        let b = budget(1, 60_000);
        let mut a = b.lease();
        let e = a.grow(2 << 20).await.expect_err("too big").to_string();
        assert!(
            e.contains("more than the operator's whole memory budget"),
            "{e}"
        );
        assert!(e.contains("--source-memory-mib=1"), "{e}");
        assert_eq!(b.available_bytes(), 1 << 20);
    }

    #[test]
    fn grows_from_blocking_threads() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_time()
            .build()
            .expect("runtime");
        let b = budget(1, 50);
        let handle = rt.handle().clone();
        let mut a = b.lease();
        std::thread::scope(|s| {
            s.spawn(|| a.grow_blocking(&handle, 4096))
                .join()
                .expect("thread")
        })
        .expect("grown");
        assert_eq!(b.available_bytes(), (1 << 20) - 4096);
    }

    #[tokio::test]
    async fn a_set_takes_no_more_than_its_share_and_others_are_unaffected() {
        let b = budget(8, 100);
        let share = SetShare::new(2 << 20);
        let (mut a, mut c) = within_share(share.clone(), async { (b.lease(), b.lease()) }).await;
        a.grow(1 << 20).await.expect("within the share");
        c.grow(1 << 20).await.expect("the rest of the share");
        let e = c.grow(1).await.expect_err("the share is full").to_string();
        assert!(e.contains("--source-memory-per-set=2"), "{e}");
        assert!(e.contains("had no room"), "{e}");
        // The failed attempt took nothing from the budget.
        assert_eq!(b.held_bytes(), 2 << 20);
        let mut big = a.empty();
        let e = big
            .grow(3 << 20)
            .await
            .expect_err("more than the share")
            .to_string();
        assert!(e.contains("more than a set's share"), "{e}");
        // Another set (or none) still has room.
        let mut other = b.lease();
        other.grow(4 << 20).await.expect("another set's room");
        // Given back: the share has room again.
        c.hold(0).await.expect("shrink");
        a.grow(1 << 20).await.expect("room in the share again");
        drop((a, c, other, big));
        assert_eq!(b.held_bytes(), 0);
    }
}

//! What a render stage may spend for one set while it produces the set's content: post-build
//! substitution and SOPS decryption today, and any later stage that writes members or build
//! inputs. A stage gets a [`StageBudget`] and charges it as it writes:
//!
//! - **Bytes, per set**: the stage's output counts against a per-set bound (the set's YAML
//!   text budget, `--max-yaml-mib-per-set`); [`StageBudget::count`] fails at the first byte over,
//!   before that byte is written, so a stage stops at the bound instead of after it.
//! - **Bytes, operator-wide**: what the stage keeps in memory is taken from the operator-wide
//!   memory budget the sources draw on (`--source-memory-mib`, [`MemoryBudget`]) before it is
//!   allocated ([`StageBudget::reserve`]), waiting for room as a source fetch does. The lease
//!   is handed back with the stage's result ([`StageBudget::run`]) and held as long as the
//!   rendered set is (the reconcile), so `--concurrency` sets at their per-set bound together
//!   hold at most the operator-wide budget.
//! - **Time**: the set's render deadline (`--source-timeout` from the start of the render);
//!   a stage looks at it between units of work ([`StageBudget::check_time`]).
//!
//! A stage runs on tokio's blocking pool ([`StageBudget::run`]): its CPU work (expansion,
//! parsing, age and AES) never holds a runtime thread, and reserving room may wait there.

use std::time::{Duration, Instant};

use crate::sources::memory::{Lease, MemoryBudget, MemoryError};

/// Why a stage must stop (the stage's own error names what it was writing and the flag).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exceeded {
    /// The stage's output would pass the per-set bound of `limit` bytes.
    Bytes { limit: u64 },
    /// The operator-wide memory budget has no room (in time) or is too small.
    Memory(MemoryError),
    /// The set's render deadline passed; `allowed` is the whole time the render may take.
    Time { allowed: Duration },
}

impl Exceeded {
    /// Whether it may pass by itself (room frees, the operator is less busy): retried.
    pub fn is_transient(&self) -> bool {
        match self {
            Exceeded::Bytes { .. } => false,
            Exceeded::Memory(e) => !matches!(
                e,
                MemoryError::TooLarge { .. } | MemoryError::OverShare { .. }
            ),
            Exceeded::Time { .. } => true,
        }
    }
}

/// A render stage's budget for one set (see the module documentation).
#[derive(Debug)]
pub struct StageBudget {
    limit: u64,
    used: u64,
    /// The operator-wide lease and the runtime to wait on (none: memory not budgeted, for
    /// pure callers and tests).
    lease: Option<(Lease, tokio::runtime::Handle)>,
    deadline: Option<(Instant, Duration)>,
    /// The most text one member may be written as (none: only the set's bound).
    member_text: Option<u64>,
}

impl StageBudget {
    /// A budget of `limit` bytes for the set's output, drawing on `memory`, until `deadline`
    /// (`allowed` is the whole time the render may take, for messages). Made on the runtime.
    pub fn new(
        limit: u64,
        memory: &MemoryBudget,
        deadline: Instant,
        allowed: Duration,
    ) -> StageBudget {
        StageBudget {
            limit,
            used: 0,
            lease: tokio::runtime::Handle::try_current()
                .ok()
                .map(|rt| (memory.lease(), rt)),
            deadline: Some((deadline, allowed)),
            member_text: None,
        }
    }

    /// A budget of `limit` bytes with no operator-wide memory and no deadline (pure callers).
    pub fn bytes_only(limit: u64) -> StageBudget {
        StageBudget {
            limit,
            used: 0,
            lease: None,
            deadline: None,
            member_text: None,
        }
    }

    /// Bounds the text one member may be written as to `bytes` too.
    pub fn limit_member_text(&mut self, bytes: u64) {
        self.member_text = Some(bytes);
    }

    /// The most text one member may be written as, if bounded.
    pub fn member_text(&self) -> Option<u64> {
        self.member_text
    }

    /// The per-set bound in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The bytes counted so far.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Counts `bytes` of output against the per-set bound; at the bound, an error and nothing
    /// counted (exactly at the bound passes).
    pub fn count(&mut self, bytes: u64) -> Result<(), Exceeded> {
        let used = self.used.saturating_add(bytes);
        if used > self.limit {
            return Err(Exceeded::Bytes { limit: self.limit });
        }
        self.used = used;
        Ok(())
    }

    /// Takes room for `bytes` more from the operator-wide budget before they are allocated,
    /// waiting for room at most the budget's wait. Blocks: call it from the stage
    /// ([`StageBudget::run`]), which runs on the blocking pool.
    pub fn reserve(&mut self, bytes: u64) -> Result<(), Exceeded> {
        match &mut self.lease {
            Some((lease, rt)) => lease.grow_blocking(rt, bytes).map_err(Exceeded::Memory),
            None => Ok(()),
        }
    }

    /// [`StageBudget::count`] and [`StageBudget::reserve`]: output that is both new to the set
    /// and kept.
    pub fn charge(&mut self, bytes: u64) -> Result<(), Exceeded> {
        self.count(bytes)?;
        self.reserve(bytes)
    }

    /// Records that `bytes` reserved were freed (the room stays with the stage until it ends).
    pub fn release(&mut self, bytes: u64) {
        if let Some((lease, _)) = &mut self.lease {
            lease.release(bytes);
        }
    }

    /// An error once the set's render deadline passed.
    pub fn check_time(&self) -> Result<(), Exceeded> {
        match self.deadline {
            Some((at, allowed)) if Instant::now() >= at => Err(Exceeded::Time { allowed }),
            _ => Ok(()),
        }
    }

    /// Runs `stage` on the blocking pool with this budget; returns its result and the lease
    /// that holds what it kept (room reserved and not used given back), for the caller to
    /// hold as long as the output lives.
    pub async fn run<T, F>(self, stage: F) -> (T, Option<Lease>)
    where
        T: Send + 'static,
        F: FnOnce(&mut StageBudget) -> T + Send + 'static,
    {
        let mut budget = self;
        let joined = tokio::task::spawn_blocking(move || {
            let out = stage(&mut budget);
            (out, budget.lease.map(|(lease, _)| lease))
        })
        .await;
        let (out, lease) = match joined {
            Ok(done) => done,
            // A panic in the stage is the stage's bug: raised here as if it ran inline.
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
        let lease = match lease {
            Some(mut lease) => {
                let used = lease.bytes();
                // Shrinking never waits: the room reserved and not used goes back.
                let _ = lease.hold(used).await;
                Some(lease).filter(|l| l.bytes() > 0)
            }
            None => None,
        };
        (out, lease)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_up_to_the_bound_and_refuses_one_byte_over() {
        let mut b = StageBudget::bytes_only(10);
        assert_eq!(b.count(4), Ok(()));
        assert_eq!(b.count(6), Ok(()), "exactly at the bound");
        assert_eq!(b.count(1), Err(Exceeded::Bytes { limit: 10 }));
        assert_eq!(b.used(), 10, "nothing counted past the bound");
        assert_eq!(b.count(0), Ok(()));
        assert_eq!(b.count(u64::MAX), Err(Exceeded::Bytes { limit: 10 }));
        assert_eq!(b.check_time(), Ok(()), "no deadline");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stage_takes_its_room_from_the_operator_wide_budget_and_hands_it_back() {
        let memory = MemoryBudget::new(1 << 20, Duration::from_millis(50));
        let later = Instant::now() + Duration::from_secs(60);
        let budget = StageBudget::new(4 << 20, &memory, later, Duration::from_secs(60));
        let (out, lease) = budget
            .run(|b| {
                b.charge(256 << 10)?;
                // Reserved and freed: given back when the stage ends.
                b.reserve(128 << 10)?;
                b.release(128 << 10);
                // More than the whole operator-wide budget: refused, though within the set's.
                b.charge(2 << 20)
            })
            .await;
        assert!(matches!(
            out,
            Err(Exceeded::Memory(MemoryError::TooLarge { .. }))
        ));
        let lease = lease.expect("a lease");
        assert_eq!(lease.bytes(), 256 << 10);
        assert_eq!(memory.held_bytes(), 256 << 10, "the freed room went back");
        drop(lease);
        assert_eq!(memory.held_bytes(), 0);

        // No room in time: transient, and the stage's other room is not lost.
        let mut hog = memory.lease();
        hog.grow(1 << 20).await.expect("the whole budget");
        let budget = StageBudget::new(4 << 20, &memory, later, Duration::from_secs(60));
        let (out, lease) = budget.run(|b| b.charge(1)).await;
        let err = out.expect_err("no room");
        assert!(err.is_transient(), "{err:?}");
        assert!(lease.is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_passed_deadline_stops_the_stage() {
        let memory = MemoryBudget::new(1 << 20, Duration::from_millis(50));
        let allowed = Duration::from_secs(120);
        let budget = StageBudget::new(10, &memory, Instant::now(), allowed);
        let (out, _) = budget.run(|b| b.check_time()).await;
        assert_eq!(out, Err(Exceeded::Time { allowed }));
        assert!(Exceeded::Time { allowed }.is_transient());
        assert!(!Exceeded::Bytes { limit: 1 }.is_transient());
    }
}

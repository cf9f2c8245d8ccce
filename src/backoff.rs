//! How the operator's watches retry after an error.
//!
//! kube-runtime's default (client-go's reflector backoff) waits from 0.8 s up to 30 s and
//! forgets the count only after 120 s without an error. After a kube-apiserver restart that
//! is too patient: every watch fails a few times in a row (connections refused, then `410
//! Expired` while the new watch cache initializes), so the backoff reaches tens of seconds
//! and the operator goes on reconciling from a stale cache meanwhile — a change to a parent
//! was seen 5 to 45 s after a 2 s restart. The operator depends on its watches to see
//! changes at all, so each watch retries sooner: from 0.2 s, doubling, capped at 2.5 s,
//! plus jitter of up to as much again (watches of many kinds do not retry in step), and
//! starting over 30 s after the last error. A successful event starts over too
//! (kube-runtime's `StreamBackoff`).
//!
//! A kube-runtime `Controller` also waits after every error of its merged trigger streams,
//! pausing all of them, with the default backoff: one controller's three watches failing
//! in turn after a restart made it wait 5 to 10 s more each time. Every stream given to our
//! controllers backs off by itself, so the controllers' own wait is [`NoWait`].

use std::time::Duration;

use kube::runtime::{
    utils::{Backoff, ResetTimerBackoff},
    watcher::ExponentialBackoff,
};

/// The first wait after an error.
pub const FIRST: Duration = Duration::from_millis(200);
/// The longest wait between two attempts.
pub const CAP: Duration = Duration::from_millis(2500);
/// Errors further apart than this start the backoff over.
pub const RESET_AFTER: Duration = Duration::from_secs(30);

/// The backoff of every watch of the operator (see the module docs).
pub fn backoff() -> ResetTimerBackoff<ExponentialBackoff> {
    let builder = backon::ExponentialBuilder::default()
        .with_min_delay(FIRST)
        .with_max_delay(CAP)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetTimerBackoff::new(ExponentialBackoff::from(builder), RESET_AFTER)
}

/// No wait: for a stream whose every source backs off by itself (a controller's triggers).
pub struct NoWait;

impl Iterator for NoWait {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::ZERO)
    }
}

impl Backoff for NoWait {
    fn reset(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::DefaultBackoff;

    #[test]
    fn waits_grow_from_the_first_to_the_cap_and_start_over_on_reset() {
        let mut b = backoff();
        let waits: Vec<Duration> = (&mut b).take(12).collect();
        // Jitter adds up to one more delay: each wait is within [d, 2d] of its step.
        assert!(waits[0] >= FIRST && waits[0] <= FIRST * 2, "{waits:?}");
        assert!(waits.iter().all(|w| *w <= CAP * 2), "{waits:?}");
        assert!(waits[11] >= CAP, "the backoff reaches its cap: {waits:?}");
        b.reset();
        let again = b.next().unwrap_or_default();
        assert!(again <= FIRST * 2, "a reset starts over: {again:?}");
    }

    #[test]
    fn the_default_would_wait_far_longer() {
        // What the module replaces: after the same 6 errors the default waits 25.6 s or more.
        let sixth = DefaultBackoff::default().nth(5).unwrap_or_default();
        assert!(sixth >= Duration::from_secs(25), "{sixth:?}");
        let ours = backoff().nth(5).unwrap_or_default();
        assert!(ours <= CAP * 2, "{ours:?}");
    }

    #[test]
    fn no_wait_never_waits_and_never_gives_up() {
        assert!(NoWait.take(100).all(|d| d.is_zero()));
        assert_eq!(NoWait.take(100).count(), 100);
    }
}

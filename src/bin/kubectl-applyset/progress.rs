//! Progress of long operations on standard error, only when it is a terminal (nothing
//! otherwise, so that output stays machine-readable).

use std::{
    io::{IsTerminal, Write},
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

/// A counter of done items shown as `label: done/total` on one line, at most ten times a
/// second.
pub struct Progress {
    label: String,
    total: usize,
    done: AtomicUsize,
    shown: Option<Mutex<Instant>>,
}

impl Progress {
    pub fn new(label: &str, total: usize) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        Progress {
            label: label.to_string(),
            total,
            done: AtomicUsize::new(0),
            shown: terminal.then(|| Mutex::new(Instant::now())),
        }
    }

    /// One more item done.
    pub fn tick(&self) {
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        let Some(shown) = &self.shown else {
            return;
        };
        if let Ok(mut at) = shown.lock()
            && (at.elapsed() >= Duration::from_millis(100) || done == self.total)
        {
            *at = Instant::now();
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K{}: {done}/{}", self.label, self.total);
            let _ = err.flush();
        }
    }

    /// A message in place of the counter (e.g. what a wait is waiting for).
    pub fn say(&self, message: &str) {
        if self.shown.is_some() {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K{message}");
            let _ = err.flush();
        }
    }

    /// Clears the line.
    pub fn finish(&self) {
        if self.shown.is_some() {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    }
}

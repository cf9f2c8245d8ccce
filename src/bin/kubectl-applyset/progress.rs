//! Progress of long operations on standard error, only when it is a terminal (nothing
//! otherwise, so that output stays machine-readable).

use std::io::{IsTerminal, Write};

/// A status line on standard error, shown only when it is a terminal.
pub struct Progress {
    shown: bool,
}

impl Progress {
    pub fn new() -> Progress {
        Progress {
            shown: std::io::stderr().is_terminal(),
        }
    }

    /// Shows `message` (e.g. what a wait is waiting for), in place of the last one.
    pub fn say(&self, message: &str) {
        if self.shown {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K{message}");
            let _ = err.flush();
        }
    }

    /// Clears the line.
    pub fn finish(&self) {
        if self.shown {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    }
}

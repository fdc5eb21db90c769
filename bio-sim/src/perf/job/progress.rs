//! The progress bar: on standard error, only when it is a terminal (nothing in a pipe, a log
//! or a test), one step per design run, with the I/Os done so far in the current run.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A bar over `total` design runs, or nothing.
#[derive(Debug)]
pub struct Progress {
    bar: Option<ProgressBar>,
    ios: Arc<AtomicU64>,
}

impl Progress {
    /// A bar if standard error is a terminal and `enabled`.
    pub fn new(total: u64, enabled: bool) -> Progress {
        let bar = (enabled && std::io::stderr().is_terminal()).then(|| {
            let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            if let Ok(style) =
                ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            {
                b.set_style(style.progress_chars("=> "));
            }
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        Progress {
            bar,
            ios: Arc::default(),
        }
    }

    /// The counter the running design bumps per completed I/O.
    pub fn io_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.ios)
    }

    /// A design run starts.
    pub fn start(&self, what: &str) {
        self.ios.store(0, Ordering::Relaxed);
        if let Some(b) = &self.bar {
            b.set_message(what.to_owned());
        }
    }

    /// A design run ended.
    pub fn step(&self) {
        if let Some(b) = &self.bar {
            b.inc(1);
        }
    }

    /// Removes the bar (before the table is printed).
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

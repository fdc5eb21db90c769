//! The binary's `tracing` subscriber.
//!
//! Events are named after kernel tracepoints (`block_bio_queue`, `block_bio_complete`,
//! `cpuhp_enter`, ...) under targets named after their subsystem (`block`, `cpuhp`, ...), so
//! `RUST_LOG=block=trace` shows the block tracepoints the way `echo 1 > events/block/enable` would.
//! The default shows warnings only (every simulated kernel splat is a warning).

use tracing_subscriber::prelude::*;
use tracing_subscriber::EnvFilter;

/// The environment variable read for the filter (same syntax as `RUST_LOG`).
pub const FILTER_ENV: &str = "RUST_LOG";

/// Installs the global subscriber writing to stderr. `default` is the filter used when
/// `RUST_LOG` is unset. An invalid `RUST_LOG` is reported and the default used instead.
pub fn init(default: &str) {
    let spec = match std::env::var(FILTER_ENV) {
        Ok(spec) => match EnvFilter::try_new(&spec) {
            Ok(_) => spec,
            Err(e) => {
                eprintln!("biosim: ignoring invalid {FILTER_ENV}={spec:?}: {e}");
                default.to_owned()
            }
        },
        Err(_) => default.to_owned(),
    };
    // Two copies of one filter: the capture layer's (global) and the fmt layer's (its own).
    let filter = || EnvFilter::new(&spec);
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time()
        .with_target(true)
        .with_filter(filter());
    // The capture layer rides along so deterministic runs capture through this subscriber (see
    // `report::capture` for why captures never use a scoped dispatcher). It is the global filter:
    // an event is built when a capture wants it or `RUST_LOG` does; the fmt layer's own copy of
    // the filter keeps captured events off stderr unless `RUST_LOG` asks for them.
    let _ = tracing_subscriber::registry()
        .with(crate::report::capture::layer_or(filter()))
        .with(fmt)
        .try_init();
}

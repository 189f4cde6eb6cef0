//! Ctrl-C as a request to stop cleanly (finish the current step, print what was done).
//!
//! SIGTERM (`kill PID`, a service manager stopping the command) and SIGHUP (the terminal
//! closing) are handled exactly like Ctrl-C (SIGINT): the same clean stop, the same exit code
//! 130. The handler cannot tell them apart, so every message says "Ctrl-C or a termination
//! signal" where it matters (`demo`).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
static INSTALLED: OnceLock<bool> = OnceLock::new();

/// Installs the handler of Ctrl-C, SIGTERM and SIGHUP once; later calls do nothing. Returns whether it is installed
/// (it is not when another handler already owns the signal).
pub fn install() -> bool {
    *INSTALLED.get_or_init(|| ctrlc::set_handler(|| STOP.store(true, Ordering::SeqCst)).is_ok())
}

/// Whether Ctrl-C was pressed (or SIGTERM or SIGHUP received) since [`install`].
pub fn requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

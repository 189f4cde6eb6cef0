//! Ctrl-C as a request to stop cleanly (finish the current step, print what was done).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
static INSTALLED: OnceLock<bool> = OnceLock::new();

/// Installs the Ctrl-C handler once; later calls do nothing. Returns whether it is installed
/// (it is not when another handler already owns the signal).
pub fn install() -> bool {
    *INSTALLED.get_or_init(|| ctrlc::set_handler(|| STOP.store(true, Ordering::SeqCst)).is_ok())
}

/// Whether Ctrl-C was pressed since [`install`].
pub fn requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

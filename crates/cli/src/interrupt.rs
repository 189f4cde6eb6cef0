//! Termination signals as a request to stop cleanly (finish the current step, print what was
//! done), each reported by its own name.
//!
//! Ctrl-C (SIGINT), SIGTERM (`kill PID`, a service manager stopping the command) and SIGHUP
//! (the terminal closing) all ask the command to stop at its next step. What it then prints
//! names the signal ("interrupted (Ctrl-C)", "stopped by SIGTERM", "stopped by SIGHUP"), and a
//! command that stops short exits with the shell's code for that signal, 128 + its number:
//! 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP ([`CliError::interrupted`](crate::error::CliError::interrupted)).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// The number of the last signal received, 0 before any.
static RECEIVED: OnceLock<Arc<AtomicUsize>> = OnceLock::new();
static INSTALLED: OnceLock<bool> = OnceLock::new();

/// A termination signal the command stops cleanly on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Signal {
    /// SIGINT: Ctrl-C in the terminal.
    Interrupt,
    /// SIGTERM: `kill PID`, or a service manager stopping the command.
    Terminate,
    /// SIGHUP: the terminal closed.
    Hangup,
}

impl Signal {
    /// The signal's number on this system.
    fn number(self) -> i32 {
        match self {
            Self::Interrupt => SIGINT,
            Self::Terminate => SIGTERM,
            Self::Hangup => SIGHUP,
        }
    }

    fn from_number(n: usize) -> Option<Self> {
        [Self::Interrupt, Self::Terminate, Self::Hangup]
            .into_iter()
            .find(|s| usize::try_from(s.number()).ok() == Some(n))
    }

    /// The exit code of a command this signal stopped short: 128 + the signal's number (130
    /// for SIGINT, 143 for SIGTERM, 129 for SIGHUP), as a shell reports a process the signal
    /// ended.
    pub fn exit_code(self) -> u8 {
        u8::try_from(128 + self.number()).unwrap_or(130)
    }

    /// How a stop by this signal reads: `interrupted (Ctrl-C)`, `stopped by SIGTERM`,
    /// `stopped by SIGHUP (the terminal closed)`.
    pub fn stopped(self) -> &'static str {
        match self {
            Self::Interrupt => "interrupted (Ctrl-C)",
            Self::Terminate => "stopped by SIGTERM",
            Self::Hangup => "stopped by SIGHUP (the terminal closed)",
        }
    }
}

fn received() -> &'static Arc<AtomicUsize> {
    RECEIVED.get_or_init(|| Arc::new(AtomicUsize::new(0)))
}

/// Installs the handler of SIGINT, SIGTERM and SIGHUP once; later calls do nothing. Returns
/// whether it is installed for all three. From then on these signals no longer end the process:
/// they only make [`requested`] true and [`signal`] name them.
pub fn install() -> bool {
    *INSTALLED.get_or_init(|| {
        [SIGINT, SIGTERM, SIGHUP].into_iter().all(|sig| {
            usize::try_from(sig).is_ok_and(|n| {
                signal_hook::flag::register_usize(sig, Arc::clone(received()), n).is_ok()
            })
        })
    })
}

/// The signal received since [`install`] (the last one, when several came), if any.
pub fn signal() -> Option<Signal> {
    Signal::from_number(received().load(Ordering::SeqCst))
}

/// Whether a stop was requested (SIGINT, SIGTERM or SIGHUP received) since [`install`].
pub fn requested() -> bool {
    signal().is_some()
}

/// How the stop reads: [`Signal::stopped`] of the signal received (`interrupted (Ctrl-C)`,
/// `stopped by SIGTERM`, ...), or `stopped by a signal` when none was recorded.
pub fn stopped() -> &'static str {
    signal().map_or("stopped by a signal", Signal::stopped)
}

/// The exit code of a command stopped short by the signal received: [`Signal::exit_code`], or
/// 130 when none was recorded.
pub fn exit_code() -> u8 {
    signal().map_or(130, Signal::exit_code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_signal_has_its_name_and_the_shell_exit_code() {
        assert_eq!(Signal::Interrupt.exit_code(), 130);
        assert_eq!(Signal::Terminate.exit_code(), 143);
        assert_eq!(Signal::Hangup.exit_code(), 129);
        assert_eq!(Signal::Interrupt.stopped(), "interrupted (Ctrl-C)");
        assert_eq!(Signal::Terminate.stopped(), "stopped by SIGTERM");
        for s in [Signal::Interrupt, Signal::Terminate, Signal::Hangup] {
            let n = usize::try_from(s.number()).unwrap_or(0);
            assert_eq!(Signal::from_number(n), Some(s));
        }
        assert_eq!(Signal::from_number(0), None);
    }
}

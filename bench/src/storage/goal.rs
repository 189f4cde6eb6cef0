//! What a target's ratio must be: the goal the target table checks and the chart draws as a
//! dashed line, below both.

/// What a ratio must be to meet its target.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Goal {
    /// At least this much.
    AtLeast(f64),
    /// At most this much.
    AtMost(f64),
    /// No target: a diagnostic row that explains the others.
    Info,
}

impl Goal {
    /// Whether `ratio` meets the goal (`None` for an info row).
    pub fn met(self, ratio: f64) -> Option<bool> {
        match self {
            Goal::AtLeast(t) => Some(ratio >= t),
            Goal::AtMost(t) => Some(ratio <= t),
            Goal::Info => None,
        }
    }

    /// The goal's threshold (`None` for an info row).
    pub fn threshold(self) -> Option<f64> {
        match self {
            Goal::AtLeast(t) | Goal::AtMost(t) => Some(t),
            Goal::Info => None,
        }
    }

    /// `"≥ 0.90×"`, `"≤ 2.00×"` or `"-"`.
    pub fn describe(self) -> String {
        match self {
            Goal::AtLeast(t) => format!("≥ {t:.2}×"),
            Goal::AtMost(t) => format!("≤ {t:.2}×"),
            Goal::Info => "-".to_owned(),
        }
    }
}

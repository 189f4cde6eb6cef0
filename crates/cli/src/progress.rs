//! Progress bars for anything that can take more than a second, drawn on stderr only when it
//! is a terminal (so pipes, logs and tests get clean output).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

/// A bar over `total` bytes, labelled `label`; hidden when stderr is not a terminal.
pub fn bytes_bar(label: &str, total: u64) -> ProgressBar {
    bar(
        label,
        total,
        "{prefix:>10} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
    )
}

/// A bar over `total` items, labelled `label`; hidden when stderr is not a terminal.
pub fn count_bar(label: &str, total: u64) -> ProgressBar {
    bar(
        label,
        total,
        "{prefix:>10} [{bar:30}] {human_pos}/{human_len} {rate} eta {eta}",
    )
}

fn bar(label: &str, total: u64, template: &str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(Some(total), target());
    if let Ok(style) = ProgressStyle::with_template(template) {
        let style = style.progress_chars("=> ").with_key(
            "rate",
            |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0}/s", state.per_sec());
            },
        );
        pb.set_style(style);
    }
    pb.set_prefix(label.to_owned());
    pb
}

fn target() -> ProgressDrawTarget {
    if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}

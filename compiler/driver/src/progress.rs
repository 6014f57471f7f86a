//! Progress bars of the long commands (`fbc bench`'s runs, `fbc tune`'s parameter sets), all
//! under one rule, [`shown`]: a bar is for a person watching a terminal, so it draws on standard
//! error only, and not at all under `-q`, under `--json` (whose reader is a program) or when
//! standard error is not a terminal (a log file, a test, CI). Standard output never changes.

use std::io::IsTerminal as _;

use indicatif::{ProgressBar, ProgressStyle};

/// Whether a bar is drawn: not with `-q` or `--json` (`quiet`), and only on a terminal.
pub(crate) fn shown(quiet: bool, stderr_is_terminal: bool) -> bool {
    !quiet && stderr_is_terminal
}

/// A bar over `len` steps saying `msg`, on standard error, or a hidden one where [`shown`]
/// says no (`quiet`: `-q` or `--json`).
pub(crate) fn bar(len: u64, msg: impl Into<String>, quiet: bool) -> ProgressBar {
    if !shown(quiet, std::io::stderr().is_terminal()) {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(msg.into());
    // Redrawn while nothing advances, so that the elapsed time moves through a long step (a
    // program build, one slow run).
    bar.enable_steady_tick(std::time::Duration::from_millis(250));
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_show_only_on_a_terminal_without_quiet_or_json() {
        assert!(shown(false, true));
        // `-q` or `--json` (callers pass either as `quiet`), or standard error not a terminal.
        assert!(!shown(true, true));
        assert!(!shown(false, false));
        assert!(!shown(true, false));
        assert!(bar(3, "fblayout", true).is_hidden());
        // The test harness captures standard error: not a terminal, so hidden without `quiet`.
        if !std::io::stderr().is_terminal() {
            assert!(bar(3, "fblayout", false).is_hidden());
        }
    }
}

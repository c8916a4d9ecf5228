//! Crash points for fault tests: a node started with `FOAM_FAILPOINTS=name`
//! (names separated by commas) exits at once, as if killed, when it reaches
//! a point of that name. Tests use them to stop a node at an exact step of a
//! protocol (between a commit's prepare and its decision, say), which a
//! SIGKILL sent from outside can only hit by chance. With the variable unset,
//! a point costs one load of an already-read flag.

use std::sync::OnceLock;

/// The variable that names the points to crash at.
pub const FAILPOINTS_VARIABLE: &str = "FOAM_FAILPOINTS";

/// Exit code of a node that stopped at a crash point.
pub const FAILPOINT_EXIT_CODE: i32 = 86;

fn armed() -> &'static [String] {
    static ARMED: OnceLock<Vec<String>> = OnceLock::new();
    ARMED.get_or_init(|| {
        std::env::var(FAILPOINTS_VARIABLE)
            .map(|names| names.split(',').map(|n| n.trim().to_string()).filter(|n| !n.is_empty()).collect())
            .unwrap_or_default()
    })
}

/// Exits the process, without unwinding or flushing anything, when `name`
/// is armed.
pub fn crash_point(name: &str) {
    if armed().iter().any(|armed| armed == name) {
        eprintln!("stopping at crash point {name} ({FAILPOINTS_VARIABLE})");
        // `_exit` as a kill would: no destructors, no buffered writes.
        unsafe extern "C" {
            fn _exit(code: i32) -> !;
        }
        unsafe { _exit(FAILPOINT_EXIT_CODE) }
    }
}

//! Helpers shared by the CLI's end-to-end tests: running the binary with a
//! time limit, and child processes to watch (from `wakemeter-testkit`).
#![allow(dead_code, unused_imports)]

use std::process::Command;

pub use wakemeter_testkit::{HANG_GUARD, Run, Sleeper, run, run_until, state, wait_for_zombie};

/// The `wakemeter` binary.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wakemeter"))
}

/// `cmd` as a user's foreground command: SIGINT and SIGTERM at their
/// default action. A shell that starts a script in the background sets
/// SIGINT to "ignore", children inherit it, and a command that keeps an
/// ignored SIGINT ignored (as it should in the background) never sees the
/// test's Ctrl-C: watch, top and diff ran for 600 s when the suite was
/// started that way beside stress-ng, and `watch --seconds 300` ran out
/// its 300 s in a quiet run started so.
pub fn as_foreground(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: signal(2) is async-signal-safe and touches no memory of the
    // parent; it runs in the child between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            Ok(())
        })
    }
}

/// `watch` arguments for `pid`, then `extra`.
pub fn watch(pid: u32, extra: &[&str]) -> Command {
    let mut c = bin();
    c.args(["watch", "--pid", &pid.to_string()]).args(extra);
    c
}

/// A pid no process has (above the kernel's `pid_max` limit).
pub const NO_SUCH_PID: u32 = 4_294_967_000;

/// Checks that a command given [`NO_SUCH_PID`] failed the way a user
/// relies on: exit 2, one line naming the pid, nothing on stdout.
pub fn assert_no_such_pid(r: &Run) {
    assert_eq!(r.code, Some(2), "{}", r.said());
    assert_eq!(
        r.stderr(),
        format!("wakemeter: no process with pid {NO_SUCH_PID}\n"),
        "{}",
        r.said()
    );
    assert!(r.stdout.is_empty(), "{}", r.said());
}

/// Reads a `--listen` command's stderr until it announces where it
/// serves, and returns that `host:port`. Panics when stderr ends first.
pub fn metrics_address(stderr: &mut impl std::io::BufRead) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        match stderr.read_line(&mut line) {
            Ok(n) if n > 0 => {}
            other => panic!("no address announced ({other:?})"),
        }
        if let Some(rest) = line
            .trim()
            .strip_prefix("wakemeter: serving metrics at http://")
        {
            return rest.trim_end_matches("/metrics").to_string();
        }
    }
}

//! Helpers shared by the CLI's end-to-end tests: running the binary with a
//! time limit, and child processes to watch (from `wakemeter-testkit`).
#![allow(dead_code, unused_imports)]

use std::process::Command;

pub use wakemeter_testkit::{HANG_GUARD, Run, Sleeper, run, run_until, state, wait_for_zombie};

/// The `wakemeter` binary.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wakemeter"))
}

/// `watch` arguments for `pid`, then `extra`.
pub fn watch(pid: u32, extra: &[&str]) -> Command {
    let mut c = bin();
    c.args(["watch", "--pid", &pid.to_string()]).args(extra);
    c
}

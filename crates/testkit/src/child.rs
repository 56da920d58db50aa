//! A test binary that starts itself again as the target of a test: the
//! parent runs [`this_test`] and [`start_until_ready`]; the re-run test
//! sees its variable, builds the threads the parent watches
//! ([`park_threads`]) and calls [`ready_until_stdin_closes`].

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use crate::Running;

/// This test binary, set to run only its test `test` (one thread, output
/// not captured) with `env=value` in its environment. The test does its
/// child's part when it sees `env`, and returns at once otherwise.
pub fn this_test(test: &str, env: &str, value: &str) -> Command {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => panic!("the test binary's own path is unknown: {e}"),
    };
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(env, value);
    cmd
}

/// Starts `cmd` with stdin and stdout piped and waits until it ends a line
/// with `ready` (libtest may print `test NAME ... ` before it on the same
/// line). Its stdin stays open as long as the [`Running`] lives, so a
/// child in [`ready_until_stdin_closes`] lives as long too.
pub fn start_until_ready(cmd: &mut Command) -> Running {
    let child = match cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn() {
        Ok(c) => c,
        Err(e) => panic!("{:?} does not start: {e}", cmd.get_program()),
    };
    let mut running = Running(child);
    let Some(stdout) = running.0.stdout.take() else {
        panic!("{:?}: no piped stdout", cmd.get_program());
    };
    let ready = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.trim_end().ends_with("ready"));
    assert!(ready, "{:?} ended before it said ready", cmd.get_program());
    running
}

/// The child's side: says `ready` on stdout, waits until its stdin closes
/// (the parent dropped its [`Running`], or is gone), and exits with 0.
pub fn ready_until_stdin_closes() -> ! {
    println!("ready");
    let _ = std::io::stdin().read(&mut [0u8; 1]);
    std::process::exit(0)
}

/// Starts `n` threads named `{prefix}-{i}` (64 KiB stacks), each parked
/// for the rest of the process's life.
pub fn park_threads(prefix: &str, n: usize) {
    for i in 0..n {
        let spawned = std::thread::Builder::new()
            .name(format!("{prefix}-{i}"))
            .stack_size(64 * 1024)
            .spawn(|| {
                loop {
                    std::thread::park();
                }
            });
        if let Err(e) = spawned {
            panic!("thread {prefix}-{i} does not start: {e}");
        }
    }
}

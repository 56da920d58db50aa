//! Helpers shared by the CLI's end-to-end tests: running the binary with a
//! time limit, and child processes to watch.
#![allow(dead_code)]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `wakemeter` binary.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wakemeter"))
}

/// What one run of the binary did.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub elapsed: Duration,
    pub timed_out: bool,
}

impl Run {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
    /// Everything it said, for assertion messages.
    pub fn said(&self) -> String {
        format!(
            "exit {:?} after {:.1} s{}\n--- stdout\n{}\n--- stderr\n{}",
            self.code,
            self.elapsed.as_secs_f64(),
            if self.timed_out {
                " (killed: too slow)"
            } else {
                ""
            },
            self.stdout(),
            self.stderr()
        )
    }
}

/// The least time [`run`] gives a command before it calls it hung: on a
/// machine at load 200 a run of a few seconds took over 20 s, so a test
/// must never fail only because the machine is slow. A test that checks
/// promptness makes the broken behaviour take far longer than this
/// (e.g. `--every 3600`).
pub const HANG_GUARD: Duration = Duration::from_secs(600);

/// Runs `cmd`, killing it after `limit` or [`HANG_GUARD`], whichever is
/// longer (so a hang fails the test instead of blocking it forever).
pub fn run(cmd: &mut Command, limit: Duration) -> Run {
    run_until(cmd, limit.max(HANG_GUARD))
}

/// Runs `cmd` and kills it after exactly `limit`: for a test that means to
/// stop a command that is meant to go on (a long `--seconds`).
pub fn run_until(cmd: &mut Command, limit: Duration) -> Run {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > limit {
            timed_out = true;
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let elapsed = start.elapsed();
    Run {
        code: status.code(),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        elapsed,
        timed_out,
    }
}

/// `watch` arguments for `pid`, then `extra`.
pub fn watch(pid: u32, extra: &[&str]) -> Command {
    let mut c = bin();
    c.args(["watch", "--pid", &pid.to_string()]).args(extra);
    c
}

/// A child that sleeps for `secs` seconds (killed and reaped on drop).
pub struct Sleeper(pub Child);

impl Sleeper {
    pub fn new(secs: &str) -> Sleeper {
        Sleeper(Command::new("sleep").arg(secs).spawn().unwrap())
    }
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The scheduler state letter of `pid` (`Z` for a zombie).
pub fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// Waits (up to 300 s: only a hang takes that long) until `pid` is a zombie.
pub fn wait_for_zombie(pid: u32) {
    let start = Instant::now();
    while state(pid) != Some('Z') {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "{pid} never became a zombie"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

//! bpftrace doing the counting ours does, on the same workload: the
//! scripts are `benches/bpftrace/*.bt`, run for one process id (`$1`).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::stats::{is_ours, program_stats};

/// What our `sched_switch` program counts.
const SWITCH: &str = include_str!("../../bpftrace/switch.bt");
/// Everything else ours counts with syscalls on (appended to `SWITCH`).
const SYSCALLS: &str = include_str!("../../bpftrace/syscalls.bt");
/// The one-liner counting switches per thread of one process.
const SWITCH_COUNT: &str = include_str!("../../bpftrace/switch_count.bt");

/// Which of our programs a bpftrace script stands for.
#[derive(Clone, Copy, PartialEq)]
pub enum Script {
    /// Our `sched_switch` handler: for one process, voluntary and
    /// involuntary switches per thread and a histogram of off-CPU spans
    /// (filter on the process first).
    Switch,
    /// Everything ours counts with syscalls on: the above, wakeups and
    /// wakers per thread, and for the poll and nanosleep families
    /// calls, zero returns, timeouts and time in the call, on the
    /// per-syscall tracepoints (bpftrace's cheapest way to them).
    Full,
    /// The one-liner a user would write first: switches per thread of one
    /// process (the baseline of the pool measurement).
    SwitchCount,
}

impl Script {
    fn text(self) -> String {
        match self {
            Script::Switch => SWITCH.to_owned(),
            Script::Full => format!("{SWITCH}\n{SYSCALLS}"),
            Script::SwitchCount => SWITCH_COUNT.to_owned(),
        }
    }
}

/// A running bpftrace with one of the scripts for process `pid`.
pub struct Bpftrace {
    child: Child,
    /// Ids of the programs it loaded.
    pub ids: Vec<u32>,
}

impl Bpftrace {
    pub fn start(pid: u32, script: Script) -> Result<Bpftrace, String> {
        let before: Vec<u32> = program_stats().keys().copied().collect();
        let child = Command::new("bpftrace")
            .args(["-e", &script.text(), &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                format!("cannot run bpftrace ({e}); install it with `apt-get install bpftrace`")
            })?;
        let mut bt = Bpftrace {
            child,
            ids: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = bt.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = bt.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                return Err(format!("bpftrace exited ({status}): {}", err.trim()));
            }
            let theirs = || -> Vec<u32> {
                program_stats()
                    .iter()
                    .filter(|(id, (name, _, _))| !before.contains(id) && !is_ours(name))
                    .map(|(id, _)| *id)
                    .collect()
            };
            if !theirs().is_empty() {
                // Let it finish loading and attaching all its programs.
                std::thread::sleep(Duration::from_millis(1000));
                bt.ids = theirs();
                return Ok(bt);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err("bpftrace did not load a program within 30 s".into())
    }
}

impl Drop for Bpftrace {
    fn drop(&mut self) {
        // SIGINT lets bpftrace detach and print its maps (to /dev/null).
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: signalling our own child process.
            unsafe { libc::kill(pid, libc::SIGINT) };
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

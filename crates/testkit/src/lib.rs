//! Dev-only helpers of wakemeter's tests (never published): the
//! child-process scaffolding the crates' tests share.
//!
//! - [`Running`]: a child killed and reaped when dropped; [`Sleeper`], a
//!   `sleep` child to watch.
//! - [`build_c`] and [`start_ready`]: a C test program built with `cc`,
//!   started and waited for until it prints `ready`.
//! - [`Work`]: what a process's threads did so far, by the kernel's own
//!   accounting (`schedstat`, `status`), to wait for work instead of for
//!   a fixed time.
//! - [`this_test`], [`start_until_ready`], [`ready_until_stdin_closes`]
//!   and [`park_threads`]: the test binary started again as a target
//!   with the threads a test watches.
//! - [`thread_named`] and [`held_bpf_program_ids`]: a thread found by
//!   name, the BPF programs a process holds.
//! - [`run`] and [`run_until`]: a command run to its end under a hang
//!   guard ([`HANG_GUARD`]), with what it printed.
//! - [`state`] and [`wait_for_zombie`]: a process's scheduler state.
//! - [`thread_cpu_ns`]: the calling thread's own CPU clock.
//!
//! A failed setup is a failed test: these helpers panic with a message
//! saying what is missing.

mod child;
mod kernel;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use child::{park_threads, ready_until_stdin_closes, start_until_ready, this_test};
pub use kernel::{held_bpf_program_ids, thread_named};

/// The least time [`run`] gives a command before it calls it hung: on a
/// machine at load 200 a run of a few seconds took over 20 s, so a test
/// must never fail only because the machine is slow. A test that checks
/// promptness makes the broken behaviour take far longer than this
/// (e.g. `--every 3600`).
pub const HANG_GUARD: Duration = Duration::from_secs(600);

/// A running child, killed and reaped when dropped.
#[derive(Debug)]
pub struct Running(pub Child);

impl Running {
    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A child that sleeps for `secs` seconds (killed and reaped on drop).
#[derive(Debug)]
pub struct Sleeper(pub Running);

impl Sleeper {
    /// Starts `sleep secs` (`secs` as `sleep` takes it: `600`, `0.5`),
    /// and returns once it is named `sleep` (see [`wait_for_name`]).
    pub fn new(secs: &str) -> Sleeper {
        match Command::new("sleep").arg(secs).spawn() {
            Ok(child) => {
                let s = Sleeper(Running(child));
                wait_for_name(s.pid(), "sleep");
                s
            }
            Err(e) => panic!("sleep {secs} does not start: {e}"),
        }
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.0.pid()
    }
}

/// Compiles the C file `src` with `flags` (and `-lpthread`) into
/// `out_dir/out_name`, and returns the program's path. Panics when `cc`
/// is missing or the build fails.
pub fn build_c(src: &Path, out_dir: &Path, out_name: &str, flags: &[&str]) -> PathBuf {
    let out = out_dir.join(out_name);
    let status = Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(src)
        .arg("-lpthread")
        .status();
    match status {
        Ok(s) if s.success() => out,
        Ok(s) => panic!("cc {} failed: {s}", src.display()),
        Err(e) => panic!("cc does not run (install a C compiler: apt-get install gcc): {e}"),
    }
}

/// Starts `program args` with its stdout piped and waits for it to say
/// `ready` (see [`start_until_ready`]).
pub fn start_ready(program: &Path, args: &[&str]) -> Running {
    start_until_ready(Command::new(program).args(args))
}

/// What a process's threads have done so far, summed over its threads:
/// CPU time (ns, `schedstat`) and voluntary context switches (`status`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Work {
    /// CPU time of all threads, ns.
    pub cpu_ns: u64,
    /// Voluntary context switches of all threads (each one an off-CPU
    /// period).
    pub voluntary_switches: u64,
}

impl Work {
    /// `pid`'s work so far (threads gone meanwhile are left out; 0 once
    /// the process is gone).
    pub fn of(pid: u32) -> Work {
        let mut work = Work::default();
        for tid in wakemeter_procfs::process::tids(pid).unwrap_or_default() {
            let one = Work::of_thread(pid, tid);
            work.cpu_ns += one.cpu_ns;
            work.voluntary_switches += one.voluntary_switches;
        }
        work
    }

    /// The work of thread `tid` of `pid` alone (0 once it is gone).
    pub fn of_thread(pid: u32, tid: u32) -> Work {
        use wakemeter_procfs::{parse, process};
        let cpu_ns = process::task_file(pid, tid, "schedstat")
            .ok()
            .and_then(|b| parse::schedstat(&b))
            .map_or(0, |(run, _, _)| run);
        let voluntary_switches = process::task_file(pid, tid, "status")
            .ok()
            .and_then(|b| parse::status_switches(&b))
            .map_or(0, |(voluntary, _)| voluntary);
        Work {
            cpu_ns,
            voluntary_switches,
        }
    }

    /// The work done since `earlier`.
    pub fn since(self, earlier: Work) -> Work {
        Work {
            cpu_ns: self.cpu_ns.saturating_sub(earlier.cpu_ns),
            voluntary_switches: self
                .voluntary_switches
                .saturating_sub(earlier.voluntary_switches),
        }
    }
}

/// What one run of a command did.
#[derive(Debug)]
pub struct Run {
    /// Its exit code (`None` when a signal ended it).
    pub code: Option<i32>,
    /// Everything it wrote to stdout.
    pub stdout: Vec<u8>,
    /// Everything it wrote to stderr.
    pub stderr: Vec<u8>,
    /// From its start to its end, wall clock.
    pub elapsed: Duration,
    /// Whether it was killed for running past its limit.
    pub timed_out: bool,
}

impl Run {
    /// Its stdout as text (invalid UTF-8 replaced).
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Its stderr as text (invalid UTF-8 replaced).
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
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => panic!("{cmd:?} does not start: {e}"),
    };
    let out = child.stdout.take().map(drain);
    let err = child.stderr.take().map(drain);
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Ok(st),
            Ok(None) => {}
            Err(e) => break Err(e),
        }
        if start.elapsed() > limit {
            timed_out = true;
            let _ = child.kill();
            break child.wait();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let status = match status {
        Ok(st) => st,
        Err(e) => panic!("waiting for {cmd:?}: {e}"),
    };
    let elapsed = start.elapsed();
    let joined = |h: Option<std::thread::JoinHandle<Vec<u8>>>| {
        h.and_then(|h| h.join().ok()).unwrap_or_default()
    };
    Run {
        code: status.code(),
        stdout: joined(out),
        stderr: joined(err),
        elapsed,
        timed_out,
    }
}

/// Reads `r` to its end on a thread of its own.
fn drain(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    })
}

/// The scheduler state letter of `pid` (`Z` for a zombie), `None` once
/// it is gone.
pub fn state(pid: u32) -> Option<char> {
    let stat = wakemeter_procfs::process::stat(pid).ok()?;
    wakemeter_procfs::parse::stat_state(&stat).map(char::from)
}

/// Waits (up to 300 s: only a hang takes that long) until `pid` is named
/// `name` (its `comm`), or is gone. A child just spawned is not named yet:
/// its parent resumes when the exec has replaced its memory, before the
/// kernel renames it after the program, so a watcher started at once may
/// read the parent's thread name (a CLI test once said "a_target_that_e").
pub fn wait_for_name(pid: u32, name: &str) {
    let start = Instant::now();
    loop {
        match wakemeter_procfs::process::comm(wakemeter_procfs::process::Process::Pid(pid)) {
            Ok(comm) if comm == name.as_bytes() => return,
            Ok(_) => {}
            Err(_) => return,
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "{pid} was never named {name}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
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

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`: what the
/// scheduler charged it), in nanoseconds, to run a thread for a known
/// amount of CPU whatever the machine's load.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the struct passed,
    // which lives for the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleeper_is_killed_and_reaped_on_drop_and_its_state_read() {
        let s = Sleeper::new("600");
        let pid = s.pid();
        // Sleeping (S) or, just spawned, still running (R).
        assert!(matches!(state(pid), Some('S' | 'R')), "{:?}", state(pid));
        drop(s);
        // Reaped: no zombie left behind.
        assert_eq!(state(pid), None);
    }

    #[test]
    fn a_run_says_its_code_and_output_and_a_hang_is_killed() {
        let r = run(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Duration::ZERO,
        );
        assert_eq!(
            (r.code, r.stdout(), r.stderr(), r.timed_out),
            (Some(3), "out\n".into(), "err\n".into(), false)
        );
        let r = run_until(Command::new("sleep").arg("600"), Duration::from_millis(100));
        assert!(r.timed_out && r.code.is_none(), "{}", r.said());
    }

    #[test]
    fn work_counts_this_process_cpu() {
        let pid = std::process::id();
        let before = Work::of(pid);
        let start = Instant::now();
        // Wait for the kernel to account some CPU of this thread (bounded
        // by the hang guard, not by a fixed time).
        let mut x = 0u64;
        while Work::of(pid).since(before).cpu_ns < 1_000_000 {
            for i in 0..100_000u64 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
            }
            std::hint::black_box(x);
            assert!(start.elapsed() < HANG_GUARD, "no CPU time accounted");
        }
        let tid = wakemeter_procfs::process::current_tid().unwrap_or(pid);
        assert!(Work::of_thread(pid, tid).cpu_ns > 0);
    }
}

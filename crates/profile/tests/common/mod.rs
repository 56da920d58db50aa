//! Helpers of the profile tests: C programs with a known answer, built
//! from the test with `cc`, and run as children.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Compiles `tests/programs/<name>.c` with `flags` into the test's temp dir.
pub fn build(name: &str, out_name: &str, flags: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(out_name);
    let status = Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .arg("-lpthread")
        .status()
        .expect("cc runs (install a C compiler: apt-get install gcc)");
    assert!(status.success(), "cc {name}.c failed");
    out
}

/// A running child, killed when dropped.
pub struct Running(pub Child);

impl Running {
    /// The child's pid.
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

/// Starts `program args` and waits for its `ready` line.
pub fn start(program: &Path, args: &[&str]) -> Running {
    let mut child = Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("test program starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("reads the ready line");
    assert_eq!(line.trim(), "ready", "test program did not start");
    Running(child)
}

/// The bound of every wait for work in these tests: a hang guard, not a
/// deadline that a loaded machine may miss.
pub const HANG_GUARD: std::time::Duration = std::time::Duration::from_secs(300);

/// How long the test programs run at most (they are killed when their
/// test is done): far longer than any wait, so a slow machine never
/// outlives them.
pub const PROGRAM_SECONDS: &str = "600";

/// What `pid`'s threads have done so far, summed over
/// `/proc/PID/task/*`: CPU time (ns, schedstat) and voluntary context
/// switches (status), the work on-CPU and off-CPU stacks are taken on.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Work {
    /// CPU time of all threads, ns.
    pub cpu_ns: u64,
    /// Voluntary context switches of all threads (each one an off-CPU
    /// period).
    pub voluntary_switches: u64,
}

impl Work {
    /// `pid`'s work so far (threads gone meanwhile are left out).
    pub fn of(pid: u32) -> Work {
        let mut work = Work::default();
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return work;
        };
        for task in tasks.flatten() {
            let one = Work::of_task_dir(&task.path());
            work.cpu_ns += one.cpu_ns;
            work.voluntary_switches += one.voluntary_switches;
        }
        work
    }

    /// The work of thread `tid` of `pid` alone (0 once it is gone).
    pub fn of_thread(pid: u32, tid: u32) -> Work {
        Work::of_task_dir(Path::new(&format!("/proc/{pid}/task/{tid}")))
    }

    fn of_task_dir(dir: &Path) -> Work {
        let cpu_ns = std::fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        let voluntary_switches = std::fs::read_to_string(dir.join("status"))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or(0);
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

/// Captures `options.kind()` stacks of `pid` until `enough` says the
/// work `pid` did since the capture started suffices (checked every 50 ms;
/// the capture's own module refresh runs meanwhile), instead of for a
/// fixed time that a loaded machine may spend elsewhere. Panics after
/// [`HANG_GUARD`].
pub fn capture_until(
    profiler: &wakemeter_profile::Profiler,
    pid: u32,
    options: &wakemeter_profile::ProfileOptions,
    enough: impl Fn(Work) -> bool,
) -> wakemeter_profile::Profile {
    capture_until_work_of(profiler, pid, options, || Work::of(pid), enough)
}

/// As [`capture_until`], with the work measured by `work` (a thread's,
/// say).
pub fn capture_until_work_of(
    profiler: &wakemeter_profile::Profiler,
    pid: u32,
    options: &wakemeter_profile::ProfileOptions,
    work: impl Fn() -> Work,
    enough: impl Fn(Work) -> bool,
) -> wakemeter_profile::Profile {
    let mut capture = profiler
        .start(wakemeter_profile::Target::Pid(pid), options)
        .expect("capture starts");
    let before = work();
    loop {
        let done = work().since(before);
        if enough(done) {
            break;
        }
        assert!(!capture.target_exited(), "the target exited: {done:?}");
        assert!(
            capture.elapsed() < HANG_GUARD,
            "the target did too little work: {done:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
        capture.refresh_modules();
    }
    capture.finish(profiler).expect("capture finishes")
}

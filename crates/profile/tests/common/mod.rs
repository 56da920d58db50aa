//! Helpers of the profile tests: C programs with a known answer, built
//! from the test with `cc`, and run as children.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

pub use wakemeter_testkit::{Running, Work};

/// Compiles `tests/programs/<name>.c` with `flags` into the test's temp dir.
pub fn build(name: &str, out_name: &str, flags: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c"));
    wakemeter_testkit::build_c(
        &src,
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        out_name,
        flags,
    )
}

/// Starts `program args` and waits for its `ready` line.
pub fn start(program: &Path, args: &[&str]) -> Running {
    wakemeter_testkit::start_ready(program, args)
}

/// How far a share measured from `n` samples may be from its true `p`:
/// four standard errors of a proportion (a test that fails once in 15,000
/// runs by chance alone), and never less than 5 points. A fixed 5 points
/// was 1.85 standard errors of spin_here's 70% at 282 samples: it failed
/// by chance about one run in 16 (63.5% once, on a loaded machine).
pub fn share_tolerance(p: f64, n: u64) -> f64 {
    (4.0 * (p * (1.0 - p) / n as f64).sqrt()).max(0.05)
}

/// The bound of every wait for work in these tests: a hang guard, not a
/// deadline that a loaded machine may miss.
pub const HANG_GUARD: std::time::Duration = std::time::Duration::from_secs(300);

/// How long the test programs run at most (they are killed when their
/// test is done): far longer than any wait, so a slow machine never
/// outlives them.
pub const PROGRAM_SECONDS: &str = "600";

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

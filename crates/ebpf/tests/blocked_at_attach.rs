//! Threads that are blocked when the programs attach, and stay blocked: no
//! switch shows them to the programs, yet their wait belongs to them, by its
//! cause, from the attach on. (Redis's `bio_*` threads wait like this for
//! minutes; an alike thread that woke once must not be the only one
//! charged with waiting.) Needs root, kernel BTF and a build with clang:
//! `cargo test -p wakemeter-ebpf --test blocked_at_attach -- --include-ignored`.
#![cfg(target_os = "linux")]
// Test helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::process::Stdio;
use std::sync::{Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use wakemeter::{KernelSample, KernelSource};
use wakemeter_ebpf::{EbpfSource, Target};
use wakemeter_testkit::Running;

/// Body of the helper process (this test binary run again): four threads
/// that block at once and forever, each in another kind of wait, named
/// after it. Does nothing in a normal test run.
#[test]
fn helper_main() {
    if std::env::var("WAKEMETER_BLOCKED_HELPER").is_err() {
        return;
    }
    let spawn = |name: &str, body: fn()| {
        thread::Builder::new()
            .name(name.into())
            .spawn(body)
            .unwrap()
    };
    spawn("wm-lock", || {
        let pair = (Mutex::new(()), Condvar::new());
        let mut g = pair.0.lock().unwrap();
        loop {
            g = pair.1.wait(g).unwrap();
        }
    });
    spawn("wm-sleep", || {
        loop {
            thread::sleep(Duration::from_secs(3600));
        }
    });
    spawn("wm-poll", || {
        let mut fds = [0i32; 2];
        // SAFETY: `fds` has room for the two descriptors pipe writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let mut p = libc::pollfd {
            fd: fds[0],
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one valid pollfd; no timeout: it never returns.
            unsafe { libc::poll(&mut p, 1, -1) };
        }
    });
    thread::sleep(Duration::from_secs(120));
}

/// The tid of the thread named `name`, once it is blocked (not running).
fn blocked_thread(pid: u32, name: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for e in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
            let path = e.unwrap().path();
            let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            let syscall = std::fs::read_to_string(path.join("syscall")).unwrap_or_default();
            if comm.trim_end() == name && !syscall.starts_with("running") {
                return path.file_name().unwrap().to_str().unwrap().parse().unwrap();
            }
        }
        assert!(
            Instant::now() < deadline,
            "no blocked thread {name} in {pid}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

fn off_cpu_of(sample: &KernelSample, tid: u64) -> wakemeter::kernel::OffCpuTime {
    let t = sample.thread(tid).unwrap_or_else(|| {
        panic!("thread {tid} blocked since before the attach has no kernel view: {sample:#?}")
    });
    assert_eq!(
        t.total_voluntary_switches + t.total_involuntary_switches,
        0,
        "it never switched"
    );
    t.total_off_cpu.clone()
}

#[test]
#[ignore = "needs root"]
fn threads_blocked_since_before_the_attach_have_their_wait_by_cause() {
    let helper = Running(
        wakemeter_testkit::this_test("helper_main", "WAKEMETER_BLOCKED_HELPER", "1")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = helper.0.id();
    let lock = blocked_thread(pid, "wm-lock");
    let sleep = blocked_thread(pid, "wm-sleep");
    let poll = blocked_thread(pid, "wm-poll");
    // Long enough for all three to be well inside their waits.
    thread::sleep(Duration::from_millis(100));

    let mut source = match EbpfSource::attach(Target::Pid(pid)) {
        Ok(s) => s,
        Err(e) => panic!("attach failed (needs root, kernel BTF, clang): {e}"),
    };
    let first = source.read().unwrap();
    thread::sleep(Duration::from_millis(500));
    let second = source.read().unwrap();

    for (tid, cause) in [(lock, "lock"), (sleep, "sleep"), (poll, "poll")] {
        let (a, b) = (off_cpu_of(&first, tid), off_cpu_of(&second, tid));
        let grew = |f: fn(&wakemeter::kernel::OffCpuTime) -> u64| f(&b).saturating_sub(f(&a));
        let by_cause = match cause {
            "lock" => grew(|o| o.lock_ns),
            "sleep" => grew(|o| o.sleep_ns),
            _ => grew(|o| o.poll_ns),
        };
        let other = grew(|o| o.total_ns()) - by_cause;
        println!("{cause}: +{by_cause} ns in its cause, +{other} ns elsewhere");
        // 500 ms of wall time between the reads, all of it blocked.
        assert!(by_cause >= 400_000_000, "{cause}: {by_cause} ns");
        assert_eq!(other, 0, "{cause}: the wait went to another cause");
    }
}

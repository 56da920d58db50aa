//! Helpers for integration tests: the kernel's own accounting, read directly.
#![allow(dead_code)]
// Test helpers may panic: a failed setup is a failed test.
#![allow(clippy::unwrap_used)]

pub mod workloads;

use std::fs;
use std::sync::mpsc;
use std::time::Duration;

/// This thread's TID.
pub fn gettid() -> u64 {
    // SAFETY: gettid has no preconditions.
    (unsafe { libc::gettid() }) as u64
}

/// A field of `/proc/self/task/<tid>/status`.
pub fn status_field(tid: u64, key: &str) -> u64 {
    let s = fs::read_to_string(format!("/proc/self/task/{tid}/status")).expect("status");
    s.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("field present")
}

/// `(run_ns, wait_ns, switches)` of `/proc/<pid>/task/<tid>/schedstat`.
pub fn schedstat(pid: &str, tid: u64) -> (u64, u64, u64) {
    let s = fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).expect("schedstat");
    let v: Vec<u64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();
    (v[0], v[1], v[2])
}

/// Number of open file descriptors of this process.
pub fn open_fds() -> usize {
    fs::read_dir("/proc/self/fd").expect("fd dir").count()
}

/// Burns roughly `ns` of CPU time on the calling thread.
pub fn burn_cpu(ns: u64) {
    let start = thread_cpu_ns();
    let mut x = 0u64;
    while thread_cpu_ns() - start < ns {
        for i in 0..10_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
    }
}

/// The calling thread's CPU clock, in ns.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs `work` on a new thread, then keeps the thread blocked (its counters
/// frozen) until the returned sender is dropped. Returns its TID.
pub fn parked_thread(
    work: impl FnOnce() + Send + 'static,
) -> (u64, mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (tid_tx, tid_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let h = std::thread::Builder::new()
        .name("wm-test-worker".into())
        .spawn(move || {
            work();
            tid_tx.send(gettid()).unwrap();
            let _ = stop_rx.recv();
        })
        .unwrap();
    let tid = tid_rx.recv().unwrap();
    // Let it reach the blocking recv.
    std::thread::sleep(Duration::from_millis(20));
    (tid, stop_tx, h)
}

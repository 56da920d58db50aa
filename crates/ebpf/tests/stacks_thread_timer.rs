//! On-CPU sessions with per-thread timers ([`SamplingTimer::PerThread`]):
//! each thread's samples are its own CPU time × frequency, within counting
//! noise, whether it spins or runs in bursts, and a thread created after
//! attach is sampled too (its event is inherited with the program). Each
//! worker runs until its own CPU clock has advanced by a fixed amount,
//! however long a loaded machine takes; samples are read after it ended.
//! Needs root.
#![cfg(target_os = "linux")]
// Test helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use wakemeter_ebpf::stacks::StackCounts;
use wakemeter_ebpf::{SamplingTimer, StackKind, StackSession, Target};
use wakemeter_testkit::thread_cpu_ns;

const FREQUENCY_HZ: u64 = 999;
/// CPU time each worker runs for: about 2,000 samples due at 999 Hz.
const WORK_NS: u64 = 2_000_000_000;

/// A worker thread: sends its thread id, waits for `go`, then spins (or, if
/// `bursty`, runs 2 ms and sleeps 1 ms, a switch-out and a switch-in per
/// burst) until its CPU clock advanced by [`WORK_NS`]; returns the CPU
/// time between its two marks.
fn worker(
    bursty: bool,
    tids: mpsc::Sender<u32>,
    go: mpsc::Receiver<()>,
) -> thread::JoinHandle<u64> {
    thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        tids.send(u32::try_from(tid).unwrap()).unwrap();
        go.recv().unwrap();
        let start = thread_cpu_ns();
        while thread_cpu_ns() - start < WORK_NS {
            if bursty {
                let until = Instant::now() + Duration::from_millis(2);
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
                thread::sleep(Duration::from_millis(1));
            } else {
                std::hint::spin_loop();
            }
        }
        thread_cpu_ns() - start
    })
}

fn attach_per_thread() -> StackSession {
    StackSession::builder(Target::Pid(std::process::id()), StackKind::OnCpu)
        .with_frequency_hz(FREQUENCY_HZ)
        .with_timer(SamplingTimer::PerThread)
        .attach()
        .unwrap()
}

fn samples_of(counts: &StackCounts, tid: u32) -> u64 {
    counts
        .entries
        .iter()
        .filter(|e| e.tid == tid)
        .map(|e| e.count)
        .sum()
}

/// The samples written for `tid` are its CPU time × frequency within
/// counting noise (3 √due) and one sample at each end of its work.
fn assert_kept(counts: &StackCounts, tid: u32, cpu_ns: u64, what: &str) {
    let timer = counts.timer.expect("an on-CPU session has timer figures");
    assert_eq!(timer.sampling_timer, SamplingTimer::PerThread, "{timer:?}");
    assert_eq!(timer.fallback, None, "{timer:?}");
    assert!(timer.thread_events >= 1, "{timer:?}");
    let due = cpu_ns as f64 * FREQUENCY_HZ as f64 / 1e9;
    let kept = samples_of(counts, tid) as f64;
    println!(
        "{what}: {kept} kept of {due:.1} due ({:.3}); {timer:?}",
        kept / due
    );
    assert!(
        (kept - due).abs() <= 3.0 * due.sqrt() + 2.0,
        "{what}: {kept} kept of {due:.1} due"
    );
}

/// A worker made before attach, started after it; returns the counts
/// once it ended, its thread id and its CPU time.
fn existing_thread(bursty: bool) -> (StackCounts, u32, u64) {
    let (tid_tx, tid_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let handle = worker(bursty, tid_tx, go_rx);
    let tid = tid_rx.recv().unwrap();
    let mut session = attach_per_thread();
    go_tx.send(()).unwrap();
    let cpu_ns = handle.join().unwrap();
    (session.read().unwrap(), tid, cpu_ns)
}

#[test]
#[ignore = "needs root"]
fn per_thread_timer_keeps_a_spinning_threads_cpu_time() {
    let (counts, tid, cpu_ns) = existing_thread(false);
    assert_kept(&counts, tid, cpu_ns, "spinning");
}

#[test]
#[ignore = "needs root"]
fn per_thread_timer_keeps_a_bursty_threads_cpu_time() {
    let (counts, tid, cpu_ns) = existing_thread(true);
    assert_kept(&counts, tid, cpu_ns, "bursty");
}

#[test]
#[ignore = "needs root"]
fn a_thread_created_after_attach_is_sampled() {
    let mut session = attach_per_thread();
    // Created by this thread, whose event (opened at attach) it inherits.
    let (tid_tx, tid_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let handle = worker(true, tid_tx, go_rx);
    let tid = tid_rx.recv().unwrap();
    go_tx.send(()).unwrap();
    let cpu_ns = handle.join().unwrap();
    let counts = session.read().unwrap();
    assert_kept(&counts, tid, cpu_ns, "created after attach");
}

#[test]
#[ignore = "needs root"]
fn one_thread_gets_one_event() {
    let (tid_tx, tid_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let handle = worker(true, tid_tx, go_rx);
    let tid = tid_rx.recv().unwrap();
    let mut session = StackSession::builder(Target::Pid(std::process::id()), StackKind::OnCpu)
        .with_frequency_hz(FREQUENCY_HZ)
        .with_timer(SamplingTimer::PerThread)
        .with_thread(tid)
        .attach()
        .unwrap();
    go_tx.send(()).unwrap();
    let cpu_ns = handle.join().unwrap();
    let counts = session.read().unwrap();
    assert_eq!(counts.timer.map(|t| t.thread_events), Some(1), "{counts:?}");
    assert_kept(&counts, tid, cpu_ns, "one thread");
}

//! The on-CPU session's timer figures (`StackCounts::timer`), with the
//! `sched_switch` program attached both ways (`tp_btf` and `raw_tp`): a
//! thread of this process that runs in bursts is sampled until the program
//! has taken 50 of its samples, however long a loaded machine takes. Needs
//! root.
#![cfg(target_os = "linux")]
// Test helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use wakemeter_ebpf::{AttachKind, StackKind, StackSession, Target};

/// Runs 2 ms, sleeps 1 ms, until `stop`: a switch-out and a switch-in per
/// burst.
fn bursts(stop: Arc<AtomicBool>) {
    thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let until = Instant::now() + Duration::from_millis(2);
            while Instant::now() < until {
                std::hint::spin_loop();
            }
            thread::sleep(Duration::from_millis(1));
        }
    });
}

fn timer_figures(kind: AttachKind) {
    let stop = Arc::new(AtomicBool::new(false));
    bursts(Arc::clone(&stop));
    let pid = std::process::id();
    let mut session = StackSession::builder(Target::Pid(pid), StackKind::OnCpu)
        .with_frequency_hz(999)
        .with_attach_kind(kind)
        .attach()
        .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
    // A hang guard of minutes, not a window: wait for the samples.
    let deadline = Instant::now() + Duration::from_secs(300);
    let counts = loop {
        thread::sleep(Duration::from_millis(50));
        let counts = session.read().unwrap();
        if counts.samples_taken >= 50 {
            break counts;
        }
        assert!(Instant::now() < deadline, "{kind:?}: {counts:?}");
    };
    stop.store(true, Ordering::Relaxed);
    let timer = counts.timer.expect("an on-CPU session has timer figures");
    println!("{kind:?}: {} taken, {timer:?}", counts.samples_taken);
    // The threads were on a CPU for the samples taken, and the program's
    // own time in them is part of that time.
    assert!(timer.switch_ns > 0, "{timer:?}");
    assert!(timer.program_ns > 0, "{timer:?}");
    assert!(timer.program_ns < timer.switch_ns, "{timer:?}");
    let written: u64 = counts.entries.iter().map(|e| e.count).sum();
    assert!(written <= counts.samples_taken, "{written} written");
}

#[test]
#[ignore = "needs root"]
fn timer_figures_with_tp_btf() {
    timer_figures(AttachKind::BtfTracepoint);
}

#[test]
#[ignore = "needs root"]
fn timer_figures_with_raw_tp() {
    timer_figures(AttachKind::RawTracepoint);
}

//! Per-thread timers asked for on a target with more threads than the
//! descriptor budget (half the soft open-file limit): the session samples
//! per CPU and says so. A file of its own: it lowers this test process's
//! open-file limit. Needs root.
#![cfg(target_os = "linux")]
// Test helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use wakemeter_ebpf::stacks::TimerFallback;
use wakemeter_ebpf::{SamplingTimer, StackKind, StackSession, Target};

/// Soft open-file limit for this process: a budget of 64 descriptors.
const SOFT_LIMIT: u64 = 128;
/// Parked threads, more than the budget.
const PARKED: usize = 80;

fn lower_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read or write one rlimit we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = SOFT_LIMIT;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
}

#[test]
#[ignore = "needs root"]
fn more_threads_than_the_budget_fall_back_to_per_cpu() {
    lower_open_file_limit();
    assert_eq!(SamplingTimer::fd_budget(), 64);
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let done_rx = std::sync::Arc::new(std::sync::Mutex::new(done_rx));
    let parked: Vec<_> = (0..PARKED)
        .map(|_| {
            let done = std::sync::Arc::clone(&done_rx);
            thread::spawn(move || {
                // Every thread waits for the channel to close.
                let _ = done.lock().map(|rx| rx.recv());
            })
        })
        .collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spin_stop = std::sync::Arc::clone(&stop);
    let spinner = thread::spawn(move || {
        while !spin_stop.load(std::sync::atomic::Ordering::Relaxed) {
            std::hint::spin_loop();
        }
    });
    let mut session = StackSession::builder(Target::Pid(std::process::id()), StackKind::OnCpu)
        .with_frequency_hz(999)
        .with_timer(SamplingTimer::PerThread)
        .attach()
        .unwrap();
    // Per-CPU timers still sample: wait for 20 samples (a hang guard of
    // minutes, not a window).
    let deadline = Instant::now() + Duration::from_secs(300);
    let counts = loop {
        thread::sleep(Duration::from_millis(50));
        let counts = session.read().unwrap();
        if counts.samples_taken >= 20 {
            break counts;
        }
        assert!(Instant::now() < deadline, "{counts:?}");
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(done_tx);
    spinner.join().unwrap();
    for p in parked {
        p.join().unwrap();
    }
    let timer = counts.timer.expect("an on-CPU session has timer figures");
    println!("{timer:?}");
    assert_eq!(timer.sampling_timer, SamplingTimer::PerCpu, "{timer:?}");
    assert_eq!(timer.thread_events, 0, "{timer:?}");
    let Some(TimerFallback {
        threads, fd_budget, ..
    }) = timer.fallback
    else {
        panic!("no fallback said: {timer:?}");
    };
    assert_eq!(fd_budget, 64);
    // The parked threads, the spinner, this one and the harness's main.
    assert!(
        threads > fd_budget && threads as usize >= PARKED + 2,
        "{threads} threads"
    );
}

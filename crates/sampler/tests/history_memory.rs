//! Bytes held by history with kernel counters and with probes (its own
//! test binary, so the figures are not disturbed by other tests).
#![cfg(target_os = "linux")]
// Test helpers outside #[test] functions unwrap like the tests do.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Barrier};

use wakemeter::kernel::Waker;
use wakemeter::{KernelSample, KernelSource, KernelSourceError, KernelThreadStats, SamplerBuilder};

/// A kernel source whose every thread is busy between reads: CPU, switches,
/// wakeups, poll and sleep calls, three histograms and eight wakers all
/// change, as they do for an active target under eBPF.
struct BusyKernel {
    threads: Vec<KernelThreadStats>,
    round: u64,
}

impl BusyKernel {
    fn new(n: u64) -> Self {
        let threads = (0..n)
            .map(|i| {
                let mut t = KernelThreadStats::default();
                t.tid = 10_000 + i;
                t.name = format!("worker-{i}");
                t
            })
            .collect();
        BusyKernel { threads, round: 0 }
    }
}

impl KernelSource for BusyKernel {
    fn read(&mut self) -> Result<KernelSample, KernelSourceError> {
        self.round += 1;
        let r = self.round;
        for (i, t) in self.threads.iter_mut().enumerate() {
            let x = r
                .wrapping_mul(2_654_435_761)
                .wrapping_add(i as u64 * 40_503)
                % 1000;
            t.total_on_cpu_ns += 3_000_000 + x * 7_919;
            t.total_voluntary_switches += 200 + x % 97;
            t.total_involuntary_switches += x % 13;
            t.total_off_cpu.sleep_ns += 400_000_000 + x * 104_729;
            t.total_off_cpu.poll_ns += 300_000_000 + x * 15_485;
            t.total_off_cpu.preempted_ns += x * 1_299;
            t.total_wakes += 200 + x % 89;
            t.poll.total_calls += 150 + x % 31;
            t.poll.total_idle_calls += 40 + x % 7;
            t.poll.total_blocked_ns += 250_000_000 + x * 3_571;
            t.sleep.total_calls += 50 + x % 11;
            t.sleep.total_requested_ns += 50_000_000;
            t.sleep.total_actual_ns += 50_000_000 + x * 1_117;
            for k in 0..6 {
                t.off_cpu_histogram.record((x + k * 131) * 1_000);
                t.run_queue_latency_histogram.record((x + k * 17) * 100);
                t.poll.timeout_histogram.record(1_000_000 << (k % 4));
            }
            t.top_wakers = (0..8)
                .map(|w| {
                    let mut waker = Waker::default();
                    waker.tid = 20_000 + w;
                    waker.name = format!("waker-{w}");
                    waker.total_wakes = r * (100 + w) + x;
                    waker
                })
                .collect();
        }
        let mut s = KernelSample::default();
        s.source = "busy".into();
        s.pid = std::process::id();
        s.threads = self.threads.clone();
        Ok(s)
    }
}

const SNAPSHOTS: usize = 300;
const MIB: f64 = (1 << 20) as f64;

/// One test, run in turn, so that neither measurement sees the other's threads.
#[test]
fn history_bytes_with_kernel_counters_and_with_probes() {
    one_hundred_busy_probes_times_300_snapshots_fit_2_mib();
    kernel_counters_of_256_busy_threads_times_300_snapshots_fit_16_mib();
    the_byte_budget_bounds_a_5000_thread_kernel_view();
}

/// 5,000 busy threads in the kernel view (every thread active under
/// eBPF), 300 snapshots configured, a 4 MiB budget: the history stays
/// within the budget by holding fewer snapshots, drops the oldest first
/// and says so in the stats. (The same with 20,000 threads and the default
/// 32 MiB held 13 snapshots of 2.5 MB; README, "Memory of the history".)
fn the_byte_budget_bounds_a_5000_thread_kernel_view() {
    let budget = 4 << 20;
    let s = SamplerBuilder::new()
        .with_history(SNAPSHOTS as u32)
        .with_history_budget_bytes(budget)
        .with_kernel_source(Box::new(BusyKernel::new(5_000)))
        .build()
        .unwrap();
    let taken = 12;
    for _ in 0..taken {
        s.sample().unwrap();
    }
    let stats = s.stats();
    println!(
        "5,000 busy kernel threads: {} snapshots held in {:.2} MiB (budget {:.0} MiB), {} bytes per snapshot, {} dropped for bytes",
        stats.history_len,
        stats.history_bytes as f64 / MIB,
        budget as f64 / MIB,
        stats.history_bytes / u64::from(stats.history_len.max(1)),
        stats.total_history_dropped_for_bytes
    );
    assert_eq!(stats.history_budget_bytes, budget);
    assert!(stats.history_bytes <= budget, "{stats:?}");
    assert!(stats.history_len >= 2, "{stats:?}");
    assert_eq!(
        stats.total_history_dropped_for_bytes,
        taken - u64::from(stats.history_len),
        "{stats:?}"
    );
    assert_eq!(stats.total_history_dropped_for_count, 0);
    // The newest stay: the last snapshot is the last taken.
    let seqs: Vec<u64> = s.snapshots().iter().map(|x| x.seq).collect();
    assert_eq!(seqs.last(), Some(&(taken - 1)));
    // And the report says the configuration was clamped.
    let warned = s.latest().unwrap().warnings;
    assert!(
        warned.iter().any(|w| matches!(
            w,
            wakemeter::SampleWarning::HistoryOverBudget {
                configured_snapshots: 300,
                budget_bytes,
                held_snapshots,
            } if *budget_bytes == budget && u64::from(*held_snapshots) <= u64::from(stats.history_len)
        )),
        "{warned:?}"
    );
}

/// 256 threads × 300 snapshots with a kernel source where every thread
/// is active: the whole history (threads, kernel counters, key frames)
/// stays under 16 MiB.
fn kernel_counters_of_256_busy_threads_times_300_snapshots_fit_16_mib() {
    let threads = 256;
    let gate = Arc::new(Barrier::new(threads));
    let others: Vec<_> = (1..threads)
        .map(|_| {
            let g = gate.clone();
            std::thread::spawn(move || g.wait())
        })
        .collect();
    let s = SamplerBuilder::new()
        .with_history(SNAPSHOTS as u32)
        .with_kernel_source(Box::new(BusyKernel::new(threads as u64)))
        .build()
        .unwrap();
    for _ in 0..SNAPSHOTS + 10 {
        s.sample().unwrap();
    }
    let stats = s.stats();
    assert_eq!(stats.history_len as usize, SNAPSHOTS);
    let last = s.latest().unwrap();
    let kernel = last.kernel.as_ref().unwrap();
    assert_eq!(kernel.threads.len(), threads, "every kernel thread kept");
    assert_eq!(kernel.threads[5].top_wakers.len(), 8);
    assert!(last.threads.len() >= threads);
    let mib = stats.history_bytes as f64 / MIB;
    println!(
        "256 threads with kernel counters: {:.2} MiB for {SNAPSHOTS} snapshots, {} bytes per snapshot",
        mib,
        stats.history_bytes / SNAPSHOTS as u64
    );
    assert!(mib <= 16.0, "history holds {mib:.2} MiB");
    gate.wait();
    for t in others {
        t.join().unwrap();
    }
}

/// 100 busy loop and sleep probes × 300 snapshots stay under 2 MiB.
fn one_hundred_busy_probes_times_300_snapshots_fit_2_mib() {
    let s = SamplerBuilder::new()
        .with_history(SNAPSHOTS as u32)
        .build()
        .unwrap();
    let mut loops: Vec<_> = (0..50)
        .map(|i| s.loop_probe(&format!("event-loop-number-{i}")).unwrap())
        .collect();
    let mut sleeps: Vec<_> = (0..50)
        .map(|i| s.sleep_probe(&format!("sleep-site-number-{i}")).unwrap())
        .collect();
    for round in 0..SNAPSHOTS + 10 {
        for (i, l) in loops.iter_mut().enumerate() {
            for k in 0..(10 + (round + i) % 7) {
                l.before_wait(Some(std::time::Duration::from_nanos(k as u64)));
                l.after_wait(k % 3);
            }
        }
        for sl in &mut sleeps {
            sl.begin(std::time::Duration::ZERO);
            sl.end();
        }
        s.sample().unwrap();
    }
    let stats = s.stats();
    let last = s.latest().unwrap();
    assert_eq!((last.loops.len(), last.sleeps.len()), (50, 50));
    assert!(last.loops.iter().all(|l| l.total_wakeups > 3000));
    // The whole history, the process's own few threads included.
    let mib = stats.history_bytes as f64 / MIB;
    println!(
        "100 busy probes: {mib:.3} MiB for {SNAPSHOTS} snapshots, {} bytes per snapshot",
        stats.history_bytes / SNAPSHOTS as u64
    );
    assert!(mib <= 2.0, "history holds {mib:.2} MiB");
}

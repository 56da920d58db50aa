//! What `Sampler::report` costs on a process of 1,000 threads (four
//! waking every 10 ms, the rest parked: the target of
//! `scripts/sidecar-cost.sh`), with a kernel view of every thread and
//! without one, against a baseline measured in the same run: a plain
//! `std::fs` read of each thread's `/proc/self/task/<tid>/stat` (what
//! `pidstat` and `top` read per thread at each refresh).
//!
//! Each iteration takes a snapshot (not timed) and times the report on
//! it, so every report diagnoses a new history, as `watch` does once a
//! second. The kernel view is a synthetic source shaped like the eBPF
//! source's entries for that process: every thread with counters,
//! histograms, a name and wakers from its start, four of them moving at
//! each read. Printed: µs per report with and without the kernel view,
//! µs of the `stat` reads, and their ratios.
//!
//! Run: `cargo bench -p wakemeter-benches --bench report`

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use criterion::Criterion;
use wakemeter::kernel::Waker;
use wakemeter::{
    KernelSample, KernelSource, KernelSourceError, KernelThreadStats, Sampler, SamplerBuilder,
};
use wakemeter_benches::{ActiveThreads, ParkedThreads, Ratios};

/// Threads of the process in all while the bench runs.
const THREADS: usize = 1_000;
/// Threads that wake every 10 ms (and move in the kernel view).
const ACTIVE: usize = 4;
/// Snapshots taken before the first timed report: a history longer than
/// the CPU window (60 samples at `watch`'s 1 s would be a minute; the
/// windows are set to match below).
const WARM_SNAPSHOTS: usize = 70;

fn ratios() -> &'static Ratios {
    static R: OnceLock<Ratios> = OnceLock::new();
    R.get_or_init(Ratios::default)
}

fn task_tids() -> Vec<u64> {
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The kernel view of `tids`: every thread has counted something since
/// it started; the first [`ACTIVE`] move at every read.
struct ManyThreads {
    threads: Vec<KernelThreadStats>,
    round: u64,
}

impl ManyThreads {
    fn new(tids: &[u64]) -> ManyThreads {
        let threads = tids
            .iter()
            .enumerate()
            .map(|(i, &tid)| {
                let mut t = KernelThreadStats::default();
                t.tid = tid;
                t.name = format!("parked-{i}");
                t.total_on_cpu_ns = 150_000 + i as u64;
                t.total_voluntary_switches = 3;
                t.total_wakes = 2;
                t.total_process_thread_wakes = 2;
                t.total_off_cpu.lock_ns = 1_000_000;
                for v in [2_000, 40_000, 900_000] {
                    t.off_cpu_histogram.record(v);
                    t.run_queue_latency_histogram.record(v / 10);
                }
                let mut w = Waker::default();
                w.tid = tids.first().copied().unwrap_or(0);
                w.name = "main".into();
                w.total_wakes = 2;
                t.top_wakers = vec![w];
                t
            })
            .collect();
        ManyThreads { threads, round: 0 }
    }
}

impl KernelSource for ManyThreads {
    fn read(&mut self) -> Result<KernelSample, KernelSourceError> {
        self.round += 1;
        for t in self.threads.iter_mut().take(ACTIVE) {
            t.total_on_cpu_ns += 2_000_000;
            t.total_voluntary_switches += 100;
            t.total_wakes += 100;
            t.total_interrupt_wakes += 100;
            t.total_off_cpu.sleep_ns += 980_000_000;
            t.sleep.total_calls += 100;
            t.sleep.total_known_request_calls += 100;
            t.sleep.total_requested_ns += 1_000_000_000;
            t.sleep.total_actual_ns += 1_006_000_000;
            t.off_cpu_histogram.record(10_000_000 + self.round);
            t.run_queue_latency_histogram.record(5_000);
            if let Some(w) = t.top_wakers.first_mut() {
                w.total_wakes += 100;
            }
        }
        let mut s = KernelSample::default();
        s.source = "bench".into();
        s.pid = std::process::id();
        s.threads = self.threads.clone();
        Ok(s)
    }
}

/// A sampler of this process with windows that its history fills
/// quickly (10 and 60 snapshots at the samples' pace), with or without
/// the kernel view.
fn sampler(kernel: bool) -> Sampler {
    let ms = Duration::from_millis;
    let t = wakemeter::Thresholds::default()
        .with_window(ms(100))
        .with_min_window(ms(20))
        .with_cpu_window(ms(600))
        .with_cpu_min_window(ms(600));
    let mut b = SamplerBuilder::new().with_thresholds(t);
    if kernel {
        b = b.with_kernel_source(Box::new(ManyThreads::new(&task_tids())));
    }
    let s = b.build().expect("sampler");
    for _ in 0..WARM_SNAPSHOTS {
        s.sample().expect("sample");
        std::thread::sleep(ms(10));
    }
    s
}

/// Times `iters` reports, each on a new snapshot; records ns per report.
fn reports(name: &str, s: &Sampler, iters: u64) -> Duration {
    let mut spent = Duration::ZERO;
    for _ in 0..iters {
        s.sample().expect("sample");
        // Spaced as the warm-up, so every window keeps its length.
        std::thread::sleep(Duration::from_millis(10));
        let start = Instant::now();
        std::hint::black_box(s.report());
        spent += start.elapsed();
    }
    ratios().record(name, spent.as_nanos() as f64 / iters.max(1) as f64);
    spent
}

fn bench(c: &mut Criterion) {
    let tids = task_tids();
    let mut g = c.benchmark_group("report");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(200));
    let paths: Vec<String> = tids
        .iter()
        .map(|t| format!("/proc/self/task/{t}/stat"))
        .collect();
    g.bench_function("stat reads", |b| {
        b.iter_custom(|iters| {
            ratios().time("stat reads", iters, || {
                paths
                    .iter()
                    .filter_map(|p| std::fs::read_to_string(p).ok())
                    .map(|s| s.len())
                    .sum::<usize>()
            })
        })
    });
    let with_kernel = sampler(true);
    g.bench_function("report, kernel view", |b| {
        b.iter_custom(|iters| reports("report, kernel view", &with_kernel, iters))
    });
    drop(with_kernel);
    let proc_only = sampler(false);
    g.bench_function("report, /proc only", |b| {
        b.iter_custom(|iters| reports("report, /proc only", &proc_only, iters))
    });
    g.finish();
}

fn main() {
    let _active = ActiveThreads::spawn(ACTIVE);
    let _parked = ParkedThreads::spawn(THREADS.saturating_sub(ACTIVE + 1));
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    let r = ratios();
    if let (Some(stat), Some(kernel), Some(proc_only)) = (
        r.median("stat reads"),
        r.median("report, kernel view"),
        r.median("report, /proc only"),
    ) {
        println!(
            "\nreport of {} threads: with the kernel view {:.0} µs = {:.2}x the stat reads ({:.0} µs); \
             /proc only {:.0} µs = {:.2}x; kernel view / proc only = {:.2}x",
            task_tids().len(),
            kernel / 1e3,
            kernel / stat,
            stat / 1e3,
            proc_only / 1e3,
            proc_only / stat,
            kernel / proc_only
        );
    }
}

//! One full sample of the process's threads with 1, 16, 64 and 256 extra
//! threads, against the procfs crate and sysinfo doing the same per-thread
//! job (CPU time and run-queue wait of every thread) in the same run.
//!
//! Run: `cargo bench -p wakemeter-benches --bench sample`

use std::sync::OnceLock;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion};
use wakemeter::SamplerBuilder;
use wakemeter_benches::{ParkedThreads, Ratios};

const THREADS: [usize; 4] = [1, 16, 64, 256];

fn ratios() -> &'static Ratios {
    static R: OnceLock<Ratios> = OnceLock::new();
    R.get_or_init(Ratios::default)
}

fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(1)
}

fn procfs_job() -> u64 {
    // Same per-thread job with the procfs crate: list tasks, read each
    // task's stat (CPU ticks) and schedstat (run ns, run-queue wait).
    let mut sum = 0u64;
    if let Ok(me) = procfs::process::Process::myself()
        && let Ok(tasks) = me.tasks()
    {
        for t in tasks.flatten() {
            if let (Ok(stat), Ok(ss)) = (t.stat(), t.schedstat()) {
                sum =
                    sum.wrapping_add(stat.utime + stat.stime + ss.sum_exec_runtime + ss.run_delay);
            }
        }
    }
    sum
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("sample");
    g.sample_size(30)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    for n in THREADS {
        let _parked = ParkedThreads::spawn(n);
        let total = thread_count();
        // Full sample = CPU clock + schedstat; the status split read on none of them.
        let fast = SamplerBuilder::new()
            .with_switch_split_every(u32::MAX)
            .with_history(4)
            .build()
            .expect("sampler");
        g.bench_with_input(BenchmarkId::new("wakemeter", n), &n, |b, _| {
            b.iter_custom(|iters| {
                ratios().time(&format!("wakemeter/{n}"), iters, || fast.sample().is_ok())
            })
        });
        let split = SamplerBuilder::new()
            .with_switch_split_every(1)
            .with_history(4)
            .build()
            .expect("sampler");
        g.bench_with_input(BenchmarkId::new("wakemeter+status", n), &n, |b, _| {
            b.iter_custom(|iters| {
                ratios().time(&format!("wakemeter+status/{n}"), iters, || {
                    split.sample().is_ok()
                })
            })
        });
        g.bench_with_input(BenchmarkId::new("procfs", n), &n, |b, _| {
            b.iter_custom(|iters| ratios().time(&format!("procfs/{n}"), iters, procfs_job))
        });
        let pid = sysinfo::Pid::from_u32(std::process::id());
        let list = sysinfo::ProcessRefreshKind::nothing().with_tasks();
        let cpu = sysinfo::ProcessRefreshKind::nothing().with_cpu();
        g.bench_with_input(BenchmarkId::new("sysinfo", n), &n, |b, _| {
            b.iter_custom(|iters| {
                ratios().time(&format!("sysinfo/{n}"), iters, || {
                    // A fresh System each time: a reused one skips threads
                    // refreshed less than 200 ms ago and would do no work.
                    let Ok(mut sys) = sysinfo::System::new() else {
                        return 0;
                    };
                    sys.refresh_processes_specifics(
                        sysinfo::ProcessesToUpdate::Some(&[pid]),
                        true,
                        list,
                    );
                    let tids: Vec<sysinfo::Pid> = sys
                        .process(pid)
                        .and_then(|p| p.tasks())
                        .map(|t| t.iter().copied().collect())
                        .unwrap_or_default();
                    sys.refresh_processes_specifics(
                        sysinfo::ProcessesToUpdate::Some(&tids),
                        true,
                        cpu,
                    )
                })
            })
        });
        TOTALS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((n, total));
    }
    g.finish();
}

/// (extra parked threads, threads in the process) per measured size.
static TOTALS: std::sync::Mutex<Vec<(usize, usize)>> = std::sync::Mutex::new(Vec::new());

fn report() {
    println!("\n== one full sample, per thread (median ns) and ratios to wakemeter, same run ==");
    println!(
        "{:>8} {:>8} {:>12} {:>16} {:>12} {:>12} {:>10} {:>10}",
        "extra",
        "threads",
        "wakemeter",
        "wakemeter+status",
        "procfs",
        "sysinfo",
        "procfs/x",
        "sysinfo/x"
    );
    let totals = TOTALS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for (n, total) in totals {
        let per = |name: &str| {
            ratios()
                .median(&format!("{name}/{n}"))
                .map(|v| v / total as f64)
        };
        if let (Some(w), Some(ws), Some(p), Some(s)) = (
            per("wakemeter"),
            per("wakemeter+status"),
            per("procfs"),
            per("sysinfo"),
        ) {
            println!(
                "{n:>8} {total:>8} {w:>12.0} {ws:>16.0} {p:>12.0} {s:>12.0} {:>9.1}x {:>9.1}x",
                p / w,
                s / w
            );
        }
    }
    let sampler = SamplerBuilder::new().build().expect("sampler");
    let _parked = ParkedThreads::spawn(256);
    // Steady state: the first samples open every thread's descriptors.
    for _ in 0..10 {
        let _ = sampler.sample();
    }
    let warm = sampler.stats();
    for _ in 0..100 {
        let _ = sampler.sample();
    }
    let stats = sampler.stats();
    let per_sample = (stats.total_sampler_cpu_time_ns - warm.total_sampler_cpu_time_ns) as f64
        / (stats.total_samples - warm.total_samples).max(1) as f64;
    println!(
        "background at 1 Hz, 256 extra threads, default config (status every 10th sample), steady state: \
         {:.0} µs CPU per sample => {:.4}% of one core (sampler's own report)",
        per_sample / 1000.0,
        per_sample / 1e9 * 100.0
    );
    println!(
        "history: {} bytes per stored thread-sample; 300 snapshots x 257 threads = {:.2} MiB",
        stats.bytes_per_stored_thread_sample,
        300.0 * 257.0 * f64::from(stats.bytes_per_stored_thread_sample) / (1 << 20) as f64
    );
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    report();
}

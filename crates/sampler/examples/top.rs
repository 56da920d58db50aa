//! Samples this process for a few seconds while some threads work, then
//! prints a per-thread table like `top -H` plus switches/s and run-queue wait.
//!
//! Run: `cargo run -p wakemeter --example top`

use std::time::Duration;

use wakemeter::{Interval, SamplerBuilder};

fn main() -> Result<(), wakemeter::Error> {
    let sampler = SamplerBuilder::new()
        .with_interval(Duration::from_millis(500))
        .with_switch_split_every(1)
        .build()?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = [("busy", 0u64), ("sleeper-1ms", 1), ("sleeper-10ms", 10)]
        .into_iter()
        .map(|(name, ms)| {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        if ms == 0 {
                            x = std::hint::black_box(x.wrapping_add(1));
                        } else {
                            std::thread::sleep(Duration::from_millis(ms));
                        }
                    }
                })
                .expect("spawn worker")
        })
        .collect();
    let guard = sampler.start()?;
    std::thread::sleep(Duration::from_secs(3));
    drop(guard);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    if let Some(i) = sampler.interval_over(Duration::from_secs(3)) {
        print_table(&i);
    }
    let stats = sampler.stats();
    println!(
        "\nsampler: {} samples, {:.1} µs CPU each, {:.4}% of one core",
        stats.total_samples,
        stats.mean_sample_cost_ns as f64 / 1e3,
        stats.sampler_cpu_percent
    );
    Ok(())
}

fn print_table(i: &Interval) {
    println!(
        "over {:.1} s: process {:.1}% CPU, RSS {:.1} MiB ({:+} KiB), {} threads",
        i.duration_secs(),
        i.process.cpu_percent,
        i.process.rss_bytes as f64 / (1 << 20) as f64,
        i.process.rss_change_bytes / 1024,
        i.process.thread_count
    );
    println!(
        "{:>8} {:<16} {:>6} {:>10} {:>10} {:>10} {:>8}",
        "TID", "NAME", "CPU%", "switch/s", "vol/s", "invol/s", "RQ wait%"
    );
    let opt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"));
    for t in &i.threads {
        println!(
            "{:>8} {:<16} {:>6.1} {:>10} {:>10} {:>10} {:>8}",
            t.tid,
            t.name,
            t.cpu_percent,
            opt(t.switches_per_sec),
            opt(t.voluntary_switches_per_sec),
            opt(t.involuntary_switches_per_sec),
            opt(t.run_queue_wait_percent)
        );
    }
}

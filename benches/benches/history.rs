//! What history costs: bytes per stored snapshot of 256 busy threads with
//! the eBPF kernel source (real, when it can attach) and with 100 busy
//! probes, and the CPU cost of a sample with 100 probes against the same
//! sample without probes, in the same run.
//!
//! Run: `cargo bench -p wakemeter-benches --bench history` (as root for eBPF).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use criterion::Criterion;
use wakemeter::{Sampler, SamplerBuilder};
use wakemeter_benches::Ratios;

const SNAPSHOTS: usize = 300;
const MIB: f64 = (1 << 20) as f64;

fn ratios() -> &'static Ratios {
    static R: OnceLock<Ratios> = OnceLock::new();
    R.get_or_init(Ratios::default)
}

/// `n` threads that each sleep 1 ms in a loop: every kernel counter of
/// every thread moves between snapshots.
struct BusyThreads {
    stop: Arc<AtomicBool>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl BusyThreads {
    fn spawn(n: usize) -> BusyThreads {
        let stop = Arc::new(AtomicBool::new(false));
        let handles = (0..n)
            .map(|i| {
                let stop = stop.clone();
                std::thread::Builder::new()
                    .name(format!("busy-{i}"))
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            std::thread::sleep(Duration::from_micros(500 + (i as u64 % 7) * 100));
                        }
                    })
                    .expect("spawn busy thread")
            })
            .collect();
        BusyThreads { stop, handles }
    }
}

impl Drop for BusyThreads {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// Fills a history of `SNAPSHOTS` snapshots, 10 ms apart; returns bytes per snapshot.
fn fill(sampler: &Sampler, mut between: impl FnMut()) -> f64 {
    for _ in 0..SNAPSHOTS + 5 {
        between();
        std::thread::sleep(Duration::from_millis(10));
        let _ = sampler.sample();
    }
    let stats = sampler.stats();
    stats.history_bytes as f64 / f64::from(stats.history_len.max(1))
}

fn kernel_history() {
    let busy = BusyThreads::spawn(255);
    let mut builder = SamplerBuilder::new().with_history(SNAPSHOTS as u32);
    #[cfg(target_os = "linux")]
    match wakemeter_ebpf::EbpfSource::attach(wakemeter_ebpf::Target::SelfProcess) {
        Ok(src) => builder = builder.with_kernel_source(Box::new(src)),
        Err(e) => println!("eBPF not attached ({e}): the figure below is /proc only"),
    }
    let sampler = builder.build().expect("sampler");
    let per = fill(&sampler, || {});
    let kernel_threads = sampler
        .latest()
        .and_then(|s| s.kernel.map(|k| k.threads.len()))
        .unwrap_or(0);
    println!(
        "history, 256 busy threads, kernel source with {kernel_threads} threads: {per:.0} bytes per stored snapshot; \
         {SNAPSHOTS} snapshots = {:.2} MiB (target <= 16 MiB)",
        per * SNAPSHOTS as f64 / MIB
    );
    drop(busy);
}

fn probe_history() {
    let sampler = SamplerBuilder::new()
        .with_history(SNAPSHOTS as u32)
        .build()
        .expect("sampler");
    let mut loops: Vec<_> = (0..50)
        .map(|i| sampler.loop_probe(&format!("loop-{i}")).expect("probe"))
        .collect();
    let mut sleeps: Vec<_> = (0..50)
        .map(|i| sampler.sleep_probe(&format!("sleep-{i}")).expect("probe"))
        .collect();
    let per = fill(&sampler, || {
        for (i, l) in loops.iter_mut().enumerate() {
            for k in 0..(5 + i % 11) {
                l.before_wait(Some(Duration::from_nanos(k as u64 * 100)));
                l.after_wait(k % 3);
            }
        }
        for s in &mut sleeps {
            s.begin(Duration::ZERO);
            s.end();
        }
    });
    println!(
        "history, 100 busy probes: {per:.0} bytes per stored snapshot; {SNAPSHOTS} snapshots = {:.2} MiB (target <= 2 MiB)",
        per * SNAPSHOTS as f64 / MIB
    );
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("history");
    g.sample_size(30)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    let plain = SamplerBuilder::new()
        .with_history(SNAPSHOTS as u32)
        .build()
        .expect("sampler");
    let with_probes = SamplerBuilder::new()
        .with_history(SNAPSHOTS as u32)
        .build()
        .expect("sampler");
    let mut probes: Vec<_> = (0..100)
        .map(|i| with_probes.loop_probe(&format!("loop-{i}")).expect("probe"))
        .collect();
    g.bench_function("sample", |b| {
        b.iter_custom(|iters| ratios().time("sample", iters, || plain.sample().is_ok()))
    });
    g.bench_function("sample+100 probes", |b| {
        b.iter_custom(|iters| {
            ratios().time("sample+100 probes", iters, || {
                // Every probe moves, so every record has a delta to pack.
                for p in &mut probes {
                    p.before_wait(None);
                    p.after_wait(1);
                }
                with_probes.sample().is_ok()
            })
        })
    });
    g.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    if let (Some(base), Some(probes)) = (
        ratios().median("sample"),
        ratios().median("sample+100 probes"),
    ) {
        println!(
            "\nsample: {base:.0} ns; with 100 moving probes: {probes:.0} ns = {:.2}x \
             ({:.0} ns per probe to read and pack)",
            probes / base,
            (probes - base) / 100.0
        );
    }
    probe_history();
    kernel_history();
}

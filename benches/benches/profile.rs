//! Overhead of on-CPU profiling at 99 Hz on two busy threads: a fixed
//! amount of work split over two threads of this process, timed by
//! criterion without profiling and with a `StackSession` (cpu-clock perf
//! events on every CPU, stacks counted in the kernel) attached to this
//! process, in the same run. Prints the ratio of the medians to the
//! baseline.
//!
//! Needs root and kernel BTF.
//!
//! Run: `cargo bench -p wakemeter-benches --bench profile`

fn main() {
    #[cfg(target_os = "linux")]
    linux::main();
    #[cfg(not(target_os = "linux"))]
    println!("profile bench: Linux hosts only; skipped");
}

#[cfg(target_os = "linux")]
mod linux {
    use std::hint::black_box;
    use std::time::{Duration, Instant};

    use criterion::Criterion;
    use wakemeter_ebpf::{StackKind, StackSession, Target};

    /// Iterations of the work loop per thread and measurement (about 20 ms).
    const WORK: u64 = 8_000_000;

    /// The work: integer mixing that the compiler cannot fold.
    fn work(seed: u64) -> u64 {
        let mut x = seed;
        for i in 0..WORK {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i) ^ (x >> 29);
        }
        x
    }

    /// The work on two threads at once; returns the wall time.
    fn two_busy_threads() -> Duration {
        let start = Instant::now();
        std::thread::scope(|s| {
            let a = s.spawn(|| black_box(work(black_box(1))));
            let b = s.spawn(|| black_box(work(black_box(2))));
            let _ = (a.join(), b.join());
        });
        start.elapsed()
    }

    fn median(c: &mut Criterion, name: &str) -> Duration {
        let mut times = Vec::new();
        c.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t = two_busy_threads();
                    times.push(t);
                    total += t;
                }
                total
            })
        });
        times.sort();
        times.get(times.len() / 2).copied().unwrap_or_default()
    }

    pub fn main() {
        let mut c = Criterion::default()
            .sample_size(30)
            .measurement_time(Duration::from_secs(8))
            .configure_from_args();
        let baseline = median(&mut c, "profile/2 busy threads, no profiling");
        let session = StackSession::builder(Target::SelfProcess, StackKind::OnCpu)
            .with_frequency_hz(99)
            .attach();
        let mut session = match session {
            Ok(s) => s,
            Err(e) => {
                println!("profile bench: cannot attach ({e}); run as root");
                return;
            }
        };
        let profiled = median(&mut c, "profile/2 busy threads, on-CPU 99 Hz");
        let counts = session.read().map(|c| c.entries.len()).unwrap_or(0);
        drop(session);
        let again = median(&mut c, "profile/2 busy threads, no profiling (after)");
        let base = (baseline.as_secs_f64() + again.as_secs_f64()) / 2.0;
        println!(
            "profile: median of 2 busy threads {:.3} ms without profiling (before {:.3}, after {:.3}), {:.3} ms with on-CPU 99 Hz ({counts} distinct stacks): ratio {:.4} ({:+.2}%)",
            base * 1e3,
            baseline.as_secs_f64() * 1e3,
            again.as_secs_f64() * 1e3,
            profiled.as_secs_f64() * 1e3,
            profiled.as_secs_f64() / base,
            (profiled.as_secs_f64() / base - 1.0) * 100.0
        );
    }
}

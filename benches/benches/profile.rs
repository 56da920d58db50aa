//! Overhead of on-CPU profiling at 99 Hz on two busy threads: a fixed
//! amount of work split over two threads of this process, timed without
//! profiling and with a `StackSession` (cpu-clock perf events on every
//! CPU, stacks counted in the kernel) attached to this process.
//!
//! The two are interleaved: each round times a batch without and a batch
//! with profiling, in alternating order (ABBA), so that the machine's
//! drift (other work on shared cores, frequency changes) falls on both
//! sides alike. Each round gives a ratio of the batch medians; the bench
//! prints every round, then the median of the ratios with its spread.
//!
//! Two figures: wall time, what the program feels, which on shared cores
//! mostly measures the other load; and the CPU time of the two work
//! threads (their thread CPU clocks), which the other load does not
//! change. Without `CONFIG_IRQ_TIME_ACCOUNTING` (Debian's default) the
//! sampling interrupt and its BPF program are charged to the thread they
//! interrupt, so the CPU figure includes the profiler's cost in the
//! kernel.
//!
//! Needs root and kernel BTF.
//!
//! Run: `cargo bench -p wakemeter-benches --bench profile`
//! (`WAKEMETER_BENCH_ROUNDS=N` for more rounds than the default 12).

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

    use wakemeter_ebpf::{StackKind, StackSession, Target};

    /// Iterations of the work loop per thread and run (about 20 ms).
    const WORK: u64 = 8_000_000;
    /// Runs per batch; a batch's figure is their median.
    const PER_BATCH: usize = 9;
    /// Default number of rounds (one batch of each kind per round).
    const ROUNDS: usize = 12;

    /// The work: integer mixing that the compiler cannot fold.
    fn work(seed: u64) -> u64 {
        let mut x = seed;
        for i in 0..WORK {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i) ^ (x >> 29);
        }
        x
    }

    /// CPU time of the calling thread.
    fn thread_cpu() -> Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; the clock id is a
        // constant the kernel knows.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        if rc != 0 {
            return Duration::ZERO;
        }
        Duration::new(
            u64::try_from(ts.tv_sec).unwrap_or(0),
            u32::try_from(ts.tv_nsec).unwrap_or(0),
        )
    }

    /// The work on one new thread; returns its CPU time.
    fn one_worker(seed: u64) -> Duration {
        let start = thread_cpu();
        black_box(work(black_box(seed)));
        thread_cpu().saturating_sub(start)
    }

    /// The work on two threads at once; returns the wall time and the two
    /// threads' CPU time added up.
    fn two_busy_threads() -> (Duration, Duration) {
        let start = Instant::now();
        let cpu = std::thread::scope(|s| {
            let a = s.spawn(|| one_worker(1));
            let b = s.spawn(|| one_worker(2));
            a.join().unwrap_or_default() + b.join().unwrap_or_default()
        });
        (start.elapsed(), cpu)
    }

    fn median<T: Copy + PartialOrd>(mut v: Vec<T>) -> T {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        v[v.len() / 2]
    }

    /// Median wall time and median CPU time of a batch of runs.
    fn batch() -> (Duration, Duration) {
        let runs: Vec<_> = (0..PER_BATCH).map(|_| two_busy_threads()).collect();
        (
            median(runs.iter().map(|r| r.0).collect()),
            median(runs.iter().map(|r| r.1).collect()),
        )
    }

    /// A batch with on-CPU profiling attached to this process; also the
    /// number of distinct stacks counted. `None` when it cannot attach.
    fn profiled_batch() -> Option<((Duration, Duration), usize)> {
        let session = StackSession::builder(Target::SelfProcess, StackKind::OnCpu)
            .with_frequency_hz(99)
            .attach();
        let mut session = match session {
            Ok(s) => s,
            Err(e) => {
                println!("profile bench: cannot attach ({e}); run as root");
                return None;
            }
        };
        let t = batch();
        let stacks = session.read().map(|c| c.entries.len()).unwrap_or(0);
        Some((t, stacks))
    }

    pub fn main() {
        let rounds = std::env::var("WAKEMETER_BENCH_ROUNDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(ROUNDS);
        // Warm up: caches, the kernel BTF parse, frequency.
        let _ = batch();
        if profiled_batch().is_none() {
            return;
        }
        let (mut wall_ratios, mut cpu_ratios) = (Vec::new(), Vec::new());
        let (mut base_all, mut prof_all) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let (base, prof, stacks) = if round % 2 == 0 {
                let base = batch();
                let Some((prof, stacks)) = profiled_batch() else {
                    return;
                };
                (base, prof, stacks)
            } else {
                let Some((prof, stacks)) = profiled_batch() else {
                    return;
                };
                (batch(), prof, stacks)
            };
            let wall = prof.0.as_secs_f64() / base.0.as_secs_f64();
            let cpu = prof.1.as_secs_f64() / base.1.as_secs_f64();
            println!(
                "profile: round {round:2}: wall {:.3} -> {:.3} ms ({wall:.4}), cpu {:.3} -> {:.3} ms ({cpu:.4}), {stacks} stacks",
                base.0.as_secs_f64() * 1e3,
                prof.0.as_secs_f64() * 1e3,
                base.1.as_secs_f64() * 1e3,
                prof.1.as_secs_f64() * 1e3,
            );
            wall_ratios.push(wall);
            cpu_ratios.push(cpu);
            base_all.push(base);
            prof_all.push(prof);
        }
        println!(
            "profile: {rounds} interleaved rounds of {PER_BATCH} runs of 2 busy threads, without / with on-CPU 99 Hz:"
        );
        let ms = |v: Vec<Duration>| median(v).as_secs_f64() * 1e3;
        println!(
            "profile: wall median {:.3} / {:.3} ms; {}",
            ms(base_all.iter().map(|b| b.0).collect()),
            ms(prof_all.iter().map(|p| p.0).collect()),
            summary(wall_ratios)
        );
        println!(
            "profile: cpu  median {:.3} / {:.3} ms; {}",
            ms(base_all.iter().map(|b| b.1).collect()),
            ms(prof_all.iter().map(|p| p.1).collect()),
            summary(cpu_ratios)
        );
    }

    /// Median ratio, its change in percent, quartiles and range.
    fn summary(mut ratios: Vec<f64>) -> String {
        ratios.sort_by(f64::total_cmp);
        let q = |p: f64| ratios[((ratios.len() - 1) as f64 * p).round() as usize];
        format!(
            "ratio median {:.4} ({:+.2}%), quartiles {:.4}..{:.4}, range {:.4}..{:.4}",
            q(0.5),
            (q(0.5) - 1.0) * 100.0,
            q(0.25),
            q(0.75),
            q(0.0),
            q(1.0)
        )
    }
}

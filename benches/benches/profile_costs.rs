//! What continuous profiling costs when nothing is being captured, and
//! what symbolizing a capture costs.
//!
//! 1. **The `AutoProfiler` between captures.** A sampler of this process
//!    (64 idle threads, the default 1 s interval) runs for a while without
//!    and then with an `AutoProfiler`; the CPU of the profiler's own thread
//!    (`wakemeter-prof`, from its `schedstat`) is printed beside the
//!    sampling thread's (`wakemeter`) over the same seconds, as a ratio and
//!    in percent of one core. Nothing fires (the threads are idle), so no
//!    capture is made: this is the price of watching for a trigger.
//! 2. **Symbolization.** Two threads of this process spin in three
//!    functions; an on-CPU capture of 2 s is taken twice with one
//!    `Profiler` (cold, then warm blazesym caches). The time of
//!    `Capture::finish` (reading the maps and symbolizing) is printed
//!    beside the capture's own length, with the stacks and frames it named.
//!
//! Needs root and kernel BTF (for the captures; part 1 runs anyway).
//!
//! Run: `cargo bench -p wakemeter-benches --bench profile_costs`
//! (`WAKEMETER_BENCH_SECONDS=N` for each half of part 1, default 20).

fn main() {
    #[cfg(target_os = "linux")]
    linux::main();
    #[cfg(not(target_os = "linux"))]
    println!("profile_costs bench: Linux hosts only; skipped");
}

#[cfg(target_os = "linux")]
mod linux {
    use std::hint::black_box;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    use wakemeter::SamplerBuilder;
    use wakemeter_profile::{AutoProfiler, ProfileOptions, Profiler, StackKind, Target};

    /// CPU time of this process's thread named `name`, in nanoseconds
    /// (`schedstat` field 1), summed over threads of that name.
    fn thread_cpu_ns(name: &str) -> u64 {
        let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
            return 0;
        };
        dir.flatten()
            .filter(|e| {
                std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim_end() == name)
            })
            .filter_map(|e| std::fs::read_to_string(e.path().join("schedstat")).ok())
            .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .sum()
    }

    /// Part 1: CPU of the sampling thread and of the profiler thread over
    /// `secs` seconds, without and with an `AutoProfiler`.
    fn idle_auto_profiler(secs: u64) {
        let stop = Arc::new(AtomicBool::new(false));
        let idle: Vec<_> = (0..64)
            .map(|i| {
                let stop = Arc::clone(&stop);
                std::thread::Builder::new()
                    .name(format!("idle-{i}"))
                    .spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            std::thread::sleep(Duration::from_millis(200));
                        }
                    })
                    .expect("spawn")
            })
            .collect();
        let Ok(sampler) = SamplerBuilder::new().build() else {
            println!("profile_costs: no sampler");
            return;
        };
        let Ok(_sampling) = sampler.start() else {
            println!("profile_costs: sampling did not start");
            return;
        };
        let measure = |with_auto: bool| {
            let auto = if with_auto {
                match AutoProfiler::builder().start(&sampler) {
                    Ok(a) => Some(a),
                    Err(e) => {
                        println!("profile_costs: no AutoProfiler ({e})");
                        return None;
                    }
                }
            } else {
                None
            };
            // Past the first tick, when the profiler thread sets up.
            std::thread::sleep(Duration::from_secs(2));
            let (s0, p0, t0) = (
                thread_cpu_ns("wakemeter"),
                thread_cpu_ns("wakemeter-prof"),
                Instant::now(),
            );
            std::thread::sleep(Duration::from_secs(secs));
            let wall = t0.elapsed().as_secs_f64();
            let sampling = thread_cpu_ns("wakemeter").saturating_sub(s0) as f64 / wall;
            let profiler = thread_cpu_ns("wakemeter-prof").saturating_sub(p0) as f64 / wall;
            drop(auto);
            Some((sampling, profiler))
        };
        let Some((base, _)) = measure(false) else {
            return;
        };
        let Some((sampling, profiler)) = measure(true) else {
            return;
        };
        println!("AutoProfiler between captures: 64 idle threads, 1 s samples, {secs} s each");
        println!(
            "  sampling thread without it: {:.1} us/s ({:.4}% of a core)",
            base / 1e3,
            base / 1e7
        );
        println!(
            "  sampling thread with it:    {:.1} us/s; profiler thread {:.1} us/s ({:.4}% of a core)",
            sampling / 1e3,
            profiler / 1e3,
            profiler / 1e7
        );
        println!(
            "  ratio profiler / sampling thread (same run): {:.2}",
            profiler / sampling.max(1.0)
        );
        stop.store(true, Ordering::Relaxed);
        for t in idle {
            let _ = t.join();
        }
    }

    #[inline(never)]
    fn mix_a(x: u64) -> u64 {
        x.wrapping_mul(6_364_136_223_846_793_005).rotate_left(7)
    }

    #[inline(never)]
    fn mix_b(x: u64) -> u64 {
        (x ^ (x >> 29)).wrapping_add(0x9e37_79b9)
    }

    #[inline(never)]
    fn spin_until(stop: &AtomicBool) -> u64 {
        let mut x = 1u64;
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..10_000 {
                x = mix_b(mix_a(x));
            }
        }
        x
    }

    /// Part 2: time of `finish` (symbolization) for a cold and a warm cache.
    fn symbolization() {
        let stop = Arc::new(AtomicBool::new(false));
        let spinners: Vec<_> = (0..2)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || black_box(spin_until(&stop)))
            })
            .collect();
        let profiler = Profiler::new();
        let length = Duration::from_secs(2);
        for pass in ["cold", "warm"] {
            let capture =
                match profiler.start(Target::SelfProcess, &ProfileOptions::new(StackKind::OnCpu)) {
                    Ok(c) => c,
                    Err(e) => {
                        println!("symbolization: cannot capture ({e}); run as root");
                        break;
                    }
                };
            std::thread::sleep(length);
            let t = Instant::now();
            let profile = match capture.finish(&profiler) {
                Ok(p) => p,
                Err(e) => {
                    println!("symbolization: {e}");
                    break;
                }
            };
            let took = t.elapsed();
            let frames: usize = profile.samples.iter().map(|s| s.frames.len()).sum();
            println!(
                "symbolization ({pass} caches): {:.1} ms for {} stacks, {frames} frames \
                 ({:.1} us per frame); {:.2}% of the {:.0} s capture",
                took.as_secs_f64() * 1e3,
                profile.samples.len(),
                took.as_secs_f64() * 1e6 / frames.max(1) as f64,
                took.as_secs_f64() / length.as_secs_f64() * 100.0,
                length.as_secs_f64()
            );
        }
        stop.store(true, Ordering::Relaxed);
        for t in spinners {
            let _ = t.join();
        }
    }

    pub fn main() {
        let secs = std::env::var("WAKEMETER_BENCH_SECONDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(20);
        symbolization();
        idle_auto_profiler(secs);
    }
}

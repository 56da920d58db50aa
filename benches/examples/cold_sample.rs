//! Takes samples with a real gap between them, for profilers: `perf stat`
//! (software events) and `valgrind --tool=callgrind` see only this loop's
//! work besides the threads' setup.
//!
//! Usage: `cold_sample [THREADS] [GAP_MS] [SAMPLES] [idle|active] [self|pid] [split]`
//! (defaults: 257 threads in all, 1000 ms, 10 samples, active, self; `split`
//! reads `status` on every sample). Prints the median CPU ns per thread.

use std::time::Duration;

use wakemeter::{SamplerBuilder, Target};
use wakemeter_benches::{ActiveThreads, ParkedThreads, median, thread_cpu_ns};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    if let Ok(n) = std::env::var("COLD_SAMPLE_CHILD") {
        let _a = ActiveThreads::spawn(n.parse().unwrap_or(0));
        std::thread::sleep(Duration::from_secs(3600));
        return;
    }
    let threads: usize = arg(1, "257").parse().unwrap_or(257);
    let gap = Duration::from_millis(arg(2, "1000").parse().unwrap_or(1000));
    let samples: usize = arg(3, "10").parse().unwrap_or(10);
    let active = arg(4, "active") == "active";
    let other = arg(5, "self") == "pid";
    let split = if arg(6, "") == "split" { 1 } else { u32::MAX };
    let extra = threads.saturating_sub(1);
    let mut child = None;
    let (_p, _a, target) = if other {
        let c = std::process::Command::new(std::env::current_exe().expect("exe"))
            .env("COLD_SAMPLE_CHILD", extra.to_string())
            .spawn()
            .expect("child");
        let pid = c.id();
        child = Some(c);
        std::thread::sleep(Duration::from_secs(2));
        (None, None, Target::Pid(pid))
    } else if active {
        (None, Some(ActiveThreads::spawn(extra)), Target::SelfProcess)
    } else {
        (Some(ParkedThreads::spawn(extra)), None, Target::SelfProcess)
    };
    let s = SamplerBuilder::new()
        .with_target(target)
        .with_switch_split_every(split)
        .with_history(4)
        .build()
        .expect("sampler");
    for _ in 0..3 {
        let _ = s.sample();
    }
    let mut cpu = Vec::new();
    let (mut faults, mut switches) = (0, 0);
    for _ in 0..samples {
        std::thread::sleep(gap);
        let r0 = rusage();
        let c0 = thread_cpu_ns();
        let _ = s.sample();
        cpu.push((thread_cpu_ns() - c0) as f64);
        let r1 = rusage();
        faults += r1.ru_minflt - r0.ru_minflt;
        switches += r1.ru_nvcsw + r1.ru_nivcsw - r0.ru_nvcsw - r0.ru_nivcsw;
    }
    println!(
        "median {:.0} ns per thread; per sample: {:.1} page faults, {:.1} switches",
        median(&mut cpu) / threads as f64,
        faults as f64 / samples as f64,
        switches as f64 / samples as f64
    );
    if let Some(mut c) = child {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// The calling thread's resource usage (`RUSAGE_THREAD`).
fn rusage() -> libc::rusage {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `r` is a valid out-pointer for the duration of the call.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut r) };
    r
}

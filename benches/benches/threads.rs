//! Sampling another process with thousands of threads (1,000 and 5,000;
//! all but four parked, four waking every 10 ms), against a baseline
//! measured in the same run: a plain `std::fs` read of each thread's
//! `/proc/<pid>/task/<tid>/stat` (what `top` and `pidstat` read per
//! thread). Printed: µs per thread per sample and the ratio to the
//! baseline, back to back (criterion) and after a 1 s gap (the cadence of
//! `watch`, caches cold); then the report of such a process made and
//! written as JSON, with its bytes beside the bytes of every thread's record.
//!
//! Run: `cargo bench -p wakemeter-benches --bench threads`
//! (`-- --quick`: 1,000 threads only.)

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use criterion::Criterion;
use wakemeter::{Sampler, SamplerBuilder, Target};
use wakemeter_benches::{ActiveThreads, ParkedThreads, Ratios};

/// Set in the child's environment: its number of threads in all.
const CHILD_ENV: &str = "WAKEMETER_BENCH_THREADS_CHILD";
/// Threads of the child that wake every 10 ms; the rest are parked.
const ACTIVE: usize = 4;
/// Cold rounds: one sample after each of this many gaps (median reported).
const COLD_ROUNDS: usize = 5;
const COLD_GAP: Duration = Duration::from_secs(1);

fn ratios() -> &'static Ratios {
    static R: OnceLock<Ratios> = OnceLock::new();
    R.get_or_init(Ratios::default)
}

/// The child process: `n` threads in all until its stdin closes.
fn child(n: usize) {
    let _active = ActiveThreads::spawn(ACTIVE);
    let _parked = ParkedThreads::spawn(n.saturating_sub(ACTIVE + 1));
    let _ = std::io::stdin().read(&mut [0u8; 1]);
    std::process::exit(0);
}

fn task_dir(pid: u32) -> String {
    format!("/proc/{pid}/task")
}

fn tids(pid: u32) -> Vec<String> {
    std::fs::read_dir(task_dir(pid))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A child process with `threads` threads in all; killed when dropped.
struct ChildProcess(Child);

impl ChildProcess {
    fn spawn(threads: usize) -> ChildProcess {
        let child = Command::new(std::env::current_exe().expect("bench executable"))
            .env(CHILD_ENV, threads.to_string())
            .stdin(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(60);
        while tids(pid).len() < threads && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        ChildProcess(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The baseline: every thread's `stat`, read whole with `std::fs`.
fn read_stats(pid: u32, tids: &[String]) -> usize {
    tids.iter()
        .map(|t| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{t}/stat")).map_or(0, |s| s.len())
        })
        .sum()
}

fn sampler(pid: u32) -> Sampler {
    // The default configuration (`status` on one sample in ten), a short
    // history: only the sample is measured here.
    SamplerBuilder::new()
        .with_target(Target::Pid(pid))
        .with_history(8)
        .build()
        .expect("sampler of the child")
}

fn bench_size(c: &mut Criterion, threads: usize) {
    let child = ChildProcess::spawn(threads);
    let pid = child.pid();
    let tids = tids(pid);
    let s = sampler(pid);
    s.sample_now().expect("first sample");
    let mut g = c.benchmark_group(format!("other_pid_{threads}_threads"));
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    g.bench_function("stat_read_baseline", |b| {
        b.iter_custom(|iters| {
            ratios().time(&format!("stat/{threads}"), iters, || read_stats(pid, &tids))
        });
    });
    g.bench_function("wakemeter_sample", |b| {
        b.iter_custom(|iters| {
            ratios().time(&format!("wm/{threads}"), iters, || s.sample_now().is_ok())
        });
    });
    g.finish();

    // After a gap, as the background sampler meets them: alternate the two.
    for _ in 0..COLD_ROUNDS {
        std::thread::sleep(COLD_GAP);
        ratios().time(&format!("stat_cold/{threads}"), 1, || {
            read_stats(pid, &tids)
        });
        std::thread::sleep(COLD_GAP);
        ratios().time(&format!("wm_cold/{threads}"), 1, || s.sample_now().is_ok());
    }

    // A report over such a process, and the JSON `watch --json` prints.
    std::thread::sleep(COLD_GAP);
    s.sample_now().expect("sample");
    let full = s.latest_interval().expect("an interval");
    let full_bytes = serde_json::to_vec(&full).map_or(0, |v| v.len());
    let mut report_bytes = 0;
    for _ in 0..COLD_ROUNDS {
        ratios().time(&format!("report/{threads}"), 1, || {
            let r = s.report();
            report_bytes = serde_json::to_vec(&r).map_or(0, |v| v.len());
        });
    }
    REPORTS.lock().unwrap_or_else(|e| e.into_inner()).push((
        threads,
        tids.len(),
        report_bytes,
        full_bytes,
    ));
}

/// (threads asked, threads seen, report bytes, bytes of every thread's interval record).
static REPORTS: std::sync::Mutex<Vec<(usize, usize, usize, usize)>> =
    std::sync::Mutex::new(Vec::new());

fn report(sizes: &[usize]) {
    println!("\n== sampling another process: µs per thread per sample (median) ==");
    println!(
        "{:>8} {:>8} {:>14} {:>14} {:>8}",
        "threads", "when", "wakemeter", "stat baseline", "ratio"
    );
    for &n in sizes {
        for (when, wm, stat) in [
            ("warm", format!("wm/{n}"), format!("stat/{n}")),
            ("1 s gap", format!("wm_cold/{n}"), format!("stat_cold/{n}")),
        ] {
            if let (Some(w), Some(b)) = (ratios().median(&wm), ratios().median(&stat)) {
                println!(
                    "{n:>8} {when:>8} {:>14.2} {:>14.2} {:>7.2}x",
                    w / n as f64 / 1e3,
                    b / n as f64 / 1e3,
                    w / b
                );
            }
        }
    }
    println!("\n== one report of that process, made and written as JSON ==");
    for &(n, seen, bytes, full) in REPORTS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        let ms = ratios().median(&format!("report/{n}")).unwrap_or(0.0) / 1e6;
        println!(
            "{n:>8} threads ({seen} seen): report {ms:.2} ms, {bytes} bytes; every thread listed would be {full} bytes for the interval alone ({:.1}x)",
            full as f64 / bytes.max(1) as f64
        );
    }
}

fn main() {
    if let Ok(n) = std::env::var(CHILD_ENV) {
        child(n.parse().unwrap_or(0));
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    let sizes: &[usize] = if quick { &[1000] } else { &[1000, 5000] };
    let mut c = Criterion::default().configure_from_args();
    for &n in sizes {
        bench_size(&mut c, n);
    }
    c.final_summary();
    report(sizes);
}

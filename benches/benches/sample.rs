//! The cost of one sample at the cadence users really sample, against the
//! procfs crate and sysinfo doing the same per-thread job under the same gap.
//!
//! Samples taken back to back find every cache warm; a sampler that runs
//! once a second finds them cold, and pays 2-2.5x more per thread. So each
//! tool is measured with a real sleep of 0, 10 ms, 100 ms or 1 s before every
//! sample, with idle (parked) and with active threads (each wakes every
//! 10 ms), at 2, 17, 65, 257 and 1001 threads in the process; then another
//! process (a child with active threads) is sampled by PID the same way.
//! Last, the sampler runs in the background at a real 1 Hz for 21 s with
//! 256 extra threads, and the whole CPU time of its thread (everything it
//! does per tick, wakeups included) is read from the kernel, together with
//! what a per-tick consumer (the FFI listener's interval + findings, a JSON
//! report) costs.
//!
//! Figures are the median over the samples of one cell, in ns of the
//! sampling thread's CPU time (its CPU clock) per thread of the target; the
//! wall time of the wakemeter sample is printed beside it. Ratios are taken
//! within the same run.
//!
//! Then another process's process files kept between samples against
//! opened for each sample, alternated sample by sample (`-- --process-files`
//! runs only these, about 2 minutes).
//!
//! Run (about 12 minutes): `cargo bench -p wakemeter-benches --bench sample`
//! Quick (about 1 minute): `cargo bench -p wakemeter-benches --bench sample -- --quick`
//! (or `WAKEMETER_BENCH_QUICK=1`).

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wakemeter::{Sampler, SamplerBuilder, Target};
use wakemeter_benches::{ActiveThreads, ParkedThreads, median, thread_cpu_ns};

/// Set in the environment of the child process: its number of active threads.
const CHILD_ENV: &str = "WAKEMETER_BENCH_SAMPLE_CHILD";

/// What one run measures.
struct Plan {
    gaps: Vec<Duration>,
    /// Threads in the process (the main thread included).
    sizes: Vec<usize>,
    /// Threads in the other process sampled by PID.
    pid_sizes: Vec<usize>,
    /// Length of each background run at 1 Hz.
    background: Duration,
    /// Workloads of the background run (true: active threads).
    background_active: Vec<bool>,
    quick: bool,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            return Plan {
                gaps: vec![Duration::ZERO, Duration::from_millis(100)],
                sizes: vec![2, 65, 257],
                pid_sizes: vec![65],
                background: Duration::from_secs(5),
                background_active: vec![true],
                quick,
            };
        }
        Plan {
            gaps: [0, 10, 100, 1000].map(Duration::from_millis).to_vec(),
            sizes: vec![2, 17, 65, 257, 1001],
            pid_sizes: vec![65, 257, 1001],
            background: Duration::from_secs(21),
            background_active: vec![false, true],
            quick,
        }
    }

    /// Samples per cell: fewer at long gaps, where each costs a sleep.
    fn samples(&self, gap: Duration) -> usize {
        match (self.quick, gap.as_millis()) {
            (true, _) => 5,
            (false, 0) => 30,
            (false, ..=10) => 20,
            (false, ..=100) => 15,
            (false, _) => 8,
        }
    }
}

/// One measured cell: per-sample CPU and wall ns of the sampling thread.
#[derive(Default)]
struct Cell {
    cpu: Vec<f64>,
    wall: Vec<f64>,
}

/// Takes `n` samples with `f`, each after sleeping `gap`.
fn measure(gap: Duration, n: usize, mut f: impl FnMut()) -> Cell {
    let mut cell = Cell::default();
    for _ in 0..n {
        if !gap.is_zero() {
            std::thread::sleep(gap);
        }
        let c0 = thread_cpu_ns();
        let t0 = Instant::now();
        f();
        let wall = t0.elapsed().as_nanos() as f64;
        cell.cpu.push(thread_cpu_ns().saturating_sub(c0) as f64);
        cell.wall.push(wall);
    }
    cell
}

fn task_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(1)
}

/// The procfs crate doing the per-thread job: list the tasks, read each
/// task's `stat` (CPU ticks) and `schedstat` (run ns, run-queue wait).
fn procfs_job(pid: u32) -> u64 {
    let mut sum = 0u64;
    if let Ok(p) = procfs::process::Process::new(pid as i32)
        && let Ok(tasks) = p.tasks()
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

/// sysinfo doing the per-thread job. A fresh `System` each time: a reused
/// one skips threads refreshed less than 200 ms ago and would do no work.
fn sysinfo_job(pid: u32) -> usize {
    let pid = sysinfo::Pid::from_u32(pid);
    let list = sysinfo::ProcessRefreshKind::nothing().with_tasks();
    let cpu = sysinfo::ProcessRefreshKind::nothing().with_cpu();
    let Ok(mut sys) = sysinfo::System::new() else {
        return 0;
    };
    sys.refresh_processes_specifics(sysinfo::ProcessesToUpdate::Some(&[pid]), true, list);
    let tids: Vec<sysinfo::Pid> = sys
        .process(pid)
        .and_then(|p| p.tasks())
        .map(|t| t.iter().copied().collect())
        .unwrap_or_default();
    sys.refresh_processes_specifics(sysinfo::ProcessesToUpdate::Some(&tids), true, cpu)
}

/// A sampler in steady state: its first samples open every thread's descriptors.
fn warm_sampler(target: Target, switch_split_every: u32) -> Sampler {
    let s = SamplerBuilder::new()
        .with_target(target)
        .with_switch_split_every(switch_split_every)
        .with_history(4)
        .build()
        .expect("sampler");
    for _ in 0..3 {
        let _ = s.sample();
    }
    s
}

/// One row: the four tools at one gap.
struct Row {
    threads: usize,
    gap: Duration,
    wm: Cell,
    wm_status: Cell,
    procfs: Cell,
    sysinfo: Cell,
}

fn row(plan: &Plan, target: Target, pid: u32, gap: Duration) -> Row {
    let n = plan.samples(gap);
    let threads = task_count(pid);
    let fast = warm_sampler(target, u32::MAX);
    let wm = measure(gap, n, || {
        let _ = fast.sample();
    });
    drop(fast);
    let split = warm_sampler(target, 1);
    let wm_status = measure(gap, n, || {
        let _ = split.sample();
    });
    drop(split);
    let procfs = measure(gap, n, || {
        std::hint::black_box(procfs_job(pid));
    });
    let sysinfo = measure(gap, n, || {
        std::hint::black_box(sysinfo_job(pid));
    });
    Row {
        threads,
        gap,
        wm,
        wm_status,
        procfs,
        sysinfo,
    }
}

fn print_header(title: &str) {
    println!("\n== {title} ==");
    println!(
        "{:>7} {:>6} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9}",
        "threads",
        "gap ms",
        "wm",
        "wm wall",
        "wm+stat",
        "default",
        "procfs",
        "sysinfo",
        "procfs/x",
        "sysinfo/x"
    );
}

fn print_row(r: &mut Row) {
    let per = |v: &mut Vec<f64>| median(v) / r.threads as f64;
    let wm = per(&mut r.wm.cpu);
    let wall = per(&mut r.wm.wall);
    let st = per(&mut r.wm_status.cpu);
    // The default configuration reads `status` on one sample in ten.
    let default = 0.9 * wm + 0.1 * st;
    let p = per(&mut r.procfs.cpu);
    let s = per(&mut r.sysinfo.cpu);
    println!(
        "{:>7} {:>6} {wm:>8.0} {wall:>9.0} {st:>9.0} {default:>9.0} {p:>9.0} {s:>9.0} {:>7.1}x {:>8.1}x",
        r.threads,
        r.gap.as_millis(),
        p / wm,
        s / wm,
    );
}

/// A warm sampler of process `pid`, its process files (task directory,
/// `statm`, `status`) kept between samples or opened for each.
fn pid_sampler(pid: u32, per_sample: bool) -> Sampler {
    let s = SamplerBuilder::new()
        .with_target(Target::Pid(pid))
        .with_history(4)
        .with_process_files_per_sample(per_sample)
        .build()
        .expect("sampler");
    for _ in 0..3 {
        let _ = s.sample();
    }
    s
}

/// Another process's process files kept between samples against opened
/// for each sample (what a sampler does past its part of the descriptor
/// budget): the sampling thread's CPU per whole sample, the two
/// alternated sample by sample so both see the same machine.
fn process_files(plan: &Plan) {
    println!("\n== another process by PID: process files kept / opened per sample ==");
    println!(
        "{:>7} {:>6} {:>10} {:>10} {:>7}",
        "threads", "gap ms", "kept ns", "opened ns", "ratio"
    );
    let sizes: &[usize] = if plan.quick {
        &[1, 65]
    } else {
        &[1, 17, 65, 257]
    };
    for &size in sizes {
        let child = ChildProcess::spawn(size);
        let pid = child.0.id();
        for &gap in &plan.gaps {
            let kept = pid_sampler(pid, false);
            let opened = pid_sampler(pid, true);
            let (mut a, mut b) = (Cell::default(), Cell::default());
            for _ in 0..plan.samples(gap) * 2 {
                for (s, cell) in [(&kept, &mut a), (&opened, &mut b)] {
                    let one = measure(gap, 1, || {
                        let _ = s.sample();
                    });
                    cell.cpu.extend(one.cpu);
                }
            }
            let (k, o) = (median(&mut a.cpu), median(&mut b.cpu));
            println!(
                "{size:>7} {:>6} {k:>10.0} {o:>10.0} {:>7.3}",
                gap.as_millis(),
                o / k
            );
        }
    }
}

/// The child process: `n` active threads until its stdin closes.
fn child(n: usize) {
    let _active = ActiveThreads::spawn(n);
    let mut buf = [0u8; 1];
    let _ = std::io::stdin().read(&mut buf);
}

/// A child process with `threads` threads in all (main included), all but
/// the main one active; killed when dropped.
struct ChildProcess(Child);

impl ChildProcess {
    fn spawn(threads: usize) -> ChildProcess {
        let exe = std::env::current_exe().expect("bench executable");
        let child = Command::new(exe)
            .env(CHILD_ENV, (threads - 1).to_string())
            .stdin(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(30);
        while task_count(pid) < threads && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        ChildProcess(child)
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The CPU time of one of this process's threads, from its `schedstat`
/// (everything the thread did, its wakeups included), in ns.
fn task_run_ns(tid: u64) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

fn tid_named(name: &str) -> Option<u64> {
    std::fs::read_dir("/proc/self/task")
        .ok()?
        .flatten()
        .find_map(|e| {
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            (comm.trim_end() == name)
                .then(|| e.file_name().to_str()?.parse().ok())
                .flatten()
        })
}

/// The default sampler in the background at 1 Hz for `length`, with 256
/// extra threads, while a consumer does per tick what the FFI listener
/// does (latest interval + findings) and serializes a report to JSON.
fn background(length: Duration, active: bool) {
    let (_parked, _active) = if active {
        (None, Some(ActiveThreads::spawn(256)))
    } else {
        (Some(ParkedThreads::spawn(256)), None)
    };
    let sampler = std::sync::Arc::new(
        SamplerBuilder::new()
            .with_thread_name("wm-background")
            .build()
            .expect("sampler"),
    );
    let _guard = sampler.start().expect("start");
    // Steady state: the first tick opens every thread's descriptors.
    std::thread::sleep(Duration::from_millis(2500));
    let Some(tid) = tid_named("wm-background") else {
        println!("background: sampler thread not found");
        return;
    };
    let threads = task_count(std::process::id());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let consumer = {
        let (sampler, stop) = (sampler.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut listener_ns, mut json_ns, mut ticks) = (0u64, 0u64, 0u64);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_secs(1));
                let c0 = thread_cpu_ns();
                std::hint::black_box(sampler.latest_interval());
                std::hint::black_box(sampler.findings());
                let c1 = thread_cpu_ns();
                let _ = std::hint::black_box(serde_json::to_string(&sampler.report()));
                json_ns += thread_cpu_ns() - c1;
                listener_ns += c1 - c0;
                ticks += 1;
            }
            (listener_ns, json_ns, ticks.max(1))
        })
    };
    let run0 = task_run_ns(tid).unwrap_or(0);
    let stats0 = sampler.stats();
    let t0 = Instant::now();
    std::thread::sleep(length);
    let run1 = task_run_ns(tid).unwrap_or(0);
    let stats1 = sampler.stats();
    let wall = t0.elapsed().as_nanos() as f64;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (listener_ns, json_ns, ticks) = consumer.join().unwrap_or((0, 0, 1));
    let samples = (stats1.total_samples - stats0.total_samples).max(1);
    let thread_ns = (run1 - run0) as f64;
    let own_ns = (stats1.total_sampler_cpu_time_ns - stats0.total_sampler_cpu_time_ns) as f64;
    let pct = |ns: f64| ns / wall * 100.0;
    println!(
        "background 1 Hz, {threads} threads ({}), {:.0} s, {samples} ticks:",
        if active { "active" } else { "idle" },
        wall / 1e9
    );
    println!(
        "  sampler thread (schedstat, everything): {:>7.0} µs/tick = {:.4}% of a core",
        thread_ns / samples as f64 / 1e3,
        pct(thread_ns)
    );
    println!(
        "  sampler's own report (samples + its readers' CPU): {:>6.0} µs/tick = {:.4}%",
        own_ns / samples as f64 / 1e3,
        pct(own_ns)
    );
    println!(
        "  consumer: interval + findings {:.0} µs/tick, report to JSON {:.0} µs/tick",
        listener_ns as f64 / ticks as f64 / 1e3,
        json_ns as f64 / ticks as f64 / 1e3
    );
    println!(
        "  all together: {:.4}% of a core",
        pct(thread_ns) + (listener_ns + json_ns) as f64 / ticks as f64 / 1e9 * 100.0
    );
    println!(
        "  history: {} bytes per stored thread-sample; 300 snapshots x {threads} threads = {:.2} MiB",
        stats1.bytes_per_stored_thread_sample,
        300.0 * threads as f64 * f64::from(stats1.bytes_per_stored_thread_sample)
            / f64::from(1 << 20)
    );
}

fn main() {
    if let Ok(n) = std::env::var(CHILD_ENV) {
        child(n.parse().unwrap_or(0));
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick")
        || std::env::var_os("WAKEMETER_BENCH_QUICK").is_some();
    let plan = Plan::new(quick);
    // `-- --process-files`: only the process files kept / opened per sample.
    if std::env::args().any(|a| a == "--process-files") {
        process_files(&plan);
        return;
    }
    // `-- --background`: only the background runs, full length (about 50 s).
    if std::env::args().any(|a| a == "--background") {
        for active in Plan::new(false).background_active {
            background(Plan::new(false).background, active);
        }
        return;
    }
    let me = std::process::id();
    println!(
        "one sample: ns of the sampling thread's CPU per thread of the target (median), \
         wm = counters only (CPU clock/schedstat), wm+stat = with the status read, \
         default = 0.9 wm + 0.1 wm+stat (status every 10th sample)"
    );
    for active in [false, true] {
        print_header(&format!(
            "this process, {} threads",
            if active { "active" } else { "idle" }
        ));
        for &size in &plan.sizes {
            let extra = size.saturating_sub(1);
            let (_p, _a) = if active {
                (None, Some(ActiveThreads::spawn(extra)))
            } else {
                (Some(ParkedThreads::spawn(extra)), None)
            };
            for &gap in &plan.gaps {
                print_row(&mut row(&plan, Target::SelfProcess, me, gap));
            }
        }
    }
    print_header("another process by PID, active threads");
    for &size in &plan.pid_sizes {
        let child = ChildProcess::spawn(size);
        let pid = child.0.id();
        for &gap in &plan.gaps {
            print_row(&mut row(&plan, Target::Pid(pid), pid, gap));
        }
    }
    process_files(&plan);
    println!();
    for &active in &plan.background_active {
        background(plan.background, active);
    }
}

//! The cost on a 64-active-thread target: the workload's pool of ping-pong
//! pairs (`workload.rs`, [`Layout::Pool`]) under our programs and under the
//! bpftrace one-liner that counts switches per thread
//! (`benches/bpftrace/switch_count.bt`), from the kernel's run-time
//! statistics.
//!
//! Each round measures ours alone and bpftrace alone, in alternating order
//! (so that a noisy stretch of the shared VM does not always fall on the
//! same side), then both attached at once, where the two see the very same
//! events over the same wall time. The medians over the rounds are printed
//! with their range.

use wakemeter_ebpf::{EbpfSource, Target};

use crate::bpftrace::{Bpftrace, Script};
use crate::stats::{Deltas, is_ours, ns_per_event, ours, program_stats};
use crate::workload::{Layout, POOL_ROUND_TRIPS, POOL_THREADS, RUNS, Workload};

/// Rounds of the three measurements (`WAKEMETER_BENCH_ROUNDS` overrides).
const ROUNDS: usize = 5;

/// One measurement's figures, from program-stat deltas over a wall time.
#[derive(Clone, Copy, Default)]
struct Figures {
    /// ns per run of our `sched_switch`, `sched_waking` and the empty
    /// program (the floor).
    switch_ns: Option<f64>,
    waking_ns: Option<f64>,
    floor_ns: Option<f64>,
    /// ns per run of bpftrace's `sched_switch` program.
    bpftrace_ns: Option<f64>,
    /// Kernel time of our programs (floor program excluded) and of
    /// bpftrace's, ms per second of wall time.
    ours_ms_per_s: Option<f64>,
    bpftrace_ms_per_s: Option<f64>,
    /// Median wall time of one run, ms.
    run_ms: f64,
    /// Runs per second of wall time of our `sched_switch` (or bpftrace's,
    /// alone) and of our `sched_waking`, thousands.
    switch_k_per_s: f64,
    waking_k_per_s: f64,
}

fn figures(d: &Deltas, wall_ns: u64, median_ns: u64) -> Figures {
    let per_s = |keep: &dyn Fn(&str) -> bool| -> Option<f64> {
        let (ns, n) = d
            .iter()
            .filter(|(name, _, _)| keep(name))
            .fold((0u64, 0u64), |a, (_, ns, n)| (a.0 + ns, a.1 + n));
        (n > 0 && wall_ns > 0).then(|| ns as f64 / wall_ns as f64 * 1e3)
    };
    let (mine, theirs): (Deltas, Deltas) = d.iter().cloned().partition(|(n, _, _)| is_ours(n));
    let k_per_s = |part: &str| {
        let runs = ns_per_event(&mine, part)
            .or_else(|| ns_per_event(&theirs, part))
            .map_or(0, |x| x.1);
        runs as f64 / wall_ns.max(1) as f64 * 1e6
    };
    Figures {
        switch_ns: ns_per_event(&mine, "sched_sw").map(|x| x.0),
        waking_ns: ns_per_event(&mine, "sched_wak").map(|x| x.0),
        floor_ns: ns_per_event(&mine, "calibrat").map(|x| x.0),
        bpftrace_ns: ns_per_event(&theirs, "sched_sw").map(|x| x.0),
        ours_ms_per_s: per_s(&|n| is_ours(n) && !n.contains("calibrat")),
        bpftrace_ms_per_s: per_s(&|n| !is_ours(n)),
        run_ms: median_ns as f64 / 1e6,
        switch_k_per_s: k_per_s("sched_sw"),
        waking_k_per_s: k_per_s("sched_wak"),
    }
}

fn attach_ours(pid: u32) -> Option<EbpfSource> {
    // What `wakemeter watch` attaches: the default hook, plus the empty
    // program for the floor.
    match EbpfSource::builder(Target::Pid(pid))
        .with_calibration_program(true)
        .attach()
    {
        Ok(s) => Some(s),
        Err(e) => {
            println!("  attach failed: {e}");
            None
        }
    }
}

fn measure_ours(w: &mut Workload) -> Option<Figures> {
    let source = attach_ours(w.pid())?;
    let ids = ours(&program_stats());
    let m = w.measure_window(Layout::Pool, &ids);
    drop(source);
    Some(figures(&m.deltas, m.wall_ns, m.median_ns))
}

fn measure_bpftrace(w: &mut Workload) -> Option<Figures> {
    let bt = match Bpftrace::start(w.pid(), Script::SwitchCount) {
        Ok(bt) => bt,
        Err(e) => {
            println!("  bpftrace: {e}");
            return None;
        }
    };
    let m = w.measure_window(Layout::Pool, &bt.ids);
    drop(bt);
    Some(figures(&m.deltas, m.wall_ns, m.median_ns))
}

fn measure_both(w: &mut Workload) -> Option<Figures> {
    let bt = Bpftrace::start(w.pid(), Script::SwitchCount).ok()?;
    let source = attach_ours(w.pid())?;
    let mut ids = ours(&program_stats());
    ids.extend(bt.ids.iter().copied());
    let m = w.measure_window(Layout::Pool, &ids);
    drop(source);
    drop(bt);
    Some(figures(&m.deltas, m.wall_ns, m.median_ns))
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// Median and range of the values `pick` finds, formatted.
fn spread(rows: &[Figures], pick: impl Fn(&Figures) -> Option<f64>, digits: usize) -> String {
    let mut v: Vec<f64> = rows.iter().filter_map(pick).collect();
    if v.is_empty() {
        return "-".into();
    }
    v.sort_by(f64::total_cmp);
    let (lo, hi) = (v[0], v[v.len() - 1]);
    let mid = v[v.len() / 2];
    format!("{mid:.digits$} ({lo:.digits$}-{hi:.digits$})")
}

fn fmt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

/// The pool measurement; run-time statistics must be on.
pub fn pool_costs(w: &mut Workload, bpftrace_ok: bool) {
    let rounds = std::env::var("WAKEMETER_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(ROUNDS);
    let pairs = POOL_THREADS / 2;
    println!(
        "\n{POOL_THREADS}-thread pool: {pairs} unpinned pairs, {POOL_ROUND_TRIPS} pipe round trips \
         each per run, {RUNS} runs per measurement, {rounds} rounds (load average {} at start)",
        load_average()
    );
    println!(
        "  ns/run from run_time_ns/run_cnt; ms/s = the programs' run time per second of wall time \
         (ours: floor program excluded); k/s = thousand runs per second of sched_switch and \
         sched_waking; ratio = ours / bpftrace ms/s"
    );
    println!(
        "  {:<22} {:>7} {:>7} {:>7} {:>9} {:>9} {:>9} {:>8} {:>7} {:>7} {:>6}",
        "round / measurement",
        "switch",
        "waking",
        "floor",
        "bt sw",
        "ours ms/s",
        "bt ms/s",
        "ms/run",
        "sw k/s",
        "wk k/s",
        "ratio"
    );
    let row = |label: &str, f: &Figures| {
        let ratio = match (f.ours_ms_per_s, f.bpftrace_ms_per_s) {
            (Some(o), Some(b)) if b > 0.0 => format!("{:.2}", o / b),
            _ => "-".into(),
        };
        println!(
            "  {label:<22} {:>7} {:>7} {:>7} {:>9} {:>9} {:>9} {:>8.1} {:>7.0} {:>7.0} {ratio:>6}",
            fmt(f.switch_ns, 1),
            fmt(f.waking_ns, 1),
            fmt(f.floor_ns, 1),
            fmt(f.bpftrace_ns, 1),
            fmt(f.ours_ms_per_s, 2),
            fmt(f.bpftrace_ms_per_s, 2),
            f.run_ms,
            f.switch_k_per_s,
            f.waking_k_per_s,
        );
    };
    let (mut alone, mut bt_alone, mut both) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let order: [bool; 2] = if r % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for mine in order {
            if mine {
                if let Some(f) = measure_ours(w) {
                    row(&format!("{r}: ours alone"), &f);
                    alone.push(f);
                }
            } else if bpftrace_ok && let Some(f) = measure_bpftrace(w) {
                row(&format!("{r}: bpftrace alone"), &f);
                bt_alone.push(f);
            }
        }
        if bpftrace_ok && let Some(f) = measure_both(w) {
            row(&format!("{r}: both attached"), &f);
            both.push(f);
        }
    }
    println!("  load average at end {}", load_average());

    println!("\nsummary, {POOL_THREADS}-thread pool: median (range) over {rounds} rounds");
    println!(
        "  ours alone:    sched_switch {} ns/run, sched_waking {} ns/run, floor {} ns/run; {} ms/s",
        spread(&alone, |f| f.switch_ns, 1),
        spread(&alone, |f| f.waking_ns, 1),
        spread(&alone, |f| f.floor_ns, 1),
        spread(&alone, |f| f.ours_ms_per_s, 2),
    );
    println!(
        "  bpftrace alone: sched_switch {} ns/run; {} ms/s",
        spread(&bt_alone, |f| f.bpftrace_ns, 1),
        spread(&bt_alone, |f| f.bpftrace_ms_per_s, 2),
    );
    let alone_ratio: Vec<Figures> = alone
        .iter()
        .zip(&bt_alone)
        .map(|(o, b)| Figures {
            ours_ms_per_s: match (o.ours_ms_per_s, b.bpftrace_ms_per_s) {
                (Some(o), Some(b)) if b > 0.0 => Some(o / b),
                _ => None,
            },
            ..Figures::default()
        })
        .collect();
    println!(
        "  alone, kernel time ours / bpftrace (same round): {}",
        spread(&alone_ratio, |f| f.ours_ms_per_s, 2)
    );
    println!(
        "  both attached: ours sched_switch {} ns/run, sched_waking {} ns/run, floor {} ns/run, \
         bpftrace sched_switch {} ns/run",
        spread(&both, |f| f.switch_ns, 1),
        spread(&both, |f| f.waking_ns, 1),
        spread(&both, |f| f.floor_ns, 1),
        spread(&both, |f| f.bpftrace_ns, 1),
    );
    println!(
        "  both attached: ours {} ms/s, bpftrace {} ms/s; kernel time ours / bpftrace = {}",
        spread(&both, |f| f.ours_ms_per_s, 2),
        spread(&both, |f| f.bpftrace_ms_per_s, 2),
        spread(
            &both,
            |f| match (f.ours_ms_per_s, f.bpftrace_ms_per_s) {
                (Some(o), Some(b)) if b > 0.0 => Some(o / b),
                _ => None,
            },
            2
        ),
    );
}

/// Starts a workload, mounts tracefs if needed, turns run-time statistics
/// on and runs [`pool_costs`].
pub fn run() {
    let Some(mut w) = Workload::start() else {
        println!("pool costs skipped: cannot start the workload process");
        return;
    };
    let mount = crate::tracefs::TracefsMount::ensure();
    if let Err(e) = &mount {
        println!("  bpftrace comparison skipped: {e}");
    }
    let Ok(_stats) = wakemeter_ebpf::enable_run_stats() else {
        println!("pool costs skipped: BPF_ENABLE_STATS refused");
        return;
    };
    pool_costs(&mut w, mount.is_ok());
}

//! The cost on a 64-active-thread target: the workload's pool of ping-pong
//! pairs (`workload.rs`, [`Layout::Pool`]) under our programs and under the
//! bpftrace one-liner that counts switches per thread
//! (`benches/bpftrace/switch_count.bt`), from the kernel's run-time
//! statistics.
//!
//! Each round measures ours alone (what `wakemeter watch` attaches, one
//! program per tracepoint) and bpftrace alone, in alternating order (so
//! that a noisy stretch of the shared VM does not always fall on the same
//! side), then both attached at once, where the two see the very same
//! events over the same wall time, then ours beside the empty calibration
//! program for the floor (in a window of its own: a second program on
//! `sched_switch` is not what a user runs). The medians over the rounds are
//! printed with their range, and a verdict against the target
//! ([`TARGET_RATIO`]): PASS when the median kernel-time ratio ours /
//! bpftrace is at most the target both alone and both attached. A load
//! above 1 at the start makes the verdict void, said on the verdict line.
//!
//! `WAKEMETER_EBPF_BENCH=parts` measures, in each round beside bpftrace,
//! ours with each [`ProgramPart`] switched off in turn: what each part
//! costs per run.

use wakemeter_ebpf::{EbpfSource, ProgramPart, Target};

use crate::bpftrace::{Bpftrace, Script};
use crate::stats::{Deltas, is_ours, ns_per_event, ours, program_stats};
use crate::workload::{Layout, POOL_ROUND_TRIPS, POOL_THREADS, RUNS, Workload};

/// Rounds of the measurements (`WAKEMETER_BENCH_ROUNDS` overrides).
const ROUNDS: usize = 5;
/// The target: our programs' kernel time at most this many times the
/// bpftrace one-liner's (issue 42).
pub const TARGET_RATIO: f64 = 1.5;
/// Above this 1-minute load at the start the verdict is void.
const MAX_LOAD: f64 = 1.0;

/// One measurement's figures, from program-stat deltas over a wall time.
#[derive(Clone, Copy, Default)]
struct Figures {
    /// ns per run of our `sched_switch`, `sched_waking` and the empty
    /// program (the floor).
    switch_ns: Option<f64>,
    waking_ns: Option<f64>,
    floor_ns: Option<f64>,
    /// ns per run of our syscall-exit program (`sys_exit` or the
    /// per-syscall one).
    sys_exit_ns: Option<f64>,
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
        sys_exit_ns: ns_per_event(&mine, "sys_exit").map(|x| x.0),
        bpftrace_ns: ns_per_event(&theirs, "sched_sw").map(|x| x.0),
        ours_ms_per_s: per_s(&|n| is_ours(n) && !n.contains("calibrat")),
        bpftrace_ms_per_s: per_s(&|n| !is_ours(n)),
        run_ms: median_ns as f64 / 1e6,
        switch_k_per_s: k_per_s("sched_sw"),
        waking_k_per_s: k_per_s("sched_wak"),
    }
}

/// What `wakemeter watch` attaches (the default hooks), with the empty
/// program for the floor when `floor`, and `off` switched off.
fn attach_ours(pid: u32, floor: bool, off: Option<ProgramPart>) -> Option<EbpfSource> {
    let mut builder = EbpfSource::builder(Target::Pid(pid)).with_calibration_program(floor);
    if let Some(part) = off {
        builder = builder.with_part_off(part);
    }
    match builder.attach() {
        Ok(s) => Some(s),
        Err(e) => {
            println!("  attach failed: {e}");
            None
        }
    }
}

fn measure_ours(w: &mut Workload, floor: bool, off: Option<ProgramPart>) -> Option<Figures> {
    let source = attach_ours(w.pid(), floor, off)?;
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
    let source = attach_ours(w.pid(), false, None)?;
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

/// The CPU model as `/proc/cpuinfo` names it.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "?".into())
}

/// The median of the values `pick` finds.
fn median(rows: &[Figures], pick: impl Fn(&Figures) -> Option<f64>) -> Option<f64> {
    let mut v: Vec<f64> = rows.iter().filter_map(pick).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// Kernel time ours / bpftrace of one measurement (both attached).
fn both_ratio(f: &Figures) -> Option<f64> {
    match (f.ours_ms_per_s, f.bpftrace_ms_per_s) {
        (Some(o), Some(b)) if b > 0.0 => Some(o / b),
        _ => None,
    }
}

/// The rounds to run: `WAKEMETER_BENCH_ROUNDS`, else [`ROUNDS`].
fn rounds() -> usize {
    std::env::var("WAKEMETER_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(ROUNDS)
}

/// The 1-minute load now, and a loud line when it is above [`MAX_LOAD`].
fn check_load() -> Option<f64> {
    let load: Option<f64> = load_average().parse().ok();
    if let Some(l) = load
        && l > MAX_LOAD
    {
        println!(
            "\n  !!! LOAD {l:.2} AT START IS ABOVE {MAX_LOAD}: other work shares the CPUs, so the \
             figures below cannot say whether the target holds (the verdict is void) !!!"
        );
    }
    load
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
    let rounds = rounds();
    let pairs = POOL_THREADS / 2;
    let load = check_load();
    println!(
        "\n{POOL_THREADS}-thread pool: {pairs} unpinned pairs, {POOL_ROUND_TRIPS} pipe round trips \
         each per run, {RUNS} runs per measurement, {rounds} rounds (load average {} at start; \
         CPU {}, {} online)",
        load_average(),
        cpu_model(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    println!(
        "  ns/run from run_time_ns/run_cnt; ms/s = the programs' run time per second of wall time \
         (ours: floor program excluded); k/s = thousand runs per second of sched_switch and \
         sched_waking; ratio = ours / bpftrace ms/s; the floor is measured in a window of \
         its own, ours beside the empty program"
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
    let (mut alone, mut bt_alone, mut both, mut floor) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let order: [bool; 2] = if r % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for mine in order {
            if mine {
                if let Some(f) = measure_ours(w, false, None) {
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
        if let Some(f) = measure_ours(w, true, None) {
            row(&format!("{r}: ours + floor prog"), &f);
            floor.push(f);
        }
    }
    println!("  load average at end {}", load_average());

    println!("\nsummary, {POOL_THREADS}-thread pool: median (range) over {rounds} rounds");
    println!(
        "  ours alone:    sched_switch {} ns/run, sched_waking {} ns/run, sys_exit {} ns/run; {} ms/s",
        spread(&alone, |f| f.switch_ns, 1),
        spread(&alone, |f| f.waking_ns, 1),
        spread(&alone, |f| f.sys_exit_ns, 1),
        spread(&alone, |f| f.ours_ms_per_s, 2),
    );
    println!(
        "  floor (empty program beside ours): {} ns/run",
        spread(&floor, |f| f.floor_ns, 1),
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
        "  both attached: ours sched_switch {} ns/run, sched_waking {} ns/run, sys_exit {} ns/run, \
         bpftrace sched_switch {} ns/run",
        spread(&both, |f| f.switch_ns, 1),
        spread(&both, |f| f.waking_ns, 1),
        spread(&both, |f| f.sys_exit_ns, 1),
        spread(&both, |f| f.bpftrace_ns, 1),
    );
    println!(
        "  both attached: ours {} ms/s, bpftrace {} ms/s; kernel time ours / bpftrace = {}",
        spread(&both, |f| f.ours_ms_per_s, 2),
        spread(&both, |f| f.bpftrace_ms_per_s, 2),
        spread(&both, both_ratio, 2),
    );
    verdict(&alone, &alone_ratio, &both, &floor, load);
}

/// The one line a closing note copies: PASS or FAIL against
/// [`TARGET_RATIO`], the ratios with their spread, the per-run ns of each
/// program, load and CPU.
fn verdict(
    alone: &[Figures],
    alone_ratio: &[Figures],
    both: &[Figures],
    floor: &[Figures],
    load: Option<f64>,
) {
    let alone_mid = median(alone_ratio, |f| f.ours_ms_per_s);
    let both_mid = median(both, both_ratio);
    let word = match (alone_mid, both_mid) {
        (Some(a), Some(b)) if a <= TARGET_RATIO && b <= TARGET_RATIO => "PASS",
        (Some(_), Some(_)) => "FAIL",
        _ => "NO VERDICT (bpftrace did not run)",
    };
    let void = match load {
        Some(l) if l <= MAX_LOAD => String::new(),
        Some(l) => format!(" -- VOID: load {l:.2} at start > {MAX_LOAD}"),
        None => " -- VOID: load unknown".into(),
    };
    println!(
        "\nverdict: {word} against {TARGET_RATIO}x{void}: kernel time ours / bpftrace alone {}, \
         both attached {}; ns/run ours sched_switch {}, sched_waking {}, sys_exit {}, floor {}; \
         bpftrace sched_switch {} (both attached); load {} at start, CPU {}",
        spread(alone_ratio, |f| f.ours_ms_per_s, 2),
        spread(both, both_ratio, 2),
        spread(alone, |f| f.switch_ns, 1),
        spread(alone, |f| f.waking_ns, 1),
        spread(alone, |f| f.sys_exit_ns, 1),
        spread(floor, |f| f.floor_ns, 1),
        spread(both, |f| f.bpftrace_ns, 1),
        load.map_or_else(|| "?".into(), |l| format!("{l:.2}")),
        cpu_model(),
    );
}

/// Where the cost goes: in each round bpftrace alone, ours whole, ours
/// with each [`ProgramPart`] off in turn and the floor program (beside
/// ours). Per-run ns of our `sched_switch` and `sched_waking` in each, and
/// what switching a part off saves against the whole in the same round.
pub fn part_costs(w: &mut Workload, bpftrace_ok: bool) {
    let rounds = rounds();
    let load = check_load();
    println!(
        "\nwhere the cost goes, {POOL_THREADS}-thread pool: {rounds} rounds (load average {} at \
         start, CPU {})",
        load_average(),
        cpu_model()
    );
    println!(
        "  ns/run from run_time_ns/run_cnt; a part \"off\" is left out of the programs (its \
         counters are then wrong)"
    );
    println!(
        "  {:<26} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "round / measurement", "switch", "waking", "sys_exit", "floor", "bt sw"
    );
    let row = |label: &str, f: &Figures| {
        println!(
            "  {label:<26} {:>9} {:>9} {:>9} {:>9} {:>9}",
            fmt(f.switch_ns, 1),
            fmt(f.waking_ns, 1),
            fmt(f.sys_exit_ns, 1),
            fmt(f.floor_ns, 1),
            fmt(f.bpftrace_ns, 1),
        );
    };
    let mut whole = Vec::new();
    let mut bt = Vec::new();
    let mut floor = Vec::new();
    let mut off: Vec<Vec<Figures>> = vec![Vec::new(); ProgramPart::ALL.len()];
    for r in 0..rounds {
        if bpftrace_ok && let Some(f) = measure_bpftrace(w) {
            row(&format!("{r}: bpftrace alone"), &f);
            bt.push(f);
        }
        if let Some(f) = measure_ours(w, false, None) {
            row(&format!("{r}: ours whole"), &f);
            whole.push(f);
        }
        for (i, part) in ProgramPart::ALL.iter().enumerate() {
            if let Some(f) = measure_ours(w, false, Some(*part)) {
                row(&format!("{r}: ours, {} off", part.name()), &f);
                off[i].push(f);
            }
        }
        if let Some(f) = measure_ours(w, true, None) {
            row(&format!("{r}: floor program"), &f);
            floor.push(f);
        }
    }
    println!("  load average at end {}", load_average());
    println!("\nsummary, where the cost goes: median (range) over {rounds} rounds");
    println!(
        "  bpftrace sched_switch {} ns/run; ours whole: sched_switch {}, sched_waking {}, \
         sys_exit {}; floor (empty program) {} ns/run",
        spread(&bt, |f| f.bpftrace_ns, 1),
        spread(&whole, |f| f.switch_ns, 1),
        spread(&whole, |f| f.waking_ns, 1),
        spread(&whole, |f| f.sys_exit_ns, 1),
        spread(&floor, |f| f.floor_ns, 1),
    );
    let saved = |rows: &[Figures], pick: &dyn Fn(&Figures) -> Option<f64>| -> String {
        let d: Vec<Figures> = rows
            .iter()
            .zip(&whole)
            .map(|(o, w)| Figures {
                switch_ns: pick(w).zip(pick(o)).map(|(w, o)| w - o),
                ..Figures::default()
            })
            .collect();
        spread(&d, |f| f.switch_ns, 1)
    };
    for (i, part) in ProgramPart::ALL.iter().enumerate() {
        println!(
            "  {:<10} off: sched_switch {} ns/run (saves {}), sched_waking {} ns/run (saves {})",
            part.name(),
            spread(&off[i], |f| f.switch_ns, 1),
            saved(&off[i], &|f| f.switch_ns),
            spread(&off[i], |f| f.waking_ns, 1),
            saved(&off[i], &|f| f.waking_ns),
        );
    }
    if load.is_none_or(|l| l > MAX_LOAD) {
        println!("  (load above {MAX_LOAD} at start: per-run figures run high under contention)");
    }
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
    if std::env::var("WAKEMETER_EBPF_BENCH").as_deref() == Ok("parts") {
        part_costs(&mut w, mount.is_ok());
    } else {
        pool_costs(&mut w, mount.is_ok());
    }
}

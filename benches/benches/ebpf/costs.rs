//! The measurements and their output: the workload's slowdown under ours
//! and under bpftrace, what a syscall of another process pays, and ns per
//! event from the kernel's run-time statistics.

use std::time::Instant;

use wakemeter_ebpf::{AttachKind, EbpfSource, SyscallHook, Target};

use crate::bpftrace::{Bpftrace, Script};
use crate::stats::{Deltas, is_ours, ns_per_event, ours, print_programs, program_stats};
use crate::tracefs::TracefsMount;
use crate::workload::{Layout, ROUND_TRIPS, RUNS, Workload};

/// Which of our syscall hooks a measurement uses.
#[derive(Clone, Copy, PartialEq)]
enum Hook {
    /// `with_syscalls(false)`.
    None,
    /// The raw `sys_exit` tracepoint (forced with `tp_btf` programs).
    SysExit,
    /// The per-syscall tracepoints (`Auto`, tracefs mounted).
    PerSyscall,
}

fn attach_ours(target: Target, hook: Hook, calibration: bool) -> Option<EbpfSource> {
    let kind = if hook == Hook::PerSyscall {
        AttachKind::Auto
    } else {
        AttachKind::BtfTracepoint
    };
    match EbpfSource::builder(target)
        .with_syscalls(hook != Hook::None)
        .with_attach_kind(kind)
        .with_calibration_program(calibration)
        .attach()
    {
        Ok(s) if hook == Hook::PerSyscall && s.syscall_hook() != SyscallHook::PerSyscall => {
            println!("  per-syscall tracepoints unavailable (is tracefs mounted?)");
            None
        }
        Ok(s) => Some(s),
        Err(e) => {
            println!("  attach failed: {e}");
            None
        }
    }
}

/// Our programs as one configuration of a measurement.
#[derive(Clone, Copy)]
struct Ours {
    label: &'static str,
    target_workload: bool,
    hook: Hook,
}

const CONFIGS: [Ours; 4] = [
    Ours {
        label: "ours (sys_exit), workload NOT the target",
        target_workload: false,
        hook: Hook::SysExit,
    },
    Ours {
        label: "ours (sys_exit), workload IS the target",
        target_workload: true,
        hook: Hook::SysExit,
    },
    Ours {
        label: "ours (per-syscall), workload IS the target",
        target_workload: true,
        hook: Hook::PerSyscall,
    },
    Ours {
        label: "ours without syscalls, workload IS target",
        target_workload: true,
        hook: Hook::None,
    },
];

/// Runs the workload under one configuration of our programs; returns
/// (median ns per run, program deltas).
fn measure_ours(
    w: &mut Workload,
    layout: Layout,
    cfg: Ours,
    calibration: bool,
) -> Option<(u64, Deltas)> {
    let target = if cfg.target_workload {
        Target::Pid(w.pid())
    } else {
        Target::SelfProcess
    };
    let source = attach_ours(target, cfg.hook, calibration)?;
    let ids = ours(&program_stats());
    let r = w.measure(layout, &ids);
    drop(source);
    Some(r)
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// ns per `getppid` syscall of this process, best of 5 runs.
pub fn ns_per_syscall() -> f64 {
    const CALLS: u32 = 200_000;
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t0 = Instant::now();
        for _ in 0..CALLS {
            // SAFETY: getppid has no arguments and no side effects.
            std::hint::black_box(unsafe { libc::syscall(libc::SYS_getppid) });
        }
        best = best.min(t0.elapsed().as_nanos() as f64 / f64::from(CALLS));
    }
    best
}

/// What a syscall of a process that is NOT the target pays while the
/// programs are attached (a syscall tracepoint puts every syscall of
/// every process on the kernel's traced path). Run-time stats off. The
/// configurations are measured in turn, three rounds, best of each, so
/// that a noisy moment does not favour one of them.
fn syscall_cost(target_pid: u32, tracefs: bool) {
    const ROUNDS: usize = 3;
    println!(
        "\nsyscall cost for a process that is not the target (getppid; stats off; best of {ROUNDS} rounds):"
    );
    let configs: [(&str, Option<Hook>); 5] = [
        ("nothing attached", None),
        ("ours, sys_exit", Some(Hook::SysExit)),
        ("ours, per-syscall tracepoints", Some(Hook::PerSyscall)),
        ("ours, without syscalls", Some(Hook::None)),
        ("bpftrace, all ours counts", None),
    ];
    let mut best = [f64::MAX; 5];
    for _ in 0..ROUNDS {
        for (i, (label, hook)) in configs.iter().enumerate() {
            let ns = match (i, hook) {
                (0, _) => Some(ns_per_syscall()),
                (_, Some(hook)) => {
                    attach_ours(Target::Pid(target_pid), *hook, false).map(|source| {
                        let ns = ns_per_syscall();
                        drop(source);
                        ns
                    })
                }
                (_, None) if tracefs => Bpftrace::start(target_pid, Script::Full).ok().map(|bt| {
                    let ns = ns_per_syscall();
                    drop(bt);
                    ns
                }),
                _ => None,
            };
            if let (Some(ns), Some(b)) = (ns, best.get_mut(i)) {
                *b = b.min(ns);
            } else if ns.is_none() {
                println!("  {label}: not measured");
            }
        }
    }
    let bare = best[0];
    for ((label, _), ns) in configs.iter().zip(best) {
        if ns < f64::MAX {
            println!("  {label:<46} {ns:>7.1} ns  {:+6.1} ns", ns - bare);
        }
    }
}

pub fn event_costs() {
    let Some(mut w) = Workload::start() else {
        println!("per-event costs skipped: cannot start the workload process");
        return;
    };
    let workload_pid = w.pid();
    println!(
        "\nworkload: {ROUND_TRIPS} pipe round trips between two threads of a child process \
         (2 switches, 4 syscalls each); median of {RUNS} runs"
    );

    // Pass 1: wall-clock slowdown, run-time statistics OFF, no
    // calibration. bpftrace first (each script alone), then ours.
    let mount = TracefsMount::ensure();
    println!("\nslowdown (threads on one CPU; run-time stats off):");
    let mut bt_times: Vec<(Script, u64)> = Vec::new();
    let mut bt_available = false;
    for script in [Script::Switch, Script::Full] {
        let bt = match &mount {
            Ok(_) => Bpftrace::start(workload_pid, script),
            Err(e) => Err(e.clone()),
        };
        match bt {
            Ok(bt) => {
                let (t, _) = w.measure(Layout::SameCpu, &[]);
                drop(bt);
                bt_times.push((script, t));
                bt_available = true;
            }
            Err(e) => println!("  bpftrace comparison skipped: {e}"),
        }
    }
    let (base, _) = w.measure(Layout::SameCpu, &[]);
    println!(
        "  {:<46} {:>8.2} ms/run",
        "baseline (nothing attached)",
        ms(base)
    );
    let slow = |t: u64| (t as f64 / base.max(1) as f64 - 1.0) * 100.0;
    let mut ours_times: Vec<(Ours, u64)> = Vec::new();
    for cfg in CONFIGS {
        if let Some((t, _)) = measure_ours(&mut w, Layout::SameCpu, cfg, false) {
            println!(
                "  {:<46} {:>8.2} ms/run  {:+6.1}%",
                cfg.label,
                ms(t),
                slow(t)
            );
            ours_times.push((cfg, t));
        }
    }
    for (script, t) in &bt_times {
        let label = match script {
            Script::Switch => "bpftrace, sched_switch only, workload IS target",
            Script::Full => "bpftrace, all ours counts, workload IS target",
            Script::SwitchCount => "bpftrace, switch count one-liner",
        };
        println!("  {label:<46} {:>8.2} ms/run  {:+6.1}%", ms(*t), slow(*t));
    }
    // Overhead against bpftrace doing the same counting (goal: at most half).
    for (script, bt) in &bt_times {
        let same = ours_times.iter().filter(|(cfg, _)| {
            cfg.target_workload && (cfg.hook != Hook::None) == (*script == Script::Full)
        });
        for (cfg, t) in same {
            let (o, b) = (slow(*t), slow(*bt));
            println!(
                "  overhead ratio, {} vs bpftrace: {o:+.1}% / {b:+.1}% = {:.2}",
                cfg.label,
                o / b
            );
        }
    }

    syscall_cost(workload_pid, mount.is_ok());

    // Pass 2: ns per event from the kernel's run-time statistics.
    let Ok(_stats) = wakemeter_ebpf::enable_run_stats() else {
        println!("per-event costs skipped: BPF_ENABLE_STATS refused");
        return;
    };
    println!(
        "\nper event (kernel run_time_ns / run_cnt; stats on; calibrate = empty program, the floor):"
    );
    let mut rows: Vec<(String, Deltas)> = Vec::new();
    for (layout, lname) in [(Layout::SameCpu, "one CPU"), (Layout::CrossCpu, "two CPUs")] {
        for cfg in CONFIGS {
            if layout == Layout::CrossCpu && !cfg.target_workload {
                continue;
            }
            if let Some((_, d)) = measure_ours(&mut w, layout, cfg, true) {
                let label = format!("{} ({lname})", cfg.label);
                println!("  {label}");
                print_programs("", &d);
                rows.push((label, d));
            }
        }
    }

    // Same run as bpftrace: both attached to the workload.
    let mut bt_row = None;
    if bt_available {
        match Bpftrace::start(workload_pid, Script::Switch) {
            Err(e) => println!("bpftrace (same run) skipped: {e}"),
            Ok(bt) => {
                if let Some(both) = attach_ours(Target::Pid(workload_pid), Hook::SysExit, true) {
                    let mut ids = ours(&program_stats());
                    ids.extend(bt.ids.iter().copied());
                    let (_, d) = w.measure(Layout::SameCpu, &ids);
                    drop(both);
                    let (mine, theirs): (Deltas, Deltas) =
                        d.into_iter().partition(|(n, _, _)| is_ours(n));
                    println!(
                        "  same run, ours and bpftrace both attached, workload IS the target (one CPU)"
                    );
                    print_programs("ours", &mine);
                    print_programs("bpftrace", &theirs);
                    bt_row = Some((mine, theirs));
                }
            }
        }
    }
    drop(mount);
    drop(w);

    println!("\nsummary: sched_switch program, ns per event (above the empty program's floor)");
    for (label, d) in &rows {
        if let (Some((ns, n)), Some((floor, _))) =
            (ns_per_event(d, "sched_sw"), ns_per_event(d, "calibrat"))
        {
            println!(
                "  {label:<58} {ns:6.1} ns ({:5.1} above floor {floor:.1}) over {n} events",
                ns - floor
            );
        }
    }
    if let Some((mine, theirs)) = bt_row
        && let (Some((o, _)), Some((b, _))) = (
            ns_per_event(&mine, "sched_sw"),
            ns_per_event(&theirs, "sched_sw"),
        )
    {
        println!(
            "  same run vs bpftrace (target, one CPU): ours {o:.1} ns, bpftrace {b:.1} ns per sched_switch; ours/bpftrace = {:.2}",
            o / b
        );
    }
}

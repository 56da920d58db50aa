//! Cost of the wakemeter-ebpf kernel programs, measured by the kernel itself.
//!
//! - criterion: attach + detach, and one `read()` of the source;
//! - per traced event: `run_time_ns / run_cnt` of each program from the
//!   kernel's BPF run-time statistics (`BPF_ENABLE_STATS`) while a
//!   context-switch-heavy workload runs (two threads of a child process
//!   ping-ponging a byte over pipes, both pinned to CPU 0, so every round
//!   trip is two switches between the workload's threads), once with the
//!   workload as a non-target process and once as the target;
//! - the same workload under bpftrace doing the equivalent counting, two
//!   ways: our `sched_switch` handler alone (switch counts and an off-CPU
//!   histogram for one process) and everything ours counts with syscalls
//!   on (plus wakeups, wakers, and poll / nanosleep calls, zero returns,
//!   timeouts and time on the per-syscall tracepoints); the workload's
//!   slowdown under each alone against ours, and, with both attached in the
//!   same run, ns per `sched_switch` event of each.
//!
//! Needs root and kernel BTF; bpftrace is optional (`apt-get install
//! bpftrace`) and needs tracefs, which this bench mounts on
//! `/sys/kernel/tracing` when it is missing (and unmounts afterwards).
//!
//! Run: `cargo bench -p wakemeter-benches --bench ebpf`

fn main() {
    #[cfg(target_os = "linux")]
    linux::main();
    #[cfg(not(target_os = "linux"))]
    println!("ebpf bench: Linux hosts only; skipped");
}

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::HashMap;
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
    use std::time::{Duration, Instant};

    use criterion::Criterion;
    use wakemeter::KernelSource;
    use wakemeter_ebpf::{AttachKind, EbpfError, EbpfSource, SyscallHook, Target};

    /// argv flag that turns this binary into the workload child.
    const WORKLOAD_FLAG: &str = "--wakemeter-ebpf-workload";
    /// Round trips per timed run (two context switches each).
    const ROUND_TRIPS: u64 = 40_000;
    /// Timed runs per configuration (the median is reported).
    const RUNS: usize = 5;
    const TRACEFS: &str = "/sys/kernel/tracing";

    /// Program id -> (kernel name, run_time_ns, run_cnt).
    type Snapshot = HashMap<u32, (String, u64, u64)>;
    /// (kernel name, run_time_ns, run_cnt) differences, summed by name.
    type Deltas = Vec<(String, u64, u64)>;

    pub fn main() {
        if std::env::args().any(|a| a == WORKLOAD_FLAG) {
            workload::serve();
            return;
        }
        if let Some(why) = skip_reason() {
            println!("ebpf bench skipped: {why}");
            return;
        }
        let cold = Instant::now();
        match EbpfSource::attach(Target::SelfProcess) {
            Ok(s) => println!(
                "first attach (includes parsing kernel BTF): {:.1} ms wall, attach_duration {:.1} ms",
                cold.elapsed().as_secs_f64() * 1e3,
                s.attach_duration().as_secs_f64() * 1e3
            ),
            Err(EbpfError::BuiltWithoutClang) => {
                println!("ebpf bench skipped: wakemeter-ebpf was built without clang");
                return;
            }
            Err(e) => {
                println!("ebpf bench skipped: attach failed: {e}");
                return;
            }
        }

        let mut c = Criterion::default().configure_from_args();
        criterion_benches(&mut c);
        c.final_summary();

        event_costs();
    }

    fn skip_reason() -> Option<&'static str> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Some("needs root (CAP_BPF + CAP_PERFMON + CAP_SYS_ADMIN for run-time stats)");
        }
        if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
            return Some("no kernel BTF");
        }
        None
    }

    fn criterion_benches(c: &mut Criterion) {
        let mut g = c.benchmark_group("ebpf");
        g.sample_size(10)
            .measurement_time(Duration::from_secs(4))
            .warm_up_time(Duration::from_millis(500));
        g.bench_function("attach_detach", |b| {
            b.iter(|| EbpfSource::attach(Target::SelfProcess).map(drop).is_ok())
        });

        // read() of a source tracking this process with 8 extra sleeping threads.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                })
            })
            .collect();
        if let Ok(mut source) = EbpfSource::attach(Target::SelfProcess) {
            std::thread::sleep(Duration::from_millis(50));
            let n = source.read().map(|s| s.threads.len()).unwrap_or(0);
            g.bench_function(format!("read_{n}_threads"), |b| {
                b.iter(|| source.read().is_ok())
            });
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in threads {
            let _ = t.join();
        }
        g.finish();
    }

    /// `(run_time_ns, run_cnt)` of every loaded BPF program in the system, by id.
    fn program_stats() -> Snapshot {
        aya::programs::loaded_programs()
            .filter_map(Result::ok)
            .map(|p| {
                let name = p.name_as_str().unwrap_or("?").to_owned();
                let ns = u64::try_from(p.run_time().as_nanos()).unwrap_or(u64::MAX);
                (p.id(), (name, ns, p.run_count()))
            })
            .collect()
    }

    /// Per-program deltas between two snapshots: name -> (ns, runs), for
    /// the programs of `ids` (summed by name).
    fn deltas(before: &Snapshot, after: &Snapshot, ids: &[u32]) -> Deltas {
        let mut by_name: Deltas = Vec::new();
        for id in ids {
            let (Some((name, ns1, n1)), Some((_, ns0, n0))) = (after.get(id), before.get(id))
            else {
                continue;
            };
            let (dns, dn) = (ns1.saturating_sub(*ns0), n1.saturating_sub(*n0));
            match by_name.iter_mut().find(|(n, _, _)| n == name) {
                Some(e) => {
                    e.1 += dns;
                    e.2 += dn;
                }
                None => by_name.push((name.clone(), dns, dn)),
            }
        }
        by_name
    }

    /// Whether a (kernel-truncated) program name is one of ours.
    fn is_ours(name: &str) -> bool {
        name.starts_with("tpbtf_") || name.starts_with("rawtp_") || name == "tp_sys_exits"
    }

    fn ours(stats: &Snapshot) -> Vec<u32> {
        stats
            .iter()
            .filter(|(_, (n, _, _))| is_ours(n))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Where the workload's two threads run.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Layout {
        /// Both on CPU 0: every switch is from one workload thread to the other.
        SameCpu,
        /// On CPUs 0 and 1: every switch is between a workload thread and
        /// the idle task (or whatever else runs there).
        CrossCpu,
    }

    struct Workload {
        child: Child,
        stdin: ChildStdin,
        stdout: BufReader<ChildStdout>,
    }

    impl Workload {
        fn start() -> Option<Workload> {
            let exe = std::env::current_exe().ok()?;
            let mut child = Command::new(exe)
                .arg(WORKLOAD_FLAG)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .ok()?;
            let stdin = child.stdin.take()?;
            let stdout = BufReader::new(child.stdout.take()?);
            Some(Workload {
                child,
                stdin,
                stdout,
            })
        }

        fn pid(&self) -> u32 {
            self.child.id()
        }

        /// One timed run of `ROUND_TRIPS` round trips; wall time in ns.
        fn run(&mut self, layout: Layout) -> Option<u64> {
            let cross = u8::from(layout == Layout::CrossCpu);
            writeln!(self.stdin, "{ROUND_TRIPS} {cross}").ok()?;
            self.stdin.flush().ok()?;
            let mut line = String::new();
            self.stdout.read_line(&mut line).ok()?;
            line.trim().parse().ok()
        }

        /// Median wall time of `RUNS` runs, with program-stat deltas over all of them.
        fn measure(&mut self, layout: Layout, ids: &[u32]) -> (u64, Deltas) {
            let _ = self.run(layout); // warm-up
            let before = program_stats();
            let mut times: Vec<u64> = (0..RUNS).filter_map(|_| self.run(layout)).collect();
            let after = program_stats();
            times.sort_unstable();
            let median = times.get(times.len() / 2).copied().unwrap_or(0);
            (median, deltas(&before, &after, ids))
        }
    }

    impl Drop for Workload {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// A running bpftrace with the equivalent one-liner for process `pid`.
    struct Bpftrace {
        child: Child,
        ids: Vec<u32>,
    }

    /// Which of our programs a bpftrace script stands for.
    #[derive(Clone, Copy, PartialEq)]
    enum Script {
        /// Our `sched_switch` handler: for one process, voluntary and
        /// involuntary switches per thread and a histogram of off-CPU spans
        /// (filter on the process first).
        Switch,
        /// Everything ours counts with syscalls on: the above, wakeups and
        /// wakers per thread, and for the poll and nanosleep families
        /// calls, zero returns, timeouts and time in the call, on the
        /// per-syscall tracepoints (bpftrace's cheapest way to them).
        Full,
    }

    fn bpftrace_script(pid: u32, script: Script) -> String {
        let switch = format!(
            "tracepoint:sched:sched_switch {{ \
               if (pid == {pid}) {{ @off_start[tid] = nsecs; @known[tid] = 1; \
                 if (args->prev_state == 0) {{ @invol[tid] = count(); }} else {{ @vol[tid] = count(); }} }} \
               $s = @off_start[args->next_pid]; \
               if ($s != 0) {{ @off_ns[args->next_pid] = hist(nsecs - $s); delete(@off_start[args->next_pid]); }} \
             }}"
        );
        if script == Script::Switch {
            return switch;
        }
        let enter = |calls: &str, body: &str| {
            let probes: Vec<String> = calls
                .split(' ')
                .map(|c| format!("tracepoint:syscalls:sys_enter_{c}"))
                .collect();
            format!(
                " {} /pid == {pid}/ {{ @enter_ns[tid] = nsecs; {body} }}",
                probes.join(",")
            )
        };
        let timespec = "$t->tv_sec * 1000000000 + $t->tv_nsec";
        format!(
            "{switch} \
             tracepoint:sched:sched_waking {{ if (@known[args->pid]) {{ \
               @wakeups[args->pid] = count(); @wakers[args->pid, tid] = count(); }} }} \
             {} {} {} {} {} \
             tracepoint:syscalls:sys_exit_poll,tracepoint:syscalls:sys_exit_epoll_wait,\
             tracepoint:syscalls:sys_exit_epoll_pwait,tracepoint:syscalls:sys_exit_epoll_pwait2,\
             tracepoint:syscalls:sys_exit_ppoll,tracepoint:syscalls:sys_exit_pselect6,\
             tracepoint:syscalls:sys_exit_select /pid == {pid}/ {{ \
               @polls[tid] = count(); if (args->ret == 0) {{ @poll_zero[tid] = count(); }} \
               @poll_ns[tid] = sum(nsecs - @enter_ns[tid]); }} \
             tracepoint:syscalls:sys_exit_nanosleep,tracepoint:syscalls:sys_exit_clock_nanosleep \
             /pid == {pid}/ {{ @sleeps[tid] = count(); @sleep_ns[tid] = sum(nsecs - @enter_ns[tid]); }}",
            enter("poll", "@timeout_ms[tid] = hist(args->timeout_msecs);"),
            enter(
                "epoll_wait epoll_pwait",
                "@timeout_ms[tid] = hist(args->timeout);"
            ),
            enter(
                "ppoll",
                &format!(
                    "$t = uptr(args->tsp); if ($t != 0) {{ @timeout_ns[tid] = hist({timespec}); }}"
                ),
            ),
            enter("pselect6 select epoll_pwait2", ""),
            enter(
                "nanosleep clock_nanosleep",
                &format!("$t = uptr(args->rqtp); @sleep_req[tid] = sum({timespec});"),
            ),
        )
    }

    impl Bpftrace {
        fn start(pid: u32, script: Script) -> Result<Bpftrace, String> {
            let before: Vec<u32> = program_stats().keys().copied().collect();
            let child = Command::new("bpftrace")
                .args(["-e", &bpftrace_script(pid, script)])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| {
                    format!("cannot run bpftrace ({e}); install it with `apt-get install bpftrace`")
                })?;
            let mut bt = Bpftrace {
                child,
                ids: Vec::new(),
            };
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(status)) = bt.child.try_wait() {
                    let mut err = String::new();
                    if let Some(mut e) = bt.child.stderr.take() {
                        let _ = std::io::Read::read_to_string(&mut e, &mut err);
                    }
                    return Err(format!("bpftrace exited ({status}): {}", err.trim()));
                }
                let theirs = || -> Vec<u32> {
                    program_stats()
                        .iter()
                        .filter(|(id, (name, _, _))| !before.contains(id) && !is_ours(name))
                        .map(|(id, _)| *id)
                        .collect()
                };
                if !theirs().is_empty() {
                    // Let it finish loading and attaching all its programs.
                    std::thread::sleep(Duration::from_millis(1000));
                    bt.ids = theirs();
                    return Ok(bt);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err("bpftrace did not load a program within 30 s".into())
        }
    }

    impl Drop for Bpftrace {
        fn drop(&mut self) {
            // SIGINT lets bpftrace detach and print its maps (to /dev/null).
            if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
                // SAFETY: signalling our own child process.
                unsafe { libc::kill(pid, libc::SIGINT) };
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Mounts tracefs for bpftrace if it is missing; unmounts on drop.
    struct TracefsMount {
        mounted_here: bool,
    }

    impl TracefsMount {
        fn ensure() -> Result<TracefsMount, String> {
            if std::path::Path::new(TRACEFS).join("events").exists() {
                return Ok(TracefsMount {
                    mounted_here: false,
                });
            }
            let ok = Command::new("mount")
                .args(["-t", "tracefs", "nodev", TRACEFS])
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if ok {
                println!("(mounted tracefs on {TRACEFS} for bpftrace; unmounted at the end)");
                Ok(TracefsMount { mounted_here: true })
            } else {
                Err(format!(
                    "tracefs is not mounted and `mount -t tracefs nodev {TRACEFS}` failed"
                ))
            }
        }
    }

    impl Drop for TracefsMount {
        fn drop(&mut self) {
            if self.mounted_here {
                let _ = Command::new("umount").arg(TRACEFS).status();
            }
        }
    }

    fn ns_per_event(d: &Deltas, name_part: &str) -> Option<(f64, u64)> {
        let (ns, n) = d
            .iter()
            .filter(|(n, _, _)| n.contains(name_part))
            .fold((0u64, 0u64), |a, (_, ns, n)| (a.0 + ns, a.1 + n));
        (n > 0).then(|| (ns as f64 / n as f64, n))
    }

    fn print_programs(label: &str, d: &Deltas) {
        for (name, ns, n) in d {
            if *n > 0 {
                println!(
                    "    {label:<20} {name:<16} {:>9} runs {:>8.1} ns/run",
                    n,
                    *ns as f64 / *n as f64
                );
            }
        }
    }

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
    fn ns_per_syscall() -> f64 {
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
                    (_, None) if tracefs => {
                        Bpftrace::start(target_pid, Script::Full).ok().map(|bt| {
                            let ns = ns_per_syscall();
                            drop(bt);
                            ns
                        })
                    }
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

    fn event_costs() {
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
                    if let Some(both) = attach_ours(Target::Pid(workload_pid), Hook::SysExit, true)
                    {
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

    /// The workload child: two threads pinned to CPU 0 ping-pong one byte
    /// over two pipes. Reads a round-trip count per line on stdin, answers
    /// the wall time in ns; exits at end of input.
    mod workload {
        use std::io::{BufRead, Write};
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        use std::time::Instant;

        /// Pins thread `tid` (0 = the caller) to one CPU.
        fn pin(tid: libc::pid_t, cpu: usize) {
            // SAFETY: `set` is a zeroed cpu_set_t that CPU_SET fills; the
            // call only reads it.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                libc::sched_setaffinity(tid, size_of::<libc::cpu_set_t>(), &set);
            }
        }

        fn pipe() -> (OwnedFd, OwnedFd) {
            let mut fds = [0i32; 2];
            // SAFETY: `fds` has room for the two descriptors pipe writes.
            let rc = unsafe { libc::pipe(fds.as_mut_ptr()) };
            assert_eq!(rc, 0, "pipe failed");
            // SAFETY: pipe returned two fresh descriptors that we now own.
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
        }

        fn xfer(fd: &OwnedFd, write: bool) -> bool {
            let mut b = [0u8; 1];
            // SAFETY: one byte of a valid buffer on a descriptor we own.
            let n = unsafe {
                if write {
                    libc::write(fd.as_raw_fd(), b.as_ptr().cast(), 1)
                } else {
                    libc::read(fd.as_raw_fd(), b.as_mut_ptr().cast(), 1)
                }
            };
            n == 1
        }

        pub fn serve() {
            let (a_to_b_r, a_to_b_w) = pipe();
            let (b_to_a_r, b_to_a_w) = pipe();
            let (tid_tx, tid_rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                // SAFETY: gettid has no preconditions.
                let _ = tid_tx.send(unsafe { libc::gettid() });
                while xfer(&a_to_b_r, false) {
                    if !xfer(&b_to_a_w, true) {
                        break;
                    }
                }
            });
            let Ok(b_tid) = tid_rx.recv() else {
                return;
            };
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            let stdin = std::io::stdin();
            let mut out = std::io::stdout();
            for line in stdin.lock().lines() {
                let Ok(line) = line else {
                    break;
                };
                let mut words = line.split_whitespace();
                let n: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
                let cross = words.next() == Some("1") && cpus > 1;
                pin(0, 0);
                pin(b_tid, usize::from(cross));
                let t0 = Instant::now();
                for _ in 0..n {
                    if !(xfer(&a_to_b_w, true) && xfer(&b_to_a_r, false)) {
                        return;
                    }
                }
                let ns = t0.elapsed().as_nanos();
                if writeln!(out, "{ns}").and_then(|()| out.flush()).is_err() {
                    return;
                }
            }
        }
    }
}

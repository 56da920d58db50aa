//! Attaching the eBPF kernel source when this build and this host allow it,
//! and saying what it costs.

use wakemeter::{KernelSource, Target};

/// Which kernel view the user asked for (`--no-ebpf`, `--no-syscall-hook`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    /// Try to attach the eBPF kernel source at all.
    pub ebpf: bool,
    /// Attach its syscall program: the poll and sleep counters, at a cost
    /// to every syscall on the machine (printed when attaching).
    pub syscall_hook: bool,
}

/// The command-line flags of [`Choice`], shared by every command that
/// attaches the kernel source.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct Args {
    /// Do not try to attach the eBPF kernel source.
    #[arg(long)]
    no_ebpf: bool,
    /// Attach eBPF without its syscall program: every syscall on the
    /// machine stays as fast as without wakemeter (a syscall-heavy target
    /// is otherwise slowed; the cost is printed when attaching), and the
    /// poll and sleep counters are not collected (switches, wakes and the
    /// off-CPU split still are).
    #[arg(long, conflicts_with = "no_ebpf")]
    no_syscall_hook: bool,
}

impl Args {
    /// What the flags ask for.
    pub fn choice(self) -> Choice {
        Choice {
            ebpf: !self.no_ebpf,
            syscall_hook: !self.no_syscall_hook,
        }
    }
}

/// The kernel source for `target`, or why there is none (printed to the user).
pub fn attach(target: Target, choice: Choice) -> Result<Box<dyn KernelSource>, String> {
    if !choice.ebpf {
        return Err("disabled by --no-ebpf".to_string());
    }
    attach_inner(target, choice.syscall_hook)
}

/// Called once a command has attached every target it will: lets go of
/// the kernel's BTF kept for later attaches (about 13 MB, most of what a
/// watcher holds besides its history and per-thread samples).
pub fn attached_all() {
    #[cfg(feature = "ebpf")]
    wakemeter_ebpf::forget_kernel_btf();
}

#[cfg(feature = "ebpf")]
fn attach_inner(target: Target, syscall_hook: bool) -> Result<Box<dyn KernelSource>, String> {
    // What one syscall costs this process before and after attaching: the
    // syscall program runs for every syscall of every process (it filters
    // on the target inside), so this is what each one on the machine pays.
    static FIRST: std::sync::Once = std::sync::Once::new();
    // The first attach of a run parses the kernel's BTF and loads and
    // verifies the programs, which takes seconds on a loaded machine: say
    // so before, so that it never looks hung. Later attaches join them.
    FIRST.call_once(|| {
        crate::print::note("eBPF: loading the kernel programs (once for every watched process)...");
    });
    let before = syscall_hook.then(ns_per_syscall);
    let src = wakemeter_ebpf::EbpfSource::builder(target)
        .with_syscalls(syscall_hook)
        .attach()
        .map_err(|e| e.to_string())?;
    if !src.loaded_programs() {
        // One set of programs serves every watched process: nothing new
        // runs on the machine, so there is no new cost to measure.
        crate::print::note(&format!(
            "eBPF: pid {} joined the attached programs in {:.1} ms ({} processes watched by one set)",
            src.pid(),
            src.attach_duration().as_secs_f64() * 1e3,
            src.watched_processes()
        ));
        return Ok(Box::new(src));
    }
    crate::print::note(&format!(
        "eBPF: attached ({:?}, syscalls via {:?}) in {:.0} ms",
        src.attach_kind(),
        src.syscall_hook(),
        src.attach_duration().as_secs_f64() * 1e3
    ));
    match before {
        Some(before) => {
            let after = ns_per_syscall();
            let cost = if after - before >= 5.0 {
                format!(
                    "{before:.0} -> {after:.0} ns here ({:+.0} ns)",
                    after - before
                )
            } else {
                // A busy machine can hide it; never print a gain.
                format!("not measurable right now ({before:.0} -> {after:.0} ns here)")
            };
            crate::print::note(&format!(
                "eBPF: the syscall hook makes every syscall on this machine slower: {cost}; the \
                 target's own poll and sleep calls pay more, so a syscall-heavy target runs \
                 slower (BENCHMARKS.md, \"What watching costs the target\"). --no-syscall-hook \
                 removes this cost and the poll/sleep counters"
            ));
        }
        None => crate::print::note(
            "eBPF: no syscall hook (--no-syscall-hook): no poll/sleep counters; \
             switches, wakes and off-CPU causes are still measured",
        ),
    }
    Ok(Box::new(src))
}

/// Nanoseconds of one `getppid` of this process: the best of 50 short
/// rounds of 2,000 (about 15 ms in all), so that preemptions and
/// interrupts, which a busy machine has plenty of, miss some rounds.
#[cfg(feature = "ebpf")]
fn ns_per_syscall() -> f64 {
    const CALLS: u32 = 2_000;
    (0..50)
        .map(|_| {
            let start = std::time::Instant::now();
            for _ in 0..CALLS {
                // SAFETY: getppid takes no arguments, touches no memory of
                // ours and cannot fail.
                std::hint::black_box(unsafe { libc::getppid() });
            }
            start.elapsed().as_nanos() as f64 / f64::from(CALLS)
        })
        .fold(f64::INFINITY, f64::min)
}

#[cfg(not(feature = "ebpf"))]
fn attach_inner(_target: Target, _syscall_hook: bool) -> Result<Box<dyn KernelSource>, String> {
    Err("this build has no eBPF support (feature `ebpf` off)".to_string())
}

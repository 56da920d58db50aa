//! Cost of the wakemeter-ebpf kernel programs, measured by the kernel itself.
//!
//! - criterion: attach + detach, and one `read()` of the source
//!   (`criterion_part.rs`);
//! - per traced event: `run_time_ns / run_cnt` of each program from the
//!   kernel's BPF run-time statistics (`BPF_ENABLE_STATS`, `stats.rs`) while
//!   a context-switch-heavy workload runs (`workload.rs`: two threads of a
//!   child process ping-ponging a byte over pipes, both pinned to CPU 0, so
//!   every round trip is two switches between the workload's threads), once
//!   with the workload as a non-target process and once as the target;
//! - the same workload under bpftrace doing the equivalent counting
//!   (`bpftrace.rs`, scripts in `benches/bpftrace/`), two ways: our
//!   `sched_switch` handler alone (switch counts and an off-CPU histogram
//!   for one process) and everything ours counts with syscalls on (plus
//!   wakeups, wakers, and poll / nanosleep calls, zero returns, timeouts and
//!   time on the per-syscall tracepoints); the workload's slowdown under
//!   each alone against ours, and, with both attached in the same run, ns
//!   per `sched_switch` event of each (`costs.rs`);
//! - a 64-active-thread target (32 unpinned ping-pong pairs): ns per run of
//!   our `sched_switch` and `sched_waking`, and the kernel time per second
//!   of ours against the bpftrace one-liner counting switches per thread,
//!   alone and both attached, over several rounds (`pool.rs`);
//! - one watched process against 64: programs loaded, the syscall and
//!   per-event cost every other process pays, the time to join (`many.rs`).
//!
//! Needs root and kernel BTF; bpftrace is optional (`apt-get install
//! bpftrace`) and needs tracefs, which this bench mounts on
//! `/sys/kernel/tracing` when it is missing (and unmounts afterwards,
//! `tracefs.rs`).
//!
//! Run: `cargo bench -p wakemeter-benches --bench ebpf`
//! (`WAKEMETER_EBPF_BENCH=pool` for the 64-thread part alone, `=parts` for
//! where its cost goes (each part of our programs switched off in turn),
//! `=many` for
//! one against 64 watched processes alone,
//! `WAKEMETER_BENCH_ROUNDS=N` for its rounds).

#[cfg(target_os = "linux")]
mod bpftrace;
#[cfg(target_os = "linux")]
mod costs;
#[cfg(target_os = "linux")]
mod criterion_part;
#[cfg(target_os = "linux")]
mod many;
#[cfg(target_os = "linux")]
mod pool;
#[cfg(target_os = "linux")]
mod stats;
#[cfg(target_os = "linux")]
mod tracefs;
#[cfg(target_os = "linux")]
mod workload;

fn main() {
    #[cfg(target_os = "linux")]
    linux_main();
    #[cfg(not(target_os = "linux"))]
    println!("ebpf bench: Linux hosts only; skipped");
}

#[cfg(target_os = "linux")]
fn linux_main() {
    use std::time::Instant;

    use wakemeter_ebpf::{EbpfError, EbpfSource, Target};

    if std::env::args().any(|a| a == workload::WORKLOAD_FLAG) {
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

    if matches!(
        std::env::var("WAKEMETER_EBPF_BENCH").as_deref(),
        Ok("pool" | "parts")
    ) {
        pool::run();
        return;
    }
    if std::env::var("WAKEMETER_EBPF_BENCH").as_deref() == Ok("many") {
        run_many();
        return;
    }
    let mut c = criterion::Criterion::default().configure_from_args();
    criterion_part::benches(&mut c);
    c.final_summary();

    costs::event_costs();
    pool::run();
    run_many();
}

/// One watched process against 64 (`many.rs`).
#[cfg(target_os = "linux")]
fn run_many() {
    match workload::Workload::start() {
        Some(mut w) => many::run(&mut w),
        None => println!("one vs many: skipped (cannot start the workload process)"),
    }
}

#[cfg(target_os = "linux")]
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

//! One watched process against 64: what the machine pays must not grow with
//! the number of watched processes (one set of programs serves them all).
//!
//! In one run, alternating the two configurations round by round:
//! - programs loaded (`bpftool prog show` would list the same ids);
//! - ns per `getppid` of this process, which is not watched (the syscall
//!   program runs for every syscall on the machine and filters first);
//! - ns per run of our `sched_switch` and `sched_waking` programs while the
//!   ping-pong workload, not watched, switches (the filtered path every
//!   other process pays), from the kernel's run-time statistics;
//! - what it took to join 63 more processes to the set.
//!
//! The watched processes are `sleep` children: idle, so they add no events.

use std::process::{Child, Command, Stdio};
use std::time::Instant;

use wakemeter_ebpf::{EbpfSource, Target};

use crate::costs::ns_per_syscall;
use crate::stats::{self, ns_per_event};
use crate::workload::{Layout, Workload};

const MANY: usize = 64;
const ROUNDS: usize = 3;

struct Sleepers(Vec<Child>);

impl Drop for Sleepers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Attaches sources to the first `n` of `pids`; `None` when an attach fails.
fn watch(pids: &[u32], n: usize) -> Option<Vec<EbpfSource>> {
    let t0 = Instant::now();
    let sources: Option<Vec<EbpfSource>> = pids
        .iter()
        .take(n)
        .map(|&p| EbpfSource::attach(Target::Pid(p)).ok())
        .collect();
    let sources = sources?;
    if n > 1 {
        let joined: f64 = sources
            .iter()
            .skip(1)
            .map(|s| s.attach_duration().as_secs_f64())
            .sum();
        println!(
            "  attaching {n}: {:.0} ms wall; the {} joins took {:.2} ms in all",
            t0.elapsed().as_secs_f64() * 1e3,
            n - 1,
            joined * 1e3
        );
    }
    Some(sources)
}

pub fn run(w: &mut Workload) {
    let children: Vec<Child> = (0..MANY)
        .filter_map(|_| {
            Command::new("sleep")
                .arg("600")
                .stdout(Stdio::null())
                .spawn()
                .ok()
        })
        .collect();
    let sleepers = Sleepers(children);
    let pids: Vec<u32> = sleepers.0.iter().map(Child::id).collect();
    if pids.len() < MANY {
        println!("one vs {MANY} watched processes: skipped (could not start {MANY} `sleep`)");
        return;
    }
    println!(
        "\none vs {MANY} watched processes (the workload and this process are not watched; \
         best of {ROUNDS} rounds, alternating):"
    );
    let stats_guard = wakemeter_ebpf::enable_run_stats();
    let mut best = [(f64::MAX, f64::MAX, f64::MAX, 0usize); 2];
    for _ in 0..ROUNDS {
        for (i, n) in [1, MANY].into_iter().enumerate() {
            let before_ids: Vec<u32> = stats::ours(&stats::program_stats());
            let Some(sources) = watch(&pids, n) else {
                println!("  attach failed; skipped");
                return;
            };
            let ids: Vec<u32> = stats::ours(&stats::program_stats())
                .into_iter()
                .filter(|id| !before_ids.contains(id))
                .collect();
            let syscall = ns_per_syscall();
            let (_, d) = w.measure(Layout::SameCpu, &ids);
            let switch = ns_per_event(&d, "sched_sw").map_or(f64::NAN, |(ns, _)| ns);
            let waking = ns_per_event(&d, "sched_wa").map_or(f64::NAN, |(ns, _)| ns);
            let b = &mut best[i];
            *b = (
                b.0.min(syscall),
                b.1.min(switch),
                b.2.min(waking),
                ids.len(),
            );
            drop(sources);
        }
    }
    drop(stats_guard);
    for (label, (syscall, switch, waking, programs)) in ["1 watched", "64 watched"].iter().zip(best)
    {
        println!(
            "  {label:<12} programs {programs}  getppid {syscall:>6.1} ns  \
             sched_switch {switch:>6.1} ns/run  sched_waking {waking:>6.1} ns/run"
        );
    }
    let (one, many) = (best[0], best[1]);
    println!(
        "  ratio 64/1: getppid {:.2}, sched_switch {:.2}, sched_waking {:.2}, programs {}/{}",
        many.0 / one.0,
        many.1 / one.1,
        many.2 / one.2,
        many.3,
        one.3
    );
}

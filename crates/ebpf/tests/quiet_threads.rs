//! The threads the eBPF source calls quiet (blocked, not run, not woken
//! since its previous read), whose `/proc` reads the sampler then skips:
//! the source names exactly the blocked ones, and a sampler that carries
//! their counters reports what `/proc` says of them, name included when a
//! sibling renames one through `/proc/TID/comm` (which changes no counter
//! and no kernel entry). Needs root, kernel BTF and a build with clang:
//! `cargo test -p wakemeter-ebpf --test quiet_threads -- --include-ignored`.
#![cfg(target_os = "linux")]
// Test helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, Write};
use std::time::Duration;

use wakemeter::{KernelSource, SamplerBuilder, Snapshot, Target};
use wakemeter_ebpf::EbpfSource;
use wakemeter_procfs::{parse, process};
use wakemeter_testkit::{Running, park_threads, start_until_ready, this_test, thread_named};

const HELPER: &str = "WAKEMETER_QUIET_HELPER";
const IDLE: usize = 40;

/// Body of the helper process (this test binary run again): `IDLE` threads
/// parked for good, one that works and sleeps in turn, and a main thread
/// that, for each `rename` line on its stdin, writes a new name into the
/// first idle thread's `comm` (as `pthread_setname_np` does for another
/// thread). Exits when its stdin closes. Does nothing in a normal run.
#[test]
fn helper_main() {
    if std::env::var(HELPER).is_err() {
        return;
    }
    park_threads("wm-idle", IDLE);
    std::thread::Builder::new()
        .name("wm-busy".into())
        .spawn(|| {
            loop {
                let start = std::time::Instant::now();
                while start.elapsed() < Duration::from_micros(200) {
                    std::hint::black_box(0u64);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        })
        .unwrap();
    println!("ready");
    for line in std::io::stdin().lock().lines() {
        if line.unwrap().trim() == "rename" {
            let tid = thread_named(std::process::id(), "wm-idle-0");
            std::fs::write(format!("/proc/self/task/{tid}/comm"), "wm-renamed").unwrap();
        }
    }
    std::process::exit(0);
}

fn helper() -> Running {
    start_until_ready(&mut this_test("helper_main", HELPER, "1"))
}

fn attach(pid: u32) -> EbpfSource {
    match EbpfSource::attach(Target::Pid(pid)) {
        Ok(s) => s,
        Err(e) => panic!("attach (needs root, kernel BTF and a build with clang): {e}"),
    }
}

/// `schedstat` (run ns, wait ns, switches) and `status` (voluntary,
/// involuntary switches, name) of one thread, as `/proc` has them now.
fn proc_counters(pid: u32, tid: u32) -> (u64, u64, u64, u64, u64, String) {
    let sched = process::task_file(pid, tid, "schedstat").unwrap();
    let (run, wait, switches) = parse::schedstat(&sched).unwrap();
    let status = process::task_file(pid, tid, "status").unwrap();
    let (vol, invol) = parse::status_switches(&status).unwrap();
    let name = String::from_utf8_lossy(parse::status_name(&status).unwrap()).into_owned();
    (run, wait, switches, vol, invol, name)
}

fn sampled(s: &Snapshot, tid: u32) -> (u64, u64, u64, u64, u64, String) {
    let t = s
        .threads
        .iter()
        .find(|t| t.tid == u64::from(tid))
        .unwrap_or_else(|| panic!("thread {tid} not sampled"));
    (
        t.total_cpu_time_ns,
        t.total_run_queue_wait_ns.unwrap(),
        t.total_switches.unwrap(),
        t.total_voluntary_switches.unwrap(),
        t.total_involuntary_switches.unwrap(),
        t.name.clone(),
    )
}

fn idle_tids(pid: u32) -> Vec<u32> {
    (0..IDLE)
        .map(|i| thread_named(pid, &format!("wm-idle-{i}")))
        .collect()
}

#[test]
#[ignore = "needs root"]
fn the_source_names_the_blocked_threads_quiet_and_not_the_busy_one() {
    let child = helper();
    let pid = child.pid();
    let idle = idle_tids(pid);
    let busy = thread_named(pid, "wm-busy");
    let mut source = attach(pid);
    // The first read gets every entry whole: nothing to call quiet yet.
    source.read().unwrap();
    assert!(source.quiet_threads().is_empty());
    // Reads until the busy thread has been scheduled in between two of
    // them (it works every 2 ms, but a loaded machine may hold it off).
    let mut reads = 0;
    let mut since_last_read = proc_counters(pid, busy).2;
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let before_read = proc_counters(pid, busy).2;
        source.read().unwrap();
        reads += 1;
        let quiet = source.quiet_threads().to_vec();
        assert!(quiet.is_sorted(), "{quiet:?}");
        for tid in &idle {
            assert!(
                quiet.binary_search(&u64::from(*tid)).is_ok(),
                "parked thread {tid} not quiet at read {reads}: {quiet:?}"
            );
        }
        if before_read > since_last_read {
            assert!(
                quiet.binary_search(&u64::from(busy)).is_err(),
                "the busy thread is called quiet though it ran"
            );
            break;
        }
        since_last_read = proc_counters(pid, busy).2;
        assert!(reads < 10_000, "the busy thread never ran");
    }
}

#[test]
#[ignore = "needs root"]
fn carried_counters_agree_with_proc_and_a_sibling_rename_is_seen() {
    let mut child = helper();
    let pid = child.pid();
    let idle = idle_tids(pid);
    let sampler = SamplerBuilder::new()
        .with_target(Target::Pid(pid))
        .with_switch_split_every(1)
        .with_kernel_source(Box::new(attach(pid)))
        .build()
        .unwrap();
    // The first sample reads every thread, the second has the source's
    // first quiet list; from the third on the parked ones are carried.
    for _ in 0..5 {
        let s = sampler.sample_now().unwrap();
        assert!(
            s.kernel.is_some(),
            "the kernel source failed: {:?}",
            s.warnings
        );
        // The parked threads never run: /proc, read after the snapshot,
        // says exactly what the snapshot does.
        for tid in &idle {
            assert_eq!(sampled(&s, *tid), proc_counters(pid, *tid), "thread {tid}");
        }
    }
    // A sibling renames a parked thread: it neither runs nor is woken.
    let stdin = child.0.stdin.as_mut().unwrap();
    stdin.write_all(b"rename\n").unwrap();
    stdin.flush().unwrap();
    let renamed = thread_named(pid, "wm-renamed");
    assert_eq!(renamed, idle[0]);
    // Each parked thread is read in full on one split sample in 32 (the
    // sampler's turns), so the new name shows within as many samples.
    let mut samples = 0;
    loop {
        let s = sampler.sample_now().unwrap();
        samples += 1;
        if sampled(&s, renamed).5 == "wm-renamed" {
            assert_eq!(sampled(&s, renamed), proc_counters(pid, renamed));
            break;
        }
        // Turns of 32 split samples (every sample here): a hundred is a hang.
        assert!(samples < 100, "the rename not seen after {samples} samples");
    }
}

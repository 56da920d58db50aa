//! Many watched processes, one set of kernel programs: the tests of the
//! shared program set. They need root (or CAP_BPF + CAP_PERFMON), kernel
//! BTF and a build with clang, and run one at a time (they count this
//! machine's programs and maps): `cargo test -p wakemeter-ebpf --test
//! many_targets -- --include-ignored` as root.
#![cfg(target_os = "linux")]
// Test helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::fs;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use wakemeter::{KernelSource, KernelSourceError};
use wakemeter_ebpf::{EbpfSource, Target};
use wakemeter_testkit::Running;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Names our loader gives its programs and maps.
fn ours(name: &str) -> bool {
    name.starts_with("tpbtf_") || name.starts_with("rawtp_") || name.starts_with("tp_sys_")
}

/// Ids of the loaded BPF programs named like ours (any process).
fn program_ids() -> HashSet<u32> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|p| ours(p.name_as_str().unwrap_or("")))
        .map(|p| p.id())
        .collect()
}

/// Ids of the loaded BPF maps named like the kernel side's own.
fn map_ids() -> HashSet<u32> {
    aya::maps::loaded_maps()
        .filter_map(Result::ok)
        .filter(|m| {
            matches!(
                m.name_as_str().unwrap_or(""),
                "threads" | "watched" | "targets" | "zero_thread" | "realtime_offset"
            )
        })
        .map(|m| m.id())
        .collect()
}

/// Waits (generously: the kernel frees programs after an RCU grace period)
/// until none of `ids` is listed by `list`.
fn wait_gone(what: &str, ids: &HashSet<u32>, list: fn() -> HashSet<u32>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !list().is_disjoint(ids) {
        assert!(Instant::now() < deadline, "{what} {ids:?} still loaded");
        thread::sleep(Duration::from_millis(20));
    }
}

/// Body of the helper processes (this test binary run again); does nothing
/// in a normal test run. `WAKEMETER_MANY_TARGETS_HELPER=sleep`: a thread
/// that sleeps 2 ms at a time for 60 s. `=watcher`: attaches an eBPF source
/// to itself, prints `ready`, then sleeps until killed.
#[test]
fn helper_main() {
    match std::env::var("WAKEMETER_MANY_TARGETS_HELPER").as_deref() {
        Ok("sleep") => {
            let end = Instant::now() + Duration::from_secs(60);
            while Instant::now() < end {
                thread::sleep(Duration::from_millis(2));
            }
        }
        Ok("watcher") => {
            let mut source = EbpfSource::attach(Target::SelfProcess).unwrap();
            source.read().unwrap();
            println!("\nwatcher-ready");
            loop {
                thread::sleep(Duration::from_secs(1));
            }
        }
        _ => {}
    }
}

fn helper(kind: &str) -> Command {
    let mut c = wakemeter_testkit::this_test("helper_main", "WAKEMETER_MANY_TARGETS_HELPER", kind);
    c.stdout(Stdio::null());
    c
}

fn tids_of(pid: u32) -> HashSet<u64> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn attach_pid(pid: u32) -> EbpfSource {
    match EbpfSource::attach(Target::Pid(pid)) {
        Ok(s) => s,
        Err(e) => panic!(
            "attach failed (these tests need root, kernel BTF and a build with clang): {e} ({:?})",
            std::error::Error::source(&e)
        ),
    }
}

/// Reads `source` until its process shows at least `switches` voluntary
/// switches in all, waiting generously.
fn read_until_switches(source: &mut EbpfSource, switches: u64) -> wakemeter::KernelSample {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let sample = source.read().unwrap();
        let total: u64 = sample
            .threads
            .iter()
            .map(|t| t.total_voluntary_switches)
            .sum();
        if total >= switches {
            return sample;
        }
        assert!(
            Instant::now() < deadline,
            "pid {}: only {total} voluntary switches seen",
            source.pid()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
#[ignore = "needs root"]
fn many_processes_share_one_program_set() {
    let _g = serial();
    const N: usize = 8;
    let helpers: Vec<Running> = (0..N)
        .map(|_| Running(helper("sleep").spawn().unwrap()))
        .collect();
    let pids: Vec<u32> = helpers.iter().map(|h| h.0.id()).collect();
    let programs_before = program_ids();

    let mut sources: Vec<EbpfSource> = pids.iter().map(|&p| attach_pid(p)).collect();
    let loaded = sources.iter().filter(|s| s.loaded_programs()).count();
    assert_eq!(loaded, 1, "one attach loads, the others join");
    let held = wakemeter_testkit::held_bpf_program_ids(None);
    let programs: HashSet<u32> = program_ids()
        .difference(&programs_before)
        .filter(|id| held.contains(id))
        .copied()
        .collect();
    assert_eq!(
        programs.len(),
        5,
        "{N} processes are watched by one set of five programs"
    );
    assert!(sources.iter().all(|s| s.watched_processes() == N));
    for s in &sources[1..] {
        println!(
            "joined the set in {:.3} ms (the load took {:.1} ms)",
            s.attach_duration().as_secs_f64() * 1e3,
            s.programs_load_duration().unwrap().as_secs_f64() * 1e3
        );
    }

    // Each source sees its own process's threads, and only those.
    for (source, &pid) in sources.iter_mut().zip(&pids) {
        let sample = read_until_switches(source, 20);
        let own = tids_of(pid);
        assert!(!sample.threads.is_empty());
        for t in &sample.threads {
            assert!(
                own.contains(&t.tid),
                "pid {pid}: thread {} is not one of its threads {own:?}",
                t.tid
            );
        }
        let usage = source.map_usage().unwrap();
        assert!(usage.threads as usize <= own.len());
        assert!(usage.set_threads >= usage.threads);
    }

    // Half of them leave: the rest keep working with the same programs,
    // and the leavers' entries are gone from the shared map.
    let kept = sources.split_off(N / 2);
    drop(sources);
    let mut kept = kept;
    let kept_threads: u32 = kept
        .iter_mut()
        .map(|s| s.map_usage().unwrap().threads)
        .sum();
    let usage = kept[0].map_usage().unwrap();
    assert_eq!(
        usage.set_threads, kept_threads,
        "entries of the processes that left were freed"
    );
    assert_eq!(kept[0].watched_processes(), N - N / 2);
    assert!(program_ids().is_superset(&programs));
    for s in &mut kept {
        read_until_switches(s, 40);
    }

    // The last one out unloads the programs and frees the maps.
    drop(kept);
    wait_gone("programs", &programs, program_ids);
}

/// Kills `child`, reaps it, and starts helpers until one gets its pid back
/// (the id the next fork gets is `ns_last_pid` + 1).
fn reuse_pid(mut child: Child) -> Running {
    let pid = child.id();
    child.kill().unwrap();
    child.wait().unwrap();
    for _ in 0..50 {
        fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", pid - 1)).unwrap();
        let next = helper("sleep").spawn().unwrap();
        if next.id() == pid {
            return Running(next);
        }
        drop(Running(next));
    }
    panic!("could not get pid {pid} again through ns_last_pid");
}

#[test]
#[ignore = "needs root"]
fn a_reused_pid_is_never_counted_as_the_exited_target() {
    let _g = serial();
    let other = Running(helper("sleep").spawn().unwrap());
    let first = helper("sleep").spawn().unwrap();
    let pid = first.id();
    let mut watcher_of_other = attach_pid(other.0.id());
    let mut source = attach_pid(pid);
    read_until_switches(&mut source, 10);
    read_until_switches(&mut watcher_of_other, 10);

    // The target exits and a new process takes its id before this source
    // reads again; the new process runs (and switches) for a while.
    let reused = reuse_pid(first);
    assert_eq!(reused.0.id(), pid);
    let deadline = Instant::now() + Duration::from_secs(240);
    while tids_of(pid).len() < 2 {
        assert!(Instant::now() < deadline, "the new process never started");
        thread::sleep(Duration::from_millis(10));
    }
    // Until the new process's threads have switched 50 times (the
    // kernel's count): a fixed 200 ms could pass with it never scheduled
    // on a loaded machine, and the check below would then prove nothing.
    let before = wakemeter_testkit::Work::of(pid);
    while wakemeter_testkit::Work::of(pid)
        .since(before)
        .voluntary_switches
        < 50
    {
        assert!(Instant::now() < deadline, "the new process never switched");
        thread::sleep(Duration::from_millis(10));
    }

    // The shared map holds the other process's threads only: the new
    // process under the old id got no entry.
    let usage = watcher_of_other.map_usage().unwrap();
    assert_eq!(
        usage.set_threads, usage.threads,
        "the process that reused pid {pid} was counted as the exited target"
    );
    match source.read() {
        Err(KernelSourceError::TargetExited { pid: p }) => assert_eq!(p, pid),
        other => panic!("expected TargetExited for {pid}, got {other:?}"),
    }
    assert_eq!(watcher_of_other.watched_processes(), 1);

    // Watching the new process afresh works, from its join.
    let mut again = attach_pid(pid);
    assert!(!again.loaded_programs(), "it joins the attached programs");
    let sample = read_until_switches(&mut again, 5);
    let own = tids_of(pid);
    assert!(sample.threads.iter().all(|t| own.contains(&t.tid)));
}

#[test]
#[ignore = "needs root"]
fn a_killed_watcher_leaves_no_program_or_map_behind() {
    let _g = serial();
    let programs_before = program_ids();
    let maps_before = map_ids();
    let mut watcher = helper("watcher").stdout(Stdio::piped()).spawn().unwrap();
    // The test harness prints its own lines first.
    let ready = BufReader::new(watcher.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .any(|line| line.trim() == "watcher-ready");
    assert!(ready, "the watcher attached");
    let held = wakemeter_testkit::held_bpf_program_ids(Some(watcher.id()));
    let programs: HashSet<u32> = program_ids()
        .difference(&programs_before)
        .filter(|id| held.contains(id))
        .copied()
        .collect();
    let maps: HashSet<u32> = map_ids().difference(&maps_before).copied().collect();
    assert_eq!(programs.len(), 5, "the watcher's programs are loaded");
    assert!(maps.len() >= 4, "the watcher's maps exist: {maps:?}");

    // SIGKILL: no destructor runs; the kernel frees what the last
    // descriptor held.
    watcher.kill().unwrap();
    watcher.wait().unwrap();
    wait_gone("programs", &programs, program_ids);
    wait_gone("maps", &maps, map_ids);
}

//! The sampler's life cycle and limits: when the watched process exits the
//! kernel source is detached at once and background sampling ends and says
//! so; lost kernel events and probe limits are reported with their own types.
#![cfg(target_os = "linux")]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wakemeter::{Error, KernelSample, KernelSource, KernelSourceError, SamplerBuilder, Target};

/// A kernel source that records when it is dropped (= detached).
struct Tracked {
    detached: Arc<AtomicBool>,
    reads: Arc<AtomicU64>,
}

impl KernelSource for Tracked {
    fn read(&mut self) -> Result<KernelSample, KernelSourceError> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        Ok(KernelSample::default())
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.detached.store(true, Ordering::Release);
    }
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_kernel_source_detaches_and_running_turns_false_when_the_target_exits() {
    let mut child = Command::new("sleep")
        .arg("30")
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn sleep");
    let detached = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let sampler = SamplerBuilder::new()
        .with_target(Target::Pid(child.id()))
        .with_interval(Duration::from_millis(20))
        .with_kernel_source(Box::new(Tracked {
            detached: detached.clone(),
            reads: reads.clone(),
        }))
        .build()
        .expect("build");
    let guard = sampler.start().expect("start");
    wait_for("a kernel read", || reads.load(Ordering::Relaxed) >= 2);
    assert!(sampler.stats().running);
    assert!(!detached.load(Ordering::Acquire));

    child.kill().expect("kill");
    child.wait().expect("reap");
    // The guard is still alive: the source is detached anyway, and the
    // sampler says it is no longer running, with the reason.
    wait_for("the sampling thread to stop", || !sampler.stats().running);
    assert!(
        detached.load(Ordering::Acquire),
        "kernel source still attached"
    );
    let stats = sampler.stats();
    assert!(
        stats
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("no process")),
        "{stats:?}"
    );
    // A new start is allowed (it stops again at once: the target is gone).
    let again = sampler.start().expect("start after a fatal stop");
    wait_for("the second run to stop", || !sampler.stats().running);
    drop(again);
    drop(guard);
    assert!(matches!(
        sampler.sample_now(),
        Err(Error::NoSuchProcess { .. })
    ));
}

#[test]
fn dropping_an_old_guard_does_not_stop_a_newer_run() {
    let sampler = SamplerBuilder::new()
        .with_interval(Duration::from_millis(5))
        .build()
        .expect("build");
    let first = sampler.start().expect("start");
    assert!(matches!(sampler.start(), Err(Error::AlreadyRunning)));
    drop(first);
    assert!(!sampler.stats().running);
    let second = sampler.start().expect("start again");
    let before = sampler.stats().total_samples;
    wait_for("the second run to sample", || {
        sampler.stats().total_samples >= before + 3
    });
    assert!(sampler.stats().running);
    drop(second);
    assert!(!sampler.stats().running);
}

#[test]
fn probe_limits_have_their_own_errors() {
    let sampler = SamplerBuilder::new().build().expect("build");
    let long = "x".repeat(wakemeter::probe::MAX_PROBE_NAME_BYTES + 1);
    match sampler.loop_probe(&long) {
        Err(Error::ProbeNameTooLong { len, max }) => {
            assert_eq!(
                (len, max),
                (long.len(), wakemeter::probe::MAX_PROBE_NAME_BYTES)
            );
        }
        other => panic!("expected ProbeNameTooLong, got {other:?}"),
    }
    assert!(matches!(
        sampler.sleep_probe(&"y".repeat(64 << 20)),
        Err(Error::ProbeNameTooLong { .. })
    ));
    let fits = "z".repeat(wakemeter::probe::MAX_PROBE_NAME_BYTES);
    let _ok = sampler.loop_probe(&fits).expect("a name at the limit");
    let probes: Vec<_> = (0..wakemeter::probe::MAX_PROBES)
        .map(|i| sampler.sleep_probe(&format!("p{i}")).expect("room"))
        .collect();
    match sampler.sleep_probe("one-too-many") {
        Err(Error::TooManyProbes { max }) => assert_eq!(max, wakemeter::probe::MAX_PROBES),
        other => panic!("expected TooManyProbes, got {other:?}"),
    }
    drop(probes);
}

/// A kernel source whose map overflows: `dropped_events` rises by 5 per read.
struct Overflowing(u64);

impl KernelSource for Overflowing {
    fn read(&mut self) -> Result<KernelSample, KernelSourceError> {
        self.0 += 5;
        let mut s = KernelSample::default();
        s.total_dropped_events = self.0;
        Ok(s)
    }
}

#[test]
fn lost_kernel_events_surface_as_a_warning_per_snapshot() {
    let sampler = SamplerBuilder::new()
        .with_kernel_source(Box::new(Overflowing(0)))
        .build()
        .expect("build");
    for _ in 0..3 {
        let snap = sampler.sample_now().expect("sample");
        assert!(
            snap.warnings
                .contains(&wakemeter::SampleWarning::KernelEventsDropped { dropped_events: 5 }),
            "{:?}",
            snap.warnings
        );
    }
    // The report sums them over its interval (snapshots 1 and 2 after 0).
    let report = sampler.report();
    assert_eq!(
        report.interval.as_ref().map(|i| (i.from_seq, i.to_seq)),
        Some((0, 2))
    );
    assert_eq!(
        report.warnings,
        vec![wakemeter::SampleWarning::KernelEventsDropped { dropped_events: 10 }]
    );
}

#[test]
fn a_target_sampled_with_its_process_files_opened_per_sample_holds_none_and_exits() {
    let mut child = Command::new("sleep").arg("30").spawn().expect("spawn");
    let pid = child.id();
    // Descriptors of this process open on the target's process files
    // (its task directory, statm, status), found by where they point.
    let process_files = || {
        let names = ["statm", "status", "task"].map(|f| format!("/proc/{pid}/{f}"));
        std::fs::read_dir("/proc/self/fd")
            .expect("fd directory")
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|link| names.iter().any(|n| link.as_os_str() == n.as_str()))
            .count()
    };
    let sampler = SamplerBuilder::new()
        .with_target(Target::Pid(pid))
        .with_process_files_per_sample(true)
        .build()
        .expect("build");
    for _ in 0..3 {
        let snapshot = sampler.sample_now().expect("sample");
        assert_eq!(snapshot.process.pid, pid);
        assert!(snapshot.process.rss_bytes > 0);
        assert_eq!(snapshot.threads.len(), 1);
        // Only the thread's kept files may stay open between samples.
        assert_eq!(process_files(), 0);
    }
    // A sampler keeping them (the default, within the budget) holds three.
    let keeping = SamplerBuilder::new()
        .with_target(Target::Pid(pid))
        .build()
        .expect("build");
    keeping.sample_now().expect("sample");
    assert_eq!(process_files(), 3);
    drop(keeping);
    child.kill().expect("kill");
    child.wait().expect("reap");
    assert!(
        matches!(sampler.sample_now(), Err(Error::NoSuchProcess { pid: p }) if p == pid),
        "the exit is seen"
    );
}

#[test]
fn a_zombie_target_reads_as_exited() {
    let mut child = Command::new("true").spawn().expect("spawn true");
    let stat = format!("/proc/{}/stat", child.id());
    // Not reaped yet: the process stays a zombie until `wait`.
    wait_for("the child to become a zombie", || {
        std::fs::read_to_string(&stat).is_ok_and(|s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z'))
        })
    });
    let outcome = SamplerBuilder::new()
        .with_target(Target::Pid(child.id()))
        .build()
        .and_then(|s| s.sample_now());
    assert!(
        matches!(outcome, Err(Error::NoSuchProcess { pid }) if pid == child.id()),
        "{outcome:?}"
    );
    child.wait().expect("reap");
}

/// A leader that called `pthread_exit` is a zombie while its other threads
/// run: the process is alive and sampled, not "exited".
#[test]
fn a_process_whose_leader_exited_first_is_still_alive() {
    let dir = std::env::temp_dir().join(format!("wm-leader-exit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let src = dir.join("leader_exit.c");
    let bin = dir.join("leader_exit");
    std::fs::write(
        &src,
        "#include <pthread.h>\n#include <unistd.h>\n\
         static void *run(void *a) { (void)a; sleep(30); return 0; }\n\
         int main(void) { pthread_t t; pthread_create(&t, 0, run, 0); usleep(50000); pthread_exit(0); }\n",
    )
    .expect("write source");
    let built = Command::new("cc")
        .args(["-pthread", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("run cc (a C compiler is needed)");
    assert!(built.success(), "cc failed");
    let mut child = Command::new(&bin).spawn().expect("spawn");
    let status = format!("/proc/{}/status", child.id());
    wait_for("the leader to exit while its thread runs", || {
        std::fs::read_to_string(&status)
            .is_ok_and(|s| s.contains("State:\tZ") && s.contains("Threads:\t2"))
    });
    let sampler = SamplerBuilder::new()
        .with_target(Target::Pid(child.id()))
        .build()
        .expect("build");
    let snap = sampler.sample_now().expect("the process is alive");
    assert_eq!(snap.process.thread_count, 2);
    child.kill().expect("kill");
    child.wait().expect("reap");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_target_that_execs_is_renamed_in_the_next_report() {
    use std::io::Write;
    // `sh` waits for a line, then becomes `sleep` (same PID, same start time).
    let mut child = Command::new("sh")
        .args(["-c", "read line; exec sleep 30"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn sh");
    // Spawned, it may still carry this thread's name for a moment (the
    // kernel renames it after the exec; under qemu-user, beside a loaded
    // machine, the first report read "a_target_that_e").
    wakemeter_testkit::wait_for_name(child.id(), "sh");
    let sampler = SamplerBuilder::new()
        .with_target(Target::Pid(child.id()))
        .build()
        .expect("build");
    sampler.sample_now().expect("sample");
    assert_eq!(sampler.report().target.name, "sh");
    writeln!(child.stdin.as_mut().expect("stdin"), "go").expect("write");
    let comm = format!("/proc/{}/comm", child.id());
    wait_for("the exec", || {
        std::fs::read_to_string(&comm).is_ok_and(|c| c.trim_end() == "sleep")
    });
    sampler.sample_now().expect("sample after the exec");
    let report = sampler.report();
    assert_eq!(report.target.name, "sleep");
    assert_eq!(report.target.pid, child.id());
    assert_eq!(
        report.target.start_time_unix_ns,
        sampler.target_identity().start_time_unix_ns
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// Makes the next process this one spawns get `pid`, through
/// `/proc/sys/kernel/ns_last_pid` (root; other processes on the machine
/// can take it first, so the caller checks and retries).
fn spawn_with_pid(pid: u32) -> Option<std::process::Child> {
    std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).ok()?;
    let child = Command::new("sleep").arg("30").spawn().ok()?;
    if child.id() == pid {
        Some(child)
    } else {
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
        None
    }
}

#[test]
#[ignore = "needs root"]
fn a_reused_pid_is_reported_as_such() {
    reused_pid_is_reported(false);
}

/// A sampler that holds no process-level descriptor between samples (as
/// one past its part of the descriptor budget) tells a reused PID by the
/// process's start time.
#[test]
#[ignore = "needs root"]
fn a_reused_pid_is_reported_as_such_with_process_files_opened_per_sample() {
    reused_pid_is_reported(true);
}

fn reused_pid_is_reported(per_sample: bool) {
    for _attempt in 0..50 {
        let mut first = Command::new("sleep").arg("30").spawn().expect("spawn");
        let pid = first.id();
        // Named after its program before the sampler reads its name.
        wakemeter_testkit::wait_for_name(pid, "sleep");
        let sampler = SamplerBuilder::new()
            .with_target(Target::Pid(pid))
            .with_process_files_per_sample(per_sample)
            .build()
            .expect("build");
        sampler.sample_now().expect("sample");
        if per_sample {
            // The start time that tells the processes apart is in clock
            // ticks (10 ms): a process must outlive one for its successor
            // under the same PID to differ (a watched process always has).
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        first.kill().expect("kill");
        first.wait().expect("reap");
        let Some(mut second) = spawn_with_pid(pid) else {
            continue;
        };
        let outcome = sampler.sample_now();
        let _ = second.kill();
        let _ = second.wait();
        match outcome {
            Err(Error::PidReused { pid: p }) => {
                assert_eq!(p, pid);
                let e = Error::PidReused { pid: p };
                assert!(e.to_string().contains("pid reused"), "{e}");
                assert!(e.target_gone());
                // The report keeps the measured process's identity.
                assert_eq!(sampler.report().target.name, "sleep");
                return;
            }
            other => panic!("expected PidReused, got {other:?}"),
        }
    }
    panic!("could not get the same pid again in 50 attempts (a busy machine?)");
}

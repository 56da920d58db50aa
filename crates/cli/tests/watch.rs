//! `wakemeter watch` against real child processes: how it starts, stops
//! and fails. No test asserts a wall-clock deadline (a machine at load 200
//! made runs of a few seconds take over 20 s): each waits for a condition,
//! and a test of promptness makes the broken behaviour take an hour
//! (`--every 3600`), far beyond the hang guard of its run.
#![cfg(target_os = "linux")]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Sleeper, run, wait_for_zombie, watch};

/// A bound only a hang reaches (see `common::HANG_GUARD`).
const LIMIT: Duration = Duration::from_secs(600);

/// Longer than any bound here: a watcher that waits for its next report
/// instead of ending would hang for this long.
const AN_HOUR: &str = "3600";

fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_missing_pid_is_one_clear_error_before_any_ebpf_attempt() {
    // eBPF left on: the old watcher tried (and reported) it before noticing.
    let r = run(&mut watch(common::NO_SUCH_PID, &["--every", "1"]), LIMIT);
    common::assert_no_such_pid(&r);
}

#[test]
fn a_zombie_is_refused_instead_of_watched_forever() {
    // Exits at once and is not reaped until the end of the test.
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    wait_for_zombie(pid);
    let r = run(&mut watch(pid, &["--every", "1", "--no-ebpf"]), LIMIT);
    child.wait().unwrap();
    assert!(!r.timed_out, "{}", r.said());
    assert_eq!(r.code, Some(2), "{}", r.said());
    assert!(
        r.stderr()
            .contains(&format!("process {pid} (true) is a zombie")),
        "{}",
        r.said()
    );
}

#[test]
fn a_thread_id_watches_its_process_and_says_so() {
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tx.send(unsafe { libc::gettid() } as u32).unwrap();
        let _ = stop_rx.recv();
    });
    let tid = rx.recv().unwrap();
    let me = std::process::id();
    let r = run(
        &mut watch(
            tid,
            &["--every", "1", "--seconds", "1", "--json", "--no-ebpf"],
        ),
        LIMIT,
    );
    drop(stop_tx);
    thread.join().unwrap();
    assert_eq!(r.code, Some(0), "{}", r.said());
    assert!(
        r.stderr()
            .contains(&format!("{tid} is a thread of process {me} ")),
        "{}",
        r.said()
    );
    let lines = json_lines(&r.stdout());
    assert!(!lines.is_empty(), "{}", r.said());
    assert_eq!(lines[0]["interval"]["process"]["pid"], me, "{}", r.said());
}

#[test]
fn a_closed_stdout_ends_watch_quietly() {
    let target = Sleeper::new("30");
    let mut w = watch(
        target.pid(),
        &["--every", "1", "--seconds", AN_HOUR, "--no-ebpf"],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let start = Instant::now();
    let mut first = String::new();
    BufReader::new(w.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The reader is dropped here: like `wakemeter watch ... | head -1`.
    let status = loop {
        if let Some(s) = w.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > LIMIT {
            let _ = w.kill();
            panic!("watch did not stop");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut w.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    // It stopped at a report after the pipe closed, not at --seconds (an
    // hour, past LIMIT).
    assert_eq!(status.code(), Some(0), "{stderr}");
}

/// One snapshot a second: `--every 2 --seconds 6` is a report on
/// snapshots 2, 4 and 6 (the last at the deadline), each over the two
/// seconds before it, never one between samples or over one second.
#[test]
fn reports_end_on_every_nth_snapshot_and_cover_every_seconds() {
    let target = Sleeper::new("60");
    let r = run(
        &mut watch(
            target.pid(),
            &["--every", "2", "--seconds", "6", "--json", "--no-ebpf"],
        ),
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}", r.said());
    let lines = json_lines(&r.stdout());
    let seqs: Vec<(u64, u64)> = lines
        .iter()
        .map(|v| {
            let i = &v["interval"];
            (
                i["from_seq"].as_u64().unwrap(),
                i["to_seq"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(seqs, vec![(0, 2), (2, 4), (4, 6)], "{}", r.said());
    for v in &lines {
        assert_eq!(v["config"]["interval"]["secs"], 1, "one snapshot a second");
    }
}

#[test]
fn seconds_shorter_than_every_stops_at_the_deadline_with_one_report() {
    let target = Sleeper::new("60");
    let r = run(
        &mut watch(
            target.pid(),
            &["--every", AN_HOUR, "--seconds", "2", "--json", "--no-ebpf"],
        ),
        LIMIT,
    );
    // Not killed: it stopped at --seconds, not at its first report due.
    assert!(!r.timed_out, "{}", r.said());
    assert_eq!(r.code, Some(0), "{}", r.said());
    let lines = json_lines(&r.stdout());
    assert_eq!(lines.len(), 1, "{}", r.said());
    assert!(lines[0]["interval"].is_object(), "{}", r.said());
    assert_eq!(lines[0]["stats"]["running"], true, "{}", r.said());
}

/// Watches a `sleep 2` with reports due every hour; `reap` says whether the
/// test reaps the child as soon as it exits (its `/proc` entry vanishes) or
/// leaves it a zombie.
fn watch_until_exit(reap: bool) {
    let mut child = Command::new("sleep").arg("2").spawn().unwrap();
    let pid = child.id();
    wakemeter_testkit::wait_for_name(pid, "sleep");
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let reaper = std::thread::spawn(move || {
        if !reap {
            // A zombie until the watcher is done.
            let _ = done_rx.recv();
        }
        child.wait().unwrap();
    });
    let r = run(
        &mut watch(pid, &["--every", AN_HOUR, "--json", "--no-ebpf"]),
        LIMIT,
    );
    drop(done_tx);
    reaper.join().unwrap();
    // Not killed: it ended with its target, not at the report due in an hour.
    assert!(!r.timed_out, "{}", r.said());
    assert_eq!(r.code, Some(0), "{}", r.said());
    assert!(
        r.stderr()
            .contains(&format!("target exited: process {pid} (sleep)")),
        "{}",
        r.said()
    );
    let lines = json_lines(&r.stdout());
    let last = lines.last().unwrap_or_else(|| panic!("{}", r.said()));
    assert!(last["interval"].is_object(), "{}", r.said());
    assert_eq!(
        last["stats"]["running"],
        false,
        "the final report comes after sampling stopped\n{}",
        r.said()
    );
}

#[test]
fn a_target_that_exits_and_is_reaped_ends_watch_promptly() {
    watch_until_exit(true);
}

#[test]
fn a_target_that_exits_unreaped_ends_watch_promptly() {
    watch_until_exit(false);
}

/// The poll calls per second of the target's busiest poller in the last
/// JSON report (`None` without a kernel view), and its voluntary switches.
fn kernel_polls(stdout: &str) -> Option<(f64, f64)> {
    let last = json_lines(stdout).pop()?;
    let threads = last["interval"]["threads"].as_array()?;
    threads
        .iter()
        .filter_map(|t| {
            let k = t.get("kernel").filter(|k| !k.is_null())?;
            Some((
                k["poll_calls_per_sec"].as_f64()?,
                k["voluntary_switches_per_sec"].as_f64()?
                    + k["involuntary_switches_per_sec"].as_f64()?,
            ))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)))
}

/// `--no-syscall-hook` keeps the kernel view without the syscall program:
/// a zero-timeout poll loop's calls are counted with the hook (and the
/// measured cost of the hook is printed), not without it, while its
/// switches are counted both ways.
#[test]
#[ignore = "needs root"]
fn no_syscall_hook_keeps_the_kernel_view_without_the_poll_counters() {
    let mut poller = Command::new("python3")
        .args([
            "-c",
            "import select, time\n\
             p = select.poll()\n\
             end = time.time() + 60\n\
             while time.time() < end:\n\
             \x20   p.poll(0)\n\
             \x20   time.sleep(0.0005)\n",
        ])
        .spawn()
        .expect("python3 runs");
    let pid = poller.id();
    let with_hook = run(
        &mut watch(pid, &["--every", "2", "--seconds", "3", "--json"]),
        LIMIT,
    );
    let without = run(
        &mut watch(
            pid,
            &[
                "--every",
                "2",
                "--seconds",
                "3",
                "--json",
                "--no-syscall-hook",
            ],
        ),
        LIMIT,
    );
    poller.kill().unwrap();
    poller.wait().unwrap();
    assert_eq!(with_hook.code, Some(0), "{}", with_hook.said());
    assert_eq!(without.code, Some(0), "{}", without.said());
    assert!(
        with_hook
            .stderr()
            .contains("makes every syscall on this machine slower")
            && with_hook.stderr().contains(" ns here"),
        "{}",
        with_hook.said()
    );
    assert!(
        without.stderr().contains("no syscall hook"),
        "{}",
        without.said()
    );
    let (polls, switches) = kernel_polls(&with_hook.stdout()).expect("a kernel view");
    // About 1,500 polls/s (0.5 ms sleeps plus the interpreter's own time).
    assert!(polls > 200.0 && switches > 200.0, "{polls} {switches}");
    let (polls, switches) = kernel_polls(&without.stdout()).expect("a kernel view");
    assert!(polls == 0.0 && switches > 200.0, "{polls} {switches}");
}

/// A start-up burst, in a real interpreter: once `watch` has printed its
/// first report (so eBPF, when asked for, is attached however long that
/// took), three seconds of a spinning thread, 300 threads started and
/// joined, 160 MB allocated and touched, then quiet. `watch` reports every
/// second; none of its reports during the burst and the eight after it
/// may call that a CPU hog, a leak or a wakeups problem: those rules keep
/// their documented minimum windows (60 s) in `watch` too. Each step waits
/// for its condition (the first report, the burst's end, eight more
/// reports), bounded by LIMIT only against a hang.
fn start_up_burst_is_not_a_hog(extra: &[&str]) {
    use std::io::Write;
    use std::sync::mpsc;
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut app = Command::new("python3")
        .args([
            "-c",
            "import sys, threading, time\n\
             sys.stdin.readline()\n\
             end = time.time() + 3\n\
             cache = bytearray(160 << 20)\n\
             for i in range(0, len(cache), 4096): cache[i] = 1\n\
             for _ in range(300):\n\
             \x20   t = threading.Thread(target=lambda: None); t.start(); t.join()\n\
             while time.time() < end: pass\n\
             print('quiet', flush=True)\n\
             time.sleep(3600)\n",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut args = vec!["--every", "1", "--seconds", AN_HOUR, "--json"];
    args.extend_from_slice(extra);
    let mut w = watch(app.id(), &args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let out = BufReader::new(w.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in out.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut err = w.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let next_report = |what: &str| match rx.recv_timeout(LIMIT) {
        Ok(line) => serde_json::from_str::<serde_json::Value>(&line).unwrap(),
        Err(e) => panic!("no report ({what}): {e}"),
    };
    let mut reports = vec![next_report("the first")];
    app.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    // Reports go on while the burst runs; collect them until it is over.
    let (quiet_tx, quiet_rx) = mpsc::channel();
    let app_out = BufReader::new(app.stdout.take().unwrap());
    std::thread::spawn(move || {
        let said = app_out.lines().map_while(Result::ok).next();
        let _ = quiet_tx.send(said);
    });
    let start = Instant::now();
    while quiet_rx.try_recv().is_err() {
        assert!(start.elapsed() < LIMIT, "the burst never ended");
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) {
            reports.push(serde_json::from_str(&line).unwrap());
        }
    }
    for _ in 0..8 {
        reports.push(next_report("after the burst"));
    }
    let _ = w.kill();
    let _ = w.wait();
    let stderr = stderr.join().unwrap();
    app.kill().unwrap();
    app.wait().unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    // The burst was seen: CPU time in the reports' intervals (however
    // little of a core a loaded machine gave it).
    let cpu_ns: f64 = reports
        .iter()
        .filter_map(|rep| rep["interval"]["process"]["cpu_time_ns"].as_f64())
        .sum();
    assert!(cpu_ns > 3e8, "{cpu_ns} ns of CPU seen: {stderr}");
    for rep in &reports {
        for f in rep["findings"].as_array().unwrap() {
            let kind = f["kind"].as_str().unwrap();
            assert!(
                !["cpu_hog", "memory_growth", "wakeups_budget"].contains(&kind),
                "{kind} for a start-up burst: {f}"
            );
        }
    }
}

#[test]
fn a_start_up_burst_is_not_a_hog_from_proc() {
    start_up_burst_is_not_a_hog(&["--no-ebpf"]);
}

#[test]
#[ignore = "needs root"]
fn a_start_up_burst_is_not_a_hog_with_ebpf() {
    start_up_burst_is_not_a_hog(&[]);
}

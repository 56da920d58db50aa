//! `wakemeter profile` and `wakemeter watch --profile-dir` end to end
//! (root: eBPF; the no-privilege case drops root with setpriv).
#![cfg(target_os = "linux")]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{Sleeper, run, watch};

/// A bound on waits and runs that only a hang reaches (a loaded machine
/// is slow, never wrong).
const LIMIT: Duration = Duration::from_secs(300);

/// The busy poller of the profile tests (`epoll_wait(…, 0)` in
/// `poll_forever`, thread "poller"), built with frame pointers.
fn busy_poller() -> Child {
    // Built once: two tests building the same file at once would exec it
    // while the other's compiler still writes it ("Text file busy").
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let exe = BUILT.get_or_init(|| {
        let src =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../profile/tests/programs/busypoll.c");
        wakemeter_testkit::build_c(
            &src,
            Path::new(env!("CARGO_TARGET_TMPDIR")),
            "busypoll-cli",
            &["-g", "-O1", "-fno-omit-frame-pointer"],
        )
    });
    let mut child = Command::new(exe)
        .arg("60")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    child
}

fn fresh_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
#[ignore = "needs root"]
fn watch_profile_dir_writes_the_busy_pollers_stacks_and_names_them_under_the_finding() {
    let mut child = busy_poller();
    let dir = fresh_dir("watch-profiles");
    let r = run(
        &mut watch(
            child.id(),
            &[
                "--every",
                "2",
                "--seconds",
                "12",
                "--profile-dir",
                dir.to_str().unwrap(),
                "--profile-seconds",
                "3",
            ],
        ),
        LIMIT,
    );
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(r.code, Some(0), "{}", r.said());
    let out = r.stdout();
    // The path is printed on the line after the finding's advice.
    let lines: Vec<&str> = out.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("busy_poller: thread") && l.contains("\"poller\""))
        .unwrap_or_else(|| panic!("no busy_poller finding\n{}", r.said()));
    let path = lines[at..]
        .iter()
        .find_map(|l| l.trim().strip_prefix("profile: "))
        .unwrap_or_else(|| panic!("no profile path under the finding\n{}", r.said()));
    assert!(path.ends_with("-on_cpu.svg"), "{path}");
    assert!(
        r.stderr()
            .contains("wakemeter: profiled busy_poller of thread")
    );
    let svg = PathBuf::from(path);
    let folded = std::fs::read_to_string(svg.with_extension("folded")).unwrap();
    let pprof = svg.with_extension("pb.gz");
    assert!(svg.exists() && pprof.exists(), "{}", r.said());
    assert!(
        folded.contains("poll_forever") && folded.contains("epoll_wait"),
        "{folded}"
    );
    // Only the poller thread's stacks: every line starts with its name.
    assert!(folded.lines().all(|l| l.starts_with("poller;")), "{folded}");
}

/// `profile` prints the top functions by total and self share above the
/// stacks, and for off-CPU the split by cause: the busy poller's thread
/// spends its CPU under poll_forever; its main thread sleeps.
#[test]
#[ignore = "needs root"]
fn profile_summary_lists_top_functions_and_causes_above_the_stacks() {
    let mut child = busy_poller();
    let pid = child.id().to_string();
    let on = run(
        common::bin().args(["profile", "--pid", &pid, "--on-cpu", "--seconds", "2"]),
        LIMIT,
    );
    let off = run(
        common::bin().args(["profile", "--pid", &pid, "--off-cpu", "--seconds", "2"]),
        LIMIT,
    );
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(on.code, Some(0), "{}", on.said());
    let text = on.stdout();
    let at = |text: &str, needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("no {needle:?} in\n{text}"))
    };
    assert!(
        at(&text, "top functions:") < at(&text, "top stacks:"),
        "{text}"
    );
    // poll_forever holds nearly every sample of the poller: a total share
    // of more than 50% on the line that names it.
    let line = text
        .lines()
        .find(|l| l.ends_with(" poll_forever"))
        .unwrap_or_else(|| panic!("poll_forever not in the top functions\n{text}"));
    let total: f64 = line
        .split_whitespace()
        .next()
        .and_then(|v| v.trim_end_matches('%').parse().ok())
        .unwrap_or_else(|| panic!("share in {line:?}"));
    assert!(total > 50.0, "{line}");
    // The summary says how many samples were due and kept, before the
    // functions: a busy poller over 2 s keeps most of what it was due.
    assert!(
        at(&text, "samples kept: ") < at(&text, "top functions:"),
        "{text}"
    );
    // "samples kept: K of D due (...)": with the default per-thread
    // timers, K within counting noise (3 √D) and a few percent the
    // scheduler charges around a thread's switches that no timer of its own
    // sees (the poller never blocks: it is only preempted) of D.
    let (kept, due) = kept_and_due(&text);
    // (A loaded machine may give the poller too little CPU in the 2 s to
    // judge: fewer than 10 samples due.)
    assert!(
        due < 10.0 || (kept - due).abs() <= 3.0 * due.sqrt() + 0.05 * due,
        "kept {kept} of {due} due\n{text}"
    );
    assert!(!text.contains("off-CPU time by cause"), "{text}");
    // The default timers are named.
    assert!(text.contains("timer: per thread ("), "{text}");
    assert_eq!(off.code, Some(0), "{}", off.said());
    let text = off.stdout();
    assert!(
        at(&text, "off-CPU time by cause:") < at(&text, "top functions:"),
        "{text}"
    );
    assert!(!text.contains("samples kept:"), "{text}");
    // The poller never blocks (epoll_wait with a zero timeout): it leaves
    // the CPU when preempted, and that cause is listed with its share.
    let line = text
        .lines()
        .find(|l| l.contains("% ") && l.contains(" preempted "))
        .unwrap_or_else(|| panic!("no preempted cause\n{text}"));
    assert!(line.contains(" switches"), "{line}");
}

/// "samples kept: K of D due (...)" of a summary: (K, D).
fn kept_and_due(text: &str) -> (f64, f64) {
    text.lines()
        .find_map(|l| {
            let rest = l.trim_start().strip_prefix("samples kept: ")?;
            let (kept, rest) = rest.split_once(" of ")?;
            let due = rest.split_once(" due")?.0;
            Some((kept.parse::<f64>().ok()?, due.parse::<f64>().ok()?))
        })
        .unwrap_or_else(|| panic!("no samples kept line in\n{text}"))
}

/// `--timer cpu`: one event per CPU, named in the summary with the default
/// offered; the samples kept are the process's CPU time × frequency within
/// counting noise (3 √D) and the uneven sampling of a thread that runs in
/// bursts (up to a quarter either way on a loaded VM, by perf's events as by
/// ours: ACCURACY.md). A poller at 0.39 s of CPU in the window was due 38.6
/// and kept 47 (1.217) on a loaded run.
#[test]
#[ignore = "needs root"]
fn profile_with_per_cpu_timers_says_so() {
    let mut child = busy_poller();
    let pid = child.id().to_string();
    let on = run(
        common::bin().args([
            "profile",
            "--pid",
            &pid,
            "--on-cpu",
            "--frequency",
            "999",
            "--seconds",
            "2",
            "--timer",
            "cpu",
        ]),
        LIMIT,
    );
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(on.code, Some(0), "{}", on.said());
    let text = on.stdout();
    assert!(
        text.contains("timer: per CPU, as asked (") && text.contains("--timer thread"),
        "{text}"
    );
    let (kept, due) = kept_and_due(&text);
    assert!(
        due < 10.0 || (kept - due).abs() <= 3.0 * due.sqrt() + 0.25 * due,
        "kept {kept} of {due} due\n{text}"
    );
    let bad = run(
        common::bin().args(["profile", "--pid", &pid, "--on-cpu", "--timer", "wall"]),
        LIMIT,
    );
    assert_eq!(bad.code, Some(2), "{}", bad.said());
}

/// Per-thread timers take a descriptor per thread: `profile` raises its soft
/// open-file limit to the hard one first, so a process of more threads than
/// half the soft limit it was started with is still sampled per thread.
#[test]
#[ignore = "needs root"]
fn profile_raises_its_open_file_limit_for_per_thread_timers() {
    /// The soft limit `profile` starts with: a budget of 64 descriptors.
    const SOFT_LIMIT: libc::rlim_t = 128;
    /// Threads of the target (this test process), more than that budget.
    const PARKED: usize = 80;
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let done_rx = std::sync::Arc::new(std::sync::Mutex::new(done_rx));
    let parked: Vec<_> = (0..PARKED)
        .map(|_| {
            let done = std::sync::Arc::clone(&done_rx);
            std::thread::spawn(move || {
                let _ = done.lock().map(|rx| rx.recv());
            })
        })
        .collect();
    let mut cmd = common::bin();
    cmd.args([
        "profile",
        "--pid",
        &std::process::id().to_string(),
        "--on-cpu",
        "--seconds",
        "1",
    ]);
    // SAFETY: between fork and exec the closure only calls getrlimit and
    // setrlimit, which are async-signal-safe, on a struct of its own.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            limit.rlim_cur = SOFT_LIMIT.min(limit.rlim_max);
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let r = run(&mut cmd, LIMIT);
    drop(done_tx);
    for t in parked {
        t.join().unwrap();
    }
    assert_eq!(r.code, Some(0), "{}", r.said());
    let text = r.stdout();
    let opened: usize = text
        .split_once("timer: per thread (")
        .and_then(|(_, rest)| rest.split_once(" opened"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no per-thread timer line in\n{text}"));
    assert!(
        opened > PARKED,
        "{opened} events for {PARKED} parked threads\n{text}"
    );
}

/// Without privilege, `profile` fails with the typed reason and status 2,
/// and `watch --profile-dir` refuses to start rather than fail later.
#[test]
#[ignore = "needs root"]
fn without_privilege_profiles_fail_with_the_reason() {
    let sleeper = Sleeper::new("30");
    let pid = sleeper.pid().to_string();
    let nobody = || {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            env!("CARGO_BIN_EXE_wakemeter"),
        ]);
        c
    };
    let r = run(
        nobody().args(["profile", "--pid", &pid, "--on-cpu", "--seconds", "1"]),
        LIMIT,
    );
    assert_eq!(r.code, Some(2), "{}", r.said());
    assert!(
        r.stderr().contains("missing privilege") && r.stderr().contains("CAP_BPF"),
        "{}",
        r.said()
    );
    assert!(r.stdout.is_empty(), "{}", r.said());
    let dir = fresh_dir("nobody-profiles");
    let r = run(
        nobody().args([
            "watch",
            "--pid",
            &pid,
            "--seconds",
            "1",
            "--profile-dir",
            dir.to_str().unwrap(),
        ]),
        LIMIT,
    );
    assert_eq!(r.code, Some(2), "{}", r.said());
    assert!(
        r.stderr().contains("--profile-dir needs eBPF") && r.stderr().contains("missing privilege"),
        "{}",
        r.said()
    );
}

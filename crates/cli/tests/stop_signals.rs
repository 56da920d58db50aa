//! Every command stops soon after SIGINT or SIGTERM, in every phase: each
//! test starts a command, waits until it is in the phase (a line on
//! stderr, a file), sends the signal and measures how long the exit took.
//! The bound asserted is generous for a busy machine (5 s); the measured
//! delays are printed (`-- --nocapture`), under 1 s on a quiet one.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{HANG_GUARD, Sleeper, as_foreground, bin};

/// Longest exit after the signal accepted (the target is < 1 s quiet).
const BOUND: Duration = Duration::from_secs(5);

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wakemeter-stop-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A command running with its stderr in a file (read for phase markers).
struct Running {
    child: Child,
    stderr: PathBuf,
    stdout: PathBuf,
    what: String,
}

fn start(what: &str, mut cmd: Command, d: &Path) -> Running {
    let stderr = d.join(format!("{}.stderr", what.replace(' ', "_")));
    let stdout = d.join(format!("{}.stdout", what.replace(' ', "_")));
    cmd.stdin(Stdio::null())
        .stdout(File::create(&stdout).unwrap())
        .stderr(File::create(&stderr).unwrap());
    as_foreground(&mut cmd);
    Running {
        child: cmd.spawn().unwrap(),
        stderr,
        stdout,
        what: what.to_string(),
    }
}

impl Running {
    fn said(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits (hang guard: minutes) until `ready` holds.
    fn wait_for(&mut self, phase: &str, ready: impl Fn(&Running) -> bool) {
        let began = Instant::now();
        while !ready(self) {
            assert!(
                self.child.try_wait().unwrap().is_none(),
                "{}: exited before {phase}: {}",
                self.what,
                self.said()
            );
            assert!(
                began.elapsed() < HANG_GUARD,
                "{}: never reached {phase}: {}",
                self.what,
                self.said()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `sig` and returns how long the exit took, and the exit code.
    fn stop(mut self, sig: i32) -> (Duration, Option<i32>) {
        self.stop_with(&[sig])
    }

    /// Sends the signals `sigs` one right after the other and returns how
    /// long the exit took after the first, and the exit code.
    fn stop_with(&mut self, sigs: &[i32]) -> (Duration, Option<i32>) {
        let sig = sigs[0];
        for &s in sigs {
            // SAFETY: kill(2) on a child we started; no memory involved.
            assert_eq!(unsafe { libc::kill(self.child.id() as i32, s) }, 0);
        }
        let sent = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                let took = sent.elapsed();
                eprintln!(
                    "{}: exit {:?} {:.0} ms after {}",
                    self.what,
                    st.code(),
                    took.as_secs_f64() * 1e3,
                    if sig == libc::SIGINT {
                        "SIGINT"
                    } else {
                        "SIGTERM"
                    }
                );
                assert!(
                    took < BOUND,
                    "{}: {took:?} after the signal: {}",
                    self.what,
                    self.said()
                );
                return (took, st.code());
            }
            if sent.elapsed() > HANG_GUARD {
                let _ = self.child.kill();
                panic!("{}: still running after the signal", self.what);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

fn has_bytes(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.len() > 0)
}

#[test]
fn record_stops_while_recording_waiting_for_a_fifo_and_with_a_trace() {
    let d = dir("record");
    let s = Sleeper::new("600");
    let pid = s.pid().to_string();
    let record = |out: &Path, extra: &[&str]| {
        let mut c = bin();
        c.args([
            "record",
            "--pid",
            &pid,
            "--seconds",
            "3600",
            // The old name of `--period`, kept as a hidden alias.
            "--interval",
            "0.1",
        ])
        .args(["--no-ebpf", "-o"])
        .arg(out)
        .args(extra);
        c
    };
    // Recording.
    let mut r = start("record", record(&d.join("r.ndjson"), &[]), &d);
    let partial = d.join(format!("r.ndjson.partial-{}", r.child.id()));
    r.wait_for("recording", |_| has_bytes(&partial));
    let (_, code) = r.stop(libc::SIGINT);
    assert_eq!(code, Some(0));
    // With a Perfetto trace beside it.
    let trace = d.join("t.pftrace");
    let mut r = start(
        "record --perfetto",
        record(
            &d.join("t.ndjson"),
            &["--perfetto", trace.to_str().unwrap()],
        ),
        &d,
    );
    let partial = d.join(format!("t.ndjson.partial-{}", r.child.id()));
    r.wait_for("recording", |_| has_bytes(&partial));
    let (_, code) = r.stop(libc::SIGTERM);
    assert_eq!(code, Some(0));
    // Waiting for a reader of its FIFO, which never comes.
    let fifo = d.join("fifo");
    mkfifo(&fifo);
    let mut r = start("record -o FIFO", record(&fifo, &[]), &d);
    let began = Instant::now();
    r.wait_for("the FIFO's open", |_| {
        began.elapsed() > Duration::from_millis(500)
    });
    let (_, code) = r.stop(libc::SIGTERM);
    assert_ne!(code, Some(0), "nothing was recorded");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn watch_stops_plain_with_a_trace_and_over_a_name() {
    let d = dir("watch");
    let s = Sleeper::new("600");
    let pid = s.pid().to_string();
    let mut c = bin();
    c.args(["watch", "--pid", &pid, "--every", "3600", "--no-ebpf"]);
    let mut r = start("watch", c, &d);
    let began = Instant::now();
    r.wait_for("watching", |_| began.elapsed() > Duration::from_millis(500));
    r.stop(libc::SIGINT);
    for (what, by) in [
        ("watch --perfetto", "--pid"),
        ("watch --name --perfetto", "--name"),
    ] {
        let trace = d.join(format!("{}.pftrace", by.trim_start_matches('-')));
        let mut c = bin();
        c.args(["watch", "--every", "3600", "--no-ebpf"]);
        match by {
            "--pid" => c.args(["--pid", &pid]),
            _ => c.args(["--name", "sleep", "--max-processes", "4"]),
        };
        c.arg("--perfetto").arg(&trace);
        let mut r = start(what, c, &d);
        r.wait_for("tracing", |_| has_bytes(&trace));
        let (_, code) = r.stop(libc::SIGTERM);
        assert!(code.is_some(), "{what} ended by the signal, not by itself");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn ab_stops_while_waiting_for_its_processes_and_during_the_load() {
    let d = dir("ab");
    // Waiting for processes that never come (--ready-timeout: an hour).
    let mut c = bin();
    c.args(["ab", "--name", "wm-never-there", "--load", "true"])
        .args(["--ready-timeout", "3600s", "--no-ebpf", "--dir"])
        .arg(d.join("wait"));
    let mut r = start("ab waiting", c, &d);
    r.wait_for("the wait", |r| r.said().contains("run 1 of"));
    let (_, code) = r.stop(libc::SIGINT);
    assert_ne!(code, Some(0));
    // During a load that would run an hour.
    let s = Sleeper::new("600");
    let mut c = bin();
    c.args(["ab", "--pid", &s.pid().to_string(), "--load", "sleep 3600"])
        .args(["--settle", "0s", "--period", "0.1", "--no-ebpf", "--dir"])
        .arg(d.join("load"));
    let mut r = start("ab during the load", c, &d);
    r.wait_for("the load", |r| r.said().contains("measuring from now"));
    let (_, code) = r.stop(libc::SIGTERM);
    assert_ne!(code, Some(0), "an interrupted experiment is not a result");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_load_that_ignores_sigterm_is_killed_after_the_grace_and_sampled_meanwhile() {
    let d = dir("stubborn");
    let s = Sleeper::new("600");
    let began = Instant::now();
    let o = bin()
        .args(["ab", "--pid", &s.pid().to_string()])
        // SIG_IGN is inherited: neither sh nor its sleep ends on SIGTERM.
        .args(["--load", "trap '' TERM; sleep 3600"])
        .args(["--load-timeout", "2s", "--settle", "0s", "--period", "0.1"])
        .args(["--no-ebpf", "--json", "--dir"])
        .arg(d.join("ab"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = began.elapsed();
    let err = String::from_utf8_lossy(&o.stderr);
    eprintln!("ab with a stubborn load: {took:?} in all");
    assert!(took < HANG_GUARD, "{err}");
    for side in ["control", "variant"] {
        let text = std::fs::read_to_string(d.join("ab").join(format!("{side}-1.ndjson"))).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let load = lines.iter().find(|l| l["record"] == "load").unwrap();
        let ran = load["duration_ns"].as_u64().unwrap();
        // Ended by SIGKILL after the 2 s grace, not by the timeout alone.
        assert!(ran >= 3_500_000_000, "{load}");
        assert!(load["exit_code"].is_null(), "killed by a signal: {load}");
        // Sampling went on during the grace: intervals cover it.
        let sampled: u64 = lines
            .iter()
            .filter(|l| l["record"] == "interval")
            .map(|l| l["duration_ns"].as_u64().unwrap_or(0))
            .sum();
        assert!(
            sampled >= 3_000_000_000,
            "{sampled} ns sampled of {ran}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn top_plain_and_diff_stop() {
    let d = dir("top");
    let s = Sleeper::new("600");
    let mut c = bin();
    c.args(["top", "--pid", &s.pid().to_string(), "--no-ebpf"]);
    let mut r = start("top (plain)", c, &d);
    let began = Instant::now();
    r.wait_for("drawing", |_| began.elapsed() > Duration::from_millis(500));
    r.stop(libc::SIGTERM);
    // diff blocked opening a recording that is a FIFO nobody writes.
    let (a, b) = (d.join("a"), d.join("b"));
    mkfifo(&a);
    mkfifo(&b);
    let mut c = bin();
    c.arg("diff").arg(&a).arg(&b);
    let mut r = start("diff", c, &d);
    let began = Instant::now();
    r.wait_for("reading", |_| began.elapsed() > Duration::from_millis(300));
    r.stop(libc::SIGINT);
    let _ = std::fs::remove_dir_all(&d);
}

/// A process that spins on one CPU (killed on drop): an on-CPU profile of
/// it has samples as soon as it has had CPU time.
fn spinner() -> wakemeter_testkit::Running {
    wakemeter_testkit::Running(
        Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap(),
    )
}

#[test]
#[ignore = "needs root"]
fn profile_stops_on_a_signal_and_writes_what_it_captured_marked_partial() {
    let d = dir("profile");
    let target = spinner();
    let pid = target.pid();
    for (what, sig) in [
        ("profile SIGINT", libc::SIGINT),
        ("profile SIGTERM", libc::SIGTERM),
    ] {
        let (svg, folded, pprof) = (d.join("p.svg"), d.join("p.folded"), d.join("p.pb.gz"));
        for f in [&svg, &folded, &pprof] {
            let _ = std::fs::remove_file(f);
        }
        let mut c = bin();
        c.args(["profile", "--pid", &pid.to_string(), "--on-cpu"])
            .args(["--seconds", "3600", "--svg"])
            .arg(&svg)
            .arg("--folded")
            .arg(&folded)
            .arg("--pprof")
            .arg(&pprof);
        let mut r = start(what, c, &d);
        r.wait_for("capturing", |r| r.said().contains("wakemeter: profiling"));
        // Wait for work to profile: CPU time of the spinner since then
        // (the busy machine may give it little).
        let from = wakemeter_testkit::Work::of(pid);
        r.wait_for("the spinner's CPU time", |_| {
            wakemeter_testkit::Work::of(pid).since(from).cpu_ns >= 300_000_000
        });
        let stdout = r.stdout.clone();
        let (_, code) = r.stop(sig);
        let summary = std::fs::read_to_string(&stdout).unwrap();
        assert_eq!(code, Some(0), "{what}: something was captured\n{summary}");
        // The summary says first that it covers part of the window.
        let first = summary.lines().next().unwrap_or_default();
        let covered: f64 = first
            .strip_prefix("partial: interrupted, the profile covers ")
            .and_then(|rest| rest.strip_suffix(" s of the 3600.0 s asked for"))
            .unwrap_or_else(|| panic!("{what}: not marked partial:\n{summary}"))
            .parse()
            .unwrap();
        assert!(covered > 0.0 && covered < 3600.0, "{what}: {first}");
        // The outputs parse: folded lines end in a count, the pprof is
        // gzip, the flame graph says it was cut short and of what.
        let text = std::fs::read_to_string(&folded).unwrap();
        let samples: u64 = text
            .lines()
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum();
        assert!(samples > 0, "{what}: no samples in\n{text}");
        let gz = std::fs::read(&pprof).unwrap();
        assert_eq!(&gz[..2], &[0x1f, 0x8b], "{what}: pprof is not gzip");
        let svg = std::fs::read_to_string(&svg).unwrap();
        assert!(svg.contains("of 3600.0 s asked, interrupted"), "{what}");
        assert!(svg.trim_end().ends_with("</svg>"), "{what}");
    }
    // A second signal right after the first ends it at once, without
    // reading or writing the profile: status 128 + the signal handled
    // second (both are pending at once, so either may be).
    let mut c = bin();
    c.args(["profile", "--pid", &pid.to_string(), "--on-cpu"])
        .args(["--seconds", "3600", "--svg"])
        .arg(d.join("twice.svg"));
    let mut r = start("profile, signalled twice", c, &d);
    r.wait_for("capturing", |r| r.said().contains("wakemeter: profiling"));
    let (_, code) = r.stop_with(&[libc::SIGINT, libc::SIGTERM]);
    assert!(
        [Some(128 + libc::SIGINT), Some(128 + libc::SIGTERM)].contains(&code),
        "{code:?}: {}",
        r.said()
    );
    assert!(!d.join("twice.svg").exists());
    let _ = std::fs::remove_dir_all(&d);
}

//! `watch --perfetto` and `record --perfetto` end to end: the file is
//! created before sampling (a bad path fails first), it holds the
//! processes watched, and Ctrl-C leaves a finished trace. With
//! `WAKEMETER_PERFETTO_PYTHON` (scripts/perfetto-test.sh), every trace is
//! also read with Perfetto's own schema.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

mod common;
#[path = "../../perfetto/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Sleeper, bin, run, watch};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "wakemeter-cli-perfetto-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The schema check's summary, or None (after saying MISSING) without Python.
fn check(trace: &Path) -> Option<String> {
    support::schema_check(trace, None)
}

fn records(bytes: &[u8]) -> usize {
    support::whole_records(bytes)
}

#[test]
fn watch_writes_a_trace_of_the_process() {
    let d = dir("watch");
    let s = Sleeper::new("60");
    let path = d.join("w.perfetto-trace");
    let r = run(
        watch(
            s.pid(),
            &["--every", "1", "--seconds", "3", "--no-ebpf", "--perfetto"],
        )
        .arg(&path),
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(0), "{}", r.said());
    assert!(r.stderr().contains("Perfetto trace"), "{}", r.said());
    let bytes = std::fs::read(&path).unwrap();
    assert!(records(&bytes) > 3);
    if let Some(said) = check(&path) {
        assert!(said.contains("1 processes, 1 threads"), "{said}");
    }
}

#[test]
fn an_unwritable_trace_path_fails_before_sampling() {
    let s = Sleeper::new("60");
    let r = run(
        &mut watch(
            s.pid(),
            &[
                "--seconds",
                "3",
                "--perfetto",
                "/nonexistent-dir/x.perfetto-trace",
            ],
        ),
        Duration::from_secs(30),
    );
    assert_eq!(r.code, Some(2), "{}", r.said());
    assert!(
        r.stderr().contains("/nonexistent-dir/x.perfetto-trace"),
        "{}",
        r.said()
    );
    assert!(r.stdout().is_empty(), "nothing was reported: {}", r.said());
    let out = dir("record-bad").join("r.ndjson");
    let r = run(
        bin()
            .args([
                "record",
                "--pid",
                &s.pid().to_string(),
                "--seconds",
                "2",
                "-o",
            ])
            .arg(&out)
            .args(["--perfetto", "/nonexistent-dir/x.perfetto-trace"]),
        Duration::from_secs(30),
    );
    assert_eq!(r.code, Some(2), "{}", r.said());
    assert!(!out.exists(), "no recording is left behind");
}

#[test]
fn record_traces_every_process_and_ctrl_c_finishes_the_file() {
    let d = dir("record");
    let (a, b) = (Sleeper::new("60"), Sleeper::new("60"));
    let path = d.join("r.perfetto-trace");
    let child = bin()
        .args([
            "record",
            "--pid",
            &a.pid().to_string(),
            "--pid",
            &b.pid().to_string(),
        ])
        .args(["--seconds", "300", "--period", "0.2", "--no-ebpf", "-o"])
        .arg(d.join("r.ndjson"))
        .arg("--perfetto")
        .arg(&path)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the trace to be created and a few intervals to be taken
    // (its size says little: unchanged counters are not written again).
    let until = std::time::Instant::now() + Duration::from_secs(240);
    while !path.exists() {
        assert!(std::time::Instant::now() < until, "no trace created");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Then wait for intervals in the recording beside it (one line per
    // process per interval): a fixed 2 s was a window a loaded machine
    // can fill with fewer than the 2 intervals asserted below.
    let partial = d.join(format!("r.ndjson.partial-{}", child.id()));
    let intervals_recorded = || {
        std::fs::read_to_string(&partial).map_or(0, |t| {
            t.lines()
                .filter(|l| l.ends_with('}') && !l.contains("\"record\":\"header\""))
                .count()
        })
    };
    while intervals_recorded() < 6 {
        assert!(std::time::Instant::now() < until, "no 3 intervals recorded");
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: signals our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let intervals: u64 = stderr
        .split("Perfetto trace ")
        .nth(1)
        .and_then(|t| t.split(": ").nth(1))
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no trace summary: {stderr}"));
    assert!(intervals >= 2, "{stderr}");
    records(&std::fs::read(&path).unwrap());
    if let Some(said) = check(&path) {
        assert!(said.contains("2 processes"), "{said}");
    }
}

//! Traces of this process, read back with Perfetto's own schema by
//! `check_trace.py` (PyPI `perfetto`): the tracks, the counter values
//! against the sampler's own intervals, the findings with their text.
//!
//! The Python check runs when `WAKEMETER_PERFETTO_PYTHON` names a Python
//! with the `perfetto` package (`scripts/perfetto-test.sh` makes one under
//! `target/`); without it the test says MISSING and checks only what Rust
//! can (the file's records are whole, the error paths).
#![cfg(target_os = "linux")]

mod support;
#[path = "support/workload.rs"]
mod workload;

use std::path::PathBuf;
use std::process::Command;

use std::time::{Duration, Instant};
use support::{schema_check, whole_records};
use workload::Worker;

use serde_json::{Value, json};
use wakemeter::{Sampler, SamplerBuilder, Thresholds};
use wakemeter_perfetto::{Error, PerfettoTrace, TraceConfig, TraceEnd};

fn out_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("wakemeter-perfetto-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A loop probe that never waits (a busy poller) on its own thread.
fn spinner(s: &Sampler) -> Worker {
    let mut spin = s.loop_probe("spin").expect("probe");
    Worker::spawn("spinner", move || {
        spin.before_wait(Some(Duration::ZERO));
        spin.after_wait(0);
    })
}

fn thresholds() -> Thresholds {
    Thresholds::default()
        .with_window(Duration::from_secs(1))
        .with_min_window(Duration::from_millis(500))
}

/// Samples by hand, one interval written at a time, until the trace ends
/// (size cap, full disk), within generous bounds.
fn sample_until_ended(s: &Sampler, trace: &PerfettoTrace, pause: Duration) {
    let until = Instant::now() + Duration::from_secs(60);
    while trace.status().ended.is_none() {
        assert!(
            Instant::now() < until,
            "the trace never ended: {:?}",
            trace.status()
        );
        let before = trace.status().intervals;
        std::thread::sleep(pause);
        s.sample().expect("sample");
        let wait = Instant::now() + Duration::from_secs(30);
        while trace.status().intervals == before && trace.status().ended.is_none() {
            assert!(Instant::now() < wait, "writer stalled");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Waits (generously) until the trace has written `n` intervals.
fn wait_intervals(trace: &PerfettoTrace, n: u64) {
    let until = Instant::now() + Duration::from_secs(30);
    while trace.status().intervals < n {
        assert!(
            Instant::now() < until,
            "the writer did not follow: {:?}",
            trace.status()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Samples by hand `n` times, waiting for the writer after each, and
/// returns the intervals and the findings that began a slice, as the
/// expectations of `check_trace.py`.
fn drive(s: &Sampler, trace: &PerfettoTrace, n: u64, every: Duration) -> (Vec<Value>, Vec<Value>) {
    workload::drive(s, n, every, |k| wait_intervals(trace, k))
}

#[test]
fn trace_of_this_process_matches_its_report() {
    let dir = out_dir("report");
    let s = SamplerBuilder::new()
        .with_thresholds(thresholds())
        .build()
        .expect("sampler");
    // A busy poller (a loop probe that never waits), a 1 ms sleep loop,
    // and a thread whose name has control characters.
    let mut spin = s.loop_probe("spin").expect("probe");
    let _spin = Worker::spawn("spinner", move || {
        spin.before_wait(Some(Duration::ZERO));
        spin.after_wait(0);
    });
    let mut nap = s.sleep_probe("usleep-1ms").expect("probe");
    let _nap = Worker::spawn("napper", move || nap.sleep(Duration::from_millis(1)));
    let odd_name = "a\u{1}b\u{1b}[31m\t";
    let odd = Worker::spawn(odd_name, || std::thread::sleep(Duration::from_millis(20)));
    s.sample().expect("first sample");
    let path = dir.join("self.perfetto-trace");
    let trace = PerfettoTrace::start(&s, &path, TraceConfig::default()).expect("start");
    let (intervals, findings) = drive(&s, &trace, 15, Duration::from_millis(100));
    let status = trace.finish();
    assert_eq!(status.intervals, 15);
    assert!(status.ended.is_none(), "{status:?}");
    assert!(
        !findings.is_empty(),
        "no finding to check: the workloads did not trigger any"
    );
    assert!(status.findings >= findings.len() as u64, "{status:?}");
    let bytes = std::fs::read(&path).expect("read trace");
    assert_eq!(bytes.len() as u64, status.bytes_written);
    assert!(whole_records(&bytes) > 15);
    let target = s.target_identity();
    let expected = json!({
        "pid": target.pid,
        "name": target.name,
        "intervals": intervals,
        "findings": findings,
        "thread_names": [[odd.tid, odd_name]],
    });
    let exp_path = dir.join("expected.json");
    std::fs::write(&exp_path, expected.to_string()).expect("write expected");
    schema_check(&path, Some(&exp_path));
}

#[test]
fn unwritable_path_is_an_error_before_sampling() {
    let s = SamplerBuilder::new().build().expect("sampler");
    let err = PerfettoTrace::start(
        &s,
        "/proc/no/such/dir/x.perfetto-trace",
        TraceConfig::default(),
    )
    .expect_err("unwritable");
    assert!(matches!(err, Error::Create { .. }), "{err}");
    assert!(err.to_string().contains("/proc/no/such/dir"), "{err}");
    let small = PerfettoTrace::start(
        &s,
        std::env::temp_dir().join("never.perfetto-trace"),
        TraceConfig::default().with_max_bytes(100),
    )
    .expect_err("cap too small");
    assert!(matches!(small, Error::CapTooSmall { .. }), "{small}");
    assert_eq!(s.stats().total_samples, 0, "nothing was sampled");
}

#[test]
fn size_cap_ends_with_a_complete_trace() {
    let dir = out_dir("cap");
    let s = SamplerBuilder::new()
        .with_thresholds(thresholds())
        .build()
        .expect("sampler");
    // A busy poller, so that findings are open when the trace ends, and
    // threads enough that every interval has several KB of tracks.
    let _spin = spinner(&s);
    let _busy: Vec<Worker> = (0..32)
        .map(|n| {
            Worker::spawn(&format!("w{n}"), || {
                std::thread::sleep(Duration::from_millis(1))
            })
        })
        .collect();
    s.sample().expect("first sample");
    let path = dir.join("cap.perfetto-trace");
    let cap = wakemeter_perfetto::MIN_MAX_BYTES + 48 * 1024;
    let trace =
        PerfettoTrace::start(&s, &path, TraceConfig::default().with_max_bytes(cap)).expect("start");
    sample_until_ended(&s, &trace, Duration::from_millis(40));
    let status = trace.finish();
    assert_eq!(status.ended, Some(TraceEnd::SizeCap { max_bytes: cap }));
    assert!(status.findings > 0, "no finding was open: {status:?}");
    let bytes = std::fs::read(&path).expect("read");
    assert!(bytes.len() as u64 <= cap, "{} > {cap}", bytes.len());
    assert_eq!(bytes.len() as u64, status.bytes_written);
    whole_records(&bytes);
    schema_check(&path, None);
}

/// A full disk: a 96 KiB tmpfs (needs root to mount).
#[test]
#[ignore = "needs root"]
fn full_disk_leaves_a_readable_trace() {
    let dir = out_dir("tmpfs");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=96k", "wakemeter-test"])
        .arg(&dir)
        .status()
        .expect("mount");
    assert!(mounted.success(), "mount tmpfs (needs root)");
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(dir.clone());
    let s = SamplerBuilder::new()
        .with_thresholds(thresholds())
        .build()
        .expect("sampler");
    let _spin = spinner(&s);
    let _busy: Vec<Worker> = (0..32)
        .map(|n| {
            Worker::spawn(&format!("w{n}"), || {
                std::thread::sleep(Duration::from_millis(1))
            })
        })
        .collect();
    s.sample().expect("first sample");
    let path = dir.join("full.perfetto-trace");
    let trace = PerfettoTrace::start(&s, &path, TraceConfig::default()).expect("start");
    sample_until_ended(&s, &trace, Duration::from_millis(40));
    let status = trace.finish();
    let Some(TraceEnd::WriteFailed { message }) = &status.ended else {
        panic!("expected a failed write: {status:?}");
    };
    assert!(message.contains("No space left"), "{message}");
    assert!(status.findings > 0, "no finding was open: {status:?}");
    let bytes = std::fs::read(&path).expect("read");
    assert_eq!(bytes.len() as u64, status.bytes_written);
    assert!(whole_records(&bytes) > 3);
    let copy = std::env::temp_dir().join(format!(
        "wakemeter-full-{}.perfetto-trace",
        std::process::id()
    ));
    std::fs::write(&copy, &bytes).expect("copy");
    schema_check(&copy, None);
    let _ = std::fs::remove_file(copy);
}

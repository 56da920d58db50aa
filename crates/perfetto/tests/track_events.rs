//! Track events into a Perfetto session of this process (the SDK's
//! in-process backend: everything but the IPC to `traced`), read back
//! with Perfetto's own schema by `check_trace.py --sdk` (PyPI `perfetto`):
//! the tracks under this process and its threads, the counter values
//! against the sampler's own intervals, the findings with their text.
//!
//! With `WAKEMETER_PERFETTO_SYSTEM` set, the same tests go through a
//! tracing service of another process instead: the system backend, whose
//! sockets `PERFETTO_PRODUCER_SOCK_NAME` and `PERFETTO_CONSUMER_SOCK_NAME`
//! name (`scripts/perfetto-test.sh` runs them so against `mini_traced.cc`).
//!
//! As in `trace.rs`, the Python check runs when
//! `WAKEMETER_PERFETTO_PYTHON` names a Python with the `perfetto` package
//! (`scripts/perfetto-test.sh` makes one); without it the test says
//! MISSING and checks only what Rust can.
#![cfg(all(target_os = "linux", feature = "track-events"))]

mod support;
#[path = "support/workload.rs"]
mod workload;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{schema_check_with, whole_records};
use wakemeter::{Sampler, SamplerBuilder, Thresholds};
use wakemeter_perfetto::perfetto_sdk::heap_buffer::HeapBuffer;
use wakemeter_perfetto::perfetto_sdk::pb_msg::{PbMsg, PbMsgWriter};
use wakemeter_perfetto::perfetto_sdk::protos::config::data_source_config::DataSourceConfig;
use wakemeter_perfetto::perfetto_sdk::protos::config::trace_config::{
    TraceConfig, TraceConfigBufferConfig, TraceConfigDataSource, TraceConfigIncrementalStateConfig,
};
use wakemeter_perfetto::perfetto_sdk::protos::config::track_event::track_event_config::TrackEventConfig;
use wakemeter_perfetto::perfetto_sdk::tracing_session::TracingSession;
use wakemeter_perfetto::{Backend, CATEGORY, TrackEvents};
use workload::Worker;

/// Waits (generously) until `te` has emitted `n` intervals.
fn wait_intervals(te: &TrackEvents, n: u64) {
    workload::wait_until_written(
        n,
        "emitter",
        || te.status().intervals,
        || format!("{:?}", te.status()),
    );
}

/// Samples by hand `n` more times, waiting for the emitter after each
/// (as `trace.rs` does for a file).
fn drive(s: &Sampler, te: &TrackEvents, n: u64, every: Duration) -> (Vec<Value>, Vec<Value>) {
    let before = te.status().intervals;
    workload::drive(s, n, every, |k| wait_intervals(te, before + k))
}

/// A trace config that records the `wakemeter` category, and only it,
/// in a 8 MiB buffer (the SDK's own protozero messages); with
/// `clear_period_ms`, the service clears the incremental state that often.
fn trace_config(clear_period_ms: Option<u32>) -> Vec<u8> {
    let writer = PbMsgWriter::new();
    let hb = HeapBuffer::new(writer.stream_writer());
    let mut msg = PbMsg::new(&writer).expect("msg");
    {
        let mut cfg = TraceConfig { msg: &mut msg };
        cfg.set_buffers(|b: &mut TraceConfigBufferConfig| {
            b.set_size_kb(8 * 1024);
        });
        if let Some(ms) = clear_period_ms {
            cfg.set_incremental_state_config(|c: &mut TraceConfigIncrementalStateConfig| {
                c.set_clear_period_ms(ms);
            });
        }
        cfg.set_data_sources(|ds: &mut TraceConfigDataSource| {
            ds.set_config(|c: &mut DataSourceConfig| {
                c.set_name("track_event");
                c.set_track_event_config(|te: &mut TrackEventConfig| {
                    te.set_enabled_categories(CATEGORY);
                    te.set_disabled_categories("*");
                });
            });
        });
    }
    msg.finalize();
    let mut cfg = vec![0u8; writer.stream_writer().get_written_size()];
    hb.copy_into(&mut cfg);
    cfg
}

fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wakemeter-te-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// The Perfetto client, its category and `TrackEvents::recording()` are process-wide:
/// one test at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A sampler with the workloads of `trace.rs`: a busy poller (a loop probe
/// that never waits), a 1 ms sleep loop, and a thread whose name has
/// control characters (its tid and name returned); one snapshot taken.
fn sampler_with_workloads() -> (Sampler, Vec<Worker>, (u64, &'static str)) {
    let s = SamplerBuilder::new()
        .with_thresholds(
            Thresholds::default()
                .with_window(Duration::from_secs(1))
                .with_min_window(Duration::from_millis(500)),
        )
        .build()
        .expect("sampler");
    let mut spin = s.loop_probe("spin").expect("probe");
    let spinner = Worker::spawn("spinner", move || {
        spin.before_wait(Some(Duration::ZERO));
        spin.after_wait(0);
    });
    let mut nap = s.sleep_probe("usleep-1ms").expect("probe");
    let napper = Worker::spawn("napper", move || nap.sleep(Duration::from_millis(1)));
    let odd_name = "a\u{1}b\u{1b}[31m\t";
    let odd = Worker::spawn(odd_name, || std::thread::sleep(Duration::from_millis(20)));
    let odd_tid = odd.tid;
    s.sample().expect("first sample");
    (s, vec![spinner, napper, odd], (odd_tid, odd_name))
}

/// Whether the tests go through a tracing service of another process.
fn system() -> bool {
    std::env::var_os("WAKEMETER_PERFETTO_SYSTEM").is_some()
}

/// The backend `TrackEvents` uses: the system one, or the in-process one
/// (with the system one too when `with_system`: no service runs, which
/// must change nothing).
fn backend(with_system: bool) -> Backend {
    match (system(), with_system) {
        (true, _) => Backend::System,
        (false, true) => Backend::SystemAndInProcess,
        (false, false) => Backend::InProcess,
    }
}

/// A session recording the category (of the service, or in process),
/// started, with `te` following the sampler (woken by the SDK).
fn start_session(te: &TrackEvents, clear_period_ms: Option<u32>) -> TracingSession {
    let mut session = if system() {
        TracingSession::system().expect("system session")
    } else {
        TracingSession::in_process().expect("in-process session")
    };
    session.setup(&trace_config(clear_period_ms));
    session.start_blocking();
    // Through a service of another process, the start reaches this
    // process's data source over IPC after the consumer's call returns.
    let until = Instant::now() + Duration::from_secs(120);
    while !TrackEvents::recording() {
        assert!(
            Instant::now() < until,
            "the session does not record the category"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    while !te.status().recording {
        assert!(Instant::now() < until, "the emitter was not woken");
        std::thread::sleep(Duration::from_millis(2));
    }
    session
}

/// Stops `session` and writes what it recorded to `path`; returns it.
fn stop_and_read(mut session: TracingSession, path: &Path) -> Vec<u8> {
    session.stop_blocking();
    let read = Arc::new(Mutex::new(Vec::new()));
    let sink = read.clone();
    session
        .read_trace_blocking(move |data, _end| sink.lock().expect("lock").extend_from_slice(data));
    let bytes = std::mem::take(&mut *read.lock().expect("lock"));
    std::fs::write(path, &bytes).expect("write trace");
    bytes
}

/// Writes the expectations of `check_trace.py` next to the trace.
fn expected(
    dir: &Path,
    s: &Sampler,
    intervals: Vec<Value>,
    findings: Vec<Value>,
    odd: (u64, &str),
) -> PathBuf {
    let target = s.target_identity();
    let expected = json!({
        "pid": target.pid,
        "name": target.name,
        "intervals": intervals,
        "findings": findings,
        "thread_names": [[odd.0, odd.1]],
    });
    let path = dir.join("expected.json");
    std::fs::write(&path, expected.to_string()).expect("write expected");
    path
}

#[test]
fn track_events_in_a_session_match_the_report() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = out_dir("session");
    let (s, _workers, odd) = sampler_with_workloads();
    let te = TrackEvents::start(&s, backend(true)).expect("start");
    // No session yet: the emitter sleeps, nothing is emitted.
    assert!(!TrackEvents::recording());
    for _ in 0..3 {
        s.sample().expect("sample");
    }
    std::thread::sleep(Duration::from_millis(50));
    let idle = te.status();
    assert!(!idle.recording && idle.intervals == 0, "{idle:?}");

    let session = start_session(&te, None);
    let (intervals, findings) = drive(&s, &te, 15, Duration::from_millis(100));
    let status = te.finish();
    let path = dir.join("session.perfetto-trace");
    let bytes = stop_and_read(session, &path);
    assert!(!TrackEvents::recording());
    assert_eq!(status.intervals, 15, "{status:?}");
    assert_eq!(status.streams, 1, "{status:?}");
    assert!(
        !findings.is_empty(),
        "no finding to check: the workloads did not trigger any"
    );
    assert!(whole_records(&bytes) as u64 > status.packets, "{status:?}");
    let exp = expected(&dir, &s, intervals, findings, odd);
    schema_check_with(&path, Some(&exp), &["--sdk"]);
}

/// A session whose incremental state is cleared gets its tracks described
/// again (a new stream each time), and a later session gets a stream of
/// its own: no slice of the earlier one ends in it.
#[test]
fn cleared_state_and_a_second_session_start_new_streams() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = out_dir("again");
    let (s, _workers, odd) = sampler_with_workloads();
    let te = TrackEvents::start(&s, backend(false)).expect("start");

    let first = start_session(&te, Some(250));
    let (_, begun) = drive(&s, &te, 12, Duration::from_millis(100));
    let cleared = te.status();
    let path = dir.join("cleared.perfetto-trace");
    stop_and_read(first, &path);
    assert!(
        cleared.streams >= 2,
        "the state was never cleared: {cleared:?}"
    );
    assert!(
        !begun.is_empty(),
        "no finding open when the session stopped"
    );
    schema_check_with(&path, None, &["--sdk"]);

    // The emitter still holds the first session's open slices.
    let second = start_session(&te, None);
    let (intervals, findings) = drive(&s, &te, 8, Duration::from_millis(100));
    let status = te.finish();
    let path = dir.join("second.perfetto-trace");
    stop_and_read(second, &path);
    assert_eq!(status.intervals, cleared.intervals + 8, "{status:?}");
    assert_eq!(status.streams, cleared.streams + 1, "{status:?}");
    let exp = expected(&dir, &s, intervals, findings, odd);
    schema_check_with(&path, Some(&exp), &["--sdk"]);
}

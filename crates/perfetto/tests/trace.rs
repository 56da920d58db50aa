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
use wakemeter_perfetto::{Error, PerfettoFile, PerfettoTrace, TraceConfig, TraceEnd};

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

/// A sampler of this process, sampled once, with a busy poller (so that
/// findings are open when a trace ends) and 32 threads waking every
/// millisecond (so that every interval has several KB of tracks). The
/// workers run as long as the returned ones live.
fn sampled_busy_process() -> (Sampler, Vec<Worker>) {
    let s = SamplerBuilder::new()
        .with_thresholds(thresholds())
        .build()
        .expect("sampler");
    let mut workers = vec![spinner(&s)];
    workers.extend((0..32).map(|n| {
        Worker::spawn(&format!("w{n}"), || {
            std::thread::sleep(Duration::from_millis(1))
        })
    }));
    s.sample().expect("first sample");
    (s, workers)
}

/// Samples by hand, one interval written at a time, until the trace ends
/// (size cap, full disk), within generous bounds.
fn sample_until_ended(s: &Sampler, trace: &PerfettoTrace, pause: Duration) {
    let until = Instant::now() + Duration::from_secs(300);
    while trace.status().ended.is_none() {
        assert!(
            Instant::now() < until,
            "the trace never ended: {:?}",
            trace.status()
        );
        let before = trace.status().intervals;
        std::thread::sleep(pause);
        s.sample().expect("sample");
        let wait = Instant::now() + Duration::from_secs(120);
        while trace.status().intervals == before && trace.status().ended.is_none() {
            assert!(Instant::now() < wait, "writer stalled");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Waits (generously) until the trace has written `n` intervals.
fn wait_intervals(trace: &PerfettoTrace, n: u64) {
    workload::wait_until_written(
        n,
        "writer",
        || trace.status().intervals,
        || format!("{:?}", trace.status()),
    );
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
    let (s, _workers) = sampled_busy_process();
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
    let (s, _workers) = sampled_busy_process();
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

/// A trace whose buffer is never due on its own (no size or age reached):
/// nothing but the first records is in the file until it ends.
/// A sampler of this process with a busy poller (so that findings are
/// open when a trace ends) and 32 threads (so that every interval has
/// several KB of tracks), sampled once.
fn busy_sampler() -> (Sampler, Vec<Worker>) {
    let s = SamplerBuilder::new()
        .with_thresholds(thresholds())
        .build()
        .expect("sampler");
    let mut workers = vec![spinner(&s)];
    workers.extend((0..32).map(|n| {
        Worker::spawn(&format!("w{n}"), || {
            std::thread::sleep(Duration::from_millis(1))
        })
    }));
    s.sample().expect("first sample");
    (s, workers)
}

fn held_back() -> TraceConfig {
    TraceConfig::default()
        .with_flush_bytes(u64::MAX)
        .with_flush_every(Duration::from_secs(3600))
}

/// Intervals are buffered, counted as taken, and reach the file, whole
/// and readable, when the trace is finished, when a process's part is
/// dropped, and on `flush`.
#[test]
fn buffered_intervals_reach_the_file_on_finish_drop_and_flush() {
    let dir = out_dir("buffered");
    let s = SamplerBuilder::new()
        .with_thresholds(thresholds())
        .build()
        .expect("sampler");
    let _spin = spinner(&s);
    s.sample().expect("first sample");

    // finish
    let path = dir.join("finish.perfetto-trace");
    let trace = PerfettoTrace::start(&s, &path, held_back()).expect("start");
    let header = trace.status().bytes_written;
    assert!(header > 0, "the first records are written at once");
    let (intervals, _) = drive(&s, &trace, 4, Duration::from_millis(60));
    let held = trace.status();
    assert_eq!(held.intervals, 4);
    assert_eq!(held.bytes_written, header, "nothing written yet: {held:?}");
    assert!(held.bytes_buffered > 0, "{held:?}");
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), header);
    let status = trace.finish();
    assert_eq!(status.intervals, 4);
    assert_eq!(status.bytes_buffered, 0);
    assert!(status.bytes_written > header + held.bytes_buffered - 1);
    let bytes = std::fs::read(&path).expect("read");
    assert_eq!(bytes.len() as u64, status.bytes_written);
    whole_records(&bytes);
    let target = s.target_identity();
    let expected = json!({
        "pid": target.pid,
        "name": target.name,
        "intervals": intervals,
        "findings": [],
        "thread_names": [],
    });
    let exp_path = dir.join("expected.json");
    std::fs::write(&exp_path, expected.to_string()).expect("write expected");
    schema_check(&path, Some(&exp_path));

    // drop, and flush, on a file polled by hand
    let path = dir.join("drop.perfetto-trace");
    let file = PerfettoFile::create(&path, held_back()).expect("create");
    let mut part = file.add(&s).expect("add");
    for _ in 0..3 {
        s.sample().expect("sample");
        assert!(part.poll());
    }
    let held = file.status();
    assert_eq!(held.intervals, 3);
    assert!(held.bytes_buffered > 0, "{held:?}");
    file.flush().expect("flush");
    let flushed = file.status();
    assert_eq!(flushed.bytes_buffered, 0);
    assert_eq!(
        flushed.bytes_written,
        held.bytes_written + held.bytes_buffered
    );
    assert_eq!(
        std::fs::metadata(&path).expect("stat").len(),
        flushed.bytes_written
    );
    s.sample().expect("sample");
    assert!(part.poll());
    assert!(file.status().bytes_buffered > 0);
    drop(part);
    let status = file.status();
    assert_eq!(status.intervals, 4);
    assert_eq!(status.bytes_buffered, 0);
    let bytes = std::fs::read(&path).expect("read");
    assert_eq!(bytes.len() as u64, status.bytes_written);
    whole_records(&bytes);
    schema_check(&path, None);
}

/// Records buffered but not yet written count toward the cap: a trace
/// that writes nothing until it ends still ends under its cap, complete.
#[test]
fn size_cap_holds_with_buffered_records() {
    let dir = out_dir("cap-buffered");
    let (s, _workers) = busy_sampler();
    let path = dir.join("cap.perfetto-trace");
    let cap = wakemeter_perfetto::MIN_MAX_BYTES + 48 * 1024;
    let file = PerfettoFile::create(&path, held_back().with_max_bytes(cap)).expect("create");
    let mut part = file.add(&s).expect("add");
    let header = file.status().bytes_written;
    let until = Instant::now() + Duration::from_secs(300);
    while part.poll() {
        assert!(Instant::now() < until, "never ended: {:?}", file.status());
        let status = file.status();
        assert_eq!(status.bytes_written, header, "written early: {status:?}");
        assert!(status.bytes_written + status.bytes_buffered <= cap);
        std::thread::sleep(Duration::from_millis(40));
        s.sample().expect("sample");
    }
    let at_end = file.status();
    assert_eq!(at_end.ended, Some(TraceEnd::SizeCap { max_bytes: cap }));
    assert_eq!(at_end.bytes_buffered, 0, "the buffer went out at the cap");
    assert!(at_end.findings > 0, "no finding was open: {at_end:?}");
    drop(part);
    let status = file.status();
    let bytes = std::fs::read(&path).expect("read");
    assert!(bytes.len() as u64 <= cap, "{} > {cap}", bytes.len());
    assert_eq!(bytes.len() as u64, status.bytes_written);
    assert_eq!(status.intervals, at_end.intervals);
    whole_records(&bytes);
    schema_check(&path, None);
}

/// A write that fails (here: past the process's file size limit,
/// `RLIMIT_FSIZE`, `EFBIG`; the full-disk test above needs root) while
/// several intervals are buffered: the trace ends saying why, the file is
/// cut back to its whole records, the status counts only what it holds,
/// and the finding slices it holds open are closed. Runs in a child
/// process of this test binary, since the limit is process-wide.
#[test]
fn failed_write_of_a_buffer_leaves_a_readable_trace() {
    const CHILD: &str = "WAKEMETER_PERFETTO_FSIZE_CHILD";
    let dir = out_dir("fsize");
    let path = dir.join("fsize.perfetto-trace");
    if std::env::var_os(CHILD).is_none() {
        let out = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "failed_write_of_a_buffer_leaves_a_readable_trace",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, &path)
            .output()
            .expect("run the child");
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "child failed: {said}");
        assert!(said.contains("1 passed"), "the child ran nothing: {said}");
        // Read back here, without the child's limit.
        let bytes = std::fs::read(&path).expect("read");
        assert!(whole_records(&bytes) > 3);
        schema_check(&path, None);
        return;
    }
    let path = PathBuf::from(std::env::var_os(CHILD).expect("child path"));
    let limit: u64 = 40 * 1024;
    // SAFETY: setting a signal disposition and a resource limit of this
    // process (a child that runs this test alone) with valid arguments.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let lim = libc::rlimit {
            rlim_cur: limit,
            rlim_max: libc::RLIM_INFINITY,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
    }
    let (s, _workers) = busy_sampler();
    // Buffers of about 16 KiB: several intervals in each write.
    let config = TraceConfig::default().with_flush_bytes(16 * 1024);
    let trace = PerfettoTrace::start(&s, &path, config).expect("start");
    sample_until_ended(&s, &trace, Duration::from_millis(40));
    let status = trace.finish();
    let Some(TraceEnd::WriteFailed { message }) = &status.ended else {
        panic!("expected a failed write: {status:?}");
    };
    assert!(message.contains("File too large"), "{message}");
    assert!(status.findings > 0, "no finding was open: {status:?}");
    assert_eq!(status.bytes_buffered, 0);
    let bytes = std::fs::read(&path).expect("read");
    assert!(bytes.len() as u64 <= limit);
    assert_eq!(bytes.len() as u64, status.bytes_written);
    assert!(whole_records(&bytes) > 3);
}

/// Set in the child of `killed_writer_leaves_a_complete_trace`: the path
/// it writes.
const KILL_CHILD: &str = "WAKEMETER_PERFETTO_KILL_CHILD";

/// The file's allocated bytes (its blocks), and its size.
fn allocated(path: &std::path::Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).expect("metadata");
    (m.blocks() * 512, m.len())
}

/// A process writing a trace (a write at every interval, its blocks
/// allocated ahead of the writes) is killed with SIGKILL: the file ends
/// on its last whole record, with no zeros past it for a parser to choke
/// on, and reads with Perfetto's schema. A trace that is finished lets
/// go of the blocks allocated ahead.
#[test]
fn killed_writer_leaves_a_complete_trace() {
    if let Some(path) = std::env::var_os(KILL_CHILD) {
        // The child: writes until killed (or for ten minutes at most, if
        // the parent is gone).
        let s = SamplerBuilder::new().build().expect("sampler");
        let _spin = spinner(&s);
        s.sample().expect("first sample");
        let every = TraceConfig::default()
            .with_flush_bytes(0)
            .with_flush_every(Duration::ZERO);
        let trace = PerfettoTrace::start(&s, &path, every).expect("start");
        let until = Instant::now() + Duration::from_secs(600);
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
            s.sample().expect("sample");
        }
        drop(trace);
        return;
    }
    let dir = out_dir("killed");
    let path = dir.join("killed.perfetto-trace");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "killed_writer_leaves_a_complete_trace",
            "--test-threads=1",
        ])
        .env(KILL_CHILD, &path)
        .spawn()
        .expect("spawn the writer");
    // Many writes, then the kill lands wherever the writer is. The bound
    // is generous (a loaded machine slows the child's sampling a lot); it
    // only keeps a broken writer from hanging the test.
    let until = Instant::now() + Duration::from_secs(300);
    while std::fs::metadata(&path).map_or(0, |m| m.len()) < 64 * 1024 {
        let exited = child.try_wait().expect("child status");
        if exited.is_some() || Instant::now() >= until {
            let _ = child.kill();
            panic!("the writer wrote too little (exited: {exited:?})");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let (blocks, size) = allocated(&path);
    // SAFETY: kill reads no memory; the pid is our child's, not reaped.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
    assert_eq!(rc, 0, "kill");
    let _ = child.wait();
    let bytes = std::fs::read(&path).expect("read trace");
    eprintln!(
        "killed writer: {} bytes, {} allocated while writing ({size} bytes then)",
        bytes.len(),
        blocks
    );
    assert!(whole_records(&bytes) > 10);
    schema_check(&path, None);

    // A finished trace keeps no block past its end.
    let path = dir.join("finished.perfetto-trace");
    let s = SamplerBuilder::new().build().expect("sampler");
    s.sample().expect("first sample");
    let trace = PerfettoTrace::start(&s, &path, TraceConfig::default()).expect("start");
    drive(&s, &trace, 3, Duration::from_millis(20));
    trace.flush().expect("flush");
    let (ahead, _) = allocated(&path);
    let status = trace.finish();
    let (after, size) = allocated(&path);
    assert_eq!(size, status.bytes_written);
    eprintln!("finished trace: {size} bytes, {ahead} allocated while open, {after} after");
    assert!(
        after < size + 64 * 1024,
        "{after} bytes allocated for {size}"
    );
}

/// The blocks allocated ahead are a few writes' worth, not a fixed MiB,
/// and `give_back` lets them go (a sibling output found the disk full).
#[test]
fn the_reserve_is_a_few_writes_and_is_given_back() {
    use std::os::unix::fs::MetadataExt;
    let dir = out_dir("reserve");
    let (s, _workers) = busy_sampler();
    let path = dir.join("reserve.perfetto-trace");
    let file = PerfettoFile::create(&path, held_back()).expect("create");
    let mut part = file.add(&s).expect("add");
    s.sample().expect("sample");
    assert!(part.poll());
    file.flush().expect("flush");
    let written = file.status().bytes_written;
    let allocated = std::fs::metadata(&path).expect("stat").blocks() * 512;
    // Where the file system allocates ahead at all (tmpfs and ext4 do):
    // at most four of this write past the end, plus a block of rounding.
    assert!(
        allocated <= written * 5 + 8192,
        "{allocated} bytes allocated for {written} written"
    );
    file.give_back();
    let after = std::fs::metadata(&path).expect("stat").blocks() * 512;
    assert!(
        after <= written + 8192,
        "{after} bytes still allocated for {written}"
    );
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), written);
    // Nothing allocated ahead from now on; the trace goes on.
    s.sample().expect("sample");
    assert!(part.poll());
    drop(part);
    let bytes = std::fs::read(&path).expect("read");
    whole_records(&bytes);
}

/// A FIFO named as the trace is written in sequence (it cannot be written
/// at offsets), and a link at the trace's name is refused.
#[test]
fn a_fifo_is_written_and_a_link_is_refused() {
    let dir = out_dir("fifo");
    let fifo = dir.join("pipe");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).expect("read the FIFO"))
    };
    let (s, _workers) = busy_sampler();
    let file = PerfettoFile::create(&fifo, TraceConfig::default()).expect("create");
    let mut part = file.add(&s).expect("add");
    for _ in 0..3 {
        s.sample().expect("sample");
        assert!(part.poll());
    }
    drop(part);
    let status = file.status();
    assert!(status.ended.is_none(), "{status:?}");
    drop(file);
    let bytes = reader.join().expect("reader");
    assert_eq!(bytes.len() as u64, status.bytes_written);
    whole_records(&bytes);
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious").expect("victim");
    let link = dir.join("link.perfetto-trace");
    std::os::unix::fs::symlink(&victim, &link).expect("link");
    let e = PerfettoFile::create(&link, TraceConfig::default()).expect_err("a link");
    assert!(matches!(e, Error::Create { .. }), "{e}");
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious"
    );
}

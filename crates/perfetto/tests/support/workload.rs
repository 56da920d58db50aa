//! What the trace tests of this crate share (`trace.rs` for files,
//! `track_events.rs` for sessions): worker threads, and the sampler's own
//! intervals and findings as the expectations of `check_trace.py`.
#![allow(dead_code)]

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wakemeter::{Finding, Interval, Sampler, Subject};

/// A named thread running `f` in a loop until dropped.
pub struct Worker {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    pub tid: u64,
}

impl Worker {
    pub fn spawn(name: &str, f: impl FnMut() + Send + 'static) -> Worker {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, mut f) = (stop.clone(), f);
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                // SAFETY: gettid has no preconditions.
                let _ = tx.send(unsafe { libc::gettid() } as u64);
                while !flag.load(Ordering::Relaxed) {
                    f();
                }
            })
            .expect("spawn");
        let tid = rx.recv().expect("tid");
        Worker {
            stop,
            handle: Some(handle),
            tid,
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

pub fn interval_json(i: &Interval) -> Value {
    json!({
        "start_ns": i.end_monotonic_ns - i.duration_ns,
        "end_ns": i.end_monotonic_ns,
        "process_cpu_percent": i.process.cpu_percent,
        "rss_bytes": i.process.rss_bytes as f64,
        "threads": i.threads.iter().map(|t| json!({
            "tid": t.tid,
            "name": t.name,
            "cpu_percent": t.cpu_percent,
            "voluntary_switches_per_sec": t.voluntary_switches_per_sec,
            "involuntary_switches_per_sec": t.involuntary_switches_per_sec,
            "run_queue_wait_percent": t.run_queue_wait_percent,
        })).collect::<Vec<_>>(),
        "loops": i.loops.iter().map(|l| json!({
            "name": l.name,
            "values": [l.wakeups_per_sec, l.idle_wakeup_ratio, l.utilization, l.mean_poll_delay_ns as f64],
        })).collect::<Vec<_>>(),
        "sleeps": i.sleeps.iter().map(|s| json!({
            "name": s.name,
            "values": [s.sleeps_per_sec, s.mean_oversleep_ns as f64, s.cpu_percent],
        })).collect::<Vec<_>>(),
    })
}

pub fn finding_json(f: &Finding) -> Value {
    let (kind, name) = match &f.subject {
        Subject::Thread { name, .. } => ("thread", Some(name.clone())),
        Subject::Loop { name, .. } => ("loop", Some(name.clone())),
        Subject::SleepSite { name, .. } => ("sleep_site", Some(name.clone())),
        Subject::Process { .. } => ("process", None),
        _ => ("threads", None),
    };
    json!({
        "summary": f.summary,
        "kind": f.kind.as_str(),
        "severity": f.severity.as_str(),
        "subject": f.subject.label(),
        "subject_kind": kind,
        "subject_name": name,
        "subject_tid": f.subject.tid(),
        "advice": f.advice,
        "evidence": f.evidence.iter().map(|e| json!({"name": e.name, "unit": e.unit})).collect::<Vec<_>>(),
    })
}

pub fn key(f: &Finding) -> String {
    format!("{}/{}", f.kind.as_str(), f.subject.label())
}

/// Samples by hand `n` times, calling `wait(k)` after the `k`th so that
/// the writer follows, and returns the intervals and the findings that
/// began a slice, as the expectations of `check_trace.py`.
pub fn drive(s: &Sampler, n: u64, every: Duration, wait: impl Fn(u64)) -> (Vec<Value>, Vec<Value>) {
    let (mut intervals, mut findings) = (Vec::new(), Vec::new());
    let mut prev = s.latest().map(|x| x.seq);
    let mut open: HashSet<String> = HashSet::new();
    for k in 1..=n {
        std::thread::sleep(every);
        let seq = s.sample().expect("sample");
        wait(k);
        let i = s
            .interval_between(prev.expect("a first snapshot"), seq)
            .expect("interval");
        intervals.push(interval_json(&i));
        let now: Vec<Finding> = s.findings();
        let keys: HashSet<String> = now.iter().map(key).collect();
        for f in &now {
            if !open.contains(&key(f)) {
                findings.push(finding_json(f));
            }
        }
        open = keys;
        prev = Some(seq);
    }
    (intervals, findings)
}

/// Waits (generously: 120 s) until `written()` reaches `n`; `what` and
/// `status()` name the follower in the failure.
pub fn wait_until_written(
    n: u64,
    what: &str,
    written: impl Fn() -> u64,
    status: impl Fn() -> String,
) {
    let until = Instant::now() + Duration::from_secs(120);
    while written() < n {
        assert!(
            Instant::now() < until,
            "the {what} did not follow: {}",
            status()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

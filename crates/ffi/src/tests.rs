//! Tests of the FFI layer in Rust: mirrors, errors, probes, listeners.
//! The Kotlin tests (bindings/kotlin) cover the same through the real boundary.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::*;

fn config() -> SamplerConfig {
    SamplerConfig {
        interval_ms: 10,
        ..SamplerConfig::default()
    }
}

/// Thresholds that let a busy loop be found within a few samples.
fn quick_thresholds() -> Thresholds {
    Thresholds {
        window_ms: 200,
        min_window_ms: 20,
        busy_poll_wakeups_per_sec: 100.0,
        ..Thresholds::default()
    }
}

fn json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap()
}

/// A sampler with one busy loop probe and one sleep probe recorded, and a
/// history long enough for findings.
fn busy_sampler() -> (Arc<Sampler>, wakemeter::Sampler) {
    let s = Sampler::new(SamplerConfig {
        thresholds: quick_thresholds(),
        ..config()
    })
    .unwrap();
    let core = s.core().unwrap();
    let lp = s.loop_probe("spin".into()).unwrap();
    let sp = s.sleep_probe("nap".into()).unwrap();
    for _ in 0..6 {
        for _ in 0..2000 {
            lp.before_wait(0).unwrap();
            lp.after_wait(0).unwrap();
        }
        sp.sleep(100_000).unwrap();
        std::thread::sleep(Duration::from_millis(10));
        s.sample_now().unwrap();
    }
    (s, core)
}

#[test]
fn mirrored_records_serialize_exactly_like_the_core() {
    let (s, core) = busy_sampler();
    let snap = core.latest().unwrap();
    assert!(!snap.loops.is_empty() && !snap.sleeps.is_empty());
    assert_eq!(json(&snap), json(&Snapshot::from(&snap)));
    let iv = core.interval_over(Duration::from_secs(60)).unwrap();
    assert!(!iv.loops.is_empty() && !iv.sleeps.is_empty());
    assert_eq!(json(&iv), json(&Interval::from(&iv)));
    let stats = core.stats();
    assert_eq!(json(&stats), json(&SamplerStats::from(&stats)));
    let report = core.report();
    assert!(
        !report.findings.is_empty(),
        "the busy loop is found: {report:?}"
    );
    assert_eq!(json(&report), json(&Report::from(&report)));
    assert_eq!(json(core.system()), json(&SystemInfo::from(core.system())));
    assert_eq!(
        serde_json::from_str::<Value>(&s.report_json().unwrap()).unwrap()["system"],
        json(core.system())
    );
}

#[test]
fn kernel_records_and_warnings_mirror_the_core() {
    let mut t = wakemeter::KernelThreadStats::default();
    t.tid = 7;
    t.name = "io".into();
    t.total_off_cpu.poll_ns = 5;
    t.off_cpu_histogram = wakemeter::Log2Histogram::from_buckets(&[0, 1, 2]);
    let mut w = wakemeter::kernel::Waker::default();
    w.tid = 3;
    w.total_wakes = 9;
    t.top_wakers.push(w);
    t.poll.total_zero_timeout_calls = 4;
    t.sleep.total_calls = 2;
    let mut k = wakemeter::KernelSample::default();
    k.source = "ebpf".into();
    k.threads.push(t);
    assert_eq!(json(&k), json(&KernelSample::from(&k)));
    for w in [
        wakemeter::SampleWarning::DescriptorsExhausted {
            threads_without_descriptors: 3,
        },
        wakemeter::SampleWarning::KernelSourceFailed {
            message: "gone".into(),
        },
    ] {
        assert_eq!(json(&w), json(&SampleWarning::from(&w)));
    }
}

#[test]
fn thresholds_mirror_the_core_with_durations_in_ms() {
    let core = wakemeter::Thresholds::default();
    let mirror = Thresholds::from(&core);
    assert_eq!(wakemeter::Thresholds::from(&mirror), core);
    let core_keys: Vec<String> = json(&core).as_object().unwrap().keys().cloned().collect();
    let mirror_keys: Vec<String> = json(&mirror)
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.strip_suffix("_ms").unwrap_or(k).to_string())
        .collect();
    let (mut a, mut b) = (core_keys, mirror_keys);
    a.sort();
    b.sort();
    assert_eq!(a, b);
    assert_eq!(default_thresholds(), mirror);
}

#[test]
fn config_defaults_are_the_core_defaults() {
    let c = default_sampler_config();
    assert_eq!(
        Duration::from_millis(c.interval_ms),
        wakemeter::sampler::DEFAULT_INTERVAL
    );
    assert_eq!(c.history as usize, wakemeter::sampler::DEFAULT_HISTORY);
    assert_eq!(
        c.switch_split_every,
        wakemeter::sampler::DEFAULT_SWITCH_SPLIT_EVERY
    );
    assert_eq!(c.pid, None);
}

#[test]
fn bad_config_is_a_typed_error_with_a_clear_message() {
    let err = |c: SamplerConfig| Sampler::new(c).unwrap_err();
    let e = err(SamplerConfig {
        interval_ms: 0,
        ..config()
    });
    assert!(matches!(e, WakemeterError::InvalidConfig { .. }));
    assert_eq!(
        e.to_string(),
        "invalid configuration: interval must be greater than zero"
    );
    assert!(matches!(
        err(SamplerConfig {
            history: u32::MAX,
            ..config()
        }),
        WakemeterError::InvalidConfig { field, .. } if field == "history"
    ));
    assert!(matches!(
        err(SamplerConfig {
            thresholds: Thresholds {
                busy_poll_idle_ratio: 2.0,
                ..Thresholds::default()
            },
            ..config()
        }),
        WakemeterError::InvalidConfig { field, .. } if field == "busy_poll_idle_ratio"
    ));
    assert!(matches!(
        err(SamplerConfig {
            pid: Some(i32::MAX as u32),
            ..config()
        }),
        WakemeterError::NoSuchProcess { .. }
    ));
    let s = Sampler::new(config()).unwrap();
    assert!(matches!(
        s.findings_with(Thresholds {
            window_ms: 0,
            ..Thresholds::default()
        }),
        Err(WakemeterError::InvalidConfig { .. })
    ));
}

#[test]
fn shut_down_sampler_and_its_probes_refuse_calls() {
    let s = Sampler::new(config()).unwrap();
    let lp = s.loop_probe("l".into()).unwrap();
    let sp = s.sleep_probe("s".into()).unwrap();
    lp.before_wait(-1).unwrap();
    lp.after_wait(1).unwrap();
    assert_eq!(lp.stats().unwrap().total_wakeups, 1);
    s.start().unwrap();
    assert!(matches!(s.start(), Err(WakemeterError::AlreadyRunning)));
    s.shutdown();
    assert!(!s.is_running());
    assert!(matches!(s.sample_now(), Err(WakemeterError::Closed)));
    assert!(matches!(s.start(), Err(WakemeterError::Closed)));
    assert!(matches!(
        s.loop_probe("x".into()),
        Err(WakemeterError::Closed)
    ));
    assert!(matches!(
        lp.before_wait(0),
        Err(WakemeterError::SamplerGone)
    ));
    assert!(matches!(lp.stats(), Err(WakemeterError::SamplerGone)));
    assert!(matches!(sp.begin(1), Err(WakemeterError::SamplerGone)));
    assert!(matches!(sp.end(), Err(WakemeterError::SamplerGone)));

    // Released (not shut down): the probe notices too.
    let s = Sampler::new(config()).unwrap();
    let lp = s.loop_probe("l".into()).unwrap();
    drop(s);
    assert!(matches!(lp.after_wait(0), Err(WakemeterError::SamplerGone)));
}

#[test]
fn probe_timeouts_follow_poll_conventions() {
    let s = Sampler::new(config()).unwrap();
    let lp = s.loop_probe("l".into()).unwrap();
    lp.before_wait(0).unwrap(); // non-blocking poll
    lp.after_wait(0).unwrap();
    lp.before_wait(-1).unwrap(); // no timeout
    lp.after_wait(2).unwrap();
    lp.before_wait(1).unwrap(); // 1 ns: times out
    std::thread::sleep(Duration::from_micros(50));
    lp.after_wait(0).unwrap();
    let st = lp.stats().unwrap();
    assert_eq!(st.total_wakeups, 3);
    assert_eq!(st.total_zero_timeout_waits, 1);
    assert_eq!(st.total_idle_wakeups, 2);
    assert_eq!(st.total_events, 2);
    assert_eq!(
        st.total_timed_out_wakeups, 2,
        "the 0 and 1 ns timeouts elapsed"
    );
    assert_eq!(st.total_early_wakeups, 0);
    assert_eq!(lp.name(), "l");
    let snap = s.sample_now().unwrap();
    assert_eq!(snap.loops[0].id, lp.id());
}

#[derive(Default)]
struct Recorder {
    intervals: Mutex<Vec<u64>>,
    findings: Mutex<Vec<Finding>>,
    threads: Mutex<Vec<String>>,
    fail_every: u64,
    calls: AtomicU64,
}

impl SamplerListener for Recorder {
    fn on_interval(&self, interval: Interval) -> Result<(), ListenerError> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        self.threads.lock().unwrap().push(
            std::thread::current()
                .name()
                .unwrap_or_default()
                .to_string(),
        );
        self.intervals.lock().unwrap().push(interval.to_seq);
        if self.fail_every != 0 && n.is_multiple_of(self.fail_every) {
            return Err(ListenerError::Failed {
                reason: format!("call {n}"),
            });
        }
        if self.fail_every != 0 && n % self.fail_every == 1 {
            panic!("listener panic {n}");
        }
        Ok(())
    }

    fn on_finding(&self, finding: Finding) -> Result<(), ListenerError> {
        self.findings.lock().unwrap().push(finding);
        Ok(())
    }
}

fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn listeners_get_each_interval_once_on_the_delivery_thread() {
    let s = Sampler::new(config()).unwrap();
    let r = Arc::new(Recorder::default());
    let id = s.add_listener(r.clone()).unwrap();
    s.start().unwrap();
    wait_for("5 intervals", || r.intervals.lock().unwrap().len() >= 5);
    s.stop().unwrap();
    let seqs = r.intervals.lock().unwrap().clone();
    let mut sorted = seqs.clone();
    sorted.dedup();
    sorted.sort();
    assert_eq!(seqs, sorted, "each interval once, in order");
    assert!(
        r.threads
            .lock()
            .unwrap()
            .iter()
            .all(|t| t == "wakemeter-cb")
    );
    assert!(s.remove_listener(id));
    assert!(!s.remove_listener(id));
    assert_eq!(s.listener_stats().listeners, 0);
}

#[test]
fn failing_and_panicking_listeners_are_counted_and_delivery_goes_on() {
    let s = Sampler::new(config()).unwrap();
    let bad = Arc::new(Recorder {
        fail_every: 3,
        ..Recorder::default()
    });
    let good = Arc::new(Recorder::default());
    s.add_listener(bad.clone()).unwrap();
    s.add_listener(good.clone()).unwrap();
    s.start().unwrap();
    wait_for("6 intervals", || good.intervals.lock().unwrap().len() >= 6);
    s.stop().unwrap();
    let st = s.listener_stats();
    assert!(st.listener_errors >= 3, "{st:?}");
    assert!(st.last_listener_error.is_some());
    assert!(
        bad.calls.load(Ordering::Relaxed) >= 6,
        "bad listener still called"
    );
}

#[test]
fn listeners_hear_a_finding_once_until_it_escalates() {
    let s = Sampler::new(SamplerConfig {
        thresholds: quick_thresholds(),
        ..config()
    })
    .unwrap();
    let r = Arc::new(Recorder::default());
    s.add_listener(r.clone()).unwrap();
    let lp = s.loop_probe("spin".into()).unwrap();
    s.start().unwrap();
    let stop = std::time::Instant::now() + Duration::from_millis(600);
    while std::time::Instant::now() < stop {
        lp.before_wait(0).unwrap();
        lp.after_wait(0).unwrap();
    }
    wait_for("a busy-poller finding", || {
        r.findings
            .lock()
            .unwrap()
            .iter()
            .any(|f| f.kind == FindingKind::BusyPoller)
    });
    s.stop().unwrap();
    let findings = r.findings.lock().unwrap();
    let busy: Vec<_> = findings
        .iter()
        .filter(|f| f.kind == FindingKind::BusyPoller)
        .collect();
    assert!(
        busy.windows(2).all(|w| w[1].severity > w[0].severity),
        "repeated only when more severe: {busy:?}"
    );
    assert!(matches!(&busy[0].subject, Subject::Loop { name, .. } if name == "spin"));
    assert_eq!(s.listener_stats().findings_delivered, findings.len() as u64);
}

#[test]
fn report_json_is_the_core_json() {
    let s = Sampler::new(config()).unwrap();
    s.sample_now().unwrap();
    std::thread::sleep(Duration::from_millis(5));
    s.sample_now().unwrap();
    let v: Value = serde_json::from_str(&s.report_json().unwrap()).unwrap();
    for key in ["unix_time_ns", "system", "stats", "interval", "findings"] {
        assert!(v.get(key).is_some(), "{key} in {v}");
    }
    assert_eq!(v["stats"]["samples_taken"], json!(2));
    let r = s.report().unwrap();
    assert_eq!(r.stats.samples_taken, 2);
    assert!(r.interval.is_some());
}

//! Property tests of `Interval::between` over arbitrary snapshot pairs:
//! counters going backwards, reused TIDs, zero or "negative" durations,
//! threads, loops and sleep sites missing at either end. It never panics,
//! never yields NaN or infinity, and with consistent inputs its
//! percentages and ratios stay within their documented bounds.
//! `ProcessInterval::rss_change_bytes` is exact, and saturates (keeping its
//! sign) where the change does not fit an `i64`.
// Test code: a failed setup is a failed test.
#![allow(clippy::unwrap_used)]

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde_json::json;
use wakemeter::{
    Interval, KernelSample, KernelThreadStats, Log2Histogram, LoopStats, ProcessSample, SleepStats,
    Snapshot, ThreadSample,
};

/// Cases per property: enough to reach the corners, fast enough for every `cargo test`.
const CASES: u32 = 512;

/// Serials are drawn from a small range and TIDs from a smaller one, so
/// pairs often share threads, and one TID often belongs to two serials.
const SERIALS: u64 = 8;
const TIDS: u64 = 4;

/// A counter: tiny, ordinary, or near the top of the range.
fn counter() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..4, 0u64..10_000_000_000, any::<u64>()]
}

fn histogram() -> impl Strategy<Value = Log2Histogram> {
    vec(counter(), 0..80).prop_map(|b| Log2Histogram::from_buckets(&b))
}

fn thread(serial: u64, tid: u64, c: [u64; 5], present: [bool; 4]) -> ThreadSample {
    let opt = |i: usize| present[i].then_some(c[i + 1]);
    serde_json::from_value(json!({
        "tid": tid,
        "serial": serial,
        "name": format!("t{serial}"),
        "total_cpu_time_ns": c[0],
        "cpu_time_source": "thread_clock",
        "total_run_queue_wait_ns": opt(0),
        "total_switches": opt(1),
        "total_voluntary_switches": opt(2),
        "total_involuntary_switches": opt(3),
    }))
    .unwrap()
}

fn snapshot(
    seq: u64,
    monotonic_ns: u64,
    process: ProcessSample,
    threads: Vec<ThreadSample>,
) -> Snapshot {
    let mut s: Snapshot = serde_json::from_value(json!({
        "seq": seq,
        "monotonic_ns": monotonic_ns,
        "unix_time_ns": 0,
        "process": ProcessSample::default(),
        "threads": [],
        "switch_split_read": true,
        "sampler_cost_ns": 0,
        "total_sampler_cpu_time_ns": 0,
        "loops": [],
        "sleeps": [],
        "kernel": null,
        "warnings": [],
    }))
    .unwrap();
    s.process = process;
    s.threads = threads;
    s
}

fn arbitrary_thread() -> impl Strategy<Value = ThreadSample> {
    (
        0..SERIALS,
        0..TIDS,
        prop::array::uniform5(counter()),
        prop::array::uniform4(any::<bool>()),
    )
        .prop_map(|(serial, tid, c, p)| thread(serial, tid, c, p))
}

fn arbitrary_process() -> impl Strategy<Value = ProcessSample> {
    (
        counter(),
        counter(),
        any::<u32>(),
        prop::option::of(counter()),
        prop::option::of(counter()),
    )
        .prop_map(|(rss, cpu, threads, irq, idle)| {
            let mut p = ProcessSample::default();
            p.rss_bytes = rss;
            p.total_cpu_time_ns = cpu;
            p.thread_count = threads;
            p.total_interrupt_wakeups = irq;
            p.total_platform_idle_wakeups = idle;
            p
        })
}

fn arbitrary_loop() -> impl Strategy<Value = LoopStats> {
    (0u64..3, prop::array::uniform10(counter()), histogram()).prop_map(|(id, c, h)| {
        let mut l = LoopStats::default();
        l.id = id;
        l.total_wakeups = c[0];
        l.total_idle_wakeups = c[1];
        l.total_timed_out_wakeups = c[2];
        l.total_early_wakeups = c[3];
        l.total_zero_timeout_waits = c[4];
        l.total_events = c[5];
        l.total_wait_ns = c[6];
        l.total_busy_ns = c[7];
        l.total_poll_delay_ns = c[8];
        l.current_wait_ns = c[9];
        l.poll_delay_histogram = h;
        l
    })
}

fn arbitrary_sleep() -> impl Strategy<Value = SleepStats> {
    (0u64..3, prop::array::uniform5(counter()), histogram()).prop_map(|(id, c, h)| {
        let mut s = SleepStats::default();
        s.id = id;
        s.total_calls = c[0];
        s.total_requested_ns = c[1];
        s.total_actual_ns = c[2];
        s.total_oversleep_ns = c[3];
        s.total_cpu_ns = c[4];
        s.oversleep_histogram = h;
        s
    })
}

fn arbitrary_kernel() -> impl Strategy<Value = Option<KernelSample>> {
    let thread = (0..TIDS, prop::array::uniform12(counter())).prop_map(|(tid, c)| {
        let mut k = KernelThreadStats::default();
        k.tid = tid;
        k.total_on_cpu_ns = c[0];
        k.total_voluntary_switches = c[1];
        k.total_involuntary_switches = c[2];
        k.total_wakes = c[3];
        k.poll.total_calls = c[4];
        k.poll.total_idle_calls = c[5];
        k.poll.total_zero_timeout_calls = c[6];
        k.sleep.total_calls = c[7];
        k.sleep.total_requested_ns = c[8];
        k.sleep.total_actual_ns = c[9];
        k.total_off_cpu.sleep_ns = c[10];
        k.total_off_cpu.poll_ns = c[11];
        k
    });
    prop::option::of(vec(thread, 0..5).prop_map(|threads| {
        let mut k = KernelSample::default();
        k.threads = threads;
        k
    }))
}

fn arbitrary_snapshot() -> impl Strategy<Value = Snapshot> {
    (
        counter(),
        counter(),
        arbitrary_process(),
        vec(arbitrary_thread(), 0..8),
        vec(arbitrary_loop(), 0..3),
        vec(arbitrary_sleep(), 0..3),
        arbitrary_kernel(),
        counter(),
    )
        .prop_map(
            |(seq, mono, process, mut threads, loops, sleeps, kernel, sampler)| {
                // Serials are unique within a snapshot (TIDs are not).
                let mut seen = std::collections::HashSet::new();
                threads.retain(|t| seen.insert(t.serial));
                let mut s = snapshot(seq, mono, process, threads);
                s.loops = loops;
                s.sleeps = sleeps;
                s.kernel = kernel;
                s.total_sampler_cpu_time_ns = sampler;
                s
            },
        )
}

/// Every floating-point value of the interval, named.
fn floats(i: &Interval) -> Vec<(String, f64)> {
    let mut out = vec![
        ("process.cpu_percent".into(), i.process.cpu_percent),
        ("sampler_cpu_percent".into(), i.sampler_cpu_percent),
    ];
    out.extend(
        i.process
            .interrupt_wakeups_per_sec
            .map(|v| ("interrupt_wakeups_per_sec".into(), v)),
    );
    out.extend(
        i.process
            .platform_idle_wakeups_per_sec
            .map(|v| ("platform_idle_wakeups_per_sec".into(), v)),
    );
    for t in &i.threads {
        let s = t.serial;
        out.push((format!("t{s}.cpu_percent"), t.cpu_percent));
        for (name, v) in [
            ("switches_per_sec", t.switches_per_sec),
            ("voluntary_switches_per_sec", t.voluntary_switches_per_sec),
            (
                "involuntary_switches_per_sec",
                t.involuntary_switches_per_sec,
            ),
            ("run_queue_wait_percent", t.run_queue_wait_percent),
        ] {
            out.extend(v.map(|v| (format!("t{s}.{name}"), v)));
        }
        if let Some(k) = &t.kernel {
            for (name, v) in [
                ("on_cpu_percent", k.on_cpu_percent),
                ("voluntary_switches_per_sec", k.voluntary_switches_per_sec),
                (
                    "involuntary_switches_per_sec",
                    k.involuntary_switches_per_sec,
                ),
                ("wakes_per_sec", k.wakes_per_sec),
                ("poll_calls_per_sec", k.poll_calls_per_sec),
                ("poll_zero_return_ratio", k.idle_poll_ratio),
                ("poll_zero_timeout_ratio", k.zero_timeout_poll_ratio),
                ("sleeps_per_sec", k.sleeps_per_sec),
            ] {
                out.push((format!("t{s}.kernel.{name}"), v));
            }
        }
    }
    for l in &i.loops {
        for (name, v) in [
            ("wakeups_per_sec", l.wakeups_per_sec),
            ("idle_wakeup_ratio", l.idle_wakeup_ratio),
            ("zero_timeout_ratio", l.zero_timeout_ratio),
            ("events_per_wakeup", l.events_per_wakeup),
            ("utilization", l.utilization),
        ] {
            out.push((format!("loop{}.{name}", l.id), v));
        }
    }
    for s in &i.sleeps {
        out.push((format!("sleep{}.sleeps_per_sec", s.id), s.sleeps_per_sec));
        out.push((format!("sleep{}.cpu_percent", s.id), s.cpu_percent));
    }
    out
}

/// At most `bound`, allowing for the rounding of one division.
fn within(v: f64, bound: f64) -> bool {
    v <= bound * (1.0 + 1e-12)
}

/// Failing cases are saved beside the crate, where proptest re-runs them first.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: CASES,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/proptest_interval.txt",
        ))),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_pairs_give_finite_rates_and_consistent_counts(
        from in arbitrary_snapshot(),
        to in arbitrary_snapshot(),
    ) {
        let i = Interval::between(&from, &to);
        let d = to.monotonic_ns.saturating_sub(from.monotonic_ns);
        prop_assert_eq!(i.duration_ns, d, "a backwards clock gives an empty interval");
        for (name, v) in floats(&i) {
            prop_assert!(v.is_finite() && v >= 0.0, "{name} = {v}");
            if d == 0 {
                prop_assert!(v == 0.0 || name.contains("ratio") || name.contains("per_wakeup")
                    || name.contains("utilization"), "{name} = {v} over an empty interval");
            }
        }
        // One interval per thread alive at the end, matched by serial, never by TID.
        prop_assert_eq!(i.threads.len(), to.threads.len());
        for t in &i.threads {
            let end = to.threads.iter().find(|x| x.serial == t.serial).unwrap();
            let start = from.threads.iter().find(|x| x.serial == t.serial);
            prop_assert_eq!(t.started_in_interval, start.is_none());
            prop_assert!(t.cpu_time_ns <= end.total_cpu_time_ns);
            if let Some(start) = start {
                prop_assert_eq!(t.cpu_time_ns, end.total_cpu_time_ns.saturating_sub(start.total_cpu_time_ns));
            }
            if d > 0 {
                let expected = t.cpu_time_ns as f64 * 100.0 / d as f64;
                prop_assert!((t.cpu_percent - expected).abs() <= expected * 1e-12);
            }
        }
        let alive: std::collections::HashSet<u64> = to.threads.iter().map(|t| t.serial).collect();
        let exited = from.threads.iter().filter(|t| !alive.contains(&t.serial)).count();
        prop_assert_eq!(i.threads_exited as usize, exited);
        prop_assert_eq!(i.loops.len(), to.loops.len());
        prop_assert_eq!(i.sleeps.len(), to.sleeps.len());
        for l in &i.loops {
            prop_assert!(within(l.utilization, 1.0), "utilization {}", l.utilization);
        }
        // The RSS change is exact, or saturated with the right sign.
        let change = i128::from(to.process.rss_bytes) - i128::from(from.process.rss_bytes);
        prop_assert_eq!(
            i128::from(i.process.rss_change_bytes),
            change.clamp(i128::from(i64::MIN), i128::from(i64::MAX))
        );
    }

    #[test]
    fn consistent_pairs_stay_within_documented_bounds(
        start in 0u64..u64::MAX / 4,
        d in 1u64..10_000_000_000_000,
        threads in vec((0..SERIALS, 0..TIDS, any::<bool>(), 0.0..=1.0f64, 0.0..=1.0f64, counter(), counter()), 0..8),
        loops in vec((0u64..3, counter(), 0.0..=1.0f64, 0.0..=1.0f64, counter(), counter(), 0u64..1 << 40, 0u64..1 << 40), 0..3),
        sleep_cpu in vec((0u64..3, 0.0..=1.0f64, 0u64..1 << 40), 0..3),
        kernel in vec((0..TIDS, 0.0..=1.0f64, 0u64..1 << 40, 0.0..=1.0f64, 0.0..=1.0f64), 0..4),
    ) {
        // A thread runs and waits for a CPU at most for the interval's
        // length; idle and zero-timeout wakeups are among the wakeups;
        // a poll call returns 0 at most once.
        let share = |x: f64, of: u64| ((of as f64) * x) as u64;
        let mut from_threads = Vec::new();
        let mut to_threads = Vec::new();
        for (serial, tid, existed, cpu, wait, c0, w0) in threads {
            if to_threads.iter().any(|t: &ThreadSample| t.serial == serial) {
                continue;
            }
            let (c0, w0) = if existed { (c0 / 2, w0 / 2) } else { (0, 0) };
            let cpu = share(cpu, d);
            let wait = share(wait, d - cpu);
            if existed {
                from_threads.push(thread(serial, tid, [c0, w0, 1, 1, 1], [true; 4]));
            }
            to_threads.push(thread(serial, tid, [c0 + cpu, w0 + wait, 2, 2, 2], [true; 4]));
        }
        let mut from = snapshot(0, start, ProcessSample::default(), from_threads);
        let mut to = snapshot(1, start + d, ProcessSample::default(), to_threads);
        for (id, w0, idle, zero, e0, e1, busy, wait) in loops {
            if to.loops.iter().any(|l| l.id == id) {
                continue;
            }
            let w0 = w0 / 2;
            let mut a = LoopStats::default();
            a.id = id;
            a.total_wakeups = w0;
            a.total_idle_wakeups = w0 / 2;
            a.total_zero_timeout_waits = w0 / 3;
            a.total_events = e0 / 2;
            let mut b = a.clone();
            let dw = d;
            b.total_wakeups += dw;
            b.total_idle_wakeups += share(idle, dw);
            b.total_zero_timeout_waits += share(zero, dw);
            b.total_events += e1 / 2;
            b.total_busy_ns = busy;
            b.total_wait_ns = wait;
            from.loops.push(a);
            to.loops.push(b);
        }
        for (id, cpu, calls) in sleep_cpu {
            if to.sleeps.iter().any(|s| s.id == id) {
                continue;
            }
            let mut s = SleepStats::default();
            s.id = id;
            s.total_calls = calls;
            s.total_cpu_ns = share(cpu, d);
            to.sleeps.push(s);
        }
        let mut kernel_from = KernelSample::default();
        let mut kernel_to = KernelSample::default();
        for (tid, on_cpu, calls, zero_ret, zero_to) in kernel {
            if kernel_to.threads.iter().any(|k| k.tid == tid) {
                continue;
            }
            let mut a = KernelThreadStats::default();
            a.tid = tid;
            let mut b = a.clone();
            b.total_on_cpu_ns = share(on_cpu, d);
            b.poll.total_calls = calls;
            b.poll.total_idle_calls = share(zero_ret, calls);
            b.poll.total_zero_timeout_calls = share(zero_to, calls);
            kernel_from.threads.push(a);
            kernel_to.threads.push(b);
        }
        from.kernel = Some(kernel_from);
        to.kernel = Some(kernel_to);

        let i = Interval::between(&from, &to);
        prop_assert_eq!(i.duration_ns, d);
        for (name, v) in floats(&i) {
            prop_assert!(v.is_finite() && v >= 0.0, "{name} = {v}");
            let bound = if name.ends_with("percent") {
                Some(100.0)
            } else if name.ends_with("ratio") || name.ends_with("utilization") {
                Some(1.0)
            } else {
                None
            };
            if let (Some(bound), false) = (bound, name.starts_with("process") || name.starts_with("sampler")) {
                prop_assert!(within(v, bound), "{name} = {v} > {bound}");
            }
        }
        for t in &i.threads {
            let sum = t.cpu_percent + t.run_queue_wait_percent.unwrap_or(0.0);
            prop_assert!(within(sum, 100.0), "cpu + wait = {sum}% of one core");
        }
    }
}

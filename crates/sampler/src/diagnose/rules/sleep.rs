//! Findings on instrumented sleep sites: the overhead of sleep-based
//! polling.

use super::{Ctx, FindingKind, Severity, Subject, number};
use crate::interval::Interval;

const SLEEP_ADVICE: &str = "Replace the sleep-and-check loop with a blocking wait that is signalled when work arrives \
(condition variable, semaphore, eventfd/pipe, a dispatch source). If a period is really needed, sleep longer or use a \
coalescing timer. On Apple platforms, lowering the polling thread's priority/QoS also cut this cost (8% -> 0.8% in an audio engine).";

pub(super) const TICKER_ADVICE: &str = "Each sleep that ends is a wakeup. If the loop wakes to check for work (a flag, a \
queue) and usually finds none, replace it with a blocking wait that is signalled when work arrives (condition \
variable, semaphore, eventfd/pipe, a dispatch source). If it is a ticker with real work each tick, lengthen the \
period or let the OS coalesce it (timer slack/leeway). A probe on the loop (wakemeter's SleepProbe or LoopProbe) \
tells which it is.";

pub(super) fn sleep_sites(cx: &mut Ctx<'_>, i: &Interval) {
    let t = cx.t;
    for s in &i.sleeps {
        if s.sleeps_per_sec < t.sleep_calls_per_sec {
            continue;
        }
        let severity = if s.cpu_percent >= t.sleep_critical_cpu_percent {
            Severity::Critical
        } else if s.cpu_percent >= t.sleep_cpu_percent
            || s.sleeps_per_sec >= t.sleep_warning_calls_per_sec
        {
            Severity::Warning
        } else {
            Severity::Info
        };
        if let Some(tid) = s.tid {
            cx.explained.insert(tid);
        }
        let oversleep = if s.mean_requested_ns > 0 {
            s.mean_oversleep_ns as f64 / s.mean_requested_ns as f64
        } else {
            0.0
        };
        cx.push(
            FindingKind::SleepOverhead,
            severity,
            Subject::SleepSite { name: s.name.clone(), tid: s.tid },
            move || format!(
                "sleep loop \"{}\" sleeps {:.0} times/s for {:.2} ms each; the sleeping itself costs {:.2}% of a core \
                 ({:.1} µs CPU per sleep) and each sleep overruns by {:.0}%",
                s.name,
                s.sleeps_per_sec,
                s.mean_requested_ns as f64 / 1e6,
                s.cpu_percent,
                s.cpu_per_sleep_ns as f64 / 1e3,
                oversleep * 100.0
            ),
            vec![
                number("sleeps_per_sec", s.sleeps_per_sec, "1/s"),
                number("cpu_percent_in_sleep", s.cpu_percent, "%"),
                number("cpu_per_sleep_ns", s.cpu_per_sleep_ns as f64, "ns"),
                number("mean_requested_ns", s.mean_requested_ns as f64, "ns"),
                number("mean_oversleep_ns", s.mean_oversleep_ns as f64, "ns"),
            ],
            SLEEP_ADVICE,
        );
    }
}

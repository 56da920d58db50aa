//! Findings on instrumented sleep sites: the overhead of sleep-based
//! polling.

use super::wake_source::periodic_advice;
use super::{Ctx, FindingKind, Grade, Severity, Subject, number};
use crate::interval::{Interval, SleepInterval};

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
        let subject = Subject::SleepSite {
            name: s.name.clone(),
            tid: s.tid,
        };
        // A sleep loop is a periodic waker too: one finding says so, of
        // one kind or the other on either side of the sleep line, judged
        // on its sleep rate alone (the thread's switches fall behind its
        // sleeps when a late sleep returns at once) and kept while the
        // rate stays within the margin of the line. Its thread is then
        // not judged again as a periodic waker.
        if !cx.wins_over(
            FindingKind::SleepOverhead,
            &subject,
            (FindingKind::PeriodicWakeups, Some(&subject)),
            s.sleeps_per_sec,
            t.sleep_calls_per_sec,
        ) {
            periodic_sleep_site(cx, s, subject);
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
        let period_ms = 1e3 / s.sleeps_per_sec;
        cx.push(
            FindingKind::SleepOverhead,
            severity,
            subject,
            move || format!(
                "sleep loop \"{}\" sleeps {:.0} times/s (a wakeup every {period_ms:.1} ms) for {:.2} ms each; the \
                 sleeping itself costs {:.2}% of a core ({:.1} µs CPU per sleep) and each sleep overruns by {:.0}%",
                s.name,
                s.sleeps_per_sec,
                s.mean_requested_ns as f64 / 1e6,
                s.cpu_percent,
                s.cpu_per_sleep_ns as f64 / 1e3,
                oversleep * 100.0
            ),
            vec![
                number("sleeps_per_sec", s.sleeps_per_sec, "1/s"),
                number("period_ms", period_ms, "ms"),
                number("cpu_percent_in_sleep", s.cpu_percent, "%"),
                number("cpu_per_sleep_ns", s.cpu_per_sleep_ns as f64, "ns"),
                number("mean_requested_ns", s.mean_requested_ns as f64, "ns"),
                number("mean_oversleep_ns", s.mean_oversleep_ns as f64, "ns"),
            ],
            SLEEP_ADVICE,
        );
    }
}

/// A sleep site below the sleep line but at or above the periodic one
/// (with the presence margin): a periodic waker of its own, named with
/// its sleeps.
fn periodic_sleep_site(cx: &mut Ctx<'_>, s: &SleepInterval, subject: Subject) {
    let t = cx.t;
    let rate = s.sleeps_per_sec;
    if !cx.reaches(
        FindingKind::PeriodicWakeups,
        rate,
        t.periodic_wakeups_per_sec,
        || subject.clone(),
    ) {
        return;
    }
    if let Some(tid) = s.tid {
        cx.explained.insert(tid);
    }
    let period_ms = 1e3 / rate;
    cx.push_graded(
        FindingKind::PeriodicWakeups,
        Grade {
            value: rate,
            base: Severity::Info,
            steps: &[(t.periodic_warning_wakeups_per_sec, Severity::Warning)],
        },
        subject,
        move || {
            format!(
                "sleep loop \"{}\" wakes every {period_ms:.1} ms ({rate:.0}/s), sleeping {:.2} ms each: a periodic \
                 timer of its own; the sleeping itself costs {:.2}% of a core ({:.1} µs CPU per sleep)",
                s.name,
                s.mean_requested_ns as f64 / 1e6,
                s.cpu_percent,
                s.cpu_per_sleep_ns as f64 / 1e3
            )
        },
        vec![
            number("wakeups_per_sec", rate, "1/s"),
            number("sleeps_per_sec", rate, "1/s"),
            number("period_ms", period_ms, "ms"),
            number("cpu_percent_in_sleep", s.cpu_percent, "%"),
            number("mean_requested_ns", s.mean_requested_ns as f64, "ns"),
        ],
        periodic_advice(cx.os),
    );
}

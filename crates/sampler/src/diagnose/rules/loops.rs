//! Findings on instrumented loops: busy polling and periodic wakeups.

use super::wake_source::PERIODIC_ADVICE;
use super::{Ctx, FindingKind, Grade, Severity, Subject, blocked_percent, number, thread_cpu};
use crate::interval::Interval;

pub(super) const BUSY_POLL_ADVICE: &str = "Block in the wait until an event arrives or the next timer is due instead of polling: \
pass a real timeout (not 0) to poll/epoll_wait/kevent and make sure the loop is not re-armed by a timer of 0. \
With libevent, check the backend it chose (event_base_get_method): 'poll' or 'select' where 'epoll' or 'kqueue' \
is available is a known cause (Envoy Mobile on iOS burned >=100% CPU while idle until kqueue was forced; ~3% after).";

pub(super) const BUSY_POLL_ADVICE_POLL: &str = "Block in the wait until an event arrives or the next timer is due instead of \
polling: pass a real timeout (not 0). This thread polls with poll(2)/select(2): if it is a portable event loop \
(libevent, libuv, a runtime), check the backend it chose (libevent: event_base_get_method) — 'poll' or 'select' \
where 'epoll' or 'kqueue' is available is a known cause (Envoy Mobile on iOS burned >=100% CPU while idle until \
kqueue was forced; ~3% after).";

pub(super) const BUSY_POLL_ADVICE_EPOLL: &str = "This thread already uses epoll, but with a zero (or tiny) timeout, so it never \
waits: pass -1 or the time until its next timer is due, and make sure the loop is not re-armed by a timer of 0 or \
a callback that always queues more work.";

pub(super) fn busy_poller_loops(cx: &mut Ctx<'_>, i: &Interval) {
    let t = cx.t;
    for l in &i.loops {
        let idle = l.idle_wakeup_ratio >= t.busy_poll_idle_ratio;
        let zero = l.zero_timeout_ratio >= t.busy_poll_zero_timeout_ratio;
        if l.wakeups_per_sec < t.busy_poll_wakeups_per_sec || !(idle || zero) {
            continue;
        }
        // A loop whose thread blocks most of the time waits: its
        // zero-timeout waits are pre-polls before blocking ones (libuv
        // does one before each wait when a timer is due), not spinning.
        let blocked = blocked_percent(i, l.tid);
        if blocked.is_some_and(|b| b > t.busy_poll_max_blocked_percent) {
            continue;
        }
        let cpu = thread_cpu(i, l.tid);
        let severity = if cpu.unwrap_or(0.0) >= t.busy_poll_critical_cpu_percent
            || l.wakeups_per_sec >= t.busy_poll_critical_wakeups_per_sec
        {
            Severity::Critical
        } else {
            Severity::Warning
        };
        let cpu_text = cpu
            .map(|c| format!("; its thread uses {c:.0}% of a core"))
            .unwrap_or_default();
        let blocked_text = blocked
            .map(|b| format!(" and is blocked {b:.0}% of the time"))
            .unwrap_or_default();
        let why = if zero {
            format!(
                "{:.0}% of its waits have a zero timeout",
                l.zero_timeout_ratio * 100.0
            )
        } else {
            format!(
                "{:.1}% of wakeups find nothing",
                l.idle_wakeup_ratio * 100.0
            )
        };
        let mut evidence = vec![
            number("wakeups_per_sec", l.wakeups_per_sec, "1/s"),
            number("idle_wakeup_ratio", l.idle_wakeup_ratio, "ratio"),
            number("zero_timeout_ratio", l.zero_timeout_ratio, "ratio"),
            number("events_per_wakeup", l.events_per_wakeup, "events"),
            number("utilization", l.utilization, "ratio"),
        ];
        if let Some(c) = cpu {
            evidence.push(number("thread_cpu_percent", c, "%"));
        }
        if let Some(b) = blocked {
            evidence.push(number("blocked_percent", b, "%"));
        }
        if let Some(tid) = l.tid {
            cx.explained.insert(tid);
        }
        // The libevent adapter of the C API names its probes
        // "libevent:<event_base_get_method>": say which backend the base uses.
        let advice = match l.name.split_once(':') {
            Some(("libevent", method)) if !method.is_empty() => format!(
                "This event_base uses the '{method}' backend (event_base_get_method). {BUSY_POLL_ADVICE}"
            ),
            _ => BUSY_POLL_ADVICE.to_string(),
        };
        cx.push(
            FindingKind::BusyPoller,
            severity,
            Subject::Loop {
                name: l.name.clone(),
                tid: l.tid,
            },
            move || format!(
                "loop \"{}\" wakes {:.0} times/s and {why}: it is busy-polling{cpu_text}{blocked_text}",
                l.name, l.wakeups_per_sec
            ),
            evidence,
            &advice,
        );
    }
}

pub(super) fn periodic_loops(cx: &mut Ctx<'_>, i: &Interval) {
    let t = cx.t;
    for l in &i.loops {
        if l.tid.is_some_and(|tid| cx.explained.contains(&tid)) || l.wakeups == 0 {
            continue;
        }
        let timed_out = l.timed_out_wakeups as f64 / l.wakeups as f64;
        if l.wakeups_per_sec < t.periodic_wakeups_per_sec
            || timed_out < t.periodic_min_timed_out_ratio
            || l.events_per_wakeup >= t.periodic_max_events_per_wakeup
        {
            continue;
        }
        if let Some(tid) = l.tid {
            cx.explained.insert(tid);
        }
        let period_ms = 1e3 / l.wakeups_per_sec;
        let subject = Subject::Loop {
            name: l.name.clone(),
            tid: l.tid,
        };
        cx.push_graded(
            FindingKind::PeriodicWakeups,
            Grade { value: l.wakeups_per_sec, base: Severity::Info, steps: &[(t.periodic_warning_wakeups_per_sec, Severity::Warning)] },
            subject,
            move || format!(
                "loop \"{}\" wakes every {period_ms:.1} ms on its timeout ({:.0}/s) and {:.0}% of those wakeups find nothing",
                l.name,
                l.wakeups_per_sec,
                l.idle_wakeup_ratio * 100.0
            ),
            vec![
                number("wakeups_per_sec", l.wakeups_per_sec, "1/s"),
                number("period_ms", period_ms, "ms"),
                number("timed_out_ratio", timed_out, "ratio"),
                number("events_per_wakeup", l.events_per_wakeup, "events"),
            ],
            PERIODIC_ADVICE,
        );
    }
}

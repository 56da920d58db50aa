//! Findings on instrumented loops: busy polling and periodic wakeups.

use super::wake_source::periodic_advice;
use super::{Ctx, FindingKind, Grade, Severity, Subject, blocked_percent, number, thread_cpu};
use crate::interval::{Interval, LoopInterval, ThreadInterval};

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

/// What to do about a loop whose waits have a timeout yet return ready at
/// once, every time: a readiness that never clears.
pub(super) const READY_LOOP_ADVICE: &str = "Its waits have a timeout but return at once because a descriptor \
stays ready: a level-triggered backend (poll, select) reports a readable descriptor on every call until it is \
drained. Drain it in its callback (read an eventfd, pipe or socket until EAGAIN), or, where the registration is \
edge-triggered (libevent EV_ET), use a backend that supports edge triggering (epoll, kqueue): libevent's 'poll' \
and 'select' backends cannot, so such an event fires on every pass of the loop (check event_base_get_method, \
and that EVENT_NOEPOLL or an event_config does not rule epoll out).";

/// Mean time in a wait, in nanoseconds, above which a loop's waits did
/// not return at once. A wait that returns at once costs a syscall: 2.5 µs
/// per pass of libevent's poll backend with a ready `EV_ET` eventfd
/// (under ASan, on this project's 2-core test machine); a wait that blocks
/// and is woken costs a context switch and the time to be woken: 78 µs per
/// park of a tokio worker unparked 12,600 times/s by its spinning sibling,
/// whose thread was blocked only 22% of the time because it waited for a
/// CPU most of the rest (13.6 µs on another machine of this kind: tokio
/// workers are left out by their kind, not by this line).
const READY_MAX_MEAN_WAIT_NS: u64 = 20_000;

/// A loop that never blocks although it waits with a timeout: its waits
/// return ready at once (events, before the timeout) at least
/// [`Thresholds::busy_poll_critical_wakeups_per_sec`](crate::Thresholds::busy_poll_critical_wakeups_per_sec)
/// times a second, in at least [`Thresholds::busy_poll_idle_ratio`](crate::Thresholds::busy_poll_idle_ratio)
/// of its wakeups, and its thread is blocked at most
/// [`Thresholds::busy_poll_max_blocked_percent`](crate::Thresholds::busy_poll_max_blocked_percent)
/// of the time. The zero-timeout and idle rules miss it: every wait has a
/// timeout and finds an event. A loop doing real work per event does not
/// make ten thousand passes a second on one core; one whose descriptor
/// never stops being ready does (libevent `EV_ET` on the `poll` backend:
/// hundreds of thousands). `Some(ready share)` when the loop is one.
///
/// Not a tokio worker's loop: its probe counts one event per unpark and
/// sees no timeout (tokio's hooks say neither), so "ready at once" is not
/// knowable there; a worker unparked 71,000 times/s at 13.6 µs a park by
/// a sibling spinning on `yield_now` (the CI machine) looked like one, and
/// took the finding from [`spinning_workers`].
fn ready_at_once(cx: &Ctx<'_>, l: &LoopInterval, blocked: Option<f64>) -> Option<f64> {
    let t = cx.t;
    if l.wakeups == 0
        || l.kind == crate::LoopKind::TokioWorker
        || blocked.is_some_and(|b| b > t.busy_poll_max_blocked_percent)
        || l.wait_ns / l.wakeups > READY_MAX_MEAN_WAIT_NS
    {
        return None;
    }
    // Wakeups with events before their timeout: at least every wakeup that
    // neither found nothing nor timed out (zero-timeout waits count as
    // timed out, so they are not in it).
    let ready = l
        .wakeups
        .saturating_sub(l.idle_wakeups)
        .saturating_sub(l.timed_out_wakeups);
    let share = ready as f64 / l.wakeups as f64;
    (share >= t.busy_poll_idle_ratio
        && share * l.wakeups_per_sec >= t.busy_poll_critical_wakeups_per_sec)
        .then_some(share)
}

/// The libevent adapter of the C API names its probes
/// "libevent:<event_base_get_method>": the backend, when the loop is one.
fn libevent_backend(l: &LoopInterval) -> Option<&str> {
    match l.name.split_once(':') {
        Some(("libevent", method)) if !method.is_empty() => Some(method),
        _ => None,
    }
}

fn ready_loop(cx: &mut Ctx<'_>, i: &Interval, l: &LoopInterval, share: f64, blocked: Option<f64>) {
    let cpu = thread_cpu(i, l.tid);
    let cpu_text = cpu
        .map(|c| format!(", using {c:.0}% of a core"))
        .unwrap_or_default();
    let blocked_text = blocked
        .map(|b| format!(" (blocked {b:.0}% of the time)"))
        .unwrap_or_default();
    let mean_wait_ns = l.wait_ns as f64 / l.wakeups.max(1) as f64;
    let mut evidence = vec![
        number("wakeups_per_sec", l.wakeups_per_sec, "1/s"),
        number("ready_at_once_ratio", share, "ratio"),
        number("idle_wakeup_ratio", l.idle_wakeup_ratio, "ratio"),
        number("zero_timeout_ratio", l.zero_timeout_ratio, "ratio"),
        number("events_per_wakeup", l.events_per_wakeup, "events"),
        number("mean_wait_ns", mean_wait_ns, "ns"),
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
    let advice = match libevent_backend(l) {
        Some(method) => format!(
            "This event_base uses the '{method}' backend (event_base_get_method). {READY_LOOP_ADVICE}"
        ),
        None => READY_LOOP_ADVICE.to_string(),
    };
    cx.push(
        FindingKind::BusyPoller,
        Severity::Critical,
        Subject::Loop {
            name: l.name.clone(),
            tid: l.tid,
        },
        move || format!(
            "loop \"{}\" wakes {:.0} times/s and {:.0}% of its waits return ready at once ({:.1} events each, \
             {:.1} µs in the wait on average) although none has a zero timeout: it never blocks{blocked_text}{cpu_text}. \
             A descriptor stays ready: an edge-triggered event on a level-triggered backend (libevent EV_ET on poll \
             or select), or one never drained",
            l.name,
            l.wakeups_per_sec,
            share * 100.0,
            l.events_per_wakeup,
            mean_wait_ns / 1e3
        ),
        evidence,
        &advice,
    );
}

pub(super) fn busy_poller_loops(cx: &mut Ctx<'_>, i: &Interval) {
    let t = cx.t;
    for l in &i.loops {
        let idle = l.idle_wakeup_ratio >= t.busy_poll_idle_ratio;
        let zero = l.zero_timeout_ratio >= t.busy_poll_zero_timeout_ratio;
        if l.wakeups_per_sec < t.busy_poll_wakeups_per_sec {
            continue;
        }
        if !(idle || zero) {
            let blocked = blocked_percent(i, l.tid);
            if let Some(share) = ready_at_once(cx, l, blocked) {
                ready_loop(cx, i, l, share, blocked);
            }
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
        // Say which backend a libevent base uses.
        let advice = match libevent_backend(l) {
            Some(method) => format!(
                "This event_base uses the '{method}' backend (event_base_get_method). {BUSY_POLL_ADVICE}"
            ),
            None => BUSY_POLL_ADVICE.to_string(),
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
            periodic_advice(cx.os),
        );
    }
}

const SPINNING_WORKER_ADVICE: &str = "A task on this worker never waits: it is polled again and again without \
anything to wait for (a loop on tokio::task::yield_now, a future that wakes itself before returning Pending, a \
busy retry), so its worker never parks, and each time it is re-queued the runtime wakes a parked sibling to share \
work that is not there. Await what the task really waits for (a channel, Notify, a timer, I/O readiness) instead \
of yielding in a loop; for CPU-bound work use spawn_blocking or a dedicated thread. With RUSTFLAGS=\"--cfg \
tokio_unstable\", RuntimeMetrics::worker_poll_count and worker_steal_count (or tokio-console) show which worker \
polls it.";

/// Workers of one pool (loop probes that share a name on several threads,
/// as `runtime::instrument` makes of a tokio runtime's workers, or threads
/// of the same name: a worker that never parked never made its probe): one
/// that never waits over the whole window (no wakeup, no wait in progress,
/// no voluntary switch, its thread runnable rather than blocked) while a
/// sibling is woken at least
/// [`Thresholds::busy_poll_wakeups_per_sec`](crate::Thresholds::busy_poll_wakeups_per_sec)
/// times a second. Measured on a tokio runtime of two workers with a task
/// looping on `yield_now` beside an `interval(1 ms)`: one worker never
/// parked (tokio's own park count stayed at 1), the other parked 14,000
/// times/s (tokio: 42,400 parks in 3 s) and its probe counted 12,600
/// wakeups/s with 1.4% utilization. tokio's stable `RuntimeMetrics` gives
/// per worker parks and busy time, the same as the probe, but neither
/// polls nor steals nor schedules (those need `tokio_unstable`), nor which
/// thread a worker is (also unstable): the probe knows its thread.
pub(super) fn spinning_workers(cx: &mut Ctx<'_>, i: &Interval) {
    let t = cx.t;
    for woken_loop in &i.loops {
        let Some(woken_tid) = woken_loop.tid else {
            continue;
        };
        if woken_loop.wakeups_per_sec < t.busy_poll_wakeups_per_sec
            || cx.explained.contains(&woken_tid)
        {
            continue;
        }
        let Some(woken_thread) = i.threads.iter().find(|x| x.tid == woken_tid) else {
            continue;
        };
        // Its siblings: the other threads of the pool, by the probe (a
        // sibling that ever parked has one) or by the thread name (a
        // worker that never parked never created its probe).
        let sibling = |th: &ThreadInterval| {
            th.tid != woken_tid
                && (th.name == woken_thread.name
                    || i.loops
                        .iter()
                        .any(|x| x.name == woken_loop.name && x.tid == Some(th.tid)))
        };
        let spinner = i.threads.iter().find(|th| {
            if !sibling(th) || cx.explained.contains(&th.tid) {
                return false;
            }
            // Never waited: no wakeup and no wait in progress of its
            // probe, no voluntary switch, and runnable, not blocked.
            let probe_waits = i
                .loops
                .iter()
                .any(|x| x.tid == Some(th.tid) && (x.wakeups > 0 || x.current_wait_ns > 0));
            let woken = th
                .kernel
                .as_ref()
                .map(|k| k.voluntary_switches_per_sec)
                .or(th.voluntary_switches_per_sec);
            !probe_waits
                && woken.is_some_and(|w| w < 1.0)
                && blocked_percent(i, Some(th.tid))
                    .is_some_and(|b| b <= t.busy_poll_max_blocked_percent)
        });
        let Some(th) = spinner else { continue };
        let tid = th.tid;
        let blocked = blocked_percent(i, Some(tid)).unwrap_or(0.0);
        let woken = woken_loop.wakeups_per_sec;
        let work_per_wakeup_ns = woken_loop.busy_ns as f64 / woken_loop.wakeups.max(1) as f64;
        let wait = th.run_queue_wait_percent.unwrap_or(0.0);
        cx.explained.insert(tid);
        cx.explained.insert(woken_tid);
        let severity = if woken >= t.busy_poll_critical_wakeups_per_sec {
            Severity::Critical
        } else {
            Severity::Warning
        };
        cx.push(
            FindingKind::BusyPoller,
            severity,
            Subject::Loop {
                name: woken_loop.name.clone(),
                tid: Some(tid),
            },
            move || {
                format!(
                    "worker \"{}\" on thread {tid} never waits: no park in {:.1} s, its thread runnable all the time \
                     ({:.0}% on a CPU, {wait:.0}% waiting for one, blocked {blocked:.0}%), while its sibling on thread \
                     {woken_tid} is woken {woken:.0} times/s and goes back to waiting after {:.1} µs of work each: \
                     a task that never waits (a loop on yield_now, a future that wakes itself) keeps one worker \
                     spinning and the runtime waking the other",
                    woken_loop.name,
                    i.duration_secs(),
                    th.cpu_percent,
                    work_per_wakeup_ns / 1e3
                )
            },
            vec![
                number("thread_cpu_percent", th.cpu_percent, "%"),
                number("run_queue_wait_percent", wait, "%"),
                number("blocked_percent", blocked, "%"),
                number("sibling_wakeups_per_sec", woken, "1/s"),
                number("sibling_utilization", woken_loop.utilization, "ratio"),
                number("sibling_work_per_wakeup_ns", work_per_wakeup_ns, "ns"),
            ],
            SPINNING_WORKER_ADVICE,
        );
    }
}

//! The rules of the findings engine.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::{Evidence, Finding, FindingKind, Severity, Subject, Thresholds};
use crate::history::{History, Stored};
use crate::interval::{Interval, between_in_history, between_stored, per_sec};
use crate::model::SystemInfo;

use crate::probe::duration_ns as ns;

fn ev(name: &str, value: f64, unit: &str) -> Evidence {
    Evidence {
        name: name.to_string(),
        value,
        unit: unit.to_string(),
    }
}

/// Oldest and newest stored snapshots of a window ending at the newest,
/// with their interval; `None` when the history covers less than `min`.
fn window(h: &History, span: Duration, min: Duration) -> Option<(&Stored, &Stored, Interval)> {
    let to = h.latest()?;
    let from = h.first_since(to.header.monotonic_ns.saturating_sub(ns(span)))?;
    if to
        .header
        .monotonic_ns
        .saturating_sub(from.header.monotonic_ns)
        < ns(min)
        || from.header.seq == to.header.seq
    {
        return None;
    }
    Some((from, to, between_in_history(h, from, to)))
}

struct Ctx<'a> {
    t: &'a Thresholds,
    out: Vec<Finding>,
    /// Threads already explained by a more specific finding (or excluded).
    explained: HashSet<u64>,
    /// Window of the rule running now, in nanoseconds.
    window_ns: u64,
}

impl Ctx<'_> {
    fn push(
        &mut self,
        kind: FindingKind,
        severity: Severity,
        subject: Subject,
        summary: String,
        evidence: Vec<Evidence>,
        advice: &str,
    ) {
        self.out.push(Finding {
            kind,
            severity,
            subject,
            summary,
            evidence,
            advice: advice.to_string(),
            window_ns: self.window_ns,
        });
    }
}

fn thread_cpu(i: &Interval, tid: Option<u64>) -> Option<f64> {
    let tid = tid?;
    i.threads
        .iter()
        .find(|t| t.tid == tid)
        .map(|t| t.cpu_percent)
}

const BUSY_POLL_ADVICE: &str = "Block in the wait until an event arrives or the next timer is due instead of polling: \
pass a real timeout (not 0) to poll/epoll_wait/kevent and make sure the loop is not re-armed by a timer of 0. \
With libevent, check the backend it chose (event_base_get_method): 'poll' or 'select' where 'epoll' or 'kqueue' \
is available is a known cause (Envoy Mobile on iOS burned >=100% CPU while idle until kqueue was forced; ~3% after).";

const SLEEP_ADVICE: &str = "Replace the sleep-and-check loop with a blocking wait that is signalled when work arrives \
(condition variable, semaphore, eventfd/pipe, a dispatch source). If a period is really needed, sleep longer or use a \
coalescing timer. On Apple platforms, lowering the polling thread's priority/QoS also cut this cost (8% -> 0.8% in an audio engine).";

const PERIODIC_ADVICE: &str = "Each wakeup takes the CPU out of idle. Make the timer fire only when there is work \
(arm it on demand), lengthen its period, or let the OS coalesce it (timer slack/leeway, Android WorkManager, \
DispatchSource leeway).";

pub(super) fn run(
    h: &History,
    t: &Thresholds,
    system: &SystemInfo,
    exclude_tid: Option<u64>,
) -> Vec<Finding> {
    let mut cx = Ctx {
        t,
        out: Vec::new(),
        explained: exclude_tid.into_iter().collect(),
        window_ns: 0,
    };
    if let Some((from, to, i)) = window(h, t.window, t.min_window) {
        cx.window_ns = i.duration_ns;
        busy_poller_loops(&mut cx, &i);
        sleep_sites(&mut cx, &i);
        kernel_threads(&mut cx, &i);
        periodic_loops(&mut cx, &i);
        periodic_threads(&mut cx, h, from, to, &i);
        run_queue(&mut cx, &i, system);
    }
    if let Some((_, _, i)) = window(h, t.cpu_window, t.min_window) {
        cx.window_ns = i.duration_ns;
        cpu_hogs(&mut cx, &i);
    }
    if let Some((from, to, i)) = window(h, t.wakeups_window, t.min_window) {
        cx.window_ns = i.duration_ns;
        wakeups_budget(&mut cx, h, from, to, &i);
    }
    memory_growth(&mut cx, h);
    let mut out = cx.out;
    out.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.kind.cmp(&b.kind)));
    out
}

fn busy_poller_loops(cx: &mut Ctx<'_>, i: &Interval) {
    let t = cx.t;
    for l in &i.loops {
        let idle = l.idle_wakeup_ratio >= t.busy_poll_idle_ratio;
        let zero = l.zero_timeout_ratio >= t.busy_poll_zero_timeout_ratio;
        if l.wakeups_per_sec < t.busy_poll_wakeups_per_sec || !(idle || zero) {
            continue;
        }
        let cpu = thread_cpu(i, l.tid);
        let severity = if cpu.unwrap_or(0.0) >= 50.0
            || l.wakeups_per_sec >= 10.0 * t.busy_poll_wakeups_per_sec
        {
            Severity::Critical
        } else {
            Severity::Warning
        };
        let cpu_text = cpu
            .map(|c| format!("; its thread uses {c:.0}% of a core"))
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
            ev("wakeups_per_sec", l.wakeups_per_sec, "1/s"),
            ev("idle_wakeup_ratio", l.idle_wakeup_ratio, "ratio"),
            ev("zero_timeout_ratio", l.zero_timeout_ratio, "ratio"),
            ev("events_per_wakeup", l.events_per_wakeup, "events"),
            ev("utilization", l.utilization, "ratio"),
        ];
        if let Some(c) = cpu {
            evidence.push(ev("thread_cpu_percent", c, "%"));
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
            format!(
                "loop \"{}\" wakes {:.0} times/s and {why}: it is busy-polling{cpu_text}",
                l.name, l.wakeups_per_sec
            ),
            evidence,
            &advice,
        );
    }
}

/// Busy pollers and sleep loops seen by a kernel source (eBPF) in threads
/// that no probe instruments, e.g. an unmodified proxy.
fn kernel_threads(cx: &mut Ctx<'_>, i: &Interval) {
    let t = cx.t;
    for th in &i.threads {
        let Some(k) = &th.kernel else { continue };
        if cx.explained.contains(&th.tid) {
            continue;
        }
        let (rate, idle, zt) = (
            k.poll_calls_per_sec,
            k.idle_poll_ratio,
            k.zero_timeout_poll_ratio,
        );
        if rate >= t.busy_poll_wakeups_per_sec
            && (idle >= t.busy_poll_idle_ratio || zt >= t.busy_poll_zero_timeout_ratio)
        {
            cx.explained.insert(th.tid);
            cx.push(
                FindingKind::BusyPoller,
                if th.cpu_percent >= 50.0 { Severity::Critical } else { Severity::Warning },
                Subject::Thread { tid: th.tid, name: th.name.clone() },
                format!(
                    "thread {} \"{}\" makes {rate:.0} poll-family calls/s and {:.1}% return nothing (kernel view): it is busy-polling",
                    th.tid,
                    th.name,
                    idle * 100.0
                ),
                vec![
                    ev("poll_calls_per_sec", rate, "1/s"),
                    ev("idle_poll_ratio", idle, "ratio"),
                    ev("zero_timeout_poll_ratio", zt, "ratio"),
                    ev("thread_cpu_percent", th.cpu_percent, "%"),
                ],
                BUSY_POLL_ADVICE,
            );
            continue;
        }
        if k.sleeps_per_sec >= t.sleep_calls_per_sec {
            cx.explained.insert(th.tid);
            cx.push(
                FindingKind::SleepOverhead,
                if k.sleeps_per_sec >= 5.0 * t.sleep_calls_per_sec { Severity::Warning } else { Severity::Info },
                Subject::Thread { tid: th.tid, name: th.name.clone() },
                format!(
                    "thread {} \"{}\" sleeps {:.0} times/s for {:.2} ms each (kernel view): a sleep-and-check polling loop",
                    th.tid,
                    th.name,
                    k.sleeps_per_sec,
                    k.mean_sleep_requested_ns as f64 / 1e6
                ),
                vec![
                    ev("sleeps_per_sec", k.sleeps_per_sec, "1/s"),
                    ev("mean_requested_ns", k.mean_sleep_requested_ns as f64, "ns"),
                    ev("mean_actual_ns", k.mean_sleep_actual_ns as f64, "ns"),
                ],
                SLEEP_ADVICE,
            );
        }
    }
}

fn sleep_sites(cx: &mut Ctx<'_>, i: &Interval) {
    let t = cx.t;
    for s in &i.sleeps {
        if s.sleeps_per_sec < t.sleep_calls_per_sec {
            continue;
        }
        let severity = if s.cpu_percent >= 5.0 * t.sleep_cpu_percent {
            Severity::Critical
        } else if s.cpu_percent >= t.sleep_cpu_percent
            || s.sleeps_per_sec >= 5.0 * t.sleep_calls_per_sec
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
            format!(
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
                ev("sleeps_per_sec", s.sleeps_per_sec, "1/s"),
                ev("cpu_percent_in_sleep", s.cpu_percent, "%"),
                ev("cpu_per_sleep_ns", s.cpu_per_sleep_ns as f64, "ns"),
                ev("mean_requested_ns", s.mean_requested_ns as f64, "ns"),
                ev("mean_oversleep_ns", s.mean_oversleep_ns as f64, "ns"),
            ],
            SLEEP_ADVICE,
        );
    }
}

fn periodic_loops(cx: &mut Ctx<'_>, i: &Interval) {
    let t = cx.t;
    for l in &i.loops {
        if l.tid.is_some_and(|tid| cx.explained.contains(&tid)) || l.wakeups == 0 {
            continue;
        }
        let timed_out = l.timed_out_wakeups as f64 / l.wakeups as f64;
        if l.wakeups_per_sec < t.periodic_wakeups_per_sec
            || timed_out < 0.8
            || l.events_per_wakeup >= 0.1
        {
            continue;
        }
        if let Some(tid) = l.tid {
            cx.explained.insert(tid);
        }
        let period_ms = 1e3 / l.wakeups_per_sec;
        cx.push(
            FindingKind::PeriodicWakeups,
            if l.wakeups_per_sec >= 5.0 * t.periodic_wakeups_per_sec { Severity::Warning } else { Severity::Info },
            Subject::Loop { name: l.name.clone(), tid: l.tid },
            format!(
                "loop \"{}\" wakes every {period_ms:.1} ms on its timeout ({:.0}/s) and {:.0}% of those wakeups find nothing",
                l.name,
                l.wakeups_per_sec,
                l.idle_wakeup_ratio * 100.0
            ),
            vec![
                ev("wakeups_per_sec", l.wakeups_per_sec, "1/s"),
                ev("period_ms", period_ms, "ms"),
                ev("timed_out_ratio", timed_out, "ratio"),
                ev("events_per_wakeup", l.events_per_wakeup, "events"),
            ],
            PERIODIC_ADVICE,
        );
    }
}

/// Threads with a steady switch rate and little CPU: a timer, found from
/// the per-sample series of their context switches.
fn periodic_threads(cx: &mut Ctx<'_>, h: &History, from: &Stored, to: &Stored, i: &Interval) {
    let t = cx.t;
    let candidates: HashMap<u64, usize> = i
        .threads
        .iter()
        .filter(|th| !cx.explained.contains(&th.tid) && !th.started_in_interval)
        .filter(|th| {
            th.switches_per_sec
                .is_some_and(|r| r >= t.periodic_wakeups_per_sec)
                && th.cpu_percent <= t.periodic_max_cpu_percent
        })
        .enumerate()
        .map(|(k, th)| (th.serial, k))
        .collect();
    if candidates.is_empty() {
        return;
    }
    // Per candidate: (monotonic ns, total switches) at every snapshot of the window.
    let mut series: Vec<Vec<(u64, u64)>> = vec![Vec::new(); candidates.len()];
    for s in h
        .iter()
        .filter(|s| s.header.seq >= from.header.seq && s.header.seq <= to.header.seq)
    {
        for th in &s.threads {
            if let Some(&k) = candidates.get(&th.ident.serial)
                && let Some(slices) = crate::platform::present(th.timeslices)
            {
                series[k].push((s.header.monotonic_ns, slices));
            }
        }
    }
    for th in &i.threads {
        let Some(&k) = candidates.get(&th.serial) else {
            continue;
        };
        let rates: Vec<f64> = series[k]
            .windows(2)
            .map(|w| per_sec(w[1].1.saturating_sub(w[0].1), w[1].0.saturating_sub(w[0].0)))
            .collect();
        if rates.len() < 3 {
            continue;
        }
        let mean = rates.iter().sum::<f64>() / rates.len() as f64;
        let var = rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / rates.len() as f64;
        let cv = if mean > 0.0 {
            var.sqrt() / mean
        } else {
            f64::INFINITY
        };
        if cv > t.periodic_max_variation {
            continue;
        }
        let period_ms = 1e3 / mean;
        cx.explained.insert(th.tid);
        cx.push(
            FindingKind::PeriodicWakeups,
            if mean >= 5.0 * t.periodic_wakeups_per_sec { Severity::Warning } else { Severity::Info },
            Subject::Thread { tid: th.tid, name: th.name.clone() },
            format!(
                "thread {} \"{}\" wakes every {period_ms:.1} ms ({mean:.0}/s, steady) and uses {:.2}% CPU: a periodic timer with little work",
                th.tid, th.name, th.cpu_percent
            ),
            vec![
                ev("switches_per_sec", mean, "1/s"),
                ev("period_ms", period_ms, "ms"),
                ev("rate_variation", cv, "ratio"),
                ev("thread_cpu_percent", th.cpu_percent, "%"),
            ],
            PERIODIC_ADVICE,
        );
    }
}

fn run_queue(cx: &mut Ctx<'_>, i: &Interval, system: &SystemInfo) {
    let t = cx.t;
    for th in &i.threads {
        let Some(wait) = th.run_queue_wait_percent else {
            continue;
        };
        if wait < t.run_queue_wait_percent || th.cpu_percent < 5.0 || cx.explained.contains(&th.tid)
        {
            continue;
        }
        let runnable: f64 = i
            .threads
            .iter()
            .map(|x| (x.cpu_percent + x.run_queue_wait_percent.unwrap_or(0.0)) / 100.0)
            .sum();
        cx.push(
            FindingKind::RunQueueContention,
            if wait >= 50.0 { Severity::Critical } else { Severity::Warning },
            Subject::Thread { tid: th.tid, name: th.name.clone() },
            format!(
                "thread {} \"{}\" waited for a CPU {wait:.0}% of the time while running {:.0}%: \
                 about {runnable:.1} of this process's threads want a CPU on {} cores",
                th.tid, th.name, th.cpu_percent, system.cpu_count
            ),
            vec![
                ev("run_queue_wait_percent", wait, "%"),
                ev("thread_cpu_percent", th.cpu_percent, "%"),
                ev("runnable_threads", runnable, "threads"),
                ev("cpu_count", f64::from(system.cpu_count), "cpus"),
            ],
            "The thread is runnable but not running: more runnable threads than cores (check thread-pool sizes \
             against the CPU count), other processes competing, or a container CPU quota throttling the process.",
        );
    }
}

fn cpu_hogs(cx: &mut Ctx<'_>, i: &Interval) {
    let t = cx.t;
    for th in &i.threads {
        if th.cpu_percent < t.cpu_hog_percent || cx.explained.contains(&th.tid) {
            continue;
        }
        cx.push(
            FindingKind::CpuHog,
            if th.cpu_percent >= 95.0 { Severity::Critical } else { Severity::Warning },
            Subject::Thread { tid: th.tid, name: th.name.clone() },
            format!(
                "thread {} \"{}\" used {:.0}% of a core for {:.0} s",
                th.tid,
                th.name,
                th.cpu_percent,
                i.duration_secs()
            ),
            vec![ev("thread_cpu_percent", th.cpu_percent, "%"), ev("window_s", i.duration_secs(), "s")],
            "A thread near a full core for a sustained time drains the battery; iOS kills background apps above 80% \
             CPU over 60 s. Profile it (perf, Instruments, Android Studio) and check for spinning, retries without \
             backoff or work that could be batched.",
        );
    }
}

fn wakeups_budget(cx: &mut Ctx<'_>, h: &History, from: &Stored, to: &Stored, i: &Interval) {
    let t = cx.t;
    // Apple's own counter where it exists; else voluntary switches (a thread
    // blocked and was woken), from the outermost snapshots that read them.
    let (rate, source, top) = if let Some(r) = i.process.interrupt_wakeups_per_sec {
        (r, "task_interrupt_wakeups", Vec::new())
    } else {
        let split = h
            .split_bounds(from.header.seq, to.header.seq)
            .filter(|(a, b)| {
                b.header.monotonic_ns.saturating_sub(a.header.monotonic_ns) >= ns(t.min_window)
            })
            .map(|(a, b)| between_stored(a, b));
        let (iv, field): (&Interval, fn(&crate::ThreadInterval) -> Option<f64>) = match &split {
            Some(s) => (s, |th| th.voluntary_switches_per_sec),
            None => (i, |th| th.switches_per_sec),
        };
        let mut per_thread: Vec<(f64, u64, String)> = iv
            .threads
            .iter()
            .filter_map(|th| Some((field(th)?, th.tid, th.name.clone())))
            .collect();
        per_thread.sort_by(|a, b| b.0.total_cmp(&a.0));
        let total = per_thread.iter().map(|p| p.0).sum();
        (
            total,
            if split.is_some() {
                "voluntary context switches"
            } else {
                "context switches"
            },
            per_thread,
        )
    };
    let budget = t.wakeups_budget_per_sec;
    if rate < budget * t.wakeups_warn_fraction {
        return;
    }
    let wakers: Vec<String> = top
        .iter()
        .take(3)
        .map(|(r, tid, name)| format!("{tid} \"{name}\" {r:.0}/s"))
        .collect();
    let wakers = if wakers.is_empty() {
        String::new()
    } else {
        format!("; top wakers: {}", wakers.join(", "))
    };
    let limit_total = budget * ns(t.wakeups_window) as f64 / 1e9;
    cx.push(
        FindingKind::WakeupsBudget,
        if rate >= budget { Severity::Critical } else { Severity::Warning },
        Subject::Process { pid: i.process.pid },
        format!(
            "the process wakes {rate:.0} times/s over {:.0} s ({source}): {:.1}x iOS's budget of {budget:.0}/s \
             ({limit_total:.0} per {:.0} s would be used up in {:.0} s){wakers}",
            i.duration_secs(),
            rate / budget,
            t.wakeups_window.as_secs_f64(),
            limit_total / rate
        ),
        vec![
            ev("wakeups_per_sec", rate, "1/s"),
            ev("budget_per_sec", budget, "1/s"),
            ev("seconds_to_limit", limit_total / rate, "s"),
        ],
        "iOS raises EXC_RESOURCE WAKEUPS (and Android vitals flags excessive wakeups) for processes that wake this \
         often. Find the top wakers above and remove polling and short timers.",
    );
}

fn memory_growth(cx: &mut Ctx<'_>, h: &History) {
    let t = cx.t;
    let (Some(first), Some(last)) = (h.iter().next(), h.latest()) else {
        return;
    };
    let d = last
        .header
        .monotonic_ns
        .saturating_sub(first.header.monotonic_ns);
    if d < ns(t.min_window) || h.len() < 3 {
        return;
    }
    let (a, b) = (
        first.header.process.rss_bytes,
        last.header.process.rss_bytes,
    );
    let growth = b.saturating_sub(a);
    if growth < t.memory_growth_bytes || (growth as f64) < t.memory_growth_ratio * a as f64 {
        return;
    }
    let steps: Vec<bool> = h
        .iter()
        .zip(h.iter().skip(1))
        .map(|(x, y)| y.header.process.rss_bytes >= x.header.process.rss_bytes)
        .collect();
    let rising = steps.iter().filter(|s| **s).count() as f64 / steps.len().max(1) as f64;
    if rising < 0.7 {
        return;
    }
    let mib = |v: u64| v as f64 / (1u64 << 20) as f64;
    let per_min = growth as f64 / (d as f64 / 60e9);
    cx.window_ns = d;
    cx.push(
        FindingKind::MemoryGrowth,
        if growth >= a { Severity::Critical } else { Severity::Warning },
        Subject::Process { pid: last.header.process.pid },
        format!(
            "resident memory grew from {:.1} MiB to {:.1} MiB over {:.0} s ({:.1} MiB/min), rising in {:.0}% of samples",
            mib(a),
            mib(b),
            d as f64 / 1e9,
            mib(per_min as u64),
            rising * 100.0
        ),
        vec![
            ev("rss_start_bytes", a as f64, "bytes"),
            ev("rss_end_bytes", b as f64, "bytes"),
            ev("growth_bytes_per_min", per_min, "bytes/min"),
            ev("rising_ratio", rising, "ratio"),
        ],
        "Steady growth across the whole history looks like a leak or an unbounded cache/queue. Compare heap \
         profiles at two points (heaptrack, Instruments Allocations, Android Studio) or bound the cache.",
    );
}

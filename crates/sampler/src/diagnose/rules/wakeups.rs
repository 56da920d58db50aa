//! Findings on wakeups: periodic wakeups of a thread, and Apple's wakeups
//! budget of the process.

use super::wake_source::{TOKIO_TIMER_ADVICE, WakeSource};
use super::{Ctx, FindingKind, Grade, Severity, Subject, ns, number};
use crate::history::{History, Stored};
use crate::interval::groups::group_name;
use crate::interval::{Interval, ThreadInterval, between_stored, per_sec};
use crate::model::LoopKind;

/// A thread's wakes per second over the interval and where the figure
/// comes from: the kernel view's wakes when attached, else its voluntary
/// switches (each one a block that a wake ended). Never its involuntary
/// switches: a preempted thread was not woken. `None` when neither is
/// known.
fn wake_rate(th: &ThreadInterval) -> Option<(f64, &'static str)> {
    if let Some(k) = &th.kernel {
        return Some((k.wakes_per_sec, "kernel wakes"));
    }
    th.voluntary_switches_per_sec
        .map(|r| (r, "voluntary context switches"))
}

/// Threads woken at a steady rate with little CPU. The rate is of wakes
/// only ([`wake_rate`]). The steadiness comes from the per-sample series
/// of all switches, the one counter read at every sample (the voluntary
/// split is read every few samples only): its spread is divided by the
/// wake rate, not by its own mean, so that steady preemptions neither
/// hide the spread of the wakes nor add to the rate. What wakes it
/// (a timer, I/O, other threads) comes from the kernel view's wake
/// sources; without it the finding does not guess.
pub(super) fn periodic_threads(
    cx: &mut Ctx<'_>,
    h: &History,
    from: &Stored,
    to: &Stored,
    i: &Interval,
) {
    let t = cx.t;
    // (serial, candidate number), sorted by serial for lookups.
    let mut candidates: Vec<(u64, usize)> = i
        .threads
        .iter()
        .filter(|th| !cx.explained.contains(&th.tid) && !th.started_in_interval)
        .filter(|th| {
            // A JVM's `VM Periodic Task` at 19.5-20.1/s against the 20/s
            // line was shown in one report of four without the hysteresis.
            wake_rate(th).is_some_and(|(r, _)| {
                cx.reaches(
                    FindingKind::PeriodicWakeups,
                    r,
                    t.periodic_wakeups_per_sec,
                    || Subject::Thread {
                        tid: th.tid,
                        name: th.name.clone(),
                    },
                )
            }) && cx.under(
                FindingKind::PeriodicWakeups,
                th.cpu_percent,
                t.periodic_max_cpu_percent,
                || Subject::Thread {
                    tid: th.tid,
                    name: th.name.clone(),
                },
            )
        })
        .enumerate()
        .map(|(k, th)| (th.serial, k))
        .collect();
    if candidates.is_empty() {
        return;
    }
    candidates.sort_unstable();
    let candidate = |serial: u64| {
        candidates
            .binary_search_by_key(&serial, |&(s, _)| s)
            .ok()
            .and_then(|at| candidates.get(at))
            .map(|&(_, k)| k)
    };
    let in_window = || {
        h.iter()
            .filter(|s| s.header.seq >= from.header.seq && s.header.seq <= to.header.seq)
    };
    let snapshots = in_window().count();
    // Per candidate: (monotonic ns, total switches) at every snapshot of the window.
    let mut series: Vec<Vec<(u64, u64)>> = (0..candidates.len())
        .map(|_| Vec::with_capacity(snapshots))
        .collect();
    for s in in_window() {
        for th in &s.threads {
            if let Some(k) = candidate(th.ident.serial)
                && let Some(slices) = crate::model::present(th.total_switches)
                && let Some(series) = series.get_mut(k)
            {
                series.push((s.header.monotonic_ns, slices));
            }
        }
    }
    // Per candidate with enough samples: (thread, wakes/s, source of the
    // figure, variation, group name).
    let mut measured = Vec::new();
    for th in &i.threads {
        let Some(k) = candidate(th.serial) else {
            continue;
        };
        let Some((wakes, counted)) = wake_rate(th) else {
            continue;
        };
        let rates: Vec<f64> = series[k]
            .windows(2)
            .map(|w| per_sec(w[1].1.saturating_sub(w[0].1), w[1].0.saturating_sub(w[0].0)))
            .collect();
        // Steadiness needs a few per-sample rates; how many a window holds
        // moves with the sampler's jitter (a 2 s window over 1 s samples
        // holds 3 rates when they come every 999 ms, 2 when every
        // 1001 ms: a ticker at exactly 100/s appeared and vanished 19
        // times in 47 reports). A thread shown before keeps its finding
        // with two.
        let needed = if cx.shown_before(
            FindingKind::PeriodicWakeups,
            &Subject::Thread {
                tid: th.tid,
                name: th.name.clone(),
            },
        ) {
            t.periodic_min_samples.min(2)
        } else {
            t.periodic_min_samples
        };
        if rates.len() < needed as usize {
            continue;
        }
        let mean = rates.iter().sum::<f64>() / rates.len() as f64;
        let var = rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / rates.len() as f64;
        let cv = if wakes > 0.0 {
            var.sqrt() / wakes
        } else {
            f64::INFINITY
        };
        measured.push((th, wakes, counted, cv, group_name(&th.name)));
    }
    for &(th, wakes, counted, cv, ref group) in &measured {
        // Alike threads (one group name, wake rates within the grouping
        // tolerance) are judged steady or not together, on their median
        // variation: Node's four V8 workers under load sat at 0.22-0.28
        // around the 0.25 line, and each report named a different two of
        // them as "behaving alike" while the others did the same.
        let mut peers: Vec<f64> = measured
            .iter()
            .filter(|(_, r, _, _, g)| {
                g == group && (r - wakes).abs() <= t.group_max_difference * r.max(wakes)
            })
            .map(|p| p.3)
            .collect();
        peers.sort_by(f64::total_cmp);
        let n = peers.len();
        let median = match n {
            0 => cv,
            _ if n % 2 == 1 => peers[n / 2],
            _ => (peers[n / 2 - 1] + peers[n / 2]) / 2.0,
        };
        // Steady enough, with the margin for a thread shown before: its
        // presence, like its rate, does not flip at the line.
        if !cx.under(
            FindingKind::PeriodicWakeups,
            median,
            t.periodic_max_variation,
            || Subject::Thread {
                tid: th.tid,
                name: th.name.clone(),
            },
        ) {
            continue;
        }
        let period_ms = 1e3 / wakes;
        let preempted = th
            .kernel
            .as_ref()
            .map(|k| k.involuntary_switches_per_sec)
            .or(th.involuntary_switches_per_sec)
            .filter(|r| *r >= 0.5)
            .map(|r| format!("; its {r:.0} preemptions/s are not counted"))
            .unwrap_or_default();
        let source = WakeSource::of(th.kernel.as_ref(), t);
        // A tokio worker (its probe made by `runtime::instrument`) whose
        // wakes may be its runtime's timer: the words and advice name it.
        let worker = i
            .loops
            .iter()
            .find(|l| l.tid == Some(th.tid) && l.kind == LoopKind::TokioWorker);
        let runtime_timer = worker.is_some() && source.may_be_runtime_timer();
        let advice = if runtime_timer {
            TOKIO_TIMER_ADVICE
        } else {
            source.advice(cx.os)
        };
        let mut evidence = vec![
            number("wakeups_per_sec", wakes, "1/s"),
            number("period_ms", period_ms, "ms"),
            number("rate_variation", cv, "ratio"),
            number("thread_cpu_percent", th.cpu_percent, "%"),
        ];
        if let Some(w) = worker {
            // The worker's unparks, as tokio's hooks counted them.
            evidence.push(number("parks_ended_per_sec", w.wakeups_per_sec, "1/s"));
        }
        if let Some(k) = &th.kernel {
            evidence.extend([
                number("interrupt_wakes_per_sec", k.interrupt_wakes_per_sec, "1/s"),
                number(
                    "process_thread_wakes_per_sec",
                    k.process_thread_wakes_per_sec,
                    "1/s",
                ),
                number(
                    "other_process_wakes_per_sec",
                    k.other_process_wakes_per_sec,
                    "1/s",
                ),
                number("blocked_percent", k.blocked_percent, "%"),
                number(
                    "timed_futex_waits_per_sec",
                    k.timed_futex_waits_per_sec,
                    "1/s",
                ),
                number("futex_timeouts_per_sec", k.futex_timeouts_per_sec, "1/s"),
            ]);
        }
        cx.explained.insert(th.tid);
        let subject = Subject::Thread {
            tid: th.tid,
            name: th.name.clone(),
        };
        cx.push_graded(
            FindingKind::PeriodicWakeups,
            Grade { value: wakes, base: Severity::Info, steps: &[(t.periodic_warning_wakeups_per_sec, Severity::Warning)] },
            subject,
            move || {
                // Woken by other threads, a steady rate is the rate of the
                // work handed to it (a pool thread under a steady load),
                // not a period of its own: no "every N ms" then.
                let rate = if matches!(source, WakeSource::ProcessThreads | WakeSource::OtherProcesses) {
                    format!("is woken {wakes:.0} times/s at a steady rate (from {counted}{preempted})")
                } else {
                    format!("wakes every {period_ms:.1} ms ({wakes:.0}/s from {counted}, steady{preempted})")
                };
                let cause = if runtime_timer {
                    source.runtime_timer_cause(th.kernel.as_ref())
                } else {
                    source.cause(th.kernel.as_ref())
                };
                let what = if runtime_timer { "tokio worker" } else { "thread" };
                format!(
                    "{what} {} \"{}\" {rate} and uses {:.2}% CPU: {cause}",
                    th.tid,
                    th.name,
                    th.cpu_percent,
                )
            },
            evidence,
            advice,
        );
    }
}

pub(super) fn wakeups_budget(
    cx: &mut Ctx<'_>,
    h: &History,
    from: &Stored,
    to: &Stored,
    i: &Interval,
) {
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
        let (iv, field): (
            &Interval,
            fn(&crate::interval::ThreadInterval) -> Option<f64>,
        ) = match &split {
            Some(s) => (s, |th| th.voluntary_switches_per_sec),
            None => (i, |th| th.switches_per_sec),
        };
        let mut per_thread: Vec<(f64, u64, String)> = iv
            .threads
            .iter()
            .filter_map(|th| Some((field(th)?, th.tid, th.name.clone())))
            .collect();
        let total = per_thread.iter().map(|p| p.0).sum();
        // Listed are threads that were woken: none at "0/s".
        per_thread.retain(|p| p.0 >= 0.5);
        per_thread.sort_by(|a, b| b.0.total_cmp(&a.0));
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
        format!("; most woken threads: {}", wakers.join(", "))
    };
    let limit_total = budget * ns(t.wakeups_window) as f64 / 1e9;
    let subject = Subject::Process { pid: i.process.pid };
    cx.push_graded(
            FindingKind::WakeupsBudget,
            Grade { value: rate, base: Severity::Warning, steps: &[(budget, Severity::Critical)] },
            subject,
        move || format!(
            "the process wakes {rate:.0} times/s over {:.0} s ({source}): {:.1}x iOS's budget of {budget:.0}/s \
             ({limit_total:.0} per {:.0} s would be used up in {:.0} s){wakers}",
            i.duration_secs(),
            rate / budget,
            t.wakeups_window.as_secs_f64(),
            limit_total / rate
        ),
        vec![
            number("wakeups_per_sec", rate, "1/s"),
            number("budget_per_sec", budget, "1/s"),
            number("seconds_to_limit", limit_total / rate, "s"),
        ],
        "iOS raises EXC_RESOURCE WAKEUPS (and Android vitals flags excessive wakeups) for processes that wake this \
         often. Start with the most woken threads above (the kernel view, with eBPF, names who wakes them) and remove \
         polling and short timers.",
    );
}

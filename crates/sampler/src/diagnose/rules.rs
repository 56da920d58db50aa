//! The rules of the findings engine.

use std::collections::HashSet;
use std::time::Duration;

use super::{Evidence, Finding, FindingKind, Severity, Subject, Thresholds};
use crate::compare::group_name;
use crate::history::{History, Stored};
use crate::interval::{
    Interval, KernelThreadInterval, SyscallRate, ThreadInterval, between_in_history,
    between_stored, per_sec,
};
use crate::kernel::Syscall;
use crate::model::SystemInfo;

use crate::probe::duration_ns as ns;

/// One number behind a finding while the rules run: static name and
/// unit, made into an [`Evidence`] only for a finding that is kept.
#[derive(Debug, Clone, Copy)]
struct Ev {
    name: &'static str,
    value: f64,
    unit: &'static str,
}

fn number(name: &'static str, value: f64, unit: &'static str) -> Ev {
    Ev { name, value, unit }
}

fn ev(name: &str, value: f64, unit: &str) -> Evidence {
    Evidence {
        name: name.to_string(),
        value,
        unit: unit.to_string(),
    }
}

impl From<Ev> for Evidence {
    fn from(e: Ev) -> Evidence {
        Evidence {
            name: e.name.to_string(),
            value: e.value,
            unit: e.unit.to_string(),
        }
    }
}

/// Oldest and newest stored snapshots of a window ending at the newest;
/// `None` when the history covers less than `min`.
fn window(h: &History, span: Duration, min: Duration) -> Option<(&Stored, &Stored)> {
    let to = h.latest()?;
    // The newest snapshot at least `span` old, so that a window covers its
    // whole span once the history does (and a minimum equal to the span
    // can be met); the oldest one while the history is shorter.
    let from = to
        .header
        .monotonic_ns
        .checked_sub(ns(span))
        .and_then(|start| h.last_at_or_before(start))
        .or_else(|| h.iter().next())?;
    if to
        .header
        .monotonic_ns
        .saturating_sub(from.header.monotonic_ns)
        < ns(min)
        || from.header.seq == to.header.seq
    {
        return None;
    }
    Some((from, to))
}

/// The intervals of the rules' windows, each computed once: windows that
/// start at the same snapshot (every window, while the history is shorter
/// than the shortest) share one, and so does an interval the caller
/// already has (a report's).
struct Windows<'a> {
    known: Option<&'a Interval>,
    computed: Vec<Interval>,
}

impl Windows<'_> {
    /// Where the interval of `(from, to)` is: `None` for the known one,
    /// else its index in `computed` (computed now if new).
    fn add(&mut self, h: &History, from: &Stored, to: &Stored) -> Option<usize> {
        let ends = (from.header.seq, to.header.seq);
        if self.known.is_some_and(|k| (k.from_seq, k.to_seq) == ends) {
            return None;
        }
        if let Some(i) = self
            .computed
            .iter()
            .position(|c| (c.from_seq, c.to_seq) == ends)
        {
            return Some(i);
        }
        self.computed.push(between_in_history(h, from, to));
        Some(self.computed.len() - 1)
    }

    fn get(&self, at: Option<usize>) -> Option<&Interval> {
        match at {
            None => self.known,
            Some(i) => self.computed.get(i),
        }
    }
}

struct Ctx<'a> {
    t: &'a Thresholds,
    out: Grouper,
    /// Threads already explained by a more specific finding (or excluded).
    explained: HashSet<u64>,
    /// Window of the rule running now, in nanoseconds.
    window_ns: u64,
}

impl Ctx<'_> {
    /// Adds a finding; `summary` is formatted only when the finding is
    /// kept (not when it joins a group of alike threads).
    fn push(
        &mut self,
        kind: FindingKind,
        severity: Severity,
        subject: Subject,
        summary: impl FnOnce() -> String,
        evidence: Vec<Ev>,
        advice: &str,
    ) {
        let window_ns = self.window_ns;
        let tolerance = self.t.group_max_difference;
        self.out.offer(
            kind,
            severity,
            subject,
            evidence,
            tolerance,
            |subject, evidence| Finding {
                kind,
                severity,
                summary: summary(),
                subject,
                evidence: evidence.into_iter().map(Evidence::from).collect(),
                advice: advice.to_string(),
                window_ns,
            },
        );
    }
}

fn thread_cpu(i: &Interval, tid: Option<u64>) -> Option<f64> {
    let tid = tid?;
    i.threads
        .iter()
        .find(|t| t.tid == tid)
        .map(|t| t.cpu_percent)
}

/// Percent of the interval thread `tid` spent blocked (off CPU and not
/// waiting for one): from the kernel view when there is one, else from
/// `/proc` as what is left of 100% after CPU and run-queue wait. `None`
/// for an unknown thread.
fn blocked_percent(i: &Interval, tid: Option<u64>) -> Option<f64> {
    let tid = tid?;
    let th = i.threads.iter().find(|t| t.tid == tid)?;
    if let Some(k) = &th.kernel {
        return Some(k.blocked_percent);
    }
    let running = th.cpu_percent + th.run_queue_wait_percent.unwrap_or(0.0);
    Some((100.0 - running).clamp(0.0, 100.0))
}

const BUSY_POLL_ADVICE: &str = "Block in the wait until an event arrives or the next timer is due instead of polling: \
pass a real timeout (not 0) to poll/epoll_wait/kevent and make sure the loop is not re-armed by a timer of 0. \
With libevent, check the backend it chose (event_base_get_method): 'poll' or 'select' where 'epoll' or 'kqueue' \
is available is a known cause (Envoy Mobile on iOS burned >=100% CPU while idle until kqueue was forced; ~3% after).";

const BUSY_POLL_ADVICE_POLL: &str = "Block in the wait until an event arrives or the next timer is due instead of \
polling: pass a real timeout (not 0). This thread polls with poll(2)/select(2): if it is a portable event loop \
(libevent, libuv, a runtime), check the backend it chose (libevent: event_base_get_method) — 'poll' or 'select' \
where 'epoll' or 'kqueue' is available is a known cause (Envoy Mobile on iOS burned >=100% CPU while idle until \
kqueue was forced; ~3% after).";

const BUSY_POLL_ADVICE_EPOLL: &str = "This thread already uses epoll, but with a zero (or tiny) timeout, so it never \
waits: pass -1 or the time until its next timer is due, and make sure the loop is not re-armed by a timer of 0 or \
a callback that always queues more work.";

const SLEEP_ADVICE: &str = "Replace the sleep-and-check loop with a blocking wait that is signalled when work arrives \
(condition variable, semaphore, eventfd/pipe, a dispatch source). If a period is really needed, sleep longer or use a \
coalescing timer. On Apple platforms, lowering the polling thread's priority/QoS also cut this cost (8% -> 0.8% in an audio engine).";

const SIGNAL_ADVICE: &str = "Find what sends the signals: an interval timer (setitimer, timer_create with SIGALRM), \
a profiler's SIGPROF, or another process calling kill(). Lower its frequency, block the signal in threads that need \
not handle it (pthread_sigmask) or send a timer's signal to one thread (SIGEV_THREAD_ID). A sleep restarted with its \
full length after every signal never ends on time: pass the remaining time, or sleep to an absolute deadline \
(clock_nanosleep with TIMER_ABSTIME).";

const PERIODIC_ADVICE: &str = "Each wakeup takes the CPU out of idle. Make the timer fire only when there is work \
(arm it on demand), lengthen its period, or let the OS coalesce it (timer slack/leeway, Android WorkManager, \
DispatchSource leeway).";

const THREADS_ADVICE: &str = "Other threads of this process wake it, one small handoff at a time. Hand work over \
in batches (one notification per batch, not per item), reuse threads from a pool instead of starting and joining \
short-lived ones, and check for condition variables signalled (or futexes woken) when nothing changed.";

const OTHER_PROCESS_ADVICE: &str = "Another process wakes it (through a pipe, socket, signal or shared futex): \
check how often that process notifies this one, and batch its messages.";

const IO_ADVICE: &str = "Interrupts of I/O completions (network or disk) wake it with little work each: read and \
write in larger batches, let the device coalesce interrupts (ethtool -C), or raise the socket's receive low-water \
mark (SO_RCVLOWAT) so that a wakeup finds more to do.";

const UNKNOWN_SOURCE_ADVICE: &str = "Find what wakes it: a timer of its own, another thread handing it work, or I/O. \
With the kernel view attached (eBPF, as root) wakemeter names the source. Then make the wakeups fewer: timers armed \
on demand or coalesced, work handed over in batches.";

/// What makes a thread runnable, as far as the kernel view tells.
#[derive(Debug, Clone, Copy, PartialEq)]
enum WakeSource {
    /// Interrupts, with its waits ending on their timeout: a timer.
    Timer,
    /// Interrupts, with its waits ending on I/O (poll calls returning
    /// events, uninterruptible I/O): network or disk completions.
    Io,
    /// Interrupts, with nothing to tell a timer from I/O.
    Interrupt,
    /// Other threads of this process.
    ProcessThreads,
    /// Threads of other processes.
    OtherProcesses,
    /// No source has a clear majority.
    Mixed,
    /// No kernel view, or no wake seen.
    Unknown,
}

impl WakeSource {
    fn of(k: Option<&KernelThreadInterval>, t: &Thresholds) -> WakeSource {
        let Some(k) = k else {
            return WakeSource::Unknown;
        };
        let irq = k.interrupt_wakes_per_sec;
        let total = irq + k.process_thread_wakes_per_sec + k.other_process_wakes_per_sec;
        if total <= 0.0 {
            return WakeSource::Unknown;
        }
        if irq / total >= t.wake_source_ratio {
            // Waits that ended on their timeout: sleeps, and blocking polls
            // that returned nothing. Waits that ended on I/O: polls with
            // events, uninterruptible I/O.
            let idle_polls = k.idle_poll_ratio * k.poll_calls_per_sec;
            let timed_out_polls = (idle_polls - k.idle_nonblocking_polls_per_sec).max(0.0);
            let polls_with_events = (k.blocking_polls_per_sec - timed_out_polls).max(0.0);
            let timer = k.sleeps_per_sec + timed_out_polls;
            let io_time = k.off_cpu.io_ns as f64;
            let wait_time = (k.off_cpu.sleep_ns + k.off_cpu.poll_ns) as f64;
            return if timer > 0.0 && timer >= t.wake_source_ratio * (timer + polls_with_events) {
                WakeSource::Timer
            } else if polls_with_events > timer || io_time > wait_time {
                WakeSource::Io
            } else {
                WakeSource::Interrupt
            };
        }
        if k.process_thread_wakes_per_sec / total >= t.wake_source_ratio {
            WakeSource::ProcessThreads
        } else if k.other_process_wakes_per_sec / total >= t.wake_source_ratio {
            WakeSource::OtherProcesses
        } else {
            WakeSource::Mixed
        }
    }

    /// What to do about wakeups from this source.
    fn advice(self) -> &'static str {
        match self {
            WakeSource::Timer | WakeSource::Interrupt => PERIODIC_ADVICE,
            WakeSource::Io => IO_ADVICE,
            WakeSource::ProcessThreads => THREADS_ADVICE,
            WakeSource::OtherProcesses => OTHER_PROCESS_ADVICE,
            WakeSource::Mixed | WakeSource::Unknown => UNKNOWN_SOURCE_ADVICE,
        }
    }

    /// The end of a periodic-wakeups summary.
    fn cause(self, k: Option<&KernelThreadInterval>) -> String {
        let shares = k
            .map(|k| {
                let total = (k.interrupt_wakes_per_sec
                    + k.process_thread_wakes_per_sec
                    + k.other_process_wakes_per_sec)
                    .max(f64::MIN_POSITIVE);
                format!(
                    "{:.0}% of its wakes by interrupts, {:.0}% by threads of this process, {:.0}% by other processes",
                    k.interrupt_wakes_per_sec * 100.0 / total,
                    k.process_thread_wakes_per_sec * 100.0 / total,
                    k.other_process_wakes_per_sec * 100.0 / total
                )
            })
            .unwrap_or_default();
        let top_thread = k
            .and_then(|k| k.top_wakers.iter().find(|w| w.tid != 0))
            .map(|w| format!(" (top waker: {} \"{}\")", w.tid, w.name))
            .unwrap_or_default();
        match self {
            WakeSource::Timer => format!("a periodic timer with little work ({shares})"),
            WakeSource::Io => format!("woken by I/O interrupts with little work each ({shares})"),
            WakeSource::Interrupt => {
                format!("woken by interrupts, a timer or I/O, with little work each ({shares})")
            }
            WakeSource::ProcessThreads => format!(
                "woken by other threads of this process{top_thread}, not by a timer ({shares})"
            ),
            WakeSource::OtherProcesses => {
                format!("woken by another process{top_thread}, not by a timer ({shares})")
            }
            WakeSource::Mixed => format!("woken by several sources ({shares})"),
            WakeSource::Unknown => "woken by a timer, another thread or I/O (without the kernel view, which one is unknown)"
                .to_string(),
        }
    }
}

pub(super) fn run(
    h: &History,
    t: &Thresholds,
    system: &SystemInfo,
    exclude_tid: Option<u64>,
    known: Option<&Interval>,
) -> Vec<Finding> {
    let mut cx = Ctx {
        t,
        out: Grouper::default(),
        explained: exclude_tid.into_iter().collect(),
        window_ns: 0,
    };
    let mut w = Windows {
        known,
        computed: Vec::new(),
    };
    let rates = window(h, t.window, t.min_window).map(|(a, b)| (a, b, w.add(h, a, b)));
    let cpu = window(h, t.cpu_window, t.cpu_min_window).map(|(a, b)| w.add(h, a, b));
    let wakeups =
        window(h, t.wakeups_window, t.wakeups_min_window).map(|(a, b)| (a, b, w.add(h, a, b)));
    if let Some((from, to, at)) = rates
        && let Some(i) = w.get(at)
    {
        cx.window_ns = i.duration_ns;
        busy_poller_loops(&mut cx, i);
        sleep_sites(&mut cx, i);
        kernel_threads(&mut cx, i);
        periodic_loops(&mut cx, i);
        periodic_threads(&mut cx, h, from, to, i);
        run_queue(&mut cx, i, system);
    }
    if let Some(at) = cpu
        && let Some(i) = w.get(at)
    {
        cx.window_ns = i.duration_ns;
        cpu_hogs(&mut cx, i);
    }
    if let Some((from, to, at)) = wakeups
        && let Some(i) = w.get(at)
    {
        cx.window_ns = i.duration_ns;
        wakeups_budget(&mut cx, h, from, to, i);
    }
    memory_growth(&mut cx, h);
    let mut out = cx.out.finish(t);
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

/// The syscalls of one family, most called first, as "poll(2) 41000/s".
fn syscall_mix(k: &KernelThreadInterval, poll: bool) -> (Vec<&SyscallRate>, String) {
    let mut calls: Vec<&SyscallRate> = k
        .calls_by_syscall
        .iter()
        .filter(|c| c.syscall.is_poll() == poll)
        .collect();
    calls.sort_by(|a, b| b.calls_per_sec.total_cmp(&a.calls_per_sec));
    let text = calls
        .iter()
        .map(|c| format!("{}(2) {:.0}/s", c.syscall.name(), c.calls_per_sec))
        .collect::<Vec<_>>()
        .join(", ");
    (calls, text)
}

/// Busy pollers, sleep loops and signal-interrupted sleeps seen by a
/// kernel source (eBPF) in threads that no probe instruments, e.g. an
/// unmodified proxy.
fn kernel_threads(cx: &mut Ctx<'_>, i: &Interval) {
    for th in &i.threads {
        let Some(k) = &th.kernel else { continue };
        if cx.explained.contains(&th.tid) {
            continue;
        }
        if kernel_busy_poller(cx, th, k) || kernel_signal_wakeups(cx, th, k) {
            cx.explained.insert(th.tid);
            continue;
        }
        if kernel_sleep_loop(cx, th, k) {
            cx.explained.insert(th.tid);
        }
    }
}

/// Busy-polling from the kernel view: many polls that find nothing while
/// the thread hardly ever blocks. Counting calls alone is wrong: a
/// libuv-style loop makes a zero-timeout poll before each blocking one, so
/// a 1 ms timer doubles its calls and every one of them "finds nothing",
/// yet the thread is blocked 95% of the time.
fn kernel_busy_poller(cx: &mut Ctx<'_>, th: &ThreadInterval, k: &KernelThreadInterval) -> bool {
    let t = cx.t;
    let idle_polls = k.idle_poll_ratio * k.poll_calls_per_sec;
    if idle_polls < t.busy_poll_wakeups_per_sec
        || k.blocked_percent > t.busy_poll_max_blocked_percent
    {
        return false;
    }
    let (calls, mix) = syscall_mix(k, true);
    let advice = match calls.first().map(|c| c.syscall) {
        Some(Syscall::Poll | Syscall::Ppoll | Syscall::Select | Syscall::Pselect6) => {
            BUSY_POLL_ADVICE_POLL
        }
        Some(Syscall::EpollWait | Syscall::EpollPwait | Syscall::EpollPwait2) => {
            BUSY_POLL_ADVICE_EPOLL
        }
        _ => BUSY_POLL_ADVICE,
    };
    let mix = if mix.is_empty() {
        String::new()
    } else {
        format!(" ({mix})")
    };
    let severity = if th.cpu_percent >= t.busy_poll_critical_cpu_percent
        || idle_polls >= t.busy_poll_critical_wakeups_per_sec
    {
        Severity::Critical
    } else {
        Severity::Warning
    };
    cx.push(
        FindingKind::BusyPoller,
        severity,
        Subject::Thread {
            tid: th.tid,
            name: th.name.clone(),
        },
        move || format!(
            "thread {} \"{}\" polls {:.0} times/s{mix}, {:.0} of them find nothing without waiting, \
             and it is blocked only {:.0}% of the time (kernel view): it is busy-polling, using {:.0}% of a core",
            th.tid,
            th.name,
            k.poll_calls_per_sec,
            k.idle_nonblocking_polls_per_sec,
            k.blocked_percent,
            th.cpu_percent
        ),
        vec![
            number("poll_calls_per_sec", k.poll_calls_per_sec, "1/s"),
            number("idle_polls_per_sec", idle_polls, "1/s"),
            number(
                "idle_nonblocking_polls_per_sec",
                k.idle_nonblocking_polls_per_sec,
                "1/s",
            ),
            number("blocking_polls_per_sec", k.blocking_polls_per_sec, "1/s"),
            number("zero_timeout_poll_ratio", k.zero_timeout_poll_ratio, "ratio"),
            number("blocked_percent", k.blocked_percent, "%"),
            number("thread_cpu_percent", th.cpu_percent, "%"),
        ],
        advice,
    );
    true
}

/// Sleeps cut short by signals: the thread wakes because of the signals.
/// Its "sleep rate" is the signal rate, and its requested length says
/// nothing about how long it slept.
fn kernel_signal_wakeups(cx: &mut Ctx<'_>, th: &ThreadInterval, k: &KernelThreadInterval) -> bool {
    let t = cx.t;
    if k.sleeps_per_sec < t.sleep_calls_per_sec
        || k.interrupted_sleeps_per_sec < t.sleep_interrupted_ratio * k.sleeps_per_sec
    {
        return false;
    }
    let asked = requested_text(k);
    cx.push(
        FindingKind::SignalWakeups,
        if k.interrupted_sleeps_per_sec >= t.sleep_warning_calls_per_sec {
            Severity::Warning
        } else {
            Severity::Info
        },
        Subject::Thread {
            tid: th.tid,
            name: th.name.clone(),
        },
        move || format!(
            "thread {} \"{}\" is interrupted by signals {:.0} times/s while sleeping: its sleeps ask for {asked} \
             but last {:.2} ms on average ({:.0}% end early, kernel view); the wakeups come from the signals, \
             not from a sleep loop",
            th.tid,
            th.name,
            k.interrupted_sleeps_per_sec,
            k.mean_sleep_actual_ns as f64 / 1e6,
            k.interrupted_sleeps_per_sec * 100.0 / k.sleeps_per_sec
        ),
        vec![
            number("interrupted_sleeps_per_sec", k.interrupted_sleeps_per_sec, "1/s"),
            number("sleeps_per_sec", k.sleeps_per_sec, "1/s"),
            number("mean_requested_ns", k.mean_sleep_requested_ns as f64, "ns"),
            number("mean_actual_ns", k.mean_sleep_actual_ns as f64, "ns"),
            number("interrupt_wakes_per_sec", k.interrupt_wakes_per_sec, "1/s"),
        ],
        SIGNAL_ADVICE,
    );
    true
}

/// The requested length of a thread's sleeps in words: "10.00 ms each",
/// or that it is unknown (an absolute deadline on a clock the kernel side
/// cannot read), never a made-up 0.
fn requested_text(k: &KernelThreadInterval) -> String {
    if k.mean_sleep_requested_ns == 0 && k.unknown_request_sleeps > 0 {
        "an unknown length (absolute deadlines on a clock the kernel view cannot read)".to_string()
    } else {
        format!("{:.2} ms", k.mean_sleep_requested_ns as f64 / 1e6)
    }
}

fn kernel_sleep_loop(cx: &mut Ctx<'_>, th: &ThreadInterval, k: &KernelThreadInterval) -> bool {
    let t = cx.t;
    let completed = (k.sleeps_per_sec - k.interrupted_sleeps_per_sec).max(0.0);
    if completed < t.sleep_calls_per_sec {
        return false;
    }
    let interrupted = if k.interrupted_sleeps_per_sec > 0.0 {
        format!(
            " ({:.0}/s more were cut short by signals)",
            k.interrupted_sleeps_per_sec
        )
    } else {
        String::new()
    };
    let (_, mix) = syscall_mix(k, false);
    let mix = if mix.is_empty() {
        String::new()
    } else {
        format!(" with {mix}")
    };
    cx.push(
        FindingKind::SleepOverhead,
        if completed >= t.sleep_warning_calls_per_sec {
            Severity::Warning
        } else {
            Severity::Info
        },
        Subject::Thread {
            tid: th.tid,
            name: th.name.clone(),
        },
        move || format!(
            "thread {} \"{}\" sleeps {completed:.0} times/s{mix}, asking for {} and sleeping {:.2} ms each{interrupted} \
             (kernel view): a sleep-and-check polling loop",
            th.tid,
            th.name,
            requested_text(k),
            k.mean_sleep_actual_ns as f64 / 1e6
        ),
        vec![
            number("sleeps_per_sec", k.sleeps_per_sec, "1/s"),
            number("completed_sleeps_per_sec", completed, "1/s"),
            number("interrupted_sleeps_per_sec", k.interrupted_sleeps_per_sec, "1/s"),
            number("mean_requested_ns", k.mean_sleep_requested_ns as f64, "ns"),
            number("mean_actual_ns", k.mean_sleep_actual_ns as f64, "ns"),
        ],
        SLEEP_ADVICE,
    );
    true
}

fn sleep_sites(cx: &mut Ctx<'_>, i: &Interval) {
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

fn periodic_loops(cx: &mut Ctx<'_>, i: &Interval) {
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
        cx.push(
            FindingKind::PeriodicWakeups,
            if l.wakeups_per_sec >= t.periodic_warning_wakeups_per_sec { Severity::Warning } else { Severity::Info },
            Subject::Loop { name: l.name.clone(), tid: l.tid },
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

/// Threads with a steady switch rate and little CPU, found from the
/// per-sample series of their context switches. What wakes them (a timer,
/// I/O, other threads) comes from the kernel view's wake sources; without
/// it the finding does not guess.
fn periodic_threads(cx: &mut Ctx<'_>, h: &History, from: &Stored, to: &Stored, i: &Interval) {
    let t = cx.t;
    // (serial, candidate number), sorted by serial for lookups.
    let mut candidates: Vec<(u64, usize)> = i
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
                && let Some(slices) = crate::platform::present(th.switches)
                && let Some(series) = series.get_mut(k)
            {
                series.push((s.header.monotonic_ns, slices));
            }
        }
    }
    for th in &i.threads {
        let Some(k) = candidate(th.serial) else {
            continue;
        };
        let rates: Vec<f64> = series[k]
            .windows(2)
            .map(|w| per_sec(w[1].1.saturating_sub(w[0].1), w[1].0.saturating_sub(w[0].0)))
            .collect();
        if rates.len() < t.periodic_min_samples as usize {
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
        let source = WakeSource::of(th.kernel.as_ref(), t);
        let advice = source.advice();
        let mut evidence = vec![
            number("switches_per_sec", mean, "1/s"),
            number("period_ms", period_ms, "ms"),
            number("rate_variation", cv, "ratio"),
            number("thread_cpu_percent", th.cpu_percent, "%"),
        ];
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
            ]);
        }
        cx.explained.insert(th.tid);
        cx.push(
            FindingKind::PeriodicWakeups,
            if mean >= t.periodic_warning_wakeups_per_sec { Severity::Warning } else { Severity::Info },
            Subject::Thread { tid: th.tid, name: th.name.clone() },
            move || format!(
                "thread {} \"{}\" wakes every {period_ms:.1} ms ({mean:.0}/s, steady) and uses {:.2}% CPU: {}",
                th.tid, th.name, th.cpu_percent, source.cause(th.kernel.as_ref())
            ),
            evidence,
            advice,
        );
    }
}

fn run_queue(cx: &mut Ctx<'_>, i: &Interval, system: &SystemInfo) {
    let t = cx.t;
    for th in &i.threads {
        let Some(wait) = th.run_queue_wait_percent else {
            continue;
        };
        if wait < t.run_queue_wait_percent
            || th.cpu_percent < t.run_queue_min_cpu_percent
            || cx.explained.contains(&th.tid)
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
            if wait >= t.run_queue_critical_wait_percent { Severity::Critical } else { Severity::Warning },
            Subject::Thread { tid: th.tid, name: th.name.clone() },
            move || format!(
                "thread {} \"{}\" waited for a CPU {wait:.0}% of the time while running {:.0}%: \
                 about {runnable:.1} of this process's threads want a CPU on {} cores",
                th.tid, th.name, th.cpu_percent, system.cpu_count
            ),
            vec![
                number("run_queue_wait_percent", wait, "%"),
                number("thread_cpu_percent", th.cpu_percent, "%"),
                number("runnable_threads", runnable, "threads"),
                number("cpu_count", f64::from(system.cpu_count), "cpus"),
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
            if th.cpu_percent >= t.cpu_hog_critical_percent { Severity::Critical } else { Severity::Warning },
            Subject::Thread { tid: th.tid, name: th.name.clone() },
            move || format!(
                "thread {} \"{}\" used {:.0}% of a core for {:.0} s",
                th.tid,
                th.name,
                th.cpu_percent,
                i.duration_secs()
            ),
            vec![number("thread_cpu_percent", th.cpu_percent, "%"), number("window_s", i.duration_secs(), "s")],
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
    cx.push(
        FindingKind::WakeupsBudget,
        if rate >= budget { Severity::Critical } else { Severity::Warning },
        Subject::Process { pid: i.process.pid },
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

fn memory_growth(cx: &mut Ctx<'_>, h: &History) {
    let t = cx.t;
    let (Some(first), Some(last)) = (h.iter().next(), h.latest()) else {
        return;
    };
    let d = last
        .header
        .monotonic_ns
        .saturating_sub(first.header.monotonic_ns);
    // Growth needs two steps at least: one step is not a trend; and its
    // own minimum window, so that start-up allocation is not a leak.
    if d < ns(t.memory_min_window) || h.len() < 3 {
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
    if rising < t.memory_growth_rising_ratio {
        return;
    }
    let mib = |v: u64| v as f64 / (1u64 << 20) as f64;
    let per_min = growth as f64 / (d as f64 / 60e9);
    cx.window_ns = d;
    cx.push(
        FindingKind::MemoryGrowth,
        if growth as f64 >= t.memory_growth_critical_ratio * a as f64 { Severity::Critical } else { Severity::Warning },
        Subject::Process { pid: last.header.process.pid },
        move || format!(
            "resident memory grew from {:.1} MiB to {:.1} MiB over {:.0} s ({:.1} MiB/min), rising in {:.0}% of samples",
            mib(a),
            mib(b),
            d as f64 / 1e9,
            mib(per_min as u64),
            rising * 100.0
        ),
        vec![
            number("rss_start_bytes", a as f64, "bytes"),
            number("rss_end_bytes", b as f64, "bytes"),
            number("growth_bytes_per_min", per_min, "bytes/min"),
            number("rising_ratio", rising, "ratio"),
        ],
        "Steady growth across the whole history looks like a leak or an unbounded cache/queue. Compare heap \
         profiles at two points (heaptrack, Instruments Allocations, Android Studio) or bound the cache.",
    );
}

/// One number of evidence, as the rules hold it until a finding is kept.
trait Number {
    fn name(&self) -> &str;
    fn value(&self) -> f64;
    fn unit(&self) -> &str;
}

impl Number for Ev {
    fn name(&self) -> &str {
        self.name
    }
    fn value(&self) -> f64 {
        self.value
    }
    fn unit(&self) -> &str {
        self.unit
    }
}

impl Number for Evidence {
    fn name(&self) -> &str {
        &self.name
    }
    fn value(&self) -> f64 {
        self.value
    }
    fn unit(&self) -> &str {
        &self.unit
    }
}

/// Whether two findings' numbers tell the same behaviour: every evidence
/// value within `tolerance` of the other's, relative to the larger, with
/// a floor for percentages (1 point) and ratios (0.05) so that 0.1% and
/// 0.15% CPU count as alike.
fn alike<A: Number, B: Number>(a: &[A], b: &[B], tolerance: f64) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            let floor = match x.unit() {
                "%" => 1.0,
                "ratio" => 0.05,
                _ => 0.0,
            };
            x.name() == y.name()
                && (x.value() - y.value()).abs()
                    <= (tolerance * x.value().abs().max(y.value().abs())).max(floor)
        })
}

/// At most this many TIDs are spelled out in a group's summary (all are in
/// its subject).
const GROUP_TIDS_SHOWN: usize = 8;

/// Threads with the same finding, kept as one: the first member's finding
/// (at `at` in the output) and every member's TID.
struct Group {
    at: usize,
    /// [`group_name`] of the members.
    pattern: String,
    tids: Vec<u64>,
}

/// Collects findings in order, grouping threads with the same kind,
/// severity, group name and behaviour as they come: twenty `worker-N`
/// threads sleeping 5 ms each are one cause. A finding that joins a group
/// is not built at all (its summary is never formatted): with hundreds of
/// alike threads, formatting and dropping their findings cost more than
/// the rules themselves.
#[derive(Default)]
struct Grouper {
    out: Vec<Finding>,
    groups: Vec<Group>,
}

impl Grouper {
    /// Adds a finding, built by `build` unless it joins a group of alike threads.
    fn offer<N: Number>(
        &mut self,
        kind: FindingKind,
        severity: Severity,
        subject: Subject,
        evidence: Vec<N>,
        tolerance: f64,
        build: impl FnOnce(Subject, Vec<N>) -> Finding,
    ) {
        if let Subject::Thread { tid, name } = &subject {
            let pattern = group_name(name);
            let out = &self.out;
            let found = self.groups.iter_mut().find(|g| {
                g.pattern == pattern
                    && out.get(g.at).is_some_and(|first| {
                        first.kind == kind
                            && first.severity == severity
                            && alike(&first.evidence, &evidence, tolerance)
                    })
            });
            if let Some(g) = found {
                g.tids.push(*tid);
                return;
            }
            self.groups.push(Group {
                at: self.out.len(),
                pattern,
                tids: vec![*tid],
            });
        }
        self.out.push(build(subject, evidence));
    }

    /// The findings, each group of two or more threads as one: the first
    /// thread's summary, evidence and advice, with the subject listing
    /// every TID and an evidence `threads` count.
    fn finish(mut self, t: &Thresholds) -> Vec<Finding> {
        for g in self.groups {
            if g.tids.len() < 2 {
                continue;
            }
            let Some(first) = self.out.get_mut(g.at) else {
                continue;
            };
            let Subject::Thread { tid, name } = first.subject.clone() else {
                continue;
            };
            let tids = g.tids;
            let mut shown: Vec<String> = tids
                .iter()
                .take(GROUP_TIDS_SHOWN)
                .map(u64::to_string)
                .collect();
            if tids.len() > GROUP_TIDS_SHOWN {
                shown.push(format!("and {} more", tids.len() - GROUP_TIDS_SHOWN));
            }
            // The rules start a thread's summary with its label.
            let own = format!("thread {tid} \"{name}\" ");
            let rest = first.summary.strip_prefix(&own).unwrap_or(&first.summary);
            first.summary = format!(
                "{} threads \"{}\" behave alike (TIDs {}); each {rest} (figures of TID {tid}, \
                 the others within {:.0}%)",
                tids.len(),
                g.pattern,
                shown.join(", "),
                t.group_max_difference * 100.0
            );
            first
                .evidence
                .push(ev("threads", tids.len() as f64, "threads"));
            first.subject = Subject::Threads {
                name: g.pattern,
                tids,
            };
        }
        self.out
    }
}

/// One finding for threads with the same kind, severity, group name and
/// behaviour (see [`Grouper`]).
#[cfg(test)]
fn group_alike_threads(findings: Vec<Finding>, t: &Thresholds) -> Vec<Finding> {
    let mut g = Grouper::default();
    for f in findings {
        let (kind, severity, subject) = (f.kind, f.severity, f.subject.clone());
        let evidence = f.evidence.clone();
        g.offer(
            kind,
            severity,
            subject,
            evidence,
            t.group_max_difference,
            |_, _| f,
        );
    }
    g.finish(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(tid: u64, name: &str, rate: f64, cpu: f64) -> Finding {
        Finding {
            kind: FindingKind::SleepOverhead,
            severity: Severity::Info,
            subject: Subject::Thread {
                tid,
                name: name.to_string(),
            },
            summary: format!("thread {tid} \"{name}\" sleeps {rate:.0} times/s"),
            evidence: vec![ev("sleeps_per_sec", rate, "1/s"), ev("cpu", cpu, "%")],
            advice: String::new(),
            window_ns: 1,
        }
    }

    /// A history of one thread sampled every second for `secs` seconds:
    /// `cpu(s)` its CPU share (0–1) and `switches(s)` its voluntary
    /// switches during second `s`, `rss(s)` the process RSS at its end.
    fn history(
        secs: u64,
        cpu: impl Fn(u64) -> f64,
        switches: impl Fn(u64) -> u64,
        rss: impl Fn(u64) -> u64,
    ) -> History {
        use std::sync::Arc;

        use crate::history::{Encoders, Header};
        use crate::model::{CpuTimeSource, ProcessSample};
        use crate::platform::{PackedThread, ThreadIdent};

        let ident = Arc::new(ThreadIdent {
            tid: 7,
            serial: 0,
            name: "app".into(),
            cpu_time_source: CpuTimeSource::ThreadClock,
        });
        let mut enc = Encoders::default();
        let mut h = History::new(1000, u64::MAX);
        let (mut cpu_ns, mut vol) = (0u64, 0u64);
        for s in 0..=secs {
            if s > 0 {
                cpu_ns += (cpu(s - 1) * 1e9) as u64;
                vol += switches(s - 1);
            }
            let header = Header {
                seq: s,
                monotonic_ns: 1_000_000_000 + s * 1_000_000_000,
                unix_time_ns: 0,
                process: ProcessSample {
                    pid: 7,
                    rss_bytes: rss(s),
                    total_cpu_time_ns: cpu_ns,
                    thread_count: 1,
                    ..Default::default()
                },
                switch_split_read: true,
                sampler_cost_ns: 0,
                total_sampler_cpu_time_ns: 0,
                warnings: Vec::new(),
            };
            let thread = PackedThread {
                ident: ident.clone(),
                cpu_time_ns: cpu_ns,
                run_queue_wait_ns: 0,
                switches: vol,
                voluntary_switches: vol,
                involuntary_switches: 0,
            };
            h.push(Arc::new(Stored::new(
                &mut enc,
                header,
                vec![thread],
                &[],
                &[],
                None,
            )));
        }
        h
    }

    fn kinds(h: &History, t: &Thresholds) -> Vec<FindingKind> {
        let system = SystemInfo {
            total_memory_bytes: 8 << 30,
            cpu_count: 2,
            os: "linux".into(),
        };
        run(h, t, &system, None, None)
            .into_iter()
            .map(|f| f.kind)
            .collect()
    }

    /// Start-up: 5 s at a full core, 2,000 wakeups/s and RSS from 10 to
    /// 210 MB, then quiet. Ten seconds in, none of the long-window rules
    /// speaks with the defaults; with their minimums lowered to 1 s (what
    /// `watch` used to do) all three would.
    #[test]
    fn a_start_up_burst_is_not_a_hog_a_leak_or_a_wakeups_problem() {
        let mb = 1u64 << 20;
        let h = history(
            10,
            |s| if s < 5 { 1.0 } else { 0.0 },
            |s| if s < 5 { 2000 } else { 1 },
            |s| (10 + 40 * s.min(5)) * mb,
        );
        let long = [
            FindingKind::CpuHog,
            FindingKind::MemoryGrowth,
            FindingKind::WakeupsBudget,
        ];
        let found = kinds(&h, &Thresholds::default());
        assert!(long.iter().all(|k| !found.contains(k)), "{found:?}");
        let one = Duration::from_secs(1);
        let eager = Thresholds::default()
            .with_cpu_min_window(one)
            .with_wakeups_min_window(one)
            .with_memory_min_window(one)
            .with_cpu_hog_percent(40.0);
        let found = kinds(&h, &eager);
        assert!(long.iter().all(|k| found.contains(k)), "{found:?}");
    }

    /// A thread at a full core is a hog once the history covers the whole
    /// 60 s window, not a second before.
    #[test]
    fn cpu_hog_needs_its_whole_window() {
        let t = Thresholds::default();
        let at = |secs| kinds(&history(secs, |_| 1.0, |_| 1, |_| 1 << 20), &t);
        assert!(!at(59).contains(&FindingKind::CpuHog));
        assert!(at(60).contains(&FindingKind::CpuHog));
        assert!(at(120).contains(&FindingKind::CpuHog));
    }

    #[test]
    fn alike_threads_become_one_finding_others_stay() {
        let t = Thresholds::default();
        let mut f: Vec<Finding> = (0..20)
            .map(|n| finding(100 + n, &format!("worker-{n}"), 190.0 + n as f64, 0.1))
            .collect();
        f.push(finding(200, "worker-99", 20.0, 0.1)); // another behaviour
        f.push(finding(300, "io", 190.0, 0.1)); // another name
        let out = group_alike_threads(f, &t);
        assert_eq!(out.len(), 3, "{out:#?}");
        let g = &out[0];
        assert!(
            matches!(&g.subject, Subject::Threads { name, tids } if name == "worker-{n}" && tids.len() == 20),
            "{g:#?}"
        );
        assert_eq!(g.evidence("threads"), Some(20.0));
        assert!(
            g.summary
                .starts_with("20 threads \"worker-{n}\" behave alike (TIDs 100, 101"),
            "{}",
            g.summary
        );
        assert!(
            g.summary.contains("and 12 more); each sleeps 190 times/s"),
            "{}",
            g.summary
        );
        assert_eq!(out[1].subject.tid(), Some(200));
        assert_eq!(out[2].subject.tid(), Some(300));
    }
}

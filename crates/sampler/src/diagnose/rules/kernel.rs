//! Findings from the kernel view (eBPF) of each thread: busy polling,
//! signal wakeups and sleep loops seen in its syscalls.

use super::loops::{
    BUSY_POLL_ADVICE, BUSY_POLL_ADVICE_EPOLL, BUSY_POLL_ADVICE_POLL, READY_LOOP_ADVICE,
};
use super::sleep::TICKER_ADVICE;
use super::{Ctx, FindingKind, Grade, Severity, Subject, number};
use crate::interval::{Interval, KernelThreadInterval, SyscallRate, ThreadInterval};
use crate::kernel::Syscall;

const SIGNAL_ADVICE: &str = "Find what sends the signals: an interval timer (setitimer, timer_create with SIGALRM), \
a profiler's SIGPROF, or another process calling kill(). Lower its frequency, block the signal in threads that need \
not handle it (pthread_sigmask) or send a timer's signal to one thread (SIGEV_THREAD_ID). A sleep restarted with its \
full length after every signal never ends on time: pass the remaining time, or sleep to an absolute deadline \
(clock_nanosleep with TIMER_ABSTIME).";

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
pub(super) fn kernel_threads(cx: &mut Ctx<'_>, i: &Interval) {
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
pub(super) fn kernel_busy_poller(
    cx: &mut Ctx<'_>,
    th: &ThreadInterval,
    k: &KernelThreadInterval,
) -> bool {
    let t = cx.t;
    let idle_polls = k.idle_poll_ratio * k.poll_calls_per_sec;
    // Most polls must find nothing, as for the loop probes: a busy worker
    // that checks for ready sockets without waiting between tasks (Go's
    // scheduler threads, a work-stealing runtime) makes many non-blocking
    // polls and is rarely blocked, yet half or more of its polls find
    // work, and its CPU goes to that work, not to polling.
    if k.blocked_percent > t.busy_poll_max_blocked_percent {
        return false;
    }
    if idle_polls < t.busy_poll_wakeups_per_sec || k.idle_poll_ratio < t.busy_poll_idle_ratio {
        return kernel_ready_poller(cx, th, k);
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

/// A poll loop that never blocks although its polls have a timeout: its
/// polls return ready at once (events, without blocking) at least
/// [`Thresholds::busy_poll_critical_wakeups_per_sec`](crate::Thresholds::busy_poll_critical_wakeups_per_sec)
/// times a second, in at least [`Thresholds::busy_poll_idle_ratio`](crate::Thresholds::busy_poll_idle_ratio)
/// of its polls, most with a non-zero timeout. Zero-timeout polls that
/// find work (Go's scheduler threads between tasks) are another thing: a
/// busy worker. Run by [`kernel_busy_poller`] once the thread is known to
/// be blocked little.
fn kernel_ready_poller(cx: &mut Ctx<'_>, th: &ThreadInterval, k: &KernelThreadInterval) -> bool {
    let t = cx.t;
    if k.poll_calls_per_sec <= 0.0 || k.zero_timeout_poll_ratio >= t.busy_poll_zero_timeout_ratio {
        return false;
    }
    let ready =
        (k.poll_calls_per_sec - k.blocking_polls_per_sec - k.idle_nonblocking_polls_per_sec)
            .max(0.0);
    let share = ready / k.poll_calls_per_sec;
    if share < t.busy_poll_idle_ratio || ready < t.busy_poll_critical_wakeups_per_sec {
        return false;
    }
    let (calls, mix) = syscall_mix(k, true);
    let syscall = calls.first().map(|c| c.syscall);
    let backend = match syscall {
        Some(Syscall::Poll | Syscall::Ppoll | Syscall::Select | Syscall::Pselect6) => {
            "a level-triggered poll(2)/select(2) loop"
        }
        Some(Syscall::EpollWait | Syscall::EpollPwait | Syscall::EpollPwait2) => {
            "a level-triggered epoll registration"
        }
        _ => "a level-triggered wait",
    };
    let mix = if mix.is_empty() {
        String::new()
    } else {
        format!(" ({mix})")
    };
    // Which descriptors: the ones its poll calls found ready (poll and
    // ppoll; the kernel view reads their arrays), with what each is.
    let (which, stays) = match k.ready_fds.as_slice() {
        [] => ("A descriptor".to_string(), "stays"),
        [one] => (
            format!("Descriptor {} ({})", one.fd, one.kind.describe()),
            "stays",
        ),
        many => (
            format!(
                "Descriptors {}",
                many.iter()
                    .map(|r| format!("{} ({})", r.fd, r.kind.describe()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "stay",
        ),
    };
    let mut evidence = vec![
        number("poll_calls_per_sec", k.poll_calls_per_sec, "1/s"),
        number("ready_at_once_polls_per_sec", ready, "1/s"),
        number("ready_at_once_ratio", share, "ratio"),
        number("blocking_polls_per_sec", k.blocking_polls_per_sec, "1/s"),
        number(
            "zero_timeout_poll_ratio",
            k.zero_timeout_poll_ratio,
            "ratio",
        ),
        number("blocked_percent", k.blocked_percent, "%"),
        number("thread_cpu_percent", th.cpu_percent, "%"),
    ];
    evidence.extend(
        k.ready_fds
            .iter()
            .map(|r| number("ready_fd", f64::from(r.fd), "fd")),
    );
    cx.push(
        FindingKind::BusyPoller,
        Severity::Critical,
        Subject::Thread {
            tid: th.tid,
            name: th.name.clone(),
        },
        move || format!(
            "thread {} \"{}\" polls {:.0} times/s{mix} and {:.0}% of its polls return ready at once, although \
             {:.0}% have a non-zero timeout: it never blocks (blocked {:.0}% of the time, kernel view), using {:.0}% \
             of a core. {which} {stays} ready in {backend}: an edge-triggered event on a backend without edge \
             triggering (libevent EV_ET on poll or select), or one never drained",
            th.tid,
            th.name,
            k.poll_calls_per_sec,
            share * 100.0,
            (1.0 - k.zero_timeout_poll_ratio) * 100.0,
            k.blocked_percent,
            th.cpu_percent
        ),
        evidence,
        READY_LOOP_ADVICE,
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
    let subject = Subject::Thread {
        tid: th.tid,
        name: th.name.clone(),
    };
    cx.push_graded(
            FindingKind::SignalWakeups,
            Grade { value: k.interrupted_sleeps_per_sec, base: Severity::Info, steps: &[(t.sleep_warning_calls_per_sec, Severity::Warning)] },
            subject,
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
    let subject = Subject::Thread {
        tid: th.tid,
        name: th.name.clone(),
    };
    // Below the line the same thread is a periodic waker: one kind or the
    // other, kept while the rate stays within the margin of the line (a
    // 100/s ticker flipped between the two 17 times in 37 reports).
    if !cx.wins_over(
        FindingKind::SleepOverhead,
        &subject,
        (FindingKind::PeriodicWakeups, Some(&subject)),
        completed,
        t.sleep_calls_per_sec,
    ) {
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
    let period_ms = 1e3 / completed.max(f64::MIN_POSITIVE);
    // The kernel sees the sleeps, not what the thread does between them:
    // a ticker (a fixed-rate timer that does its work each tick), a
    // sleep-and-check loop (that looks for work and often finds none) and
    // a back-off loop (Go's sysmon: 20 µs sleeps doubling up to 10 ms when
    // idle) look alike from here, and only the mean request is known, so
    // the summary claims only the sleeping, and says "on average".
    cx.push_graded(
        FindingKind::SleepOverhead,
        Grade {
            value: completed,
            base: Severity::Info,
            steps: &[(t.sleep_warning_calls_per_sec, Severity::Warning)],
        },
        subject,
        move || format!(
            "thread {} \"{}\" sleeps {completed:.0} times/s{mix} (a wakeup every {period_ms:.1} ms), asking for {} and sleeping {:.2} ms on average{interrupted} \
             (kernel view): a sleep loop (a ticker, a back-off or a sleep-and-check loop; whether each wakeup \
             finds work is not visible from the kernel)",
            th.tid,
            th.name,
            requested_text(k),
            k.mean_sleep_actual_ns as f64 / 1e6
        ),
        vec![
            number("sleeps_per_sec", k.sleeps_per_sec, "1/s"),
            number("completed_sleeps_per_sec", completed, "1/s"),
            number("period_ms", period_ms, "ms"),
            number("interrupted_sleeps_per_sec", k.interrupted_sleeps_per_sec, "1/s"),
            number("mean_requested_ns", k.mean_sleep_requested_ns as f64, "ns"),
            number("mean_actual_ns", k.mean_sleep_actual_ns as f64, "ns"),
        ],
        TICKER_ADVICE,
    );
    true
}

//! Wake-source classification: what makes a thread runnable, as the kernel
//! view tells, and what to do about it.

use super::Thresholds;
use crate::interval::KernelThreadInterval;

/// What to do about a periodic timer, in the terms of the platform the
/// target runs on (`SystemInfo::os`): no Android or Apple API named for a
/// Linux server.
pub(super) fn periodic_advice(os: &str) -> &'static str {
    match os {
        "android" => concat!(
            "Each wakeup takes the CPU out of idle. Make the timer fire only when there is work (arm it on demand), ",
            "lengthen its period, or let the OS coalesce it (WorkManager or inexact alarms for background work, ",
            "timer slack for native threads)."
        ),
        "macos" | "ios" => concat!(
            "Each wakeup takes the CPU out of idle. Make the timer fire only when there is work (arm it on demand), ",
            "lengthen its period, or let the OS coalesce it (DispatchSource leeway, Timer tolerance)."
        ),
        _ => concat!(
            "Each wakeup takes the CPU out of idle. Make the timer fire only when there is work (arm it on demand), ",
            "lengthen its period, or let the kernel coalesce it (timer slack: prctl(PR_SET_TIMERSLACK), or a ",
            "deadline rounded to a coarser tick)."
        ),
    }
}

/// What to do about a tokio runtime's timer that wakes a worker every
/// period (a `tokio::time::interval` or `sleep` in a task).
pub(super) const TOKIO_TIMER_ADVICE: &str = "A task's tokio::time::interval (or a sleep in a loop) wakes the runtime \
every period even when there is nothing to do. Wait for the work itself instead of polling on a tick (a channel, \
tokio::sync::Notify, a watch), or lengthen the period and do the work of several ticks in one batch; for an interval \
that must stay, set MissedTickBehavior::Delay or Skip so that a late tick does not fire a burst of catch-up ticks. \
tokio's timer has a 1 ms resolution: a 1 ms interval is the most often it can fire.";

const TIMED_WAIT_ADVICE: &str = "A timer inside the process's runtime wakes it: a scheduled task (Java's \
ScheduledExecutorService.scheduleAtFixedRate or a java.util.Timer), or a loop around a wait with a timeout \
(Condvar::wait_timeout, Object.wait(ms), parkNanos) that finds nothing to do when it times out. Submit the work when \
it arrives instead of checking for it on a schedule, lengthen the period, or do several periods' work in one run.";

const THREADS_ADVICE: &str = "Other threads of this process wake it, one small handoff at a time. Hand work over \
in batches (one notification per batch, not per item), reuse threads from a pool instead of starting and joining \
short-lived ones, and check for condition variables signalled (or futexes woken) when nothing changed.";

const OTHER_PROCESS_ADVICE: &str = "Another process wakes it (through a pipe, socket, signal or shared futex): \
check how often that process notifies this one, and batch its messages.";

const IO_ADVICE: &str = "Interrupts of I/O completions (network or disk) wake it with little work each: read and \
write in larger batches, let the device coalesce interrupts (ethtool -C), or raise the socket's receive low-water \
mark (SO_RCVLOWAT) so that a wakeup finds more to do.";

const MIXED_SOURCE_ADVICE: &str = "No single source wakes it most of the time: the summary gives the split of its \
wakes (interrupts, threads of this process, other processes) and its top waker. Take the largest share first: \
timers armed on demand or coalesced, work handed over in batches, I/O read in larger batches.";

const UNKNOWN_SOURCE_ADVICE: &str = "Find what wakes it: a timer of its own, another thread handing it work, or I/O. \
With the kernel view attached (eBPF, as root) wakemeter names the source. Then make the wakeups fewer: timers armed \
on demand or coalesced, work handed over in batches.";

/// The split of a thread's wakes by source, in words ("" without the kernel view).
fn shares(k: Option<&KernelThreadInterval>) -> String {
    k.map(|k| {
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
    .unwrap_or_default()
}

/// What makes a thread runnable, as far as the kernel view tells.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum WakeSource {
    /// Interrupts, with its waits ending on their timeout: a timer.
    Timer,
    /// Interrupts, with its waits ending on I/O (poll calls returning
    /// events, uninterruptible I/O): network or disk completions.
    Io,
    /// Interrupts, with its timed `futex` waits ending on their timeout: a
    /// timer inside a runtime (a scheduled executor, a condition variable
    /// waited on with a timeout, a runtime's timed park).
    TimedWait,
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
    pub(super) fn of(k: Option<&KernelThreadInterval>, t: &Thresholds) -> WakeSource {
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
            // A futex wait that returned ETIMEDOUT was ended by its
            // timeout (the timer interrupt), not by another thread.
            let timer = k.sleeps_per_sec + timed_out_polls + k.futex_timeouts_per_sec;
            let io_time = k.off_cpu.io_ns as f64;
            let wait_time = (k.off_cpu.sleep_ns + k.off_cpu.poll_ns) as f64;
            return if timer > 0.0 && timer >= t.wake_source_ratio * (timer + polls_with_events) {
                if k.futex_timeouts_per_sec >= t.wake_source_ratio * timer {
                    WakeSource::TimedWait
                } else {
                    WakeSource::Timer
                }
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

    /// What to do about wakeups from this source, in the terms of the
    /// platform `os` runs on. Only without the kernel view does it point
    /// to the kernel view: with it, the source (or the split) is known.
    pub(super) fn advice(self, os: &str) -> &'static str {
        match self {
            WakeSource::Timer | WakeSource::Interrupt => periodic_advice(os),
            WakeSource::TimedWait => TIMED_WAIT_ADVICE,
            WakeSource::Io => IO_ADVICE,
            WakeSource::ProcessThreads => THREADS_ADVICE,
            WakeSource::OtherProcesses => OTHER_PROCESS_ADVICE,
            WakeSource::Mixed => MIXED_SOURCE_ADVICE,
            WakeSource::Unknown => UNKNOWN_SOURCE_ADVICE,
        }
    }

    /// Whether a tokio worker woken from this source is woken by its
    /// runtime's timer: interrupts that end its timed parks (the kernel
    /// view), or no kernel view at all (then the worker's own parks are
    /// what is known, and the words say what would look alike).
    pub(super) fn may_be_runtime_timer(self) -> bool {
        matches!(
            self,
            WakeSource::Timer | WakeSource::TimedWait | WakeSource::Interrupt | WakeSource::Unknown
        )
    }

    /// The end of a periodic-wakeups summary of a tokio worker woken from
    /// this source (see [`WakeSource::may_be_runtime_timer`]; other
    /// sources keep [`WakeSource::cause`]). A tokio worker parks with a
    /// timeout only while the runtime's timer has a deadline armed, so
    /// interrupts that end its parks are that timer.
    pub(super) fn runtime_timer_cause(self, k: Option<&KernelThreadInterval>) -> String {
        match (self, k) {
            (WakeSource::Timer | WakeSource::TimedWait | WakeSource::Interrupt, Some(_)) => format!(
                "the tokio runtime's timer (a tokio::time::interval or sleep in a task): the worker's parks \
                 end at the timer's deadline, woken by the timer interrupt, with little work each ({})",
                shares(k)
            ),
            _ => "the tokio runtime's timer (a tokio::time::interval or sleep in a task) ends its parks, \
                  with little work each; a task woken from outside the runtime at this rate would look alike \
                  (the kernel view, with eBPF, names the waker)"
                .to_string(),
        }
    }

    /// The end of a periodic-wakeups summary.
    pub(super) fn cause(self, k: Option<&KernelThreadInterval>) -> String {
        let shares = shares(k);
        let top_thread = k
            .and_then(|k| k.top_wakers.iter().find(|w| w.tid != 0))
            .map(|w| format!(" (top waker: {} \"{}\")", w.tid, w.name))
            .unwrap_or_default();
        match self {
            WakeSource::Timer => {
                format!("a periodic timer: its waits end on their timeout, with little work each ({shares})")
            }
            WakeSource::TimedWait => {
                let (timeouts, woken) = k
                    .map(|k| {
                        (
                            k.futex_timeouts_per_sec,
                            (k.timed_futex_waits_per_sec - k.futex_timeouts_per_sec).max(0.0),
                        )
                    })
                    .unwrap_or_default();
                format!(
                    "its own timed waits time out ({timeouts:.0}/s futex waits ended by their timeout, \
                     {woken:.0}/s woken by another thread): a timer in the runtime, e.g. a ScheduledExecutor \
                     or Condvar.wait_timeout, with little work each ({shares})"
                )
            }
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
            WakeSource::Mixed => format!("woken by mixed sources, none a clear majority ({shares})"),
            WakeSource::Unknown => "woken by a timer, another thread or I/O (without the kernel view, which one is unknown)"
                .to_string(),
        }
    }
}

//! Cumulative counters of the app's probes (loop and sleep).

use serde::{Deserialize, Serialize};

use crate::histogram::Log2Histogram;

/// What kind of loop a probe instruments: who made the probe, and so what
/// its waits are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Enum))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LoopKind {
    /// A loop the application instruments itself with a [`crate::LoopProbe`]
    /// (its poll, epoll_wait or kevent calls, with their timeouts).
    #[default]
    Application,
    /// A tokio runtime worker instrumented by `wakemeter::runtime::instrument`:
    /// a wait is a park, a wakeup an unpark. A worker parks with a timeout
    /// only while the runtime's timer has a deadline armed (a
    /// `tokio::time::interval` or `sleep` in a task).
    TokioWorker,
}

impl LoopKind {
    /// Its number in the packed history (0 for the default).
    pub(crate) fn code(self) -> u64 {
        match self {
            LoopKind::Application => 0,
            LoopKind::TokioWorker => 1,
        }
    }

    /// The kind of a packed history number; unknown numbers are the default.
    pub(crate) fn from_code(code: u64) -> LoopKind {
        match code {
            1 => LoopKind::TokioWorker,
            _ => LoopKind::Application,
        }
    }
}

/// Cumulative counters of one instrumented loop (since the probe was created).
///
/// A *wakeup* is one return from the loop's wait (poll, epoll_wait, kevent,
/// a park). Rates and ratios are in [`crate::LoopInterval`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct LoopStats {
    /// Probe id, unique within its sampler.
    pub id: u64,
    /// Name given when the probe was created.
    pub name: String,
    /// What kind of loop it is (an application's loop, a tokio worker).
    /// Absent from reports written before it existed (reads as `application`).
    #[serde(default)]
    pub kind: LoopKind,
    /// OS id of the thread that last waited (see [`crate::ThreadSample::tid`]); `None` before the first wait.
    pub tid: Option<u64>,
    /// Returns from the wait.
    pub total_wakeups: u64,
    /// Wakeups that reported 0 ready events: the loop woke and found nothing.
    pub total_idle_wakeups: u64,
    /// Wakeups after a finite timeout fully elapsed.
    pub total_timed_out_wakeups: u64,
    /// Wakeups before a finite timeout elapsed (an event, a signal, a spurious wakeup).
    pub total_early_wakeups: u64,
    /// Waits with a zero timeout: non-blocking polls, i.e. busy polling.
    pub total_zero_timeout_waits: u64,
    /// Sum of the ready-event counts reported after each wait (saturating).
    pub total_events: u64,
    /// Time spent inside waits, in nanoseconds.
    pub total_wait_ns: u64,
    /// Time between returning from a wait and starting the next one (the
    /// loop doing work), in nanoseconds.
    pub total_busy_ns: u64,
    /// Sum over timed-out wakeups of how late the wait returned compared
    /// with its timeout (Envoy's `poll_delay_us`), in nanoseconds.
    pub total_poll_delay_ns: u64,
    /// Poll delay of each timed-out wakeup, in nanoseconds (log2 buckets).
    pub poll_delay_histogram: Log2Histogram,
    /// Calls out of order (an `after_wait` without `before_wait`, or two
    /// `before_wait` in a row); they are ignored and counted here.
    pub total_unmatched_calls: u64,
    /// How long the wait in progress has lasted at the snapshot, in
    /// nanoseconds (0 when the loop is not waiting): a wait that never ends shows here.
    pub current_wait_ns: u64,
}

/// Cumulative counters of one instrumented sleep site (since the probe was created).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct SleepStats {
    /// Probe id, unique within its sampler.
    pub id: u64,
    /// Name given when the probe was created.
    pub name: String,
    /// OS id of the thread that last slept; `None` before the first sleep.
    pub tid: Option<u64>,
    /// Completed sleeps.
    pub total_calls: u64,
    /// Sum of requested durations, in nanoseconds.
    pub total_requested_ns: u64,
    /// Sum of actual durations (monotonic clock, call to return), in nanoseconds.
    pub total_actual_ns: u64,
    /// CPU time the thread consumed inside the sleep calls (syscall entry,
    /// timer setup, the switches out and back), in nanoseconds: the cost
    /// of sleeping itself. Exact by default; with
    /// [`SleepProbe::set_cpu_every`](crate::probe::SleepProbe::set_cpu_every) `n` > 1, the CPU of every `n`th sleep
    /// times `n` (an estimate).
    pub total_cpu_ns: u64,
    /// Sum of `actual - requested` (0 when a sleep returned early), in nanoseconds.
    pub total_oversleep_ns: u64,
    /// Oversleep of each call, in nanoseconds (log2 buckets).
    pub oversleep_histogram: Log2Histogram,
    /// `end` without `begin` (ignored and counted here).
    pub total_unmatched_calls: u64,
}

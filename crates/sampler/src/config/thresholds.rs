//! Thresholds of the findings engine, with their sources.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// When a finding fires. Every default is documented with where it comes from;
/// change them with the `with_*` setters and check with [`Thresholds::validate`].
///
/// A threshold missing from a saved report (one written before the
/// threshold existed) reads as its default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct Thresholds {
    /// Window for rate-based findings (busy poller, sleep overhead, periodic
    /// wakeups, run-queue contention). Default 10 s.
    pub window: Duration,
    /// Least history the rate-based findings need (those over
    /// [`Thresholds::window`]); shorter windows report nothing. Default 2 s.
    /// The CPU hog, wakeups budget and memory growth findings have their
    /// own minimums ([`Thresholds::cpu_min_window`],
    /// [`Thresholds::wakeups_min_window`], [`Thresholds::memory_min_window`]).
    pub min_window: Duration,
    /// Busy poller: wakeups per second of a loop (or poll calls per second of
    /// a thread, with eBPF). Default 1000/s — an order of magnitude above
    /// any timer a healthy idle loop needs.
    pub busy_poll_wakeups_per_sec: f64,
    /// Busy poller: share of wakeups that found nothing (0–1). Default 0.9.
    pub busy_poll_idle_ratio: f64,
    /// Busy poller: share of waits with a zero timeout (0–1); either this or
    /// the idle ratio suffices. Default 0.5.
    pub busy_poll_zero_timeout_ratio: f64,
    /// Busy poller: a thread blocked (off CPU, not preempted) for more than
    /// this percent of the window does not busy-poll, whatever its call
    /// counts say: it waits. Default 50%: measured here, a zero-timeout
    /// `epoll_wait` loop is blocked 0%, a libuv-style 1 ms timer loop (Node
    /// `setInterval(…, 1)`, a zero-timeout pre-poll before each blocking
    /// wait) 95–99% (ACCURACY.md).
    pub busy_poll_max_blocked_percent: f64,
    /// Busy poller: CPU of its thread (percent of one core) that makes the
    /// finding critical. Default 50% (iOS energy logs record 50% CPU over
    /// 180 s; the Envoy Mobile poll-backend case burned >= 100% while idle).
    pub busy_poll_critical_cpu_percent: f64,
    /// Busy poller: wakeups (or idle non-blocking polls) per second that
    /// make the finding critical. Default 10,000/s (the Envoy Mobile case:
    /// "your loop wakes 10,000 times a second and finds nothing").
    pub busy_poll_critical_wakeups_per_sec: f64,
    /// Sleep overhead: sleeps per second of one sleep site. Default 100/s
    /// (powertop shows a 100 ms usleep loop at ~212 events/s as a top waker).
    pub sleep_calls_per_sec: f64,
    /// Sleep overhead: CPU inside sleeps, percent of one core, that makes the
    /// finding a warning. Default 1%.
    pub sleep_cpu_percent: f64,
    /// Sleep overhead: CPU inside sleeps, percent of one core, that makes the
    /// finding critical. Default 5% (the iOS audio engine's `usleep` loop
    /// cost 8%; lowering its priority brought it to 0.8%).
    pub sleep_critical_cpu_percent: f64,
    /// Sleep overhead: sleeps per second that make the finding a warning
    /// even at low CPU. Default 500/s: a 2 ms sleep-and-check period, five
    /// times [`Thresholds::sleep_calls_per_sec`] (a judgement of this
    /// project, not an external limit).
    pub sleep_warning_calls_per_sec: f64,
    /// Share of a thread's sleeps ended early by a signal (0–1) above which
    /// its wakeups are attributed to the signals, not to a sleep loop.
    /// Default 0.5: a majority (a 10 ms sleep under a 1 kHz timer signal
    /// is interrupted ~99% of the time; an undisturbed sleep loop 0%).
    pub sleep_interrupted_ratio: f64,
    /// Periodic wakeups: wakeups per second of a thread or loop that does
    /// little per wakeup. Default 20/s (a 50 ms timer).
    pub periodic_wakeups_per_sec: f64,
    /// Periodic wakeups: most CPU (percent of one core) such a thread may use. Default 5%.
    pub periodic_max_cpu_percent: f64,
    /// Periodic wakeups: largest coefficient of variation of the per-sample
    /// wakeup rate that still counts as periodic. Default 0.25.
    pub periodic_max_variation: f64,
    /// Periodic wakeups: wakeups per second that make the finding a warning.
    /// Default 100/s (a 10 ms timer: two thirds of iOS's 150/s wakeups
    /// budget by itself).
    pub periodic_warning_wakeups_per_sec: f64,
    /// Periodic wakeups of a loop: least share of its wakeups that ended on
    /// their timeout (0–1). Default 0.8 (a timer-driven loop; a loop woken
    /// by work ends its waits early).
    pub periodic_min_timed_out_ratio: f64,
    /// Periodic wakeups of a loop: most events per wakeup (a loop with work
    /// on one wakeup in ten or more is not idle-periodic). Default 0.1.
    pub periodic_max_events_per_wakeup: f64,
    /// Periodic wakeups of a thread: least number of per-sample rates the
    /// steadiness is judged on. Default 3 (a variation needs a few points).
    pub periodic_min_samples: u32,
    /// Share of a thread's wakes (0–1) one source must have for a finding
    /// to name it (a timer or I/O interrupt, other threads of the process,
    /// other processes); below it the finding says the sources are mixed
    /// and gives the split. Default 0.75, three wakes in four: at 0.6 Go's
    /// sysmon under light load (62% of its wakes from interrupts, the rest
    /// from the scheduler's other threads) was called a timer.
    pub wake_source_ratio: f64,
    /// CPU hog: percent of one core over [`Thresholds::cpu_window`]. Default 80%
    /// (iOS kills background apps above 80% CPU over 60 s).
    pub cpu_hog_percent: f64,
    /// CPU hog: percent of one core that makes the finding critical.
    /// Default 95% (a thread that never yields its core).
    pub cpu_hog_critical_percent: f64,
    /// Window of the CPU hog finding. Default 60 s (the iOS rule's window).
    pub cpu_window: Duration,
    /// Least history the CPU hog finding needs (at most
    /// [`Thresholds::cpu_window`]). Default 60 s, the whole window: a
    /// start-up burst of a few seconds at full CPU is not a hog, and the
    /// iOS rule judges 80% over 60 s, not over the first seconds.
    pub cpu_min_window: Duration,
    /// Run-queue contention: percent of time a thread waited runnable for a
    /// CPU. Default 20%.
    pub run_queue_wait_percent: f64,
    /// Run-queue contention: wait percent that makes the finding critical.
    /// Default 50% (the thread waits for a CPU as long as it could run).
    pub run_queue_critical_wait_percent: f64,
    /// Run-queue contention: least CPU of the thread, percent of one core,
    /// for a finding about that thread; an almost idle thread's waits say
    /// little about contention. Default 5%. Many threads below it are
    /// judged together: a process whose runnable threads want more CPUs
    /// than the machine has, and which waits at least
    /// [`Thresholds::run_queue_wait_percent`] of its runnable time, gets a
    /// finding about the process (256 threads at 0.5% CPU each, each
    /// waiting for a CPU almost all the time, on 2 cores).
    pub run_queue_min_cpu_percent: f64,
    /// Wakeups budget: average wakeups per second allowed over
    /// [`Thresholds::wakeups_window`]. Default 150/s (iOS EXC_RESOURCE WAKEUPS:
    /// 45,000 per 300 s). The finding is judged only where the budget
    /// applies, on Apple platforms (macOS, iOS), unless
    /// [`Thresholds::wakeups_budget_everywhere`] is set.
    pub wakeups_budget_per_sec: f64,
    /// Judge the wakeups budget on every platform, not only on Apple's
    /// (a Linux or Android build of an app that also ships on iOS, where
    /// the developer wants the iOS limit in view). Default false: a Linux
    /// server that wakes 1,800 times/s under load is not over any budget.
    pub wakeups_budget_everywhere: bool,
    /// Share of the budget that raises a warning before the OS would act (0–1). Default 0.8.
    pub wakeups_warn_fraction: f64,
    /// Window of the wakeups budget. Default 300 s.
    pub wakeups_window: Duration,
    /// Least history the wakeups budget finding needs (at most
    /// [`Thresholds::wakeups_window`]). Default 60 s: the finding projects
    /// a rate onto the 300 s budget, and a rate from the first seconds
    /// (start-up: threads created, files loaded) projects a burst.
    pub wakeups_min_window: Duration,
    /// Memory growth: RSS growth across the history, in bytes. Default 32 MiB.
    pub memory_growth_bytes: u64,
    /// Least history the memory growth finding needs. Default 60 s: a
    /// program that allocates its caches while starting grows steeply for
    /// seconds and then stays flat, which is not a leak.
    pub memory_min_window: Duration,
    /// Memory growth: growth relative to the start (0–10). Default 0.10.
    pub memory_growth_ratio: f64,
    /// Memory growth: growth relative to the start that makes the finding
    /// critical (0–10). Default 1.0 (the resident size doubled).
    pub memory_growth_critical_ratio: f64,
    /// Memory growth: least share of consecutive samples in which RSS did
    /// not shrink (0–1), so that a one-off allocation is not called a
    /// leak. Default 0.7.
    pub memory_growth_rising_ratio: f64,
    /// Grouping: threads whose findings have the same kind, severity and
    /// group name (digits aside: `worker-1`, `worker-2` → `worker-{n}`) become one
    /// finding when every number of their evidence is within this relative
    /// difference of the group's first (0–1). Default 0.25.
    pub group_max_difference: f64,
    /// Hysteresis of severities (0–1): a finding that had a severity in
    /// the previous report keeps it until its figure moves past the
    /// threshold by this share of the threshold (down for a lower
    /// severity, up for a higher one). Default 0.1: a thread that was a
    /// warning at 101 wakes/s (threshold 100/s) stays one until it wakes
    /// fewer than 90 times/s, and one that was info becomes a warning
    /// only above 110/s. Threads alike in everything but severity are
    /// grouped, the group taking the highest severity of its members.
    pub severity_margin: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            window: Duration::from_secs(10),
            min_window: Duration::from_secs(2),
            busy_poll_wakeups_per_sec: 1000.0,
            busy_poll_idle_ratio: 0.9,
            busy_poll_zero_timeout_ratio: 0.5,
            busy_poll_max_blocked_percent: 50.0,
            busy_poll_critical_cpu_percent: 50.0,
            busy_poll_critical_wakeups_per_sec: 10_000.0,
            sleep_calls_per_sec: 100.0,
            sleep_cpu_percent: 1.0,
            sleep_critical_cpu_percent: 5.0,
            sleep_warning_calls_per_sec: 500.0,
            sleep_interrupted_ratio: 0.5,
            periodic_wakeups_per_sec: 20.0,
            periodic_max_cpu_percent: 5.0,
            periodic_max_variation: 0.25,
            periodic_warning_wakeups_per_sec: 100.0,
            periodic_min_timed_out_ratio: 0.8,
            periodic_max_events_per_wakeup: 0.1,
            periodic_min_samples: 3,
            wake_source_ratio: 0.75,
            cpu_hog_percent: 80.0,
            cpu_hog_critical_percent: 95.0,
            cpu_window: Duration::from_secs(60),
            cpu_min_window: Duration::from_secs(60),
            run_queue_wait_percent: 20.0,
            run_queue_critical_wait_percent: 50.0,
            run_queue_min_cpu_percent: 5.0,
            wakeups_budget_per_sec: 150.0,
            wakeups_budget_everywhere: false,
            wakeups_warn_fraction: 0.8,
            wakeups_window: Duration::from_secs(300),
            wakeups_min_window: Duration::from_secs(60),
            memory_growth_bytes: 32 << 20,
            memory_min_window: Duration::from_secs(60),
            memory_growth_ratio: 0.10,
            memory_growth_critical_ratio: 1.0,
            memory_growth_rising_ratio: 0.7,
            group_max_difference: 0.25,
            severity_margin: 0.1,
        }
    }
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $field:ident: $ty:ty;)*) => {
        impl Thresholds {
            $($(#[$doc])* #[must_use] pub fn $name(mut self, v: $ty) -> Self { self.$field = v; self })*
        }
    };
}

setters! {
    /// Sets [`Thresholds::window`].
    with_window: window: Duration;
    /// Sets [`Thresholds::min_window`].
    with_min_window: min_window: Duration;
    /// Sets [`Thresholds::busy_poll_wakeups_per_sec`].
    with_busy_poll_wakeups_per_sec: busy_poll_wakeups_per_sec: f64;
    /// Sets [`Thresholds::busy_poll_idle_ratio`].
    with_busy_poll_idle_ratio: busy_poll_idle_ratio: f64;
    /// Sets [`Thresholds::busy_poll_zero_timeout_ratio`].
    with_busy_poll_zero_timeout_ratio: busy_poll_zero_timeout_ratio: f64;
    /// Sets [`Thresholds::busy_poll_max_blocked_percent`].
    with_busy_poll_max_blocked_percent: busy_poll_max_blocked_percent: f64;
    /// Sets [`Thresholds::busy_poll_critical_cpu_percent`].
    with_busy_poll_critical_cpu_percent: busy_poll_critical_cpu_percent: f64;
    /// Sets [`Thresholds::busy_poll_critical_wakeups_per_sec`].
    with_busy_poll_critical_wakeups_per_sec: busy_poll_critical_wakeups_per_sec: f64;
    /// Sets [`Thresholds::sleep_critical_cpu_percent`].
    with_sleep_critical_cpu_percent: sleep_critical_cpu_percent: f64;
    /// Sets [`Thresholds::sleep_warning_calls_per_sec`].
    with_sleep_warning_calls_per_sec: sleep_warning_calls_per_sec: f64;
    /// Sets [`Thresholds::sleep_interrupted_ratio`].
    with_sleep_interrupted_ratio: sleep_interrupted_ratio: f64;
    /// Sets [`Thresholds::periodic_warning_wakeups_per_sec`].
    with_periodic_warning_wakeups_per_sec: periodic_warning_wakeups_per_sec: f64;
    /// Sets [`Thresholds::periodic_min_timed_out_ratio`].
    with_periodic_min_timed_out_ratio: periodic_min_timed_out_ratio: f64;
    /// Sets [`Thresholds::periodic_max_events_per_wakeup`].
    with_periodic_max_events_per_wakeup: periodic_max_events_per_wakeup: f64;
    /// Sets [`Thresholds::periodic_min_samples`].
    with_periodic_min_samples: periodic_min_samples: u32;
    /// Sets [`Thresholds::wake_source_ratio`].
    with_wake_source_ratio: wake_source_ratio: f64;
    /// Sets [`Thresholds::cpu_hog_critical_percent`].
    with_cpu_hog_critical_percent: cpu_hog_critical_percent: f64;
    /// Sets [`Thresholds::run_queue_critical_wait_percent`].
    with_run_queue_critical_wait_percent: run_queue_critical_wait_percent: f64;
    /// Sets [`Thresholds::run_queue_min_cpu_percent`].
    with_run_queue_min_cpu_percent: run_queue_min_cpu_percent: f64;
    /// Sets [`Thresholds::memory_growth_critical_ratio`].
    with_memory_growth_critical_ratio: memory_growth_critical_ratio: f64;
    /// Sets [`Thresholds::memory_growth_rising_ratio`].
    with_memory_growth_rising_ratio: memory_growth_rising_ratio: f64;
    /// Sets [`Thresholds::group_max_difference`].
    with_group_max_difference: group_max_difference: f64;
    /// Sets [`Thresholds::sleep_calls_per_sec`].
    with_sleep_calls_per_sec: sleep_calls_per_sec: f64;
    /// Sets [`Thresholds::sleep_cpu_percent`].
    with_sleep_cpu_percent: sleep_cpu_percent: f64;
    /// Sets [`Thresholds::periodic_wakeups_per_sec`].
    with_periodic_wakeups_per_sec: periodic_wakeups_per_sec: f64;
    /// Sets [`Thresholds::periodic_max_cpu_percent`].
    with_periodic_max_cpu_percent: periodic_max_cpu_percent: f64;
    /// Sets [`Thresholds::periodic_max_variation`].
    with_periodic_max_variation: periodic_max_variation: f64;
    /// Sets [`Thresholds::cpu_hog_percent`].
    with_cpu_hog_percent: cpu_hog_percent: f64;
    /// Sets [`Thresholds::cpu_window`].
    with_cpu_window: cpu_window: Duration;
    /// Sets [`Thresholds::cpu_min_window`].
    with_cpu_min_window: cpu_min_window: Duration;
    /// Sets [`Thresholds::run_queue_wait_percent`].
    with_run_queue_wait_percent: run_queue_wait_percent: f64;
    /// Sets [`Thresholds::wakeups_budget_per_sec`].
    with_wakeups_budget_per_sec: wakeups_budget_per_sec: f64;
    /// Sets [`Thresholds::wakeups_warn_fraction`].
    with_wakeups_warn_fraction: wakeups_warn_fraction: f64;
    /// Sets [`Thresholds::wakeups_window`].
    with_wakeups_window: wakeups_window: Duration;
    /// Sets [`Thresholds::wakeups_min_window`].
    with_wakeups_min_window: wakeups_min_window: Duration;
    /// Sets [`Thresholds::memory_min_window`].
    with_memory_min_window: memory_min_window: Duration;
    /// Sets [`Thresholds::memory_growth_bytes`].
    with_memory_growth_bytes: memory_growth_bytes: u64;
    /// Sets [`Thresholds::memory_growth_ratio`].
    with_memory_growth_ratio: memory_growth_ratio: f64;
    /// Sets [`Thresholds::wakeups_budget_everywhere`].
    with_wakeups_budget_everywhere: wakeups_budget_everywhere: bool;
    /// Sets [`Thresholds::severity_margin`].
    with_severity_margin: severity_margin: f64;
}

impl Thresholds {
    /// Checks every threshold is in range.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first field out of range.
    pub fn validate(&self) -> Result<()> {
        let bad = |field: &'static str, reason: &str| {
            Err(Error::InvalidConfig {
                field,
                reason: reason.to_string(),
            })
        };
        let rate = |v: f64| v.is_finite() && v > 0.0;
        let unit = |v: f64| v.is_finite() && (0.0..=1.0).contains(&v);
        let pct = |v: f64| v.is_finite() && v > 0.0 && v <= 100.0;
        for (f, d) in [
            ("window", self.window),
            ("cpu_window", self.cpu_window),
            ("wakeups_window", self.wakeups_window),
        ] {
            if d.is_zero() {
                return bad(f, "must be greater than zero");
            }
        }
        for (f, min, window, reason) in [
            (
                "min_window",
                self.min_window,
                self.window,
                "must not exceed window",
            ),
            (
                "cpu_min_window",
                self.cpu_min_window,
                self.cpu_window,
                "must not exceed cpu_window (shorten both)",
            ),
            (
                "wakeups_min_window",
                self.wakeups_min_window,
                self.wakeups_window,
                "must not exceed wakeups_window (shorten both)",
            ),
        ] {
            if min > window {
                return bad(f, reason);
            }
        }
        for (f, v) in [
            ("busy_poll_wakeups_per_sec", self.busy_poll_wakeups_per_sec),
            ("sleep_calls_per_sec", self.sleep_calls_per_sec),
            ("periodic_wakeups_per_sec", self.periodic_wakeups_per_sec),
            ("wakeups_budget_per_sec", self.wakeups_budget_per_sec),
            ("periodic_max_variation", self.periodic_max_variation),
            (
                "busy_poll_critical_wakeups_per_sec",
                self.busy_poll_critical_wakeups_per_sec,
            ),
            (
                "sleep_warning_calls_per_sec",
                self.sleep_warning_calls_per_sec,
            ),
            (
                "periodic_warning_wakeups_per_sec",
                self.periodic_warning_wakeups_per_sec,
            ),
        ] {
            if !rate(v) {
                return bad(f, "must be a finite number greater than zero");
            }
        }
        for (f, v) in [
            ("busy_poll_idle_ratio", self.busy_poll_idle_ratio),
            (
                "busy_poll_zero_timeout_ratio",
                self.busy_poll_zero_timeout_ratio,
            ),
            ("wakeups_warn_fraction", self.wakeups_warn_fraction),
            ("sleep_interrupted_ratio", self.sleep_interrupted_ratio),
            (
                "periodic_min_timed_out_ratio",
                self.periodic_min_timed_out_ratio,
            ),
            ("wake_source_ratio", self.wake_source_ratio),
            (
                "memory_growth_rising_ratio",
                self.memory_growth_rising_ratio,
            ),
            ("group_max_difference", self.group_max_difference),
            ("severity_margin", self.severity_margin),
        ] {
            if !unit(v) {
                return bad(f, "must be between 0 and 1");
            }
        }
        for (f, v) in [
            ("sleep_cpu_percent", self.sleep_cpu_percent),
            ("periodic_max_cpu_percent", self.periodic_max_cpu_percent),
            ("cpu_hog_percent", self.cpu_hog_percent),
            ("run_queue_wait_percent", self.run_queue_wait_percent),
            (
                "busy_poll_max_blocked_percent",
                self.busy_poll_max_blocked_percent,
            ),
            (
                "busy_poll_critical_cpu_percent",
                self.busy_poll_critical_cpu_percent,
            ),
            (
                "sleep_critical_cpu_percent",
                self.sleep_critical_cpu_percent,
            ),
            ("cpu_hog_critical_percent", self.cpu_hog_critical_percent),
            (
                "run_queue_critical_wait_percent",
                self.run_queue_critical_wait_percent,
            ),
            ("run_queue_min_cpu_percent", self.run_queue_min_cpu_percent),
        ] {
            if !pct(v) {
                return bad(f, "must be a percentage above 0 and at most 100");
            }
        }
        for (f, v) in [
            ("memory_growth_ratio", self.memory_growth_ratio),
            (
                "memory_growth_critical_ratio",
                self.memory_growth_critical_ratio,
            ),
        ] {
            if !(v.is_finite() && (0.0..=10.0).contains(&v)) {
                return bad(f, "must be between 0 and 10");
            }
        }
        if !(self.periodic_max_events_per_wakeup.is_finite()
            && self.periodic_max_events_per_wakeup >= 0.0)
        {
            return bad(
                "periodic_max_events_per_wakeup",
                "must be a finite number of at least zero",
            );
        }
        if self.periodic_min_samples < 2 {
            return bad("periodic_min_samples", "must be at least 2");
        }
        if self.memory_growth_bytes == 0 {
            return bad("memory_growth_bytes", "must be greater than zero");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        Thresholds::default().validate().unwrap();
        let field = |t: Thresholds| match t.validate() {
            Err(Error::InvalidConfig { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            field(Thresholds::default().with_busy_poll_idle_ratio(1.5)),
            "busy_poll_idle_ratio"
        );
        assert_eq!(
            field(Thresholds::default().with_cpu_hog_percent(f64::NAN)),
            "cpu_hog_percent"
        );
        assert_eq!(
            field(Thresholds::default().with_window(Duration::ZERO)),
            "window"
        );
        assert_eq!(
            field(Thresholds::default().with_sleep_calls_per_sec(-1.0)),
            "sleep_calls_per_sec"
        );
        assert_eq!(
            field(Thresholds::default().with_memory_growth_bytes(0)),
            "memory_growth_bytes"
        );
        assert_eq!(
            field(Thresholds::default().with_min_window(Duration::from_secs(60))),
            "min_window"
        );
        // Shortening a window alone leaves its minimum above it: named.
        assert_eq!(
            field(Thresholds::default().with_cpu_window(Duration::from_secs(10))),
            "cpu_min_window"
        );
        assert_eq!(
            field(Thresholds::default().with_wakeups_window(Duration::from_secs(30))),
            "wakeups_min_window"
        );
    }
}

//! Thresholds of the findings engine, with their sources.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// When a finding fires. Every default is documented with where it comes from;
/// change them with the `with_*` setters and check with [`Thresholds::validate`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct Thresholds {
    /// Window for rate-based findings (busy poller, sleep overhead, periodic
    /// wakeups, run-queue contention). Default 10 s.
    pub window: Duration,
    /// Least history a finding needs; shorter windows report nothing. Default 2 s.
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
    /// Sleep overhead: sleeps per second of one sleep site. Default 100/s
    /// (powertop shows a 100 ms usleep loop at ~212 events/s as a top waker).
    pub sleep_calls_per_sec: f64,
    /// Sleep overhead: CPU inside sleeps, percent of one core, that makes the
    /// finding a warning (5× this: critical; the iOS audio case was 8%). Default 1%.
    pub sleep_cpu_percent: f64,
    /// Periodic wakeups: wakeups per second of a thread or loop that does
    /// little per wakeup. Default 20/s (a 50 ms timer).
    pub periodic_wakeups_per_sec: f64,
    /// Periodic wakeups: most CPU (percent of one core) such a thread may use. Default 5%.
    pub periodic_max_cpu_percent: f64,
    /// Periodic wakeups: largest coefficient of variation of the per-sample
    /// wakeup rate that still counts as periodic. Default 0.25.
    pub periodic_max_variation: f64,
    /// CPU hog: percent of one core over [`Thresholds::cpu_window`]. Default 80%
    /// (iOS kills background apps above 80% CPU over 60 s).
    pub cpu_hog_percent: f64,
    /// Window of the CPU hog finding. Default 60 s (the iOS rule's window).
    pub cpu_window: Duration,
    /// Run-queue contention: percent of time a thread waited runnable for a
    /// CPU. Default 20%.
    pub run_queue_wait_percent: f64,
    /// Wakeups budget: average wakeups per second allowed over
    /// [`Thresholds::wakeups_window`]. Default 150/s (iOS EXC_RESOURCE WAKEUPS:
    /// 45,000 per 300 s).
    pub wakeups_budget_per_sec: f64,
    /// Share of the budget that raises a warning before the OS would act (0–1). Default 0.8.
    pub wakeups_warn_fraction: f64,
    /// Window of the wakeups budget. Default 300 s.
    pub wakeups_window: Duration,
    /// Memory growth: RSS growth across the history, in bytes. Default 32 MiB.
    pub memory_growth_bytes: u64,
    /// Memory growth: growth relative to the start (0–10). Default 0.10.
    pub memory_growth_ratio: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            window: Duration::from_secs(10),
            min_window: Duration::from_secs(2),
            busy_poll_wakeups_per_sec: 1000.0,
            busy_poll_idle_ratio: 0.9,
            busy_poll_zero_timeout_ratio: 0.5,
            sleep_calls_per_sec: 100.0,
            sleep_cpu_percent: 1.0,
            periodic_wakeups_per_sec: 20.0,
            periodic_max_cpu_percent: 5.0,
            periodic_max_variation: 0.25,
            cpu_hog_percent: 80.0,
            cpu_window: Duration::from_secs(60),
            run_queue_wait_percent: 20.0,
            wakeups_budget_per_sec: 150.0,
            wakeups_warn_fraction: 0.8,
            wakeups_window: Duration::from_secs(300),
            memory_growth_bytes: 32 << 20,
            memory_growth_ratio: 0.10,
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
    /// Sets [`Thresholds::run_queue_wait_percent`].
    with_run_queue_wait_percent: run_queue_wait_percent: f64;
    /// Sets [`Thresholds::wakeups_budget_per_sec`].
    with_wakeups_budget_per_sec: wakeups_budget_per_sec: f64;
    /// Sets [`Thresholds::wakeups_warn_fraction`].
    with_wakeups_warn_fraction: wakeups_warn_fraction: f64;
    /// Sets [`Thresholds::wakeups_window`].
    with_wakeups_window: wakeups_window: Duration;
    /// Sets [`Thresholds::memory_growth_bytes`].
    with_memory_growth_bytes: memory_growth_bytes: u64;
    /// Sets [`Thresholds::memory_growth_ratio`].
    with_memory_growth_ratio: memory_growth_ratio: f64;
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
        if self.min_window > self.window {
            return bad("min_window", "must not exceed window");
        }
        for (f, v) in [
            ("busy_poll_wakeups_per_sec", self.busy_poll_wakeups_per_sec),
            ("sleep_calls_per_sec", self.sleep_calls_per_sec),
            ("periodic_wakeups_per_sec", self.periodic_wakeups_per_sec),
            ("wakeups_budget_per_sec", self.wakeups_budget_per_sec),
            ("periodic_max_variation", self.periodic_max_variation),
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
        ] {
            if !pct(v) {
                return bad(f, "must be a percentage above 0 and at most 100");
            }
        }
        if !(self.memory_growth_ratio.is_finite()
            && self.memory_growth_ratio >= 0.0
            && self.memory_growth_ratio <= 10.0)
        {
            return bad("memory_growth_ratio", "must be between 0 and 10");
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
    }
}

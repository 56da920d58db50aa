//! Thresholds of the findings engine, with their sources.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Declares every threshold once, in one line each: its doc (definition,
/// default and source), name, type, default, unit and range. The struct,
/// its `Default`, its `with_*` setters, [`Thresholds::FIELDS`] and
/// [`Thresholds::validate`] are derived from that line; adding a
/// threshold is one more line here.
macro_rules! thresholds {
    ($($(#[$doc:meta])* $field:ident, $setter:ident: $ty:ty = $default:expr; unit $unit:literal; range $range:ident;)*) => {
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
            $($(#[$doc])* pub $field: $ty,)*
        }

        impl Default for Thresholds {
            fn default() -> Self {
                Thresholds { $($field: $default,)* }
            }
        }

        impl Thresholds {
            /// Every threshold, in declaration order: its name (the field's,
            /// the JSON key's), unit and range.
            pub const FIELDS: &'static [ThresholdField] = &[
                $(ThresholdField { name: stringify!($field), unit: $unit, range: ThresholdRange::$range },)*
            ];

            $(
                #[doc = concat!("Sets [`Thresholds::", stringify!($field), "`].")]
                #[must_use]
                pub fn $setter(mut self, v: $ty) -> Self {
                    self.$field = v;
                    self
                }
            )*

            /// Checks every threshold is in range.
            ///
            /// # Errors
            /// [`Error::InvalidConfig`] naming the first field out of range,
            /// in declaration order.
            pub fn validate(&self) -> Result<()> {
                $(ThresholdRange::$range.check(self, Value::from(self.$field)).map_err(|reason| Error::InvalidConfig {
                    field: stringify!($field),
                    reason: reason.to_string(),
                })?;)*
                Ok(())
            }
        }
    };
}

/// One threshold as [`Thresholds::FIELDS`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThresholdField {
    /// The field's name, which is also its JSON key.
    pub name: &'static str,
    /// Its unit (`s`, `1/s`, `ratio`, `% of one core`, ...); empty for a flag.
    pub unit: &'static str,
    /// What [`Thresholds::validate`] accepts.
    pub range: ThresholdRange,
}

/// What [`Thresholds::validate`] accepts for one threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ThresholdRange {
    /// Greater than zero (and finite, for a number).
    Positive,
    /// A share, from 0 to 1.
    Share,
    /// A percentage above 0 and at most 100.
    Percent,
    /// From 0 to 10.
    UpToTen,
    /// A finite number of at least zero.
    NonNegative,
    /// At least 2.
    AtLeastTwo,
    /// At most [`Thresholds::window`].
    AtMostWindow,
    /// At most [`Thresholds::cpu_window`].
    AtMostCpuWindow,
    /// At most [`Thresholds::wakeups_window`].
    AtMostWakeupsWindow,
    /// Any value.
    Any,
}

/// A threshold's value, as the range check sees it.
#[derive(Debug, Clone, Copy)]
enum Value {
    Number(f64),
    Duration(Duration),
    Count(u64),
    Flag,
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Number(v)
    }
}

impl From<Duration> for Value {
    fn from(v: Duration) -> Value {
        Value::Duration(v)
    }
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::Count(v)
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::Count(u64::from(v))
    }
}

impl From<bool> for Value {
    fn from(_: bool) -> Value {
        Value::Flag
    }
}

impl ThresholdRange {
    /// Why `value` is out of this range, if it is.
    fn check(self, t: &Thresholds, value: Value) -> std::result::Result<(), &'static str> {
        use ThresholdRange as R;
        let ok = match (self, value) {
            (R::Any, _) => true,
            (R::Positive, Value::Number(v)) => {
                return (v.is_finite() && v > 0.0)
                    .then_some(())
                    .ok_or("must be a finite number greater than zero");
            }
            (R::Positive, Value::Duration(d)) => !d.is_zero(),
            (R::Positive, Value::Count(n)) => n > 0,
            (R::Share, Value::Number(v)) => {
                return (v.is_finite() && (0.0..=1.0).contains(&v))
                    .then_some(())
                    .ok_or("must be between 0 and 1");
            }
            (R::Percent, Value::Number(v)) => {
                return (v.is_finite() && v > 0.0 && v <= 100.0)
                    .then_some(())
                    .ok_or("must be a percentage above 0 and at most 100");
            }
            (R::UpToTen, Value::Number(v)) => {
                return (v.is_finite() && (0.0..=10.0).contains(&v))
                    .then_some(())
                    .ok_or("must be between 0 and 10");
            }
            (R::NonNegative, Value::Number(v)) => {
                return (v.is_finite() && v >= 0.0)
                    .then_some(())
                    .ok_or("must be a finite number of at least zero");
            }
            (R::AtLeastTwo, Value::Count(n)) => {
                return (n >= 2).then_some(()).ok_or("must be at least 2");
            }
            (R::AtMostWindow, Value::Duration(d)) => {
                return (d <= t.window)
                    .then_some(())
                    .ok_or("must not exceed window");
            }
            (R::AtMostCpuWindow, Value::Duration(d)) => {
                return (d <= t.cpu_window)
                    .then_some(())
                    .ok_or("must not exceed cpu_window (shorten both)");
            }
            (R::AtMostWakeupsWindow, Value::Duration(d)) => {
                return (d <= t.wakeups_window)
                    .then_some(())
                    .ok_or("must not exceed wakeups_window (shorten both)");
            }
            // A range declared for a type it does not apply to: refused,
            // so the declaration is fixed (the tests check every default).
            _ => return Err("has a range that does not apply to its type"),
        };
        ok.then_some(()).ok_or("must be greater than zero")
    }
}

thresholds! {
    /// Window for rate-based findings (busy poller, sleep overhead, periodic
    /// wakeups, run-queue contention). Default 10 s.
    window, with_window: Duration = Duration::from_secs(10); unit "s"; range Positive;
    /// Least history the rate-based findings need (those over
    /// [`Thresholds::window`]); shorter windows report nothing. Default 2 s.
    /// The CPU hog, wakeups budget and memory growth findings have their
    /// own minimums ([`Thresholds::cpu_min_window`],
    /// [`Thresholds::wakeups_min_window`], [`Thresholds::memory_min_window`]).
    min_window, with_min_window: Duration = Duration::from_secs(2); unit "s"; range AtMostWindow;
    /// Busy poller: wakeups per second of a loop (or poll calls per second of
    /// a thread, with eBPF). Default 1000/s — an order of magnitude above
    /// any timer a healthy idle loop needs.
    busy_poll_wakeups_per_sec, with_busy_poll_wakeups_per_sec: f64 = 1000.0; unit "1/s"; range Positive;
    /// Busy poller: share of wakeups that found nothing (0–1). Default 0.9.
    busy_poll_idle_ratio, with_busy_poll_idle_ratio: f64 = 0.9; unit "ratio"; range Share;
    /// Busy poller: share of waits with a zero timeout (0–1); either this or
    /// the idle ratio suffices. Default 0.5.
    busy_poll_zero_timeout_ratio, with_busy_poll_zero_timeout_ratio: f64 = 0.5; unit "ratio"; range Share;
    /// Busy poller: a thread blocked (off CPU, not preempted) for more than
    /// this percent of the window does not busy-poll, whatever its call
    /// counts say: it waits. Default 50%: measured here, a zero-timeout
    /// `epoll_wait` loop is blocked 0%, a libuv-style 1 ms timer loop (Node
    /// `setInterval(…, 1)`, a zero-timeout pre-poll before each blocking
    /// wait) 95–99% (ACCURACY.md).
    busy_poll_max_blocked_percent, with_busy_poll_max_blocked_percent: f64 = 50.0; unit "% of the window"; range Percent;
    /// Busy poller: CPU of its thread (percent of one core) that makes the
    /// finding critical. Default 50% (iOS energy logs record 50% CPU over
    /// 180 s; the Envoy Mobile poll-backend case burned >= 100% while idle).
    busy_poll_critical_cpu_percent, with_busy_poll_critical_cpu_percent: f64 = 50.0; unit "% of one core"; range Percent;
    /// Busy poller: wakeups (or idle non-blocking polls) per second that
    /// make the finding critical. Default 10,000/s (the Envoy Mobile case:
    /// "your loop wakes 10,000 times a second and finds nothing").
    busy_poll_critical_wakeups_per_sec, with_busy_poll_critical_wakeups_per_sec: f64 = 10_000.0; unit "1/s"; range Positive;
    /// Sleep overhead: sleeps per second of one sleep site. Default 100/s
    /// (powertop shows a 100 ms usleep loop at ~212 events/s as a top waker).
    sleep_calls_per_sec, with_sleep_calls_per_sec: f64 = 100.0; unit "1/s"; range Positive;
    /// Sleep overhead: CPU inside sleeps, percent of one core, that makes the
    /// finding a warning. Default 1%.
    sleep_cpu_percent, with_sleep_cpu_percent: f64 = 1.0; unit "% of one core"; range Percent;
    /// Sleep overhead: CPU inside sleeps, percent of one core, that makes the
    /// finding critical. Default 5% (the iOS audio engine's `usleep` loop
    /// cost 8%; lowering its priority brought it to 0.8%).
    sleep_critical_cpu_percent, with_sleep_critical_cpu_percent: f64 = 5.0; unit "% of one core"; range Percent;
    /// Sleep overhead: sleeps per second that make the finding a warning
    /// even at low CPU. Default 500/s: a 2 ms sleep-and-check period, five
    /// times [`Thresholds::sleep_calls_per_sec`] (a judgement of this
    /// project, not an external limit).
    sleep_warning_calls_per_sec, with_sleep_warning_calls_per_sec: f64 = 500.0; unit "1/s"; range Positive;
    /// Share of a thread's sleeps ended early by a signal (0–1) above which
    /// its wakeups are attributed to the signals, not to a sleep loop.
    /// Default 0.5: a majority (a 10 ms sleep under a 1 kHz timer signal
    /// is interrupted ~99% of the time; an undisturbed sleep loop 0%).
    sleep_interrupted_ratio, with_sleep_interrupted_ratio: f64 = 0.5; unit "ratio"; range Share;
    /// Periodic wakeups: wakeups per second of a thread or loop that does
    /// little per wakeup. Default 20/s (a 50 ms timer).
    periodic_wakeups_per_sec, with_periodic_wakeups_per_sec: f64 = 20.0; unit "1/s"; range Positive;
    /// Periodic wakeups: most CPU (percent of one core) such a thread may use. Default 5%.
    periodic_max_cpu_percent, with_periodic_max_cpu_percent: f64 = 5.0; unit "% of one core"; range Percent;
    /// Periodic wakeups: largest coefficient of variation of the per-sample
    /// wakeup rate that still counts as periodic. Default 0.25.
    periodic_max_variation, with_periodic_max_variation: f64 = 0.25; unit "ratio"; range Positive;
    /// Periodic wakeups: wakeups per second that make the finding a warning.
    /// Default 100/s (a 10 ms timer: two thirds of iOS's 150/s wakeups
    /// budget by itself).
    periodic_warning_wakeups_per_sec, with_periodic_warning_wakeups_per_sec: f64 = 100.0; unit "1/s"; range Positive;
    /// Periodic wakeups of a loop: least share of its wakeups that ended on
    /// their timeout (0–1). Default 0.8 (a timer-driven loop; a loop woken
    /// by work ends its waits early).
    periodic_min_timed_out_ratio, with_periodic_min_timed_out_ratio: f64 = 0.8; unit "ratio"; range Share;
    /// Periodic wakeups of a loop: most events per wakeup (a loop with work
    /// on one wakeup in ten or more is not idle-periodic). Default 0.1.
    periodic_max_events_per_wakeup, with_periodic_max_events_per_wakeup: f64 = 0.1; unit "events per wakeup"; range NonNegative;
    /// Periodic wakeups of a thread: least number of per-sample rates the
    /// steadiness is judged on. Default 3 (a variation needs a few points).
    periodic_min_samples, with_periodic_min_samples: u32 = 3; unit "samples"; range AtLeastTwo;
    /// Share of a thread's wakes (0–1) one source must have for a finding
    /// to name it (a timer or I/O interrupt, other threads of the process,
    /// other processes); below it the finding says the sources are mixed
    /// and gives the split. Default 0.75, three wakes in four: at 0.6 Go's
    /// sysmon under light load (62% of its wakes from interrupts, the rest
    /// from the scheduler's other threads) was called a timer.
    wake_source_ratio, with_wake_source_ratio: f64 = 0.75; unit "ratio"; range Share;
    /// CPU hog: percent of one core over [`Thresholds::cpu_window`]. Default 80%
    /// (iOS kills background apps above 80% CPU over 60 s).
    cpu_hog_percent, with_cpu_hog_percent: f64 = 80.0; unit "% of one core"; range Percent;
    /// CPU hog: percent of one core that makes the finding critical.
    /// Default 95% (a thread that never yields its core).
    cpu_hog_critical_percent, with_cpu_hog_critical_percent: f64 = 95.0; unit "% of one core"; range Percent;
    /// Window of the CPU hog finding. Default 60 s (the iOS rule's window).
    cpu_window, with_cpu_window: Duration = Duration::from_secs(60); unit "s"; range Positive;
    /// Least history the CPU hog finding needs (at most
    /// [`Thresholds::cpu_window`]). Default 60 s, the whole window: a
    /// start-up burst of a few seconds at full CPU is not a hog, and the
    /// iOS rule judges 80% over 60 s, not over the first seconds.
    cpu_min_window, with_cpu_min_window: Duration = Duration::from_secs(60); unit "s"; range AtMostCpuWindow;
    /// Run-queue contention: percent of time a thread waited runnable for a
    /// CPU. Default 20%.
    run_queue_wait_percent, with_run_queue_wait_percent: f64 = 20.0; unit "% of the window"; range Percent;
    /// Run-queue contention: wait percent that makes the finding critical.
    /// Default 50% (the thread waits for a CPU as long as it could run).
    run_queue_critical_wait_percent, with_run_queue_critical_wait_percent: f64 = 50.0; unit "% of the window"; range Percent;
    /// Run-queue contention: least CPU of the thread, percent of one core,
    /// for a finding about that thread; an almost idle thread's waits say
    /// little about contention. Default 5%. Many threads below it are
    /// judged together: a process whose runnable threads want more CPUs
    /// than the machine has, and which waits at least
    /// [`Thresholds::run_queue_wait_percent`] of its runnable time, gets a
    /// finding about the process (256 threads at 0.5% CPU each, each
    /// waiting for a CPU almost all the time, on 2 cores).
    run_queue_min_cpu_percent, with_run_queue_min_cpu_percent: f64 = 5.0; unit "% of one core"; range Percent;
    /// Wakeups budget: average wakeups per second allowed over
    /// [`Thresholds::wakeups_window`]. Default 150/s (iOS EXC_RESOURCE WAKEUPS:
    /// 45,000 per 300 s). The finding is judged only where the budget
    /// applies, on Apple platforms (macOS, iOS), unless
    /// [`Thresholds::wakeups_budget_everywhere`] is set.
    wakeups_budget_per_sec, with_wakeups_budget_per_sec: f64 = 150.0; unit "1/s"; range Positive;
    /// Judge the wakeups budget on every platform, not only on Apple's
    /// (a Linux or Android build of an app that also ships on iOS, where
    /// the developer wants the iOS limit in view). Default false: a Linux
    /// server that wakes 1,800 times/s under load is not over any budget.
    wakeups_budget_everywhere, with_wakeups_budget_everywhere: bool = false; unit ""; range Any;
    /// Share of the budget that raises a warning before the OS would act (0–1). Default 0.8.
    wakeups_warn_fraction, with_wakeups_warn_fraction: f64 = 0.8; unit "ratio"; range Share;
    /// Window of the wakeups budget. Default 300 s.
    wakeups_window, with_wakeups_window: Duration = Duration::from_secs(300); unit "s"; range Positive;
    /// Least history the wakeups budget finding needs (at most
    /// [`Thresholds::wakeups_window`]). Default 60 s: the finding projects
    /// a rate onto the 300 s budget, and a rate from the first seconds
    /// (start-up: threads created, files loaded) projects a burst.
    wakeups_min_window, with_wakeups_min_window: Duration = Duration::from_secs(60); unit "s"; range AtMostWakeupsWindow;
    /// Memory growth: RSS growth across the history, in bytes. Default 32 MiB.
    memory_growth_bytes, with_memory_growth_bytes: u64 = 32 << 20; unit "bytes"; range Positive;
    /// Least history the memory growth finding needs. Default 60 s: a
    /// program that allocates its caches while starting grows steeply for
    /// seconds and then stays flat, which is not a leak.
    memory_min_window, with_memory_min_window: Duration = Duration::from_secs(60); unit "s"; range Any;
    /// Memory growth: growth relative to the start (0–10). Default 0.10.
    memory_growth_ratio, with_memory_growth_ratio: f64 = 0.10; unit "ratio"; range UpToTen;
    /// Memory growth: growth relative to the start that makes the finding
    /// critical (0–10). Default 1.0 (the resident size doubled).
    memory_growth_critical_ratio, with_memory_growth_critical_ratio: f64 = 1.0; unit "ratio"; range UpToTen;
    /// Memory growth: least share of consecutive samples in which RSS did
    /// not shrink (0–1), so that a one-off allocation is not called a
    /// leak. Default 0.7.
    memory_growth_rising_ratio, with_memory_growth_rising_ratio: f64 = 0.7; unit "ratio"; range Share;
    /// Grouping: threads whose findings have the same kind, severity and
    /// group name (digits aside: `worker-1`, `worker-2` → `worker-{n}`) become one
    /// finding when every number of their evidence is within this relative
    /// difference of the group's first (0–1). Default 0.25.
    group_max_difference, with_group_max_difference: f64 = 0.25; unit "ratio"; range Share;
    /// Hysteresis of severities (0–1): a finding that had a severity in
    /// the previous report keeps it until its figure moves past the
    /// threshold by this share of the threshold (down for a lower
    /// severity, up for a higher one). Default 0.1: a thread that was a
    /// warning at 101 wakes/s (threshold 100/s) stays one until it wakes
    /// fewer than 90 times/s, and one that was info becomes a warning
    /// only above 110/s. Threads alike in everything but severity are
    /// grouped, the group taking the highest severity of its members.
    severity_margin, with_severity_margin: f64 = 0.1; unit "ratio"; range Share;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value out of `range` of the type of `current`, if any.
    fn out_of(range: ThresholdRange, current: &serde_json::Value) -> Option<serde_json::Value> {
        use ThresholdRange as R;
        Some(match range {
            R::Positive if current.is_object() => serde_json::json!({"secs": 0, "nanos": 0}),
            R::Positive => serde_json::json!(0),
            R::Share => serde_json::json!(1.5),
            R::Percent => serde_json::json!(101),
            R::UpToTen => serde_json::json!(11),
            R::NonNegative => serde_json::json!(-1),
            R::AtLeastTwo => serde_json::json!(1),
            R::AtMostWindow | R::AtMostCpuWindow | R::AtMostWakeupsWindow => {
                serde_json::json!({"secs": 100_000, "nanos": 0})
            }
            R::Any => return None,
        })
    }

    /// Every derived list names every declared threshold: the JSON keys
    /// are [`Thresholds::FIELDS`], each in its declared range by default,
    /// and a value out of its range is refused naming that threshold.
    #[test]
    fn every_threshold_is_serialized_validated_and_named() {
        let json = serde_json::to_value(Thresholds::default()).unwrap();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut names: Vec<&str> = Thresholds::FIELDS.iter().map(|f| f.name).collect();
        let mut sorted_keys = keys.clone();
        sorted_keys.sort_unstable();
        names.sort_unstable();
        assert_eq!(sorted_keys, names);
        for field in Thresholds::FIELDS {
            let Some(bad) = out_of(field.range, &json[field.name]) else {
                continue;
            };
            let mut value = json.clone();
            value[field.name] = bad;
            let t: Thresholds = serde_json::from_value(value).unwrap();
            match t.validate() {
                Err(Error::InvalidConfig { field: named, .. }) => assert_eq!(named, field.name),
                other => panic!("{} out of range: {other:?}", field.name),
            }
        }
    }

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

//! A sampler's configuration as one plain record: the one place its
//! defaults live (the builder, the FFI, Kotlin and Swift all start from
//! [`SamplerConfig::default`]), and what a [`crate::Report`] carries so a
//! saved report says how it was measured.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::Target;

mod thresholds;

pub use thresholds::{ThresholdField, ThresholdRange, Thresholds};

/// Default time between background samples.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// Default number of snapshots kept (5 minutes at the default interval,
/// matching the 300 s window of iOS's wakeups limit).
pub const DEFAULT_HISTORY: u32 = 300;
/// Default: read voluntary/involuntary switch counts every 10th sample
/// (`status` is the costliest file of a sample; BENCHMARKS.md, "Per-thread
/// reads", gives its cost, and "One sample at the cadence users sample" the
/// cost with and without it).
pub const DEFAULT_SWITCH_SPLIT_EVERY: u32 = 10;
/// Default name of the background sampling thread.
pub const DEFAULT_THREAD_NAME: &str = "wakemeter";
/// Largest accepted history, to keep memory bounded (README, "Memory").
pub const MAX_HISTORY: u32 = 100_000;
/// Default byte budget of the history: 32 MiB. Enough for the default 300
/// snapshots of a process with up to about 1,000 busy threads with a
/// kernel (eBPF) source, and for about 20 snapshots (20 s at the default
/// interval, more than the 10 s findings window) of a 20,000-thread one,
/// which keeps such a sidecar under 64 MiB in all (README, "Memory").
pub const DEFAULT_HISTORY_BUDGET_BYTES: u64 = 32 * 1024 * 1024;
/// Smallest accepted history byte budget: 64 KiB.
pub const MIN_HISTORY_BUDGET_BYTES: u64 = 64 * 1024;
/// Largest accepted history byte budget: 1 GiB (the most a host is let to
/// hand to one sampler's history; longer or wider histories belong in a
/// recording, `wakemeter record`).
pub const MAX_HISTORY_BUDGET_BYTES: u64 = 1024 * 1024 * 1024;
/// Shortest accepted sampling period ([`SamplerConfig::interval`]).
pub const MIN_INTERVAL: Duration = Duration::from_millis(1);
/// Longest accepted thread name, in bytes (Linux's `comm` limit).
pub const MAX_THREAD_NAME_BYTES: usize = 15;
/// Default number of threads a [`crate::Report`] lists one by one (see
/// [`SamplerConfig::report_threads`]): a screenful, like `top -H`.
pub const DEFAULT_REPORT_THREADS: u32 = 64;

/// How a [`crate::Sampler`] samples. Build one with [`SamplerConfig::default`]
/// and the `with_*` setters, or through [`crate::SamplerBuilder`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct SamplerConfig {
    /// The sampling period: time between background samples (at least
    /// [`MIN_INTERVAL`]). Default 1 s. (Named `interval` in the records and
    /// the bindings; an [`Interval`](crate::Interval) is what changed between two snapshots.)
    pub interval: Duration,
    /// Snapshots kept in history (1 to [`MAX_HISTORY`]). Default 300.
    /// The history also stays within [`SamplerConfig::history_budget_bytes`]:
    /// whichever limit is reached first drops the oldest snapshots.
    pub history: u32,
    /// Byte budget of the history, in bytes ([`MIN_HISTORY_BUDGET_BYTES`] to
    /// [`MAX_HISTORY_BUDGET_BYTES`]). When the stored snapshots reach it, the
    /// oldest are dropped before `history` is reached (counted in
    /// [`crate::SamplerStats::total_history_dropped_for_bytes`]); the two
    /// newest are always kept, since an interval needs two. A budget out
    /// of range is [`Error::InvalidConfig`]; a `history` the budget cannot
    /// hold at the target's thread count is not an error (the thread count
    /// changes while sampling), it is clamped as described. Default
    /// [`DEFAULT_HISTORY_BUDGET_BYTES`].
    #[serde(default = "default_history_budget_bytes")]
    pub history_budget_bytes: u64,
    /// The process to observe. Default: this one.
    pub target: Target,
    /// Read voluntary/involuntary switch counts every Nth sample (1 = every
    /// sample); total switches are read on every sample. Default 10.
    pub switch_split_every: u32,
    /// Name of the background sampling thread (1 to 15 bytes, no NUL).
    /// Default "wakemeter".
    pub thread_name: String,
    /// Thresholds of the findings engine.
    pub thresholds: Thresholds,
    /// Threads a [`crate::Report`] lists one by one in its interval: the
    /// threads its findings name, then the busiest by CPU, by switches per
    /// second and by kernel wakes per second, in turn, so a thread high on
    /// any one of them is kept. The others are only counted in the
    /// report's groups by name ([`crate::Report::thread_groups`]), which
    /// keeps a report of a process with thousands of threads small.
    /// Findings always look at every thread. 0 lists none. Default
    /// [`DEFAULT_REPORT_THREADS`].
    #[serde(default = "default_report_threads")]
    pub report_threads: u32,
}

/// What a configuration saved before `history_budget_bytes` existed reads as.
fn default_history_budget_bytes() -> u64 {
    DEFAULT_HISTORY_BUDGET_BYTES
}

/// What a configuration saved before `report_threads` existed reads as.
fn default_report_threads() -> u32 {
    DEFAULT_REPORT_THREADS
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            interval: DEFAULT_INTERVAL,
            history: DEFAULT_HISTORY,
            history_budget_bytes: DEFAULT_HISTORY_BUDGET_BYTES,
            target: Target::SelfProcess,
            switch_split_every: DEFAULT_SWITCH_SPLIT_EVERY,
            thread_name: DEFAULT_THREAD_NAME.to_string(),
            thresholds: Thresholds::default(),
            report_threads: DEFAULT_REPORT_THREADS,
        }
    }
}

/// The `with_*` setters of [`SamplerConfig`]'s plain fields, written once
/// for [`SamplerConfig`] and for [`crate::SamplerBuilder`], which holds one:
/// the optional attribute goes on each setter, and `$(.$path)*` leads from
/// `self` to the config (nothing for the config itself, `.config` for the
/// builder).
macro_rules! config_setters {
    ($(#[$attr:meta])* ; $(.$path:ident)*) => {
        /// Time between background samples, [`SamplerConfig::interval`](crate::config::SamplerConfig::interval)
        /// (at least [`MIN_INTERVAL`](crate::config::MIN_INTERVAL)).
        $(#[$attr])*
        pub fn with_interval(mut self, interval: std::time::Duration) -> Self {
            self$(.$path)*.interval = interval;
            self
        }

        /// Number of snapshots kept in history, [`SamplerConfig::history`](crate::config::SamplerConfig::history)
        /// (1 to [`MAX_HISTORY`](crate::config::MAX_HISTORY)).
        $(#[$attr])*
        pub fn with_history(mut self, snapshots: u32) -> Self {
            self$(.$path)*.history = snapshots;
            self
        }

        /// Byte budget of the history, in bytes
        /// ([`MIN_HISTORY_BUDGET_BYTES`](crate::config::MIN_HISTORY_BUDGET_BYTES) to
        /// [`MAX_HISTORY_BUDGET_BYTES`](crate::config::MAX_HISTORY_BUDGET_BYTES); see
        /// [`SamplerConfig::history_budget_bytes`](crate::config::SamplerConfig::history_budget_bytes)).
        $(#[$attr])*
        pub fn with_history_budget_bytes(mut self, bytes: u64) -> Self {
            self$(.$path)*.history_budget_bytes = bytes;
            self
        }

        /// The process to observe, [`SamplerConfig::target`](crate::config::SamplerConfig::target)
        /// (default: this one).
        $(#[$attr])*
        pub fn with_target(mut self, target: crate::model::Target) -> Self {
            self$(.$path)*.target = target;
            self
        }

        /// Read voluntary/involuntary switch counts every `n`th sample (1 = every
        /// sample), [`SamplerConfig::switch_split_every`](crate::config::SamplerConfig::switch_split_every).
        /// Total switches are read on every sample regardless.
        $(#[$attr])*
        pub fn with_switch_split_every(mut self, n: u32) -> Self {
            self$(.$path)*.switch_split_every = n;
            self
        }

        /// Name of the background sampling thread, [`SamplerConfig::thread_name`](crate::config::SamplerConfig::thread_name)
        /// (at most 15 bytes, no NUL).
        $(#[$attr])*
        pub fn with_thread_name(mut self, name: impl Into<String>) -> Self {
            self$(.$path)*.thread_name = name.into();
            self
        }

        /// Thresholds of the findings engine, [`SamplerConfig::thresholds`](crate::config::SamplerConfig::thresholds)
        /// (default: [`Thresholds::default`](crate::config::Thresholds::default)).
        $(#[$attr])*
        pub fn with_thresholds(mut self, thresholds: crate::config::Thresholds) -> Self {
            self$(.$path)*.thresholds = thresholds;
            self
        }

        /// Threads a report lists one by one, [`SamplerConfig::report_threads`](crate::config::SamplerConfig::report_threads)
        /// (default [`DEFAULT_REPORT_THREADS`](crate::config::DEFAULT_REPORT_THREADS)).
        $(#[$attr])*
        pub fn with_report_threads(mut self, threads: u32) -> Self {
            self$(.$path)*.report_threads = threads;
            self
        }
    };
}
pub(crate) use config_setters;

impl SamplerConfig {
    config_setters!(#[must_use];);

    /// Checks every field.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first field out of range.
    pub fn validate(&self) -> Result<()> {
        let invalid = |field, reason: &str| {
            Err(Error::InvalidConfig {
                field,
                reason: reason.to_string(),
            })
        };
        if self.interval.is_zero() {
            return invalid("interval", "must be greater than zero");
        }
        if self.interval < MIN_INTERVAL {
            return invalid("interval", "must be at least 1 ms");
        }
        if self.history == 0 {
            return invalid("history", "must be at least 1 snapshot");
        }
        if self.history > MAX_HISTORY {
            return invalid("history", "must be at most 100000 snapshots");
        }
        if !(MIN_HISTORY_BUDGET_BYTES..=MAX_HISTORY_BUDGET_BYTES)
            .contains(&self.history_budget_bytes)
        {
            return invalid(
                "history_budget_bytes",
                "must be between 65536 (64 KiB) and 1073741824 (1 GiB) bytes",
            );
        }
        if self.switch_split_every == 0 {
            return invalid(
                "switch_split_every",
                "must be at least 1 (1 = every sample)",
            );
        }
        if self.thread_name.is_empty()
            || self.thread_name.len() > MAX_THREAD_NAME_BYTES
            || self.thread_name.contains('\0')
        {
            return invalid("thread_name", "must be 1 to 15 bytes without NUL");
        }
        self.thresholds.validate()
    }
}

/// The default configuration; for the bindings, where it is the one source
/// of the defaults Kotlin's and Swift's `SamplerConfig` start from.
#[cfg_attr(feature = "uniffi", uniffi::export)]
pub fn default_sampler_config() -> SamplerConfig {
    SamplerConfig::default()
}

/// The default thresholds of the findings engine; for the bindings.
#[cfg_attr(feature = "uniffi", uniffi::export)]
pub fn default_thresholds() -> Thresholds {
    Thresholds::default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_each_bad_field_is_named() {
        assert!(SamplerConfig::default().validate().is_ok());
        let field = |c: SamplerConfig| match c.validate() {
            Err(Error::InvalidConfig { field, .. }) => field,
            other => panic!("expected InvalidConfig, got {other:?}"),
        };
        let d = SamplerConfig::default;
        assert_eq!(field(d().with_interval(Duration::ZERO)), "interval");
        assert_eq!(
            field(d().with_interval(Duration::from_micros(999))),
            "interval"
        );
        assert_eq!(field(d().with_history(0)), "history");
        assert_eq!(field(d().with_history(MAX_HISTORY + 1)), "history");
        assert_eq!(
            field(d().with_history_budget_bytes(MIN_HISTORY_BUDGET_BYTES - 1)),
            "history_budget_bytes"
        );
        assert_eq!(
            field(d().with_history_budget_bytes(MAX_HISTORY_BUDGET_BYTES + 1)),
            "history_budget_bytes"
        );
        assert!(
            d().with_history_budget_bytes(MIN_HISTORY_BUDGET_BYTES)
                .validate()
                .is_ok()
        );
        assert!(
            d().with_history_budget_bytes(MAX_HISTORY_BUDGET_BYTES)
                .validate()
                .is_ok()
        );
        assert_eq!(field(d().with_switch_split_every(0)), "switch_split_every");
        assert_eq!(field(d().with_thread_name("")), "thread_name");
        assert_eq!(field(d().with_thread_name("x".repeat(16))), "thread_name");
        assert_eq!(field(d().with_thread_name("a\0b")), "thread_name");
    }

    #[test]
    fn round_trips_through_json() {
        let c = SamplerConfig::default()
            .with_target(Target::Pid(42))
            .with_interval(Duration::from_millis(250));
        let back: SamplerConfig =
            serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn a_config_saved_before_history_budget_bytes_reads_with_the_default() {
        let mut old = serde_json::to_value(SamplerConfig::default()).unwrap();
        old.as_object_mut().unwrap().remove("history_budget_bytes");
        let back: SamplerConfig = serde_json::from_value(old).unwrap();
        assert_eq!(back.history_budget_bytes, DEFAULT_HISTORY_BUDGET_BYTES);
    }

    #[test]
    fn a_config_saved_before_report_threads_reads_with_the_default() {
        let mut old =
            serde_json::to_value(SamplerConfig::default().with_report_threads(7)).unwrap();
        old.as_object_mut().unwrap().remove("report_threads");
        let back: SamplerConfig = serde_json::from_value(old).unwrap();
        assert_eq!(back.report_threads, DEFAULT_REPORT_THREADS);
    }
}

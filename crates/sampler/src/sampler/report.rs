//! The records about a sampler: its report (versioned) and its own counters.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::SamplerConfig;
use crate::diagnose::Finding;
use crate::history::History;
use crate::interval::{Interval, between_in_history};
use crate::model::{SampleWarning, SystemInfo, TargetIdentity};

/// Version of the [`Report`] layout, in [`Report::schema_version`]: raised
/// whenever a field of the report (or of a record inside it) is renamed,
/// removed or changes meaning, so a saved report is read with the right
/// expectations. Version 1 is the first published layout.
pub const REPORT_SCHEMA_VERSION: u32 = 1;

/// A report: what the sampler measured and what it concluded, with what a
/// reader needs to interpret it later (schema and library version, which
/// process, with which configuration). Round-trips through serde.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct Report {
    /// Layout version of this record ([`REPORT_SCHEMA_VERSION`] when made
    /// by this library).
    pub schema_version: u32,
    /// Version of the wakemeter library that made the report.
    pub library_version: String,
    /// The process measured.
    pub target: TargetIdentity,
    /// The configuration it was measured with.
    pub config: SamplerConfig,
    /// When the report was made, in nanoseconds since the Unix epoch.
    pub unix_time_ns: u64,
    /// The machine.
    pub system: SystemInfo,
    /// The sampler's own counters and overhead.
    pub stats: SamplerStats,
    /// The interval over the findings window (None with fewer than two snapshots).
    pub interval: Option<Interval>,
    /// Findings, most severe first.
    pub findings: Vec<Finding>,
    /// What made the snapshots of the interval less complete than
    /// configured, each kind once; lost kernel events are summed.
    pub warnings: Vec<SampleWarning>,
}

/// The interval over `window` ending at the newest snapshot of `h`.
pub(super) fn interval_over_in(h: &History, window: Duration) -> Option<Interval> {
    let to = h.latest()?;
    let since = to
        .header
        .monotonic_ns
        .saturating_sub(crate::probe::duration_ns(window));
    let from = h.first_since(since)?;
    if from.header.seq == to.header.seq {
        let n = h.len();
        return Some(between_in_history(h, h.get(n.checked_sub(2)?)?, to));
    }
    Some(between_in_history(h, from, to))
}

/// The warnings of the snapshots after `from_seq` up to `to_seq`, each once
/// (the newest of its kind), with lost kernel events summed.
pub(super) fn warnings_in(h: &History, from_seq: u64, to_seq: u64) -> Vec<SampleWarning> {
    let mut out: Vec<SampleWarning> = Vec::new();
    let mut dropped = 0u64;
    let within = h
        .iter()
        .rev()
        .filter(|s| s.header.seq > from_seq && s.header.seq <= to_seq);
    for w in within.flat_map(|s| &s.header.warnings) {
        match w {
            SampleWarning::KernelEventsDropped { dropped_events } => {
                dropped = dropped.saturating_add(*dropped_events);
            }
            w if !out
                .iter()
                .any(|o| std::mem::discriminant(o) == std::mem::discriminant(w)) =>
            {
                out.push(w.clone());
            }
            _ => {}
        }
    }
    if dropped > 0 {
        out.push(SampleWarning::KernelEventsDropped {
            dropped_events: dropped,
        });
    }
    out
}

/// Counters about the sampler itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct SamplerStats {
    /// Snapshots taken so far (on demand and in the background).
    pub total_samples: u64,
    /// CPU time spent taking them, in nanoseconds.
    pub total_sampler_cpu_time_ns: u64,
    /// Sampler CPU time as a percentage of one core since the first snapshot.
    pub sampler_cpu_percent: f64,
    /// Mean CPU time per snapshot, in nanoseconds.
    pub mean_sample_cost_ns: u64,
    /// Snapshots currently in history.
    pub history_len: u32,
    /// Bytes one thread-sample occupies in history (see the README's memory table).
    pub bytes_per_stored_thread_sample: u32,
    /// Bytes the whole history holds: thread samples, probe and kernel
    /// counters (packed), headers. Divide by `history_len` for the bytes
    /// per stored snapshot.
    pub history_bytes: u64,
    /// Whether background sampling is running: false once the sampling
    /// thread stopped, by its guard or on a fatal error such as the
    /// target's exit (see `last_error`).
    pub running: bool,
    /// The last error of the background thread, as text, if any.
    pub last_error: Option<String>,
}

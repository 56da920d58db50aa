//! What made a snapshot less complete than configured.

use serde::{Deserialize, Serialize};

/// Something that made a snapshot less complete than configured; the
/// snapshot is still correct for what it contains.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Enum))]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum SampleWarning {
    /// The process ran out of file descriptors: this many threads are sampled
    /// without kept descriptors (CPU time only; no run-queue wait or switches).
    DescriptorsExhausted {
        /// Threads sampled with fewer sources.
        threads_without_descriptors: u32,
    },
    /// An attached kernel source failed to read; the rest of the snapshot is fine.
    KernelSourceFailed {
        /// The error, as text.
        message: String,
    },
    /// The kernel source lost events since the previous snapshot because a
    /// bounded map was full (e.g. more threads than its map holds): its
    /// counters are low by that much.
    KernelEventsDropped {
        /// Events lost since the previous snapshot.
        dropped_events: u64,
    },
    /// The history reached its byte budget
    /// ([`crate::SamplerConfig::history_budget_bytes`]) before holding
    /// `history` snapshots: it holds fewer than configured, the oldest
    /// dropped first (counted in
    /// [`crate::SamplerStats::total_history_dropped_for_bytes`]). The
    /// configuration is clamped, not refused: the thread count, and so the
    /// size of a snapshot, changes while sampling.
    HistoryOverBudget {
        /// Snapshots the history held after the last one was stored.
        held_snapshots: u32,
        /// Snapshots configured ([`crate::SamplerConfig::history`]).
        configured_snapshots: u32,
        /// The byte budget, in bytes.
        budget_bytes: u64,
    },
}

//! Everything measured at one instant.

use serde::{Deserialize, Serialize};

use super::{LoopStats, ProcessSample, SampleWarning, SleepStats, ThreadSample};
use crate::kernel::KernelSample;

/// Everything measured at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct Snapshot {
    /// Sequence number, starting at 0 for the sampler's first snapshot.
    pub seq: u64,
    /// Monotonic timestamp in nanoseconds (`CLOCK_MONOTONIC` on Linux; the
    /// OS's monotonic clock elsewhere). Only differences are meaningful.
    pub monotonic_ns: u64,
    /// Wall-clock time in nanoseconds since the Unix epoch.
    pub unix_time_ns: u64,
    /// Process-wide counters.
    pub process: ProcessSample,
    /// One record per live thread, in the order the OS listed them.
    pub threads: Vec<ThreadSample>,
    /// Whether voluntary/involuntary switch counts were read in this snapshot.
    pub switch_split_read: bool,
    /// CPU time the sampler itself spent taking this snapshot, in nanoseconds
    /// (the sampling thread's CPU clock before and after).
    pub sampler_cost_ns: u64,
    /// CPU time the sampler has spent on all its snapshots so far, this one
    /// included, in nanoseconds. Differences give the sampler's overhead over
    /// an interval.
    pub total_sampler_cpu_time_ns: u64,
    /// Every loop probe of the sampler (cumulative counters).
    pub loops: Vec<LoopStats>,
    /// Every sleep probe of the sampler (cumulative counters).
    pub sleeps: Vec<SleepStats>,
    /// What an attached kernel source (eBPF) measured, if one is attached.
    pub kernel: Option<KernelSample>,
    /// What made this snapshot less complete than configured (empty when complete).
    pub warnings: Vec<SampleWarning>,
}

impl Snapshot {
    /// The thread with this serial, if it is in the snapshot.
    pub fn thread_by_serial(&self, serial: u64) -> Option<&ThreadSample> {
        self.threads.iter().find(|t| t.serial == serial)
    }

    /// The thread with this OS thread id, if it is in the snapshot.
    pub fn thread_by_tid(&self, tid: u64) -> Option<&ThreadSample> {
        self.threads.iter().find(|t| t.tid == tid)
    }
}

//! One thread's cumulative counters at one instant.

use serde::{Deserialize, Serialize};

/// Where a thread's CPU time came from; sources differ in resolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Enum))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CpuTimeSource {
    /// The thread's own CPU clock (`clock_gettime` on its clock id): exact nanoseconds.
    ThreadClock,
    /// First field of `/proc/<pid>/task/<tid>/schedstat` (the scheduler's
    /// `sum_exec_runtime`): exact nanoseconds. Used for other processes.
    Schedstat,
    /// `utime + stime` of `/proc/<pid>/task/<tid>/stat`, in clock ticks
    /// converted to nanoseconds: resolution of one tick (usually 10 ms).
    /// Used where `schedstat` is absent (some Android kernels).
    StatTicks,
    /// Mach `thread_info(THREAD_BASIC_INFO)` user + system time: microsecond resolution.
    MachThreadInfo,
}

/// Cumulative counters of one thread at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct ThreadSample {
    /// OS thread id: the Linux TID, or the Mach `thread_id` on Apple platforms.
    /// TIDs are reused by the OS; use `serial` to tell threads apart.
    pub tid: u64,
    /// Sampler-assigned identity, unique for the sampler's lifetime: a reused
    /// TID gets a new serial, so two different threads are never merged.
    pub serial: u64,
    /// Thread name (Linux `comm`, at most 15 bytes; pthread name on Apple).
    pub name: String,
    /// CPU time consumed by the thread since it started, in nanoseconds.
    pub total_cpu_time_ns: u64,
    /// Where `total_cpu_time_ns` came from.
    pub cpu_time_source: CpuTimeSource,
    /// Time spent runnable but waiting for a CPU since the thread started, in
    /// nanoseconds (`schedstat` field 2). `None` where the platform has no such counter.
    pub total_run_queue_wait_ns: Option<u64>,
    /// Context switches since the thread started: the number of times it
    /// was scheduled onto a CPU (`schedstat` field 3), which equals the
    /// voluntary plus the involuntary switches, give or take the current one.
    /// `None` where the platform has no such counter.
    pub total_switches: Option<u64>,
    /// Voluntary context switches (the thread blocked or slept), from
    /// `status`' `voluntary_ctxt_switches`. Read every Nth sample only (see
    /// [`crate::SamplerBuilder::with_switch_split_every`]): `None` on the others.
    pub total_voluntary_switches: Option<u64>,
    /// Involuntary context switches (the thread was preempted), from
    /// `status`' `nonvoluntary_ctxt_switches`. Present on the same samples as
    /// `total_voluntary_switches`.
    pub total_involuntary_switches: Option<u64>,
}

//! Plain data records produced by the sampler.
//!
//! Every record is cumulative ("since the thread or process started") unless
//! it says otherwise; rates live in [`crate::Interval`]. All records are plain
//! data with public fields so the FFI layer can expose them as they are, and
//! all serialize with serde (JSON field names equal the Rust field names).

use serde::{Deserialize, Serialize};

use crate::kernel::KernelSample;
use crate::probe::{LoopStats, SleepStats};

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

/// Process-wide counters at one instant.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct ProcessSample {
    /// Process id.
    pub pid: u32,
    /// Resident set size in bytes (Linux: `statm` resident pages × page size;
    /// Apple: `TASK_VM_INFO.resident_size`).
    pub rss_bytes: u64,
    /// Peak resident set size in bytes (Linux: `VmHWM` of `status`;
    /// Apple: `TASK_VM_INFO.resident_size_peak`).
    pub peak_rss_bytes: Option<u64>,
    /// Apple's `phys_footprint` in bytes, the figure jetsam and Xcode use. `None` elsewhere.
    pub phys_footprint_bytes: Option<u64>,
    /// CPU time of the whole process in nanoseconds, including threads that
    /// have exited (the process CPU clock).
    pub total_cpu_time_ns: u64,
    /// Number of threads seen in this sample.
    pub thread_count: u32,
    /// Apple `TASK_POWER_INFO.task_interrupt_wakeups`: wakeups of the
    /// process's threads by interrupts (timers included). `None` elsewhere.
    pub total_interrupt_wakeups: Option<u64>,
    /// Apple `TASK_POWER_INFO.task_platform_idle_wakeups`: wakeups that took
    /// a CPU out of idle (what "Idle Wake Ups" shows). `None` elsewhere.
    pub total_platform_idle_wakeups: Option<u64>,
}

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

/// Facts about the machine, read once when the sampler is built.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct SystemInfo {
    /// Total physical memory in bytes.
    pub total_memory_bytes: u64,
    /// Number of logical CPUs; a thread can use at most 100% of one, the
    /// process at most `cpu_count × 100`%.
    pub cpu_count: u32,
    /// Operating system family: "linux", "android", "macos" or "ios".
    pub os: String,
}

/// Which process a sampler measured: enough to tell it from a later
/// process that reuses its PID.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct TargetIdentity {
    /// Process id.
    pub pid: u32,
    /// Process name (Linux `comm`; the executable's file name elsewhere),
    /// read when the sampler was built; "" if unreadable.
    pub name: String,
    /// When the process started, in nanoseconds since the Unix epoch (to
    /// one clock tick on Linux); `None` where the platform does not say.
    pub start_time_unix_ns: Option<u64>,
}

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

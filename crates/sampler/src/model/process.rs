//! The process's cumulative counters at one instant.

use serde::{Deserialize, Serialize};

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

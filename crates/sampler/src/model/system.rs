//! Facts about the machine.

use serde::{Deserialize, Serialize};

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

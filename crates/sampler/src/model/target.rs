//! Which process a sampler observes, and how to tell it from another.

use serde::{Deserialize, Serialize};

/// Which process a sampler observes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Enum))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Target {
    /// The calling process (default). Per-thread CPU comes from each thread's CPU clock.
    #[default]
    SelfProcess,
    /// Another process by PID (the sidecar use). Another process's thread
    /// CPU clocks are not readable, so CPU time comes from `schedstat`.
    /// Linux and Android only: on macOS and iOS another process's task port
    /// needs `task_for_pid` and a debugger entitlement, so building a sampler
    /// for it fails with [`crate::Error::Unsupported`].
    Pid(u32),
}

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

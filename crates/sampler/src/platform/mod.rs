//! The platform seam: one backend per OS family, behind [`Backend`].
//!
//! Everything OS-specific lives below this module; the sampler, history,
//! intervals and findings only see [`Backend`] and the records it fills.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::Result;
use crate::model::{CpuTimeSource, ProcessSample, SampleWarning};

pub(crate) mod clock;
mod identity;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) mod linux;
mod system;
pub(crate) mod ticks;
pub(crate) use identity::identity;
// The Mach calls (`sys.rs`) build on Apple targets only; the logic, fake and
// unit tests build everywhere under `cfg(test)`.
#[cfg(any(target_vendor = "apple", test))]
pub(crate) mod darwin;

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

/// Identity of one tracked thread; shared by every stored sample of it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ThreadIdent {
    pub tid: u64,
    pub serial: u64,
    pub name: Box<str>,
    pub cpu_time_source: CpuTimeSource,
}

/// Marker for "this counter is absent" in [`PackedThread`].
pub(crate) const ABSENT: u64 = u64::MAX;

/// One thread's counters as stored in history: 48 bytes on 64-bit targets
/// (the identity is shared, absent values are [`ABSENT`]).
#[derive(Debug, Clone)]
pub(crate) struct PackedThread {
    pub ident: Arc<ThreadIdent>,
    pub cpu_time_ns: u64,
    pub run_queue_wait_ns: u64,
    pub switches: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
}

/// Converts an [`ABSENT`]-coded counter to an `Option`.
#[inline]
pub(crate) fn present(v: u64) -> Option<u64> {
    (v != ABSENT).then_some(v)
}

/// What the sampler asks of a backend for one sample.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SampleRequest {
    /// Read voluntary/involuntary switch counts this time.
    pub switch_split: bool,
}

/// A platform backend: fills one sample of the target's threads and process.
pub(crate) trait Backend: Send {
    /// Samples every live thread into `threads` (cleared first) and returns
    /// the process counters. A thread that exits mid-sample is left out.
    ///
    /// # Errors
    /// When the process-level sources cannot be read at all (e.g. the target exited).
    fn sample(
        &mut self,
        request: SampleRequest,
        threads: &mut Vec<PackedThread>,
        warnings: &mut Vec<SampleWarning>,
    ) -> Result<ProcessSample>;
}

/// Creates the backend of this platform for `target`.
///
/// # Errors
/// [`crate::Error::NoSuchProcess`], [`crate::Error::Unreadable`] when `/proc`
/// is missing, [`crate::Error::Unsupported`] on platforms without a backend
/// and for another process's PID on macOS/iOS.
#[allow(unreachable_code)]
pub(crate) fn backend_for(target: Target) -> Result<Box<dyn Backend>> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        return Ok(Box::new(linux::LinuxBackend::new(
            linux::LinuxSys::open(target)?,
            target,
        )?));
    }
    #[cfg(target_vendor = "apple")]
    {
        return Ok(Box::new(darwin::DarwinBackend::new(
            darwin::DarwinSys::new(),
            target,
        )?));
    }
    let _ = target;
    Err(crate::Error::Unsupported {
        what: "thread sampling on this operating system",
    })
}

pub(crate) use system::{cpu_count, total_memory_bytes};

/// Name of the OS family this build samples.
pub(crate) fn os_name() -> &'static str {
    if cfg!(target_os = "android") {
        "android"
    } else if cfg!(target_os = "ios") {
        "ios"
    } else if cfg!(target_os = "macos") {
        "macos"
    } else {
        std::env::consts::OS
    }
}

//! The platform seam: one backend per OS family, behind [`Backend`].
//!
//! Everything OS-specific lives below this module; the sampler, history,
//! intervals and findings only see [`Backend`] and the records it fills.

use crate::error::Result;
use crate::model::{ProcessSample, SampleWarning, Target, ThreadRow};

pub(crate) mod clock;
pub(crate) mod competition;
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

/// What the sampler asks of a backend for one sample.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SampleRequest<'a> {
    /// Read voluntary/involuntary switch counts this time.
    pub switch_split: bool,
    /// Threads a kernel source saw blocked since just before the previous
    /// sample (sorted; see [`crate::KernelSource::quiet_threads`]): a
    /// backend may carry their previous counters instead of reading them
    /// (the Linux one does; the others read every thread).
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    pub quiet: &'a [u64],
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
        request: SampleRequest<'_>,
        threads: &mut Vec<ThreadRow>,
        warnings: &mut Vec<SampleWarning>,
    ) -> Result<ProcessSample>;
}

/// Creates the backend of this platform for `target`.
///
/// # Errors
/// [`crate::Error::NoSuchProcess`], [`crate::Error::Unreadable`] when `/proc`
/// is missing, [`crate::Error::Unsupported`] on platforms without a backend
/// and for another process's PID on macOS/iOS. `process_files_per_sample`:
/// see [`crate::SamplerBuilder::with_process_files_per_sample`].
#[allow(unreachable_code)]
pub(crate) fn backend_for(
    target: Target,
    process_files_per_sample: bool,
) -> Result<Box<dyn Backend>> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        return Ok(Box::new(linux::LinuxBackend::with_process_files(
            linux::LinuxSys::open(target)?,
            target,
            process_files_per_sample,
        )?));
    }
    let _ = process_files_per_sample;
    #[cfg(target_vendor = "apple")]
    {
        return Ok(Box::new(darwin::DarwinBackend::new(
            darwin::DarwinSys::new(),
            target,
        )?));
    }
    let _ = target;
    Err(crate::error::Error::Unsupported {
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

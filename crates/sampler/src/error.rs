//! The one error type of the core crate.

use std::io;

/// Everything that can go wrong while configuring or sampling.
///
/// Sampling never panics; every failure surfaces as one of these variants.
/// A thread that exits while it is being sampled is *not* an error: it just
/// drops out of the snapshot.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A builder or threshold setting is out of range.
    #[error("invalid configuration: {field} {reason}")]
    InvalidConfig {
        /// The setting that was rejected, as named by its `with_*` setter.
        field: &'static str,
        /// Why it was rejected, e.g. "must be greater than zero".
        reason: String,
    },
    /// A file or directory the platform backend needs could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Unreadable {
        /// The path, e.g. `/proc/self/task`.
        path: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The target process does not exist (or has exited).
    #[error("no process with pid {pid}")]
    NoSuchProcess {
        /// The process id that was asked for.
        pid: u32,
    },
    /// The target process exited and its PID now names another process
    /// (the OS reused it). A sampler follows one process: build a new
    /// sampler to observe the new one.
    #[error("process {pid} exited and its pid now names another process (pid reused)")]
    PidReused {
        /// The process id, now another process's.
        pid: u32,
    },
    /// The process has run out of file descriptors (EMFILE/ENFILE).
    ///
    /// The sampler keeps working with the descriptors it already holds;
    /// threads it could not open descriptors for are sampled with fewer
    /// sources (see [`crate::SampleWarning`]).
    #[error("out of file descriptors while opening {path}: {source}")]
    DescriptorsExhausted {
        /// The path that could not be opened.
        path: String,
        /// The OS error (EMFILE or ENFILE).
        #[source]
        source: io::Error,
    },
    /// The requested source or target is not supported on this platform.
    #[error("not supported on this platform: {what}")]
    Unsupported {
        /// What was asked for.
        what: &'static str,
    },
    /// A sampler already has [`crate::probe::MAX_PROBES`] probes of the kind asked for.
    #[error("too many probes: at most {max} of each kind per sampler; drop unused ones")]
    TooManyProbes {
        /// The limit, [`crate::probe::MAX_PROBES`].
        max: usize,
    },
    /// A probe name is longer than [`crate::probe::MAX_PROBE_NAME_BYTES`].
    #[error("probe name of {len} bytes is too long: at most {max} bytes")]
    ProbeNameTooLong {
        /// Length of the rejected name, in bytes.
        len: usize,
        /// The limit, [`crate::probe::MAX_PROBE_NAME_BYTES`].
        max: usize,
    },
    /// A background sampling thread is already running for this sampler.
    #[error("background sampling is already running")]
    AlreadyRunning,
    /// The background sampling thread could not be spawned.
    #[error("cannot spawn the sampling thread: {0}")]
    Spawn(#[source] io::Error),
}

impl Error {
    /// Whether the target process is gone ([`Error::NoSuchProcess`] or
    /// [`Error::PidReused`]): sampling it again cannot succeed.
    pub fn target_gone(&self) -> bool {
        matches!(self, Error::NoSuchProcess { .. } | Error::PidReused { .. })
    }

    /// Classifies an error from opening `path`: descriptor exhaustion gets its own variant.
    // Only the procfs (Linux/Android) backend opens files.
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    pub(crate) fn from_open(path: impl Into<String>, source: io::Error) -> Self {
        let path = path.into();
        match source.raw_os_error() {
            Some(libc::EMFILE) | Some(libc::ENFILE) => Error::DescriptorsExhausted { path, source },
            _ => Error::Unreadable { path, source },
        }
    }
}

/// Result alias of the core crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

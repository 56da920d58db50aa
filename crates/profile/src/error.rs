//! The error type of capturing and writing profiles.

use std::path::PathBuf;

/// Why a profile could not be captured or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    /// The kernel programs could not attach or be read: no privilege
    /// ([`wakemeter_ebpf::EbpfError::MissingPrivilege`]), no kernel BTF,
    /// no such process, built without clang, not Linux, ...
    #[error("eBPF: {0}")]
    Ebpf(#[from] wakemeter_ebpf::EbpfError),

    /// The capture length is zero or above [`crate::MAX_CAPTURE`].
    #[error("capture length {seconds} s is out of range: more than 0, at most {max_seconds} s")]
    DurationOutOfRange {
        /// The length asked for, in seconds.
        seconds: f64,
        /// The longest capture, in seconds.
        max_seconds: u64,
    },

    /// An option of the continuous profiler is out of range.
    #[error("{option} is out of range: {why}")]
    TriggerOption {
        /// The option, e.g. `max_kept`.
        option: &'static str,
        /// What the range is.
        why: &'static str,
    },

    /// The continuous profiler's thread could not be started.
    #[error("starting the profiler's thread")]
    Thread(#[source] std::io::Error),

    /// Writing an output (folded stacks, SVG, pprof) failed.
    #[error("writing {what}")]
    Write {
        /// What was being written, e.g. `flame graph SVG`.
        what: &'static str,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// Creating, writing or removing a file of a capture failed.
    #[error("file {path}")]
    File {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

//! The crate's one error type.

use std::path::PathBuf;

/// Why a trace could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The trace file could not be created or its first records written
    /// (an unwritable directory, a full disk, a read-only file system).
    #[error("cannot write the Perfetto trace {path}: {source}")]
    Create {
        /// The path asked for.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The size cap is too small to hold a trace's first records and the
    /// room kept to close its findings.
    #[error("the trace size cap of {max_bytes} bytes is below the minimum of {min_bytes} bytes")]
    CapTooSmall {
        /// The cap asked for, in bytes.
        max_bytes: u64,
        /// The smallest cap accepted, in bytes.
        min_bytes: u64,
    },
    /// The writer thread could not be started.
    #[error("cannot start the Perfetto trace writer thread: {0}")]
    Spawn(#[source] std::io::Error),
}

//! The errors of the bindings; every core error is converted here, in one place.

/// Everything a wakemeter call can fail with, as seen from Kotlin
/// (`WakemeterException.*`) and Swift (`WakemeterError.*`).
///
/// Exposed as a "flat" error: each variant carries its message, which is the
/// `Display` text below, so Kotlin's `message` and Swift's description read
/// as plain sentences.
#[derive(Debug, thiserror::Error, uniffi::Error)]
#[uniffi(flat_error)]
pub enum WakemeterError {
    /// A configuration value is out of range (e.g. a zero interval or a huge history).
    #[error("invalid configuration: {field} {reason}")]
    InvalidConfig {
        /// The setting that was rejected, as its setter names it, e.g.
        /// `interval` or a threshold such as `busy_poll_idle_ratio`.
        field: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A file the platform backend needs could not be read.
    #[error("cannot read {path}: {message}")]
    Unreadable {
        /// The path, e.g. `/proc/self/task`.
        path: String,
        /// The OS error, as text.
        message: String,
    },
    /// The observed process does not exist or has exited.
    #[error("no process with pid {pid}")]
    NoSuchProcess {
        /// The process id asked for.
        pid: u32,
    },
    /// The process ran out of file descriptors.
    #[error("out of file descriptors while opening {path}: {message}")]
    DescriptorsExhausted {
        /// The path that could not be opened.
        path: String,
        /// The OS error, as text.
        message: String,
    },
    /// Not supported on this platform.
    #[error("not supported on this platform: {what}")]
    Unsupported {
        /// What was asked for.
        what: String,
    },
    /// The sampler already has the most probes of that kind it tracks (4096); drop unused ones.
    #[error("too many probes: at most {max} of each kind per sampler; drop unused ones")]
    TooManyProbes {
        /// The limit.
        max: u32,
    },
    /// A probe name is longer than the limit (64 bytes of UTF-8).
    #[error("probe name of {len} bytes is too long: at most {max} bytes")]
    ProbeNameTooLong {
        /// Length of the rejected name, in bytes.
        len: u32,
        /// The limit, in bytes.
        max: u32,
    },
    /// `start()` was called while background sampling was already running.
    #[error("background sampling is already running")]
    AlreadyRunning,
    /// A background thread could not be created.
    #[error("cannot spawn a thread: {message}")]
    Spawn {
        /// The OS error, as text.
        message: String,
    },
    /// The sampler was shut down (`shutdown()`); create a new one.
    #[error("the sampler is shut down")]
    Closed,
    /// The probe's sampler has been shut down or released, so the probe has
    /// nowhere to report to.
    #[error("the probe's sampler is gone (shut down or released)")]
    SamplerGone,
    /// A report could not be serialized.
    #[error("cannot serialize the report: {message}")]
    Serialization {
        /// The serializer's error, as text.
        message: String,
    },
    /// A file could not be written (a Perfetto trace: a missing
    /// directory, no permission, a full disk), or its size cap is too small.
    #[error("cannot write {path}: {message}")]
    Unwritable {
        /// The path asked for.
        path: String,
        /// Why, as text.
        message: String,
    },
    /// An error of the core library this version of the bindings does not know.
    #[error("{message}")]
    Other {
        /// The core error, as text.
        message: String,
    },
    /// The observed process exited and its PID now names another process
    /// (last, so the earlier variants keep their wire indices).
    #[error("process {pid} exited and its pid now names another process (pid reused)")]
    PidReused {
        /// The process id, now another process's.
        pid: u32,
    },
}

impl From<wakemeter::Error> for WakemeterError {
    fn from(e: wakemeter::Error) -> Self {
        use wakemeter::Error as E;
        match e {
            E::InvalidConfig { field, reason } => WakemeterError::InvalidConfig {
                field: field.to_string(),
                reason,
            },
            E::Unreadable { path, source } => WakemeterError::Unreadable {
                path,
                message: source.to_string(),
            },
            E::NoSuchProcess { pid } => WakemeterError::NoSuchProcess { pid },
            E::PidReused { pid } => WakemeterError::PidReused { pid },
            E::DescriptorsExhausted { path, source } => WakemeterError::DescriptorsExhausted {
                path,
                message: source.to_string(),
            },
            E::Unsupported { what } => WakemeterError::Unsupported {
                what: what.to_string(),
            },
            E::TooManyProbes { max } => WakemeterError::TooManyProbes {
                max: u32::try_from(max).unwrap_or(u32::MAX),
            },
            E::ProbeNameTooLong { len, max } => WakemeterError::ProbeNameTooLong {
                len: u32::try_from(len).unwrap_or(u32::MAX),
                max: u32::try_from(max).unwrap_or(u32::MAX),
            },
            E::AlreadyRunning => WakemeterError::AlreadyRunning,
            E::Spawn(source) => WakemeterError::Spawn {
                message: source.to_string(),
            },
            other => WakemeterError::Other {
                message: other.to_string(),
            },
        }
    }
}

impl From<wakemeter_perfetto::Error> for WakemeterError {
    fn from(e: wakemeter_perfetto::Error) -> Self {
        use wakemeter_perfetto::Error as E;
        match e {
            E::Create { path, source } => WakemeterError::Unwritable {
                path: path.to_string_lossy().into_owned(),
                message: source.to_string(),
            },
            E::CapTooSmall { .. } => WakemeterError::InvalidConfig {
                field: "max_bytes".to_string(),
                reason: e.to_string(),
            },
            E::Spawn(source) => WakemeterError::Spawn {
                message: source.to_string(),
            },
            other => WakemeterError::Other {
                message: other.to_string(),
            },
        }
    }
}

impl From<serde_json::Error> for WakemeterError {
    fn from(e: serde_json::Error) -> Self {
        WakemeterError::Serialization {
            message: e.to_string(),
        }
    }
}

/// What a Kotlin or Swift listener reports back when it fails.
///
/// Any exception a listener throws arrives here (an exception that is not a
/// `ListenerException`/`ListenerError` becomes [`ListenerError::Unexpected`]);
/// the sampler counts it, keeps the message and keeps sampling.
#[derive(Debug, thiserror::Error, uniffi::Error)]
pub enum ListenerError {
    /// The listener reported a failure itself.
    #[error("listener failed: {reason}")]
    Failed {
        /// What went wrong, in the listener's words.
        reason: String,
    },
    /// The listener threw something else (the foreign exception's text).
    #[error("listener threw: {reason}")]
    Unexpected {
        /// The exception as text (Kotlin: its stack trace).
        reason: String,
    },
}

impl From<uniffi::UnexpectedUniFFICallbackError> for ListenerError {
    fn from(e: uniffi::UnexpectedUniFFICallbackError) -> Self {
        ListenerError::Unexpected { reason: e.reason }
    }
}

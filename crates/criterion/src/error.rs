//! The one error type of this crate.

/// Why a measurement cannot be made here. Every variant names what is
/// missing, so a benchmark can print it and skip the measurement.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The measurement does not exist on this operating system (for example
    /// per-thread switch counts or perf counters outside Linux and Android).
    #[error("{what} is not supported on {os}")]
    Unsupported {
        /// The measurement asked for.
        what: &'static str,
        /// `std::env::consts::OS` of the running program.
        os: &'static str,
    },
    /// The kernel has no such counter: a hardware event (cycles,
    /// instructions, cache misses) on a machine without a performance
    /// monitoring unit, as in most virtual machines (`ENOENT`/`EOPNOTSUPP`).
    #[error(
        "perf counter {event} is not available: this machine exposes no {capability} ({source})"
    )]
    NoCounter {
        /// The event asked for, as `perf` names it (`cycles`, `instructions`, ...).
        event: &'static str,
        /// The missing capability, e.g. "hardware performance monitoring unit (PMU)".
        capability: &'static str,
        /// The error of `perf_event_open`.
        source: std::io::Error,
    },
    /// The kernel refused the counter for lack of privilege
    /// (`EACCES`/`EPERM`): `kernel.perf_event_paranoid` is too high and the
    /// process lacks `CAP_PERFMON`. Counting switches or migrations needs
    /// kernel events included, i.e. paranoid <= 1 or `CAP_PERFMON`.
    #[error(
        "perf counter {event} is forbidden: needs CAP_PERFMON or kernel.perf_event_paranoid <= {needed_paranoid} (it is {paranoid}) ({source})"
    )]
    Forbidden {
        /// The event asked for.
        event: &'static str,
        /// `/proc/sys/kernel/perf_event_paranoid` as read, or "unknown".
        paranoid: String,
        /// The highest paranoid level at which the counter is allowed.
        needed_paranoid: i32,
        /// The error of `perf_event_open`.
        source: std::io::Error,
    },
    /// Any other failure of an OS call, named.
    #[error("{call} failed: {source}")]
    Os {
        /// The call that failed (`perf_event_open`, `getrusage`, ...).
        call: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The wakemeter sampler failed to take a snapshot.
    #[error("wakemeter sample failed: {0}")]
    Sampler(#[from] wakemeter::Error),
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

//! Clocks shared by every Unix backend (`clock_gettime`).

/// Reads `clock`, in nanoseconds; `None` if the clock is invalid (e.g. the
/// CPU clock of a thread that has exited).
#[inline]
pub(crate) fn read_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return None;
    }
    Some(
        (ts.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(ts.tv_nsec as u64),
    )
}

/// Monotonic time in nanoseconds (`CLOCK_MONOTONIC`).
#[inline]
pub(crate) fn monotonic_ns() -> u64 {
    read_ns(libc::CLOCK_MONOTONIC).unwrap_or(0)
}

/// Wall-clock time in nanoseconds since the Unix epoch.
#[inline]
pub(crate) fn unix_ns() -> u64 {
    read_ns(libc::CLOCK_REALTIME).unwrap_or(0)
}

/// CPU time of the calling thread in nanoseconds.
#[inline]
pub(crate) fn current_thread_cpu_ns() -> u64 {
    read_ns(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0)
}

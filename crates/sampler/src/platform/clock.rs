//! Clocks and thread ids shared by every Unix backend and by the probes
//! (`clock_gettime`, `Instant`, `gettid`/`pthread_threadid_np`).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

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

/// CPU time of one thread of the *calling* process, by TID, in nanoseconds;
/// `None` when no such thread exists (any more).
#[cfg(any(target_os = "linux", target_os = "android"))]
#[inline]
pub(crate) fn thread_cpu_ns(tid: u32) -> Option<u64> {
    // The per-thread CPU clock id of the kernel's posix-cpu-timers ABI:
    // (~tid << 3) | CPUCLOCK_PERTHREAD_MASK (4) | CPUCLOCK_SCHED (2).
    // Only threads of the calling process may be read this way.
    let clock = (!(tid as libc::clockid_t)).wrapping_shl(3) | 6;
    read_ns(clock)
}

/// Nanoseconds since a process-wide origin, from `Instant` (the vDSO
/// monotonic clock: ~25-70 ns). A TSC clock (quanta) was measured as well;
/// see BENCHMARKS.md for why `Instant` stays.
#[inline]
pub(crate) fn now_ns() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = ORIGIN.get_or_init(Instant::now);
    duration_ns(origin.elapsed())
}

/// A duration in ns, saturating at `u64::MAX` (~584 years).
#[inline]
pub(crate) fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The calling thread's OS id, cached per thread.
#[inline]
pub(crate) fn current_tid() -> u64 {
    thread_local! {
        static TID: u64 = os_tid();
    }
    TID.with(|t| *t)
}

/// The calling thread's OS id (`gettid` on Linux/Android, the 64-bit
/// `pthread_threadid_np` id on Apple platforms; 0 elsewhere).
fn os_tid() -> u64 {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SAFETY: gettid has no preconditions and cannot fail.
        return (unsafe { libc::gettid() }) as u64;
    }
    #[cfg(target_vendor = "apple")]
    {
        let mut id: u64 = 0;
        // SAFETY: a null thread means the calling thread; `id` is a valid out-pointer.
        unsafe { libc::pthread_threadid_np(0, &mut id) };
        return id;
    }
    #[allow(unreachable_code)]
    0
}

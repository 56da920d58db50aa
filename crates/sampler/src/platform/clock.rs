//! Clocks and thread ids shared by every Unix backend and by the probes
//! (`clock_gettime`, `Instant`, `gettid`/`pthread_threadid_np`).

#[cfg(not(any(target_os = "linux", target_os = "android")))]
use std::sync::OnceLock;
use std::time::Duration;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
use std::time::Instant;

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

/// The probes' clock: monotonic nanoseconds, for differences only.
///
/// On Linux and Android this is `CLOCK_MONOTONIC` read through the vDSO
/// (the clock `Instant::now()` reads) with the nanoseconds computed in
/// 64-bit integers. `Instant` adds a validity check of the timespec, the
/// subtraction of an origin into a `Duration` and a 128-bit `as_nanos`;
/// dropping them brings a LoopProbe wait pair (two reads) close to two
/// `Instant::now()` (BENCHMARKS.md, "Probes and findings").
/// CLOCK_MONOTONIC_COARSE would be cheaper still, but it advances once per
/// tick (1-4 ms), too coarse for poll delays of a few hundred µs. Where
/// the CPU's counter is safe (x86_64 Linux with a trusted TSC, aarch64
/// Linux and Android, Apple platforms), loop probes move to it once the
/// sampler has calibrated it (`super::ticks`). Other platforms use
/// `Instant` (not measured here).
#[inline]
pub(crate) fn now_ns() -> u64 {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the duration of the
        // call; CLOCK_MONOTONIC always exists, so the call cannot fail.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        // A monotonic clock is never negative; u64 ns overflow in 584 years.
        (ts.tv_sec as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(ts.tv_nsec as u64)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        let origin = ORIGIN.get_or_init(Instant::now);
        duration_ns(origin.elapsed())
    }
}

/// A duration in ns, saturating at `u64::MAX` (~584 years). In 64-bit
/// arithmetic: `Duration::as_nanos` is 128-bit.
#[inline]
pub(crate) fn duration_ns(d: Duration) -> u64 {
    d.as_secs()
        .checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(u64::from(d.subsec_nanos())))
        .unwrap_or(u64::MAX)
}

/// The calling thread's OS id, cached per thread.
#[inline]
pub(crate) fn current_tid() -> u64 {
    thread_local! {
        // 0 until first asked (no thread has id 0): a const initializer
        // makes the access a plain TLS load, without the lazy-init state
        // check of a non-const `thread_local!` (on every probe wait).
        static TID: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }
    TID.with(|t| {
        let tid = t.get();
        if tid != 0 {
            return tid;
        }
        let tid = os_tid();
        t.set(tid);
        tid
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_ns_saturate() {
        assert_eq!(duration_ns(Duration::new(3, 7)), 3_000_000_007);
        assert_eq!(duration_ns(Duration::MAX), u64::MAX);
        assert_eq!(
            duration_ns(Duration::from_secs(u64::MAX / 1_000_000_000)),
            u64::MAX / 1_000_000_000 * 1_000_000_000
        );
    }

    #[test]
    fn the_probe_clock_is_monotonic_and_in_ns() {
        let a = now_ns();
        std::thread::sleep(Duration::from_millis(2));
        let b = now_ns();
        assert!(b - a >= 2_000_000, "{a} {b}");
    }
}

//! The OS calls of this crate: CPU clocks, `getrusage`, the calling thread's id.

use std::cell::Cell;

use crate::error::{Error, Result};

/// Reads a CPU clock, in nanoseconds.
#[cfg(unix)]
pub(crate) fn cpu_clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock ids used here
    // (thread and process CPU clocks of the caller) always exist.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// CPU time of the calling thread, in nanoseconds.
#[cfg(unix)]
pub(crate) fn thread_cpu_ns() -> u64 {
    cpu_clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time of the calling thread, in nanoseconds (unsupported: 0).
#[cfg(not(unix))]
pub(crate) fn thread_cpu_ns() -> u64 {
    0
}

/// CPU time of all threads of the process, exited ones included, in nanoseconds.
#[cfg(unix)]
pub(crate) fn process_cpu_ns() -> u64 {
    cpu_clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU time of the process (unsupported: 0).
#[cfg(not(unix))]
pub(crate) fn process_cpu_ns() -> u64 {
    0
}

/// Voluntary and involuntary context switches, cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Switches {
    pub voluntary: u64,
    pub involuntary: u64,
}

/// Whose switches to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Who {
    /// The calling thread (`RUSAGE_THREAD`).
    Thread,
    /// Every thread of the process, exited ones included (`RUSAGE_SELF`).
    Process,
}

/// `getrusage` switch counts of the calling thread or the whole process.
#[cfg(unix)]
pub(crate) fn switches(who: Who) -> Result<Switches> {
    let w = match who {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        Who::Thread => libc::RUSAGE_THREAD,
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        Who::Thread => return Err(unsupported("per-thread context switches (RUSAGE_THREAD)")),
        Who::Process => libc::RUSAGE_SELF,
    };
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage; `w` is a valid `who`.
    let rc = unsafe { libc::getrusage(w, &mut ru) };
    if rc != 0 {
        return Err(Error::Os {
            call: "getrusage",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(Switches {
        voluntary: ru.ru_nvcsw.max(0) as u64,
        involuntary: ru.ru_nivcsw.max(0) as u64,
    })
}

/// `getrusage` does not exist here.
#[cfg(not(unix))]
pub(crate) fn switches(_who: Who) -> Result<Switches> {
    Err(unsupported("context switch counts (getrusage)"))
}

/// The typed "unsupported" error for `what` on this OS.
pub(crate) fn unsupported(what: &'static str) -> Error {
    Error::Unsupported {
        what,
        os: std::env::consts::OS,
    }
}

thread_local! {
    static THREAD_KEY: Cell<u64> = const { Cell::new(0) };
}

/// A number unique to the calling thread for the life of the process (not
/// the OS thread id: those are reused). Costs a thread-local read.
pub(crate) fn thread_key() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    THREAD_KEY.with(|k| {
        let v = k.get();
        if v != 0 {
            return v;
        }
        let v = NEXT.fetch_add(1, Ordering::Relaxed);
        k.set(v);
        v
    })
}

/// Panics with a clear message when a per-thread measurement is ended on
/// another thread than the one that started it (the difference of two
/// threads' counters means nothing).
#[track_caller]
pub(crate) fn check_same_thread(what: &str, started_on: u64) {
    let now = thread_key();
    if now != started_on {
        panic!(
            "{what}: start() and end() ran on different threads; a per-thread \
             measurement must be started and ended on the benchmark's thread \
             (use the process-wide variant for multi-threaded or async benchmarks)"
        );
    }
}

//! CPU time measurements: the calling thread's and the whole process's.

use criterion::measurement::{Measurement, ValueFormatter};

use crate::format::CpuTimeFormatter;
use crate::sys;

/// CPU time of the benchmark's thread (`CLOCK_THREAD_CPUTIME_ID`), in
/// nanoseconds: user + system time the thread ran, excluding the time it
/// slept or waited for a CPU. Values are ns of CPU per sample; the report
/// shows `µs cpu` per iteration.
///
/// A read is a system call on Linux (no vDSO); its cost, and the overhead
/// per sample, are in BENCHMARKS.md ("Per-thread reads", "criterion
/// measurements").
///
/// # Panics
/// `end` panics if it runs on a different thread from `start` (the
/// difference of two threads' clocks means nothing); use
/// [`ProcessCpuTime`] for benchmarks that move between threads.
#[derive(Debug, Default, Clone, Copy)]
pub struct ThreadCpuTime;

/// CPU time of the benchmark's thread at `start`, with the thread it was read on.
#[derive(Debug, Clone, Copy)]
pub struct ThreadCpuStart {
    thread: u64,
    ns: u64,
}

impl Measurement for ThreadCpuTime {
    type Intermediate = ThreadCpuStart;
    type Value = u64;

    fn start(&self) -> ThreadCpuStart {
        ThreadCpuStart {
            thread: sys::thread_key(),
            ns: sys::thread_cpu_ns(),
        }
    }

    fn end(&self, i: ThreadCpuStart) -> u64 {
        let ns = sys::thread_cpu_ns();
        sys::check_same_thread("ThreadCpuTime", i.thread);
        ns.saturating_sub(i.ns)
    }

    u64_value!();

    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuTimeFormatter
    }
}

/// CPU time of every thread of the process (`CLOCK_PROCESS_CPUTIME_ID`),
/// threads that exited during the sample included, in nanoseconds. For
/// async and multi-threaded benchmarks: a tokio runtime's workers, a thread
/// pool. Includes whatever else the process runs meanwhile (criterion's own
/// threads are idle while a sample is measured).
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessCpuTime;

impl Measurement for ProcessCpuTime {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        sys::process_cpu_ns()
    }

    fn end(&self, i: u64) -> u64 {
        sys::process_cpu_ns().saturating_sub(i)
    }

    u64_value!();

    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuTimeFormatter
    }
}

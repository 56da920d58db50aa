//! The `cpu-clock` sampling events of the on-CPU profile, opened with
//! perf-event2, kernel included, at a frequency; the perf_event program is
//! attached to each. Either one event per online CPU, every process
//! ([`SamplingTimer::PerCpu`]), or one per thread of the target, inherited
//! by the threads it creates ([`SamplingTimer::PerThread`]).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use perf_event::Counter;
use perf_event::events::Software;

use crate::EbpfError;
use crate::linux::sys;
use crate::stacks::{SamplingTimer, TimerFallback};

/// Times the thread list is read again for threads created while the
/// events of the earlier ones were opened (a thread created by one whose
/// event was already open inherits it; one created before is listed by a
/// later pass).
const LIST_PASSES: usize = 4;

/// Half the soft `RLIMIT_NOFILE`, in descriptors; `u32::MAX` without a
/// limit.
pub(crate) fn fd_budget() -> u32 {
    wakemeter_procfs::process::open_fd_limit().map_or(u32::MAX, |limit| {
        u32::try_from(limit / 2).unwrap_or(u32::MAX)
    })
}

/// Open sampling events; closing them (drop) detaches the program. A
/// per-thread event of a thread that exited is closed with the others.
pub(crate) struct CpuClockEvents {
    /// `(cpu or thread id, event)` pairs.
    counters: Vec<(u32, Counter)>,
    timer: SamplingTimer,
    fallback: Option<TimerFallback>,
}

impl std::fmt::Debug for CpuClockEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuClockEvents")
            .field("timer", &self.timer)
            .field("events", &self.counters.len())
            .field("fallback", &self.fallback)
            .finish()
    }
}

impl CpuClockEvents {
    /// Opens the events `timer` asks for on process `pid` (per thread:
    /// on its thread `only` alone when not 0, the one thread a session
    /// samples) at `frequency_hz`, runs `program` on each sample, and
    /// enables them. Per thread falls back to per CPU when `pid` has more
    /// threads than [`fd_budget`] (said by [`CpuClockEvents::fallback`]).
    pub(crate) fn open(
        program: BorrowedFd<'_>,
        frequency_hz: u64,
        timer: SamplingTimer,
        pid: u32,
        only: u32,
    ) -> Result<Self, EbpfError> {
        match timer {
            SamplingTimer::PerThread => match Self::per_thread(program, frequency_hz, pid, only)? {
                Ok(events) => Ok(events),
                Err(fallback) => {
                    let mut events = Self::per_cpu(program, frequency_hz)?;
                    events.fallback = Some(fallback);
                    Ok(events)
                }
            },
            SamplingTimer::PerCpu => Self::per_cpu(program, frequency_hz),
        }
    }

    /// The timers that sample.
    pub(crate) fn timer(&self) -> SamplingTimer {
        self.timer
    }

    /// Why per thread was not used, when it was asked for.
    pub(crate) fn fallback(&self) -> Option<TimerFallback> {
        self.fallback
    }

    /// Per-thread events opened (0 per CPU).
    pub(crate) fn thread_events(&self) -> u32 {
        match self.timer {
            SamplingTimer::PerThread => u32::try_from(self.counters.len()).unwrap_or(u32::MAX),
            SamplingTimer::PerCpu => 0,
        }
    }

    fn per_cpu(program: BorrowedFd<'_>, frequency_hz: u64) -> Result<Self, EbpfError> {
        let cpus = aya::util::online_cpus().map_err(|(what, source)| EbpfError::Io {
            what: format!("reading {what}"),
            source,
        })?;
        let mut counters = Vec::with_capacity(cpus.len());
        for cpu in cpus {
            let error = |source| EbpfError::PerfEvent { cpu, source };
            let index = usize::try_from(cpu).unwrap_or(usize::MAX);
            let mut counter = perf_event::Builder::new(Software::CPU_CLOCK)
                .any_pid()
                .one_cpu(index)
                .include_kernel()
                .sample_frequency(frequency_hz)
                .build()
                .map_err(error)?;
            counter.set_bpf(program.as_raw_fd()).map_err(error)?;
            counters.push((cpu, counter));
        }
        for (cpu, counter) in &mut counters {
            let cpu = *cpu;
            counter
                .enable()
                .map_err(|source| EbpfError::PerfEvent { cpu, source })?;
        }
        Ok(CpuClockEvents {
            counters,
            timer: SamplingTimer::PerCpu,
            fallback: None,
        })
    }

    /// One event per thread of `pid`, each enabled as it is opened (a
    /// thread created by it from then on inherits it); `Ok(Err(_))` when
    /// the threads outnumber the budget, or the process runs out of
    /// descriptors first (the budget is then the events it could open),
    /// with every event opened so far closed.
    fn per_thread(
        program: BorrowedFd<'_>,
        frequency_hz: u64,
        pid: u32,
        only: u32,
    ) -> Result<Result<Self, TimerFallback>, EbpfError> {
        let fd_budget = fd_budget();
        let mut counters: Vec<(u32, Counter)> = Vec::new();
        // The threads with an event, to skip them on the next pass (a
        // scan of `counters` per thread was quadratic in the thread count).
        let mut opened = std::collections::HashSet::new();
        let mut tids = Vec::new();
        for _ in 0..LIST_PASSES {
            if only != 0 {
                tids = vec![only];
            } else if !sys::list_tids(pid, &mut tids) {
                return Err(EbpfError::NoSuchProcess { pid });
            }
            let threads = u32::try_from(tids.len()).unwrap_or(u32::MAX);
            if threads > fd_budget {
                return Ok(Err(TimerFallback { threads, fd_budget }));
            }
            let before = counters.len();
            for &tid in &tids {
                if opened.contains(&tid) {
                    continue;
                }
                match open_thread(program, frequency_hz, tid) {
                    Ok(counter) => {
                        opened.insert(tid);
                        counters.push((tid, counter));
                    }
                    // Listed, but gone before its open.
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                    // The process's other descriptors left less room than
                    // the budget: per CPU, as for too many threads.
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                        let opened = u32::try_from(counters.len()).unwrap_or(u32::MAX);
                        return Ok(Err(TimerFallback {
                            threads,
                            fd_budget: opened.min(fd_budget),
                        }));
                    }
                    Err(source) => return Err(EbpfError::ThreadPerfEvent { tid, source }),
                }
            }
            if counters.len() == before {
                break;
            }
        }
        Ok(Ok(CpuClockEvents {
            counters,
            timer: SamplingTimer::PerThread,
            fallback: None,
        }))
    }
}

/// The event of thread `tid`, with `program` attached, enabled.
fn open_thread(program: BorrowedFd<'_>, frequency_hz: u64, tid: u32) -> io::Result<Counter> {
    let pid = libc::pid_t::try_from(tid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    let mut counter = perf_event::Builder::new(Software::CPU_CLOCK)
        .observe_pid(pid)
        .any_cpu()
        .include_kernel()
        // Threads it creates get their own event with the program; child
        // processes do not (`inherit_thread`, Linux 5.13).
        .inherit(true)
        .inherit_thread(true)
        .sample_frequency(frequency_hz)
        .build()?;
    counter.set_bpf(program.as_raw_fd())?;
    counter.enable()?;
    Ok(counter)
}

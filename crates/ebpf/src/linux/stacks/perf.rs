//! The `cpu-clock` sampling events of the on-CPU profile, opened with
//! perf-event2: one software event per online CPU, every process, kernel
//! included, at a frequency; the perf_event program is attached to each.

use std::os::fd::{AsRawFd, BorrowedFd};

use perf_event::Counter;
use perf_event::events::Software;

use crate::EbpfError;

/// Open sampling events; closing them (drop) detaches the program.
pub(crate) struct CpuClockEvents {
    /// `(cpu, event)` pairs.
    counters: Vec<(u32, Counter)>,
}

impl std::fmt::Debug for CpuClockEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuClockEvents")
            .field("cpus", &self.counters.len())
            .finish()
    }
}

impl CpuClockEvents {
    /// Opens one `cpu-clock` event per online CPU at `frequency_hz`, runs
    /// `program` on each sample, and enables them.
    pub(crate) fn open(program: BorrowedFd<'_>, frequency_hz: u64) -> Result<Self, EbpfError> {
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
        Ok(CpuClockEvents { counters })
    }
}

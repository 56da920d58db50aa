//! The backend's per-thread row: one thread's cumulative counters.

use std::sync::Arc;

use super::CpuTimeSource;

/// Identity of one tracked thread; shared by every stored sample of it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ThreadIdent {
    pub tid: u64,
    pub serial: u64,
    pub name: Box<str>,
    pub cpu_time_source: CpuTimeSource,
}

#[cfg(test)]
impl ThreadIdent {
    /// The shared identity of a test thread whose CPU time comes from its
    /// own clock.
    pub(crate) fn thread_clock(tid: u64, serial: u64, name: &str) -> Arc<ThreadIdent> {
        Arc::new(ThreadIdent {
            tid,
            serial,
            name: name.into(),
            cpu_time_source: CpuTimeSource::ThreadClock,
        })
    }
}

/// Marker for "this counter is absent" in [`ThreadRow`].
pub(crate) const ABSENT: u64 = u64::MAX;

/// One thread's cumulative counters as a backend reads them and history
/// stores them: 48 bytes on 64-bit targets (the identity is shared, absent
/// values are [`ABSENT`]).
#[derive(Debug, Clone)]
pub(crate) struct ThreadRow {
    pub ident: Arc<ThreadIdent>,
    pub total_cpu_time_ns: u64,
    pub total_run_queue_wait_ns: u64,
    pub total_switches: u64,
    pub total_voluntary_switches: u64,
    pub total_involuntary_switches: u64,
}

/// Converts an [`ABSENT`]-coded counter to an `Option`.
#[inline]
pub(crate) fn present(v: u64) -> Option<u64> {
    (v != ABSENT).then_some(v)
}

//! Loop wakeups per operation, read from wakemeter's own loop probes.

use criterion::measurement::{Measurement, ValueFormatter};
use wakemeter::{LoopStats, Sampler};

use crate::error::Result;
use crate::format::CountFormatter;
use crate::sys;

/// What [`LoopWakeups`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopCount {
    /// Returns from the loop's wait ([`LoopStats::total_wakeups`]).
    Wakeups,
    /// Wakeups that reported 0 events ([`LoopStats::total_idle_wakeups`]).
    IdleWakeups,
}

/// Wakeups (or idle wakeups) per iteration of the loop probes named `name`
/// in a wakemeter [`Sampler`], summed over every probe of that name (a tokio
/// runtime instrumented with `wakemeter::runtime::instrument` has one per
/// worker, all with the same name).
///
/// The benchmark drives work through an event loop that runs elsewhere (a
/// tokio runtime, a hand-written `epoll` thread) and criterion counts how
/// often the loop woke, and woke for nothing, per operation. Each `start`
/// and `end` takes one snapshot of the sampler (`Sampler::sample_now`, a
/// cost per thread of the process plus the probes: BENCHMARKS.md, "One
/// sample at the cadence users sample" and "History: bytes per stored
/// snapshot"), which is paid per
/// criterion sample, not per iteration, and is stored in the sampler's
/// history like any other snapshot.
///
/// The loops must be idle when a sample starts and ends for the count to be
/// exactly the operations' (a loop that wakes on a timer adds its timer's
/// wakeups: that is the point when measuring a poller).
///
/// # Panics
/// `start`/`end` panic if the sampler cannot take a snapshot (its target
/// process exited).
#[derive(Debug, Clone)]
pub struct LoopWakeups {
    sampler: Sampler,
    name: String,
    count: LoopCount,
}

impl LoopWakeups {
    /// Wakeups of the loops named `name`.
    pub fn new(sampler: &Sampler, name: &str) -> Self {
        LoopWakeups {
            sampler: sampler.clone(),
            name: name.to_string(),
            count: LoopCount::Wakeups,
        }
    }

    /// Idle wakeups (woke with 0 events) of the loops named `name`.
    pub fn idle(sampler: &Sampler, name: &str) -> Self {
        LoopWakeups {
            count: LoopCount::IdleWakeups,
            ..LoopWakeups::new(sampler, name)
        }
    }

    /// What is counted.
    pub fn count(&self) -> LoopCount {
        self.count
    }

    /// The summed cumulative counters of the loops named like this one, now.
    ///
    /// # Errors
    /// [`crate::Error::Sampler`] if the snapshot fails.
    pub fn totals(&self) -> Result<LoopTotals> {
        let snap = self.sampler.sample_now()?;
        Ok(LoopTotals::sum(
            snap.loops.iter().filter(|l| l.name == self.name),
        ))
    }
}

/// Cumulative counters of a set of loop probes, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoopTotals {
    /// Probes summed.
    pub loops: u64,
    /// Returns from the wait.
    pub wakeups: u64,
    /// Wakeups that reported 0 events.
    pub idle_wakeups: u64,
    /// Ready events reported.
    pub events: u64,
}

impl LoopTotals {
    fn sum<'a>(loops: impl Iterator<Item = &'a LoopStats>) -> LoopTotals {
        loops.fold(LoopTotals::default(), |t, l| LoopTotals {
            loops: t.loops + 1,
            wakeups: t.wakeups.saturating_add(l.total_wakeups),
            idle_wakeups: t.idle_wakeups.saturating_add(l.total_idle_wakeups),
            events: t.events.saturating_add(l.total_events),
        })
    }

    /// `self - earlier`, field by field (saturating).
    pub fn since(&self, earlier: &LoopTotals) -> LoopTotals {
        LoopTotals {
            loops: self.loops,
            wakeups: self.wakeups.saturating_sub(earlier.wakeups),
            idle_wakeups: self.idle_wakeups.saturating_sub(earlier.idle_wakeups),
            events: self.events.saturating_sub(earlier.events),
        }
    }
}

/// What a run of `ops` operations cost, from [`loop_cost`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoopCost {
    /// Operations run.
    pub ops: u64,
    /// Loop wakeups per operation.
    pub wakeups_per_op: f64,
    /// Idle loop wakeups (0 events) per operation.
    pub idle_wakeups_per_op: f64,
    /// Wakeups received by all threads of the process (voluntary switches)
    /// per operation; see [`crate::Wakeups`].
    pub process_wakeups_per_op: f64,
    /// CPU time of the whole process per operation, in nanoseconds.
    pub process_cpu_ns_per_op: f64,
}

/// Runs `run(ops)` once (it must perform `ops` operations through the loops
/// named `name` and return when they are done) and reports the loops'
/// wakeups and idle wakeups per operation, with the process's wakeups and
/// CPU time per operation. For printing next to criterion's figures, or
/// asserting in tests.
///
/// # Errors
/// [`crate::Error::Sampler`] if a snapshot fails; [`crate::Error::Os`] /
/// [`crate::Error::Unsupported`] if the process's switch counts cannot be read.
pub fn loop_cost(
    sampler: &Sampler,
    name: &str,
    ops: u64,
    run: impl FnOnce(u64),
) -> Result<LoopCost> {
    let m = LoopWakeups::new(sampler, name);
    let w = crate::Wakeups::process();
    let before = m.totals()?;
    let w0 = w.read()?;
    let c0 = sys::process_cpu_ns();
    run(ops);
    let c1 = sys::process_cpu_ns();
    let w1 = w.read()?;
    let d = m.totals()?.since(&before);
    let per = |x: u64| x as f64 / ops.max(1) as f64;
    Ok(LoopCost {
        ops,
        wakeups_per_op: per(d.wakeups),
        idle_wakeups_per_op: per(d.idle_wakeups),
        process_wakeups_per_op: per(w1.saturating_sub(w0)),
        process_cpu_ns_per_op: per(c1.saturating_sub(c0)),
    })
}

impl Measurement for LoopWakeups {
    type Intermediate = LoopTotals;
    type Value = u64;

    fn start(&self) -> LoopTotals {
        match self.totals() {
            Ok(t) => t,
            Err(e) => panic!("LoopWakeups({:?}): {e}", self.name),
        }
    }

    fn end(&self, i: LoopTotals) -> u64 {
        let d = match self.totals() {
            Ok(t) => t.since(&i),
            Err(e) => panic!("LoopWakeups({:?}): {e}", self.name),
        };
        match self.count {
            LoopCount::Wakeups => d.wakeups,
            LoopCount::IdleWakeups => d.idle_wakeups,
        }
    }

    u64_value!();

    fn formatter(&self) -> &dyn ValueFormatter {
        match self.count {
            LoopCount::Wakeups => &CountFormatter::WAKEUPS,
            LoopCount::IdleWakeups => &CountFormatter::IDLE_WAKEUPS,
        }
    }
}

//! Sleep-loop instrumentation.

use std::sync::Arc;
use std::time::Duration;

use super::cells::{Counter, Histogram};
use crate::model::SleepStats;
use crate::platform::clock::{self, current_tid, duration_ns, now_ns};

/// Counters of one sleep probe, shared with the sampler.
#[derive(Debug, Default)]
pub(crate) struct SleepCells {
    pub id: u64,
    pub name: String,
    pub tid: Counter,
    pub calls: Counter,
    pub requested_ns: Counter,
    pub actual_ns: Counter,
    pub cpu_ns: Counter,
    pub oversleep_ns: Counter,
    pub oversleep: Histogram,
    pub unmatched_calls: Counter,
}

impl SleepCells {
    pub(crate) fn read(&self) -> SleepStats {
        let tid = self.tid.get();
        SleepStats {
            id: self.id,
            name: self.name.clone(),
            tid: (tid != 0).then_some(tid),
            total_calls: self.calls.get(),
            total_requested_ns: self.requested_ns.get(),
            total_actual_ns: self.actual_ns.get(),
            total_cpu_ns: self.cpu_ns.get(),
            total_oversleep_ns: self.oversleep_ns.get(),
            oversleep_histogram: self.oversleep.read(),
            total_unmatched_calls: self.unmatched_calls.get(),
        }
    }
}

/// Instruments a sleep-based polling loop: use [`SleepProbe::sleep`] instead
/// of `std::thread::sleep`, or wrap a foreign sleep (`usleep`, `nanosleep`)
/// in [`SleepProbe::begin`] / [`SleepProbe::end`].
///
/// Each call reads the monotonic clock and the thread's CPU clock before and
/// after the sleep. The thread's CPU clock is a real system call (not
/// vDSO), most of the probe's cost; see BENCHMARKS.md, "Probes and
/// findings". [`SleepProbe::set_cpu_every`] reads it on every `n`th sleep only.
#[derive(Debug)]
pub struct SleepProbe {
    cells: Arc<SleepCells>,
    begun: Option<Begun>,
    /// The CPU clocks are read on one sleep in this many (at least 1).
    cpu_every: u32,
    /// Sleeps left before the next one whose CPU is measured.
    cpu_countdown: u32,
}

/// A sleep in progress.
#[derive(Debug, Clone, Copy)]
struct Begun {
    start_ns: u64,
    /// The thread's CPU clock at `begin`; `None` on a sleep whose CPU is not measured.
    cpu_start_ns: Option<u64>,
    requested_ns: u64,
}

impl SleepProbe {
    pub(crate) fn new(cells: Arc<SleepCells>) -> Self {
        SleepProbe {
            cells,
            begun: None,
            cpu_every: 1,
            cpu_countdown: 0,
        }
    }

    /// Measures the CPU spent inside sleeps on every `n`th sleep only, and
    /// counts it `n` times in [`SleepStats::total_cpu_ns`]. Calls, requested,
    /// actual and oversleep times stay exact; only the CPU becomes an
    /// estimate, right on average for a loop whose sleeps cost alike (the
    /// polling loops this probe is for) and off by up to `n` sleeps' CPU
    /// over short windows. The default, 1, measures every sleep.
    ///
    /// Why: the CPU clock of the calling thread is a system call, two per
    /// sleep, most of what a sleep costs the probe; with `n` = 8 those
    /// reads are paid on one sleep in eight (BENCHMARKS.md, "Probes and
    /// findings").
    pub fn set_cpu_every(&mut self, n: std::num::NonZeroU32) {
        self.cpu_every = n.get();
        self.cpu_countdown = 0;
    }

    /// Sleeps for `duration` (with `std::thread::sleep`) and records it.
    pub fn sleep(&mut self, duration: Duration) {
        self.begin(duration);
        std::thread::sleep(duration);
        self.end();
    }

    /// A sleep of `requested` is about to start. A second `begin` without
    /// `end` replaces the first.
    #[inline]
    pub fn begin(&mut self, requested: Duration) {
        let cpu_start_ns = if self.cpu_countdown == 0 {
            self.cpu_countdown = self.cpu_every - 1;
            Some(clock::current_thread_cpu_ns())
        } else {
            self.cpu_countdown -= 1;
            None
        };
        self.begun = Some(Begun {
            start_ns: now_ns(),
            cpu_start_ns,
            requested_ns: duration_ns(requested),
        });
    }

    /// The sleep started by [`SleepProbe::begin`] returned.
    #[inline]
    pub fn end(&mut self) {
        let now = now_ns();
        let c = &*self.cells;
        let Some(begun) = self.begun.take() else {
            c.unmatched_calls.add(1);
            return;
        };
        if let Some(cpu_start) = begun.cpu_start_ns {
            let cpu = clock::current_thread_cpu_ns().saturating_sub(cpu_start);
            c.cpu_ns.add(cpu.saturating_mul(u64::from(self.cpu_every)));
        }
        let actual = now.saturating_sub(begun.start_ns);
        let over = actual.saturating_sub(begun.requested_ns);
        c.tid.set(current_tid());
        c.calls.add(1);
        c.requested_ns.add(begun.requested_ns);
        c.actual_ns.add(actual);
        c.oversleep_ns.add(over);
        c.oversleep.record(over);
    }

    /// The probe's id (matches [`SleepStats::id`]).
    pub fn id(&self) -> u64 {
        self.cells.id
    }

    /// The current cumulative counters of this probe.
    pub fn stats(&self) -> SleepStats {
        self.cells.read()
    }
}

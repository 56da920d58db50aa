//! The counter catalogue: what each counter track is (name, unit) and the
//! last value written on it.

use super::*;

/// Off-CPU causes, in the order of [`wakemeter::OffCpuTime::by_cause`].
pub(super) const OFF_CPU_CAUSES: [&str; 6] = ["sleep", "lock", "poll", "io", "preempted", "other"];

/// One counter track and the last value written on it: an unchanged
/// value is not written again (a Perfetto counter holds its value until
/// the next one), which keeps idle threads almost free.
#[derive(Debug, Clone, Copy)]
pub(super) struct Counter {
    /// The track's uuid; 0 while it is not described (no uuid is 0:
    /// [`Uuids`]).
    pub(super) uuid: u64,
    /// The last value written; NaN before the first (values written are
    /// finite, and NaN differs from every value).
    pub(super) last: f64,
}

/// A counter track not described yet.
pub(super) const UNDESCRIBED: Counter = Counter {
    uuid: 0,
    last: f64::NAN,
};

/// What a counter track is: name and unit, fixed per kind.
#[derive(Debug, Clone, Copy)]
pub(super) struct CounterKind {
    pub(super) name: &'static str,
    pub(super) unit: Unit,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Unit {
    Percent,
    PerSec,
    Ratio,
    Ns,
    Bytes,
}

impl CounterKind {
    pub(super) const fn new(name: &'static str, unit: Unit) -> Self {
        CounterKind { name, unit }
    }

    pub(super) fn descriptor(self) -> CounterDescriptor {
        let (unit, name) = match self.unit {
            Unit::Percent => (None, Some("%")),
            Unit::PerSec => (None, Some("/s")),
            Unit::Ratio => (None, Some("ratio")),
            Unit::Ns => (Some(unit::TIME_NS), None),
            Unit::Bytes => (Some(unit::SIZE_BYTES), None),
        };
        CounterDescriptor {
            unit,
            unit_name: name.map(str::to_string),
        }
    }
}

/// Per-thread counter tracks (children of the thread's track).
pub(super) const THREAD_COUNTERS: [CounterKind; 5] = [
    CounterKind::new("CPU %", Unit::Percent),
    CounterKind::new("voluntary switches/s", Unit::PerSec),
    CounterKind::new("involuntary switches/s", Unit::PerSec),
    CounterKind::new("run-queue wait %", Unit::Percent),
    CounterKind::new("wakes/s", Unit::PerSec),
];
/// Per loop probe.
pub(super) const LOOP_COUNTERS: [CounterKind; 4] = [
    CounterKind::new("wakeups/s", Unit::PerSec),
    CounterKind::new("idle-wakeup ratio", Unit::Ratio),
    CounterKind::new("utilization", Unit::Ratio),
    CounterKind::new("mean poll delay", Unit::Ns),
];
/// Per sleep site.
pub(super) const SLEEP_COUNTERS: [CounterKind; 3] = [
    CounterKind::new("sleeps/s", Unit::PerSec),
    CounterKind::new("mean oversleep", Unit::Ns),
    CounterKind::new("CPU in sleep %", Unit::Percent),
];
/// The process's own counters.
pub(super) const PROCESS_COUNTERS: [CounterKind; 2] = [
    CounterKind::new("process CPU %", Unit::Percent),
    CounterKind::new("RSS", Unit::Bytes),
];

/// Off-CPU time of one cause (the cause goes into the track's name).
pub(super) const OFF_CPU: CounterKind = CounterKind::new("off-CPU", Unit::Percent);

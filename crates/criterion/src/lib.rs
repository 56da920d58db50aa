#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// The `add`, `zero` and `to_f64` of a `Measurement` whose value is a
/// `u64` count (the same for every measurement of this crate): saturating
/// sums, and [`count_to_f64`] for criterion's statistics.
macro_rules! u64_value {
    () => {
        fn add(&self, v1: &u64, v2: &u64) -> u64 {
            v1.saturating_add(*v2)
        }

        fn zero(&self) -> u64 {
            0
        }

        fn to_f64(&self, value: &u64) -> f64 {
            crate::count_to_f64(*value)
        }
    };
}

mod cpu;
mod error;
mod format;
mod perf;
mod probe;
mod switches;
mod sys;

pub use cpu::{ProcessCpuTime, ThreadCpuStart, ThreadCpuTime};
pub use error::{Error, Result};
pub use format::{CountFormatter, CpuTimeFormatter};
pub use perf::{PerfCounter, PerfEvent, PerfReading};
pub use probe::{LoopCost, LoopCount, LoopTotals, LoopWakeups, loop_cost};
pub use switches::{ContextSwitches, SwitchKind, SwitchesStart, Wakeups};

/// What a sample of zero events (or zero ns) is reported to criterion as:
/// criterion drops a benchmark if any sample is exactly 0.0. One millionth
/// of an event per sample prints as 0.0000 per iteration.
pub const ZERO_FLOOR: f64 = 1e-6;

/// A count as criterion's `f64`, with 0 mapped to [`ZERO_FLOOR`]. Counts up
/// to 2^53 are exact.
pub fn count_to_f64(count: u64) -> f64 {
    if count == 0 { ZERO_FLOOR } else { count as f64 }
}

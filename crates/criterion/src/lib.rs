//! criterion measurements of what wakemeter measures: CPU time, context
//! switches, wakeups and perf counters per iteration, so `cargo bench`
//! reports what code costs the machine, not only how long it takes.
//!
//! | measurement | counts | unit in reports |
//! |---|---|---|
//! | [`ThreadCpuTime`] | CPU time of the benchmark's thread (`CLOCK_THREAD_CPUTIME_ID`) | `µs cpu` |
//! | [`ProcessCpuTime`] | CPU time of every thread of the process (`CLOCK_PROCESS_CPUTIME_ID`) | `µs cpu` |
//! | [`ContextSwitches`] | voluntary, involuntary or all switches of the thread or the process (`getrusage`) | `switches/iter` |
//! | [`Wakeups`] | wakeups from blocking waits received by the process's (or the thread's) threads | `wakeups/iter` |
//! | [`PerfCounter`] | one `perf_event_open` counter of the thread (software or hardware) | `<event>/iter` |
//! | [`LoopWakeups`] | wakeups / idle wakeups of wakemeter loop probes (tokio workers, hand-written loops) | `wakeups/iter` |
//!
//! ```no_run
//! use criterion::{Criterion, criterion_group, criterion_main};
//! use wakemeter_criterion::ContextSwitches;
//!
//! fn spin(c: &mut Criterion<ContextSwitches>) {
//!     c.bench_function("spin 10µs", |b| {
//!         b.iter(|| {
//!             let t = std::time::Instant::now();
//!             while t.elapsed() < std::time::Duration::from_micros(10) {}
//!         })
//!     });
//! }
//!
//! criterion_group! {
//!     name = benches;
//!     config = Criterion::default().with_measurement(ContextSwitches::voluntary());
//!     targets = spin
//! }
//! criterion_main!(benches);
//! ```
//!
//! **Zero counts.** criterion refuses to analyse a benchmark any of whose
//! samples is exactly 0.0 (it logs "took zero time per iteration" and skips
//! the report and the baseline). A spin-wait costs zero switches, so every
//! measurement here reports a sample of 0 events as [`ZERO_FLOOR`] (one
//! millionth of an event per *sample*, i.e. far less per iteration); the
//! report then prints `0.0000 switches/iter` and comparisons against a saved
//! baseline work. [`count_to_f64`] is that conversion.
//!
//! **Threads.** Per-thread measurements ([`ThreadCpuTime`],
//! [`ContextSwitches`] without `.process()`, [`PerfCounter`]) must be
//! started and ended on the benchmark's thread, which is where criterion
//! calls them; they panic with a message otherwise rather than report the
//! difference of two threads' counters. Use the process-wide variants for
//! async and multi-threaded code.
//!
//! On other platforms than Linux and Android, per-thread switch counts and
//! perf counters return [`Error::Unsupported`] (CPU clocks and process
//! switch counts work on every Unix).

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

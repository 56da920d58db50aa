//! App instrumentation: [`LoopProbe`] for event loops, [`SleepProbe`] for
//! sleep-based polling. Probes are created from a [`crate::Sampler`], which
//! publishes their cumulative counters in every snapshot.
//!
//! The hot path of a probe reads a clock and updates plain counters: no
//! allocation, no lock, no syscall beyond the clock (SleepProbe also reads
//! the thread's CPU clock, the only way to know the CPU spent inside a sleep).
//! Each probe has one writer (`&mut self` methods); the sampler reads the
//! counters with relaxed atomic loads, so a snapshot may see a wait half
//! recorded (one counter updated, the next not yet): every counter is exact
//! on its own, and they agree again after the call returns.

mod cells;
mod loop_probe;
mod registry;
mod sleep_probe;

// Re-exported for the sampler, runtime and rules, which take them from here.
pub use crate::model::{LoopStats, SleepStats};
pub(crate) use crate::platform::clock::{current_tid, duration_ns};
pub use loop_probe::{LoopProbe, WaitGuard};
pub(crate) use registry::ProbeRegistry;
pub use sleep_probe::SleepProbe;

/// Most live probes of each kind (loop, sleep) one sampler tracks at once.
/// A dropped probe's slot is free at once; its final counters wait for the
/// next snapshot outside the slots (at most this many of them too, the
/// oldest forgotten first).
pub const MAX_PROBES: usize = 4096;

/// Longest probe name, in bytes (UTF-8). Names are stored once per key
/// frame and copied into every report, so they are bounded; 64 bytes fits
/// "module/loop-name#instance" style names.
pub const MAX_PROBE_NAME_BYTES: usize = 64;

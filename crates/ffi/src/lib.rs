//! # wakemeter-ffi
//!
//! Kotlin and Swift bindings of [`wakemeter`], exported with uniffi
//! proc-macros. The plain records (snapshots, intervals, findings, the
//! report, the configuration) are the core's own, derived there behind its
//! `uniffi` feature; this crate holds only what has a different shape
//! across FFI: the objects (sampler, probes, listeners, Perfetto trace), the error
//! ([`WakemeterError`]) and the JVM fast path ([`fast`]).
//!
//! Bindings are generated from the built library ("library mode") by
//! `scripts/bindings.sh`; the idiomatic Kotlin and Swift layers live in
//! `bindings/kotlin` and `bindings/swift`.

uniffi::setup_scaffolding!();

mod error;
pub mod fast;
mod handle;
mod listener;
mod lock;
mod perfetto;
mod probe;
mod sampler_object;

pub use error::{ListenerError, WakemeterError};
pub use listener::{ListenerStats, SamplerListener};
pub use perfetto::{PerfettoTrace, PerfettoTraceStatus};
pub use probe::{LoopProbe, SleepProbe};
pub use sampler_object::Sampler;

/// Version of the wakemeter library behind these bindings.
#[uniffi::export]
pub fn wakemeter_version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

#[cfg(test)]
mod tests;

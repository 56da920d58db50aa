#![doc = include_str!("../README.md")]

uniffi::setup_scaffolding!();

mod error;
pub mod fast;
mod handle;
mod listener;
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

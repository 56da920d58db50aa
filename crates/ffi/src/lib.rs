//! # wakemeter-ffi
//!
//! Kotlin and Swift bindings of [`wakemeter`], exported with uniffi
//! proc-macros. The core knows nothing about FFI; this crate mirrors its
//! records, converts its errors in one place ([`WakemeterError`]), and calls
//! foreign listeners from its own thread.
//!
//! Bindings are generated from the built library ("library mode") by
//! `scripts/bindings.sh`; the idiomatic Kotlin and Swift layers live in
//! `bindings/kotlin` and `bindings/swift`.

uniffi::setup_scaffolding!();

mod error;
pub mod fast;
mod findings;
mod listener;
mod probe;
mod records;
mod sampler;

pub use error::{ListenerError, WakemeterError};
pub use findings::{Evidence, Finding, FindingKind, Report, Severity, Subject, Thresholds};
pub use listener::{ListenerStats, SamplerListener};
pub use probe::{LoopProbe, LoopStats, SleepProbe, SleepStats};
pub use records::*;
pub use sampler::{Sampler, SamplerConfig};

/// The default sampler configuration (the core's defaults).
#[uniffi::export]
pub fn default_sampler_config() -> SamplerConfig {
    SamplerConfig::default()
}

/// The default thresholds of the findings engine (the core's defaults).
#[uniffi::export]
pub fn default_thresholds() -> Thresholds {
    Thresholds::default()
}

/// Version of the wakemeter library behind these bindings.
#[uniffi::export]
pub fn wakemeter_version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

#[cfg(test)]
mod tests;

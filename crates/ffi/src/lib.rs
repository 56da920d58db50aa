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
mod listener;
mod records;
mod sampler;

pub use error::{ListenerError, WakemeterError};
pub use listener::{ListenerStats, SamplerListener};
pub use records::*;
pub use sampler::{Report, Sampler, SamplerConfig};

/// Version of the wakemeter library behind these bindings.
#[uniffi::export]
pub fn wakemeter_version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

#![doc = include_str!("../README.md")]

mod encode;
mod error;
mod proto;
mod trace;
#[cfg(feature = "track-events-prebuilt")]
mod track_events;

pub use encode::{CLOSE_BYTES_PER_FINDING, MAX_OPEN_FINDINGS, TraceEncoder};
pub use error::Error;
pub use trace::{
    DEFAULT_FLUSH_BYTES, DEFAULT_FLUSH_EVERY, DEFAULT_MAX_BYTES, MIN_MAX_BYTES, PerfettoFile,
    PerfettoTrace, ProcessTrace, TraceConfig, TraceEnd, TraceStatus,
};
#[cfg(feature = "track-events-prebuilt")]
pub use track_events::{Backend, CATEGORY, TrackEventStatus, TrackEvents};

/// The Perfetto SDK this crate emits track events with (the same version,
/// for starting sessions in process or building a trace config).
#[cfg(feature = "track-events-prebuilt")]
pub use perfetto_sdk;

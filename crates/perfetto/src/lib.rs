#![doc = include_str!("../README.md")]

mod encode;
mod error;
mod proto;
mod trace;

pub use encode::{CLOSE_BYTES_PER_FINDING, MAX_OPEN_FINDINGS, TraceEncoder};
pub use error::Error;
pub use trace::{
    DEFAULT_FLUSH_BYTES, DEFAULT_FLUSH_EVERY, DEFAULT_MAX_BYTES, MIN_MAX_BYTES, PerfettoFile,
    PerfettoTrace, ProcessTrace, TraceConfig, TraceEnd, TraceStatus,
};

//! Perfetto traces of a [`wakemeter::Sampler`]: the counters and findings
//! on a timeline, for ui.perfetto.dev, Android Studio and anything that
//! reads Perfetto's trace format.
//!
//! [`PerfettoTrace::start`] follows a sampler and writes a trace file as
//! it goes (a thread woken by each stored snapshot, no clock of its own);
//! [`PerfettoFile`] puts several processes in one file, each a
//! [`ProcessTrace`] polled by the caller (the CLI's `watch` and `record`);
//! [`TraceEncoder`] is the encoding alone, for other sinks. The tracks
//! are described on [`TraceEncoder`].
//!
//! ```no_run
//! use std::time::Duration;
//! use wakemeter::SamplerBuilder;
//! use wakemeter_perfetto::{PerfettoTrace, TraceConfig};
//!
//! let sampler = SamplerBuilder::new().with_interval(Duration::from_secs(1)).build()?;
//! let trace = PerfettoTrace::start(&sampler, "app.perfetto-trace", TraceConfig::default())?;
//! let sampling = sampler.start()?;
//! // ... the app runs ...
//! drop(sampling);
//! let status = trace.finish();
//! println!("{} intervals, {} bytes", status.intervals, status.bytes_written);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod encode;
mod error;
mod proto;
mod trace;

pub use encode::{CLOSE_BYTES_PER_FINDING, MAX_OPEN_FINDINGS, TraceEncoder};
pub use error::Error;
pub use trace::{
    DEFAULT_MAX_BYTES, MIN_MAX_BYTES, PerfettoFile, PerfettoTrace, ProcessTrace, TraceConfig,
    TraceEnd, TraceStatus,
};

//! Plain data records: what the sampler measures (snapshots, probe
//! counters) and which process it observes ([`Target`]). The modules that
//! do the work (backends, probes, history, intervals, findings) import
//! these records; the records import none of them.
//!
//! Every record is cumulative ("since the thread or process started") unless
//! it says otherwise; rates live in [`crate::Interval`]. All records are plain
//! data with public fields so the FFI layer can expose them as they are, and
//! all serialize with serde (JSON field names equal the Rust field names).

mod probes;
mod process;
mod row;
mod snapshot;
mod system;
mod target;
mod thread;
mod warning;

pub use probes::{LoopKind, LoopStats, SleepStats};
pub use process::ProcessSample;
pub(crate) use row::{ABSENT, ThreadIdent, ThreadRow, present};
pub use snapshot::Snapshot;
pub use system::SystemInfo;
pub use target::{Target, TargetIdentity};
pub use thread::{CpuTimeSource, ThreadSample};
pub use warning::SampleWarning;

#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod accounting;
mod capture;
mod error;
pub mod folded;
mod maps;
mod model;
pub mod pprof;
mod svg;
mod symbolize;
pub mod trigger;

pub use accounting::{
    SampleAccounting, StopReason, ThreadSamples, TimerAccounting, TimerFallbackAccounting,
    UnwindStopCount,
};
pub use capture::{Capture, MAX_CAPTURE, ProfileOptions, Profiler};
pub use error::ProfileError;
pub use folded::write_folded;
pub use model::{
    CauseShare, Frame, FunctionShare, KERNEL_MAPPING, KERNEL_START, ModuleMapping, OffCpuCause,
    Profile, ProfileWarning, StackGap, StackKind, StackSample, kind_label,
};
pub use pprof::write_pprof;
pub use svg::write_svg;
pub use symbolize::Symbolizer;
pub use trigger::{
    AutoProfiler, AutoProfilerBuilder, AutoProfilerStats, CaptureFiles, ProfiledFinding, Trigger,
    TriggeredProfile,
};
pub use wakemeter_ebpf::stacks::{DEFAULT_MAX_STACKS, UnwindStop};
pub use wakemeter_ebpf::{SamplingTimer, Target};

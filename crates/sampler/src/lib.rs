#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod compare;
pub mod config;
#[cfg(feature = "uniffi")]
uniffi::setup_scaffolding!();

pub mod diagnose;
pub mod error;
pub mod histogram;
pub mod kernel;
pub mod model;
pub mod probe;
#[cfg(feature = "tokio")]
pub mod runtime;

pub use config::{SamplerConfig, default_sampler_config, default_thresholds};
pub use error::{Error, Result};
pub use histogram::Log2Histogram;
pub use kernel::{
    FdKind, KernelSample, KernelSource, KernelSourceError, KernelThreadStats, ReadyFd,
};
pub use kernel::{OffCpuTime, PollSyscallStats, SleepSyscallStats, Syscall, SyscallCalls, Waker};
pub use model::{
    CpuTimeSource, ProcessSample, SampleWarning, Snapshot, SystemInfo, TargetIdentity, ThreadSample,
};
pub mod interval;
pub mod sampler;

mod history;
mod platform;
pub mod sync;

pub use diagnose::{Evidence, Finding, FindingKind, Severity, Subject, Thresholds};
pub use history::BYTES_PER_STORED_THREAD_SAMPLE;
pub use interval::{
    Interval, KernelThreadInterval, LoopInterval, ProcessInterval, SleepInterval, SyscallRate,
    ThreadInterval,
};
pub use model::{LoopKind, LoopStats, SleepStats, Target};
pub use probe::{LoopProbe, SleepProbe, WaitGuard};
pub use sampler::{
    REPORT_SCHEMA_VERSION, Report, SampleWait, Sampler, SamplerBuilder, SamplerStats, SamplingGuard,
};

/// Monotonic time now, in nanoseconds (`CLOCK_MONOTONIC`; 0 if the clock
/// cannot be read): the clock [`Snapshot::monotonic_ns`] is stamped with,
/// and on Linux the clock of eBPF's `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    platform::clock::monotonic_ns()
}

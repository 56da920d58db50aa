//! # wakemeter-profile
//!
//! *Where in the code*: on-CPU, off-CPU and wakeup stacks of a process,
//! collected by wakemeter's eBPF programs ([`wakemeter_ebpf::StackSession`]),
//! symbolized with blazesym (ELF, DWARF, JIT perf maps, kernel symbols),
//! and written as folded stacks, an SVG flame graph (inferno) or pprof
//! protobuf. [`AutoProfiler`] captures a profile automatically when a
//! wakemeter finding fires or a CPU threshold is crossed, and keeps it
//! with the finding (module [`trigger`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use wakemeter_ebpf::{StackKind, Target};
//! use wakemeter_profile::{ProfileOptions, Profiler};
//!
//! let profiler = Profiler::new();
//! let profile = profiler.capture(
//!     Target::Pid(1234),
//!     &ProfileOptions::new(StackKind::OnCpu),      // 99 Hz cpu-clock samples
//!     Duration::from_secs(10),
//! )?;
//! println!("{:.0}% in spin_here", profile.inclusive_share("spin_here") * 100.0);
//! wakemeter_profile::write_svg(&profile, std::fs::File::create("cpu.svg")?)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Memory: a capture holds the kernel maps (by default about 8.8 MiB for
//! 8192 stacks and 1.2 MiB for 16,384 counts, fixed at attach), the unwind
//! table of the target's modules (16 bytes a row, at most 262,144 rows =
//! 4 MiB; built in user space at attach from `.eh_frame` and freed once
//! loaded) — no stack copies per event: user stacks are unwound in the
//! kernel — and, when
//! read, one [`StackSample`] per distinct (thread, cause, stack) — at most
//! the count map's capacity — with at most 254 frames each.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod capture;
mod error;
pub mod folded;
mod maps;
mod model;
pub mod pprof;
mod svg;
mod symbolize;
pub mod trigger;

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
pub use wakemeter_ebpf::Target;

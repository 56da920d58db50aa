//! The aggregated, symbolized stacks of one capture.

use std::time::Duration;

use serde::Serialize;

pub use wakemeter_ebpf::StackKind;
pub use wakemeter_ebpf::stacks::OffCpuCause;

/// One frame of a stack.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[non_exhaustive]
pub struct Frame {
    /// Instruction address (a return address for every frame but the
    /// innermost).
    pub address: u64,
    /// Function name (demangled), when a symbol was found: ELF symbols,
    /// DWARF, a JIT perf map (`/tmp/perf-<pid>.map`) or kernel symbols.
    pub function: Option<String>,
    /// The binary or library the address belongs to, when known
    /// (`[kernel]` for kernel frames).
    pub module: Option<String>,
    /// Offset of the address in `module` (file offset for user binaries),
    /// when known: with `module`, what a later symbolization needs.
    pub module_offset: Option<u64>,
    /// Source file and line of the address, when DWARF has them.
    pub source: Option<(String, u32)>,
    /// Whether this is a kernel frame.
    pub kernel: bool,
}

impl Frame {
    /// A frame with only its address.
    pub fn unresolved(address: u64, kernel: bool) -> Frame {
        Frame {
            address,
            function: None,
            module: None,
            module_offset: None,
            source: None,
            kernel,
        }
    }

    /// The frame as one name: the function, else `module+0xoffset`, else
    /// the address in hex. Kernel functions end in `_[k]`, as in
    /// `perf script` folded output.
    pub fn label(&self) -> String {
        let base = match (&self.function, &self.module, self.module_offset) {
            (Some(f), _, _) => f.clone(),
            (None, Some(m), Some(off)) => format!("{m}+{off:#x}"),
            (None, _, _) => format!("{:#x}", self.address),
        };
        if self.kernel {
            format!("{base}_[k]")
        } else {
            base
        }
    }
}

/// Why part of a stack is missing, shown as a frame in outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StackGap {
    /// The user stack was lost (stack map collision or full).
    UserLost,
    /// The kernel stack was lost.
    KernelLost,
}

/// One distinct stack of a thread with its counts.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct StackSample {
    /// Thread id in the target.
    pub tid: u32,
    /// Thread name (kernel `comm`).
    pub thread_name: String,
    /// Off-CPU profiles: why the thread left the CPU.
    #[serde(serialize_with = "cause_name")]
    pub cause: Option<OffCpuCause>,
    /// Wakeup profiles: the waker thread id (0 = interrupt context) and name.
    /// The frames are then the waker's.
    pub waker: Option<(u32, String)>,
    /// Frames, outermost (root) first: user frames, then kernel frames.
    pub frames: Vec<Frame>,
    /// Parts of the stack that are missing.
    pub gaps: Vec<StackGap>,
    /// On-CPU samples, off-CPU switches, or wakeups.
    pub count: u64,
    /// Off-CPU time of the finished spans, ns; 0 for other kinds.
    pub total_ns: u64,
}

fn cause_name<S: serde::Serializer>(c: &Option<OffCpuCause>, s: S) -> Result<S::Ok, S::Error> {
    match c {
        Some(c) => s.serialize_some(c.name()),
        None => s.serialize_none(),
    }
}

impl StackSample {
    /// Whether a frame's function name equals `function`.
    pub fn contains_function(&self, function: &str) -> bool {
        self.frames
            .iter()
            .any(|f| f.function.as_deref() == Some(function))
    }

    /// The weight of this stack in its profile: off-CPU time in ns for
    /// off-CPU profiles, the count otherwise.
    pub fn weight(&self, kind: StackKind) -> u64 {
        if kind == StackKind::OffCpu {
            self.total_ns
        } else {
            self.count
        }
    }
}

/// Something a reader of the profile must know: it is partial, or some
/// stacks are incomplete.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProfileWarning {
    /// The target exited during the capture: the profile covers only the
    /// time until then.
    TargetExited,
    /// Events or stacks were lost because a kernel map was full or had a
    /// collision (raise the map sizes).
    StacksLost {
        /// Events not counted at all.
        events: u64,
        /// Stacks missing from counted events.
        stacks: u64,
    },
    /// Stacks whose innermost user frame has no frame pointer and whose
    /// direct caller could not be read from the stack (a page not
    /// resident): they go from that frame to its caller's caller.
    CallersMissing {
        /// Events with such a stack.
        stacks: u64,
    },
    /// Most user stacks are one or two frames deep: the target was very
    /// likely built without frame pointers, so user stacks stop at the
    /// innermost function. Kernel stacks are complete.
    NoFramePointers {
        /// Share of samples whose user stack has at most two frames, 0-1.
        shallow_ratio: f64,
    },
    /// Symbols could not be read for the target (it exited before
    /// symbolization, or its maps were unreadable): frames are addresses.
    NotSymbolized {
        /// Why.
        reason: String,
    },
}

impl std::fmt::Display for ProfileWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProfileWarning::TargetExited => {
                write!(f, "partial: the target exited during the capture")
            }
            ProfileWarning::StacksLost { events, stacks } => write!(
                f,
                "{events} events and {stacks} stacks lost to full kernel maps or collisions"
            ),
            ProfileWarning::CallersMissing { stacks } => write!(
                f,
                "{stacks} stacks lack the direct caller of their innermost frame (no frame pointer there, and its return address could not be read)"
            ),
            ProfileWarning::NoFramePointers { shallow_ratio } => write!(
                f,
                "{:.0}% of user stacks have at most 2 frames: the target was probably built without frame pointers (-fno-omit-frame-pointer); kernel stacks are complete",
                shallow_ratio * 100.0
            ),
            ProfileWarning::NotSymbolized { reason } => {
                write!(f, "user frames left as addresses: {reason}")
            }
        }
    }
}

/// The aggregated stacks of one capture.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Profile {
    /// What was collected.
    #[serde(serialize_with = "kind_name")]
    pub kind: StackKind,
    /// The observed process id.
    pub pid: u32,
    /// Wall time of the capture.
    pub duration: Duration,
    /// On-CPU: samples per second per CPU; 0 otherwise.
    pub frequency_hz: u64,
    /// Wall-clock start of the capture, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// The stacks, heaviest first.
    pub samples: Vec<StackSample>,
    /// What makes this profile partial or incomplete.
    pub warnings: Vec<ProfileWarning>,
}

fn kind_name<S: serde::Serializer>(k: &StackKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(kind_label(*k))
}

/// `on_cpu`, `off_cpu` or `wakeups`.
pub fn kind_label(kind: StackKind) -> &'static str {
    match kind {
        StackKind::OnCpu => "on_cpu",
        StackKind::OffCpu => "off_cpu",
        _ => "wakeups",
    }
}

impl Profile {
    /// Sum of the weights of every stack (samples, or off-CPU ns).
    pub fn total_weight(&self) -> u64 {
        self.samples
            .iter()
            .fold(0u64, |a, s| a.saturating_add(s.weight(self.kind)))
    }

    /// Share (0-1) of the profile's weight in stacks containing `function`
    /// (inclusive: anywhere in the stack). 0 for an empty profile.
    pub fn inclusive_share(&self, function: &str) -> f64 {
        self.share_where(|s| s.contains_function(function))
    }

    /// Share (0-1) of the weight in stacks for which `pick` is true.
    pub fn share_where(&self, pick: impl Fn(&StackSample) -> bool) -> f64 {
        let total = self.total_weight();
        if total == 0 {
            return 0.0;
        }
        let picked = self
            .samples
            .iter()
            .filter(|s| pick(s))
            .fold(0u64, |a, s| a.saturating_add(s.weight(self.kind)));
        picked as f64 / total as f64
    }

    /// Whether the profile is partial (the target exited during it).
    pub fn is_partial(&self) -> bool {
        self.warnings.contains(&ProfileWarning::TargetExited)
    }

    /// The stacks of thread `tid`, heaviest first.
    pub fn thread(&self, tid: u32) -> impl Iterator<Item = &StackSample> {
        self.samples.iter().filter(move |s| s.tid == tid)
    }

    /// Bytes of memory the profile holds, counted from the capacities of
    /// its vectors and strings (the allocator's own overhead is not
    /// included). What the bound on kept captures
    /// ([`crate::AutoProfilerBuilder::with_max_kept_bytes`]) adds up.
    pub fn memory_bytes(&self) -> u64 {
        use std::mem::size_of;
        let string = |s: &String| s.capacity();
        let frame = |f: &Frame| {
            f.function.as_ref().map_or(0, string)
                + f.module.as_ref().map_or(0, string)
                + f.source.as_ref().map_or(0, |(file, _)| string(file))
        };
        let sample = |s: &StackSample| {
            size_of::<StackSample>()
                + string(&s.thread_name)
                + s.waker.as_ref().map_or(0, |(_, n)| string(n))
                + s.frames.capacity() * size_of::<Frame>()
                + s.frames.iter().map(frame).sum::<usize>()
                + s.gaps.capacity() * size_of::<StackGap>()
        };
        let warning = |w: &ProfileWarning| match w {
            ProfileWarning::NotSymbolized { reason } => string(reason),
            _ => 0,
        };
        let bytes = size_of::<Profile>()
            + (self.samples.capacity() - self.samples.len()) * size_of::<StackSample>()
            + self.samples.iter().map(sample).sum::<usize>()
            + self.warnings.capacity() * size_of::<ProfileWarning>()
            + self.warnings.iter().map(warning).sum::<usize>();
        u64::try_from(bytes).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn frame(name: &str, kernel: bool) -> Frame {
        let mut f = Frame::unresolved(0x1000, kernel);
        f.function = Some(name.to_owned());
        f
    }

    /// An off-CPU profile: 3 ms in write, 1 ms on a lock, one frame unknown.
    pub(crate) fn off_cpu_profile() -> Profile {
        let mut unknown = Frame::unresolved(0x5555, false);
        unknown.module = Some("/usr/bin/app".into());
        unknown.module_offset = Some(0x55);
        let sample = |frames: Vec<Frame>, cause, count, ns| StackSample {
            tid: 7,
            thread_name: "worker;1".into(),
            cause: Some(cause),
            waker: None,
            frames,
            gaps: Vec::new(),
            count,
            total_ns: ns,
        };
        Profile {
            kind: StackKind::OffCpu,
            pid: 42,
            duration: Duration::from_secs(1),
            frequency_hz: 0,
            start_unix_ns: 1,
            samples: vec![
                sample(
                    vec![
                        frame("main", false),
                        frame("log_request", false),
                        unknown,
                        frame("pipe_write", true),
                    ],
                    OffCpuCause::Other,
                    3,
                    3_000_000,
                ),
                sample(
                    vec![frame("main", false), frame("contended_path", false)],
                    OffCpuCause::Lock,
                    2,
                    1_000_000,
                ),
            ],
            warnings: vec![ProfileWarning::TargetExited],
        }
    }

    #[test]
    fn shares_and_labels() {
        let p = off_cpu_profile();
        assert_eq!(p.total_weight(), 4_000_000);
        assert!((p.inclusive_share("log_request") - 0.75).abs() < 1e-9);
        assert!((p.inclusive_share("main") - 1.0).abs() < 1e-9);
        assert_eq!(p.inclusive_share("absent"), 0.0);
        assert!(p.is_partial());
        let labels: Vec<String> = p.samples[0].frames.iter().map(Frame::label).collect();
        assert_eq!(
            labels,
            ["main", "log_request", "/usr/bin/app+0x55", "pipe_write_[k]"]
        );
        assert_eq!(Frame::unresolved(0xab, false).label(), "0xab");
    }

    #[test]
    fn memory_bytes_grow_with_the_stacks() {
        let p = off_cpu_profile();
        let one_frame = std::mem::size_of::<Frame>() as u64;
        let mut bigger = p.clone();
        bigger.samples[0].frames.reserve_exact(100);
        assert!(bigger.memory_bytes() >= p.memory_bytes() + 90 * one_frame);
        let mut empty = p.clone();
        empty.samples = Vec::new();
        assert!(empty.memory_bytes() < p.memory_bytes());
        assert!(empty.memory_bytes() >= std::mem::size_of::<Profile>() as u64);
    }
}

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

    /// The frame as one plain name: the function, else
    /// `module+0xoffset`, else the address in hex. Kernel frames are not
    /// marked (see [`Frame::kernel`] and [`Frame::label`]).
    pub fn name(&self) -> String {
        match (&self.function, &self.module, self.module_offset) {
            (Some(f), _, _) => f.clone(),
            (None, Some(m), Some(off)) => format!("{m}+{off:#x}"),
            (None, _, _) => format!("{:#x}", self.address),
        }
    }

    /// [`Frame::name`] as folded stacks show it: kernel functions end in
    /// `_[k]`, as in `perf script` folded output (flame graph tools color
    /// them by it).
    pub fn label(&self) -> String {
        if self.kernel {
            format!("{}_[k]", self.name())
        } else {
            self.name()
        }
    }
}

/// Why part of a stack is missing, shown as a frame in outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StackGap {
    /// The user stack was lost (the stack map was full).
    UserLost,
    /// The kernel stack was lost.
    KernelLost,
    /// The user stack was cut where a return address pointed outside every
    /// executable mapping of the target (a data word read as a frame
    /// pointer's neighbour, as frame-pointer walks do in code built without
    /// frame pointers): its outer frames are unknown and not shown.
    UserTruncated,
}

/// The path of the kernel's [`ModuleMapping`], as `perf` names it.
pub const KERNEL_MAPPING: &str = "[kernel.kallsyms]";

/// First address of the kernel's [`ModuleMapping`] (the x86_64 and aarch64
/// kernel half of the address space; its end is `u64::MAX`).
pub const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// An executable mapping of the target that frames of a profile fall in:
/// what a server needs to symbolize them later (pprof `Mapping`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ModuleMapping {
    /// First virtual address of the mapping.
    pub start: u64,
    /// One past its last virtual address.
    pub end: u64,
    /// File offset (bytes) that `start` maps.
    pub file_offset: u64,
    /// The file's path, or `[kernel.kallsyms]` for the kernel.
    pub path: String,
    /// The GNU build ID of the file (lowercase hex), when it has one and it
    /// could be read.
    pub build_id: Option<String>,
    /// Whether this is the kernel.
    pub kernel: bool,
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
    /// The capture was stopped early (SIGINT or SIGTERM to `wakemeter
    /// profile`): the profile covers the first `covered_seconds` of the
    /// `asked_seconds` asked for.
    Interrupted {
        /// Seconds of stacks the profile holds (wall time of the capture).
        covered_seconds: f64,
        /// Seconds the capture was asked to run.
        asked_seconds: f64,
    },
    /// Events or stacks were lost because a kernel map was full or had a
    /// collision (raise the map sizes).
    StacksLost {
        /// Events not counted at all.
        events: u64,
        /// Stacks missing from counted events.
        stacks: u64,
    },
    /// User stacks unwound from `.eh_frame` in the kernel whose unwinding
    /// stopped before the outermost frame (a stack page not resident, a
    /// frame with neither a rule nor a frame pointer, more than 127
    /// frames): they end in a `[truncated]` marker.
    UnwindTruncated {
        /// Events with such a stack.
        stacks: u64,
    },
    /// Most user stacks are one or two frames deep: the target was very
    /// likely built without frame pointers and could not be unwound from
    /// `.eh_frame` in the kernel (aarch64, where only the frame-pointer walk
    /// exists, or modules without `.eh_frame`), so user stacks stop at the
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
    /// The unwind table could not be rebuilt for modules the target mapped
    /// during the capture (`dlopen`, an exec): their frames were unwound by
    /// frame pointers or marked truncated from then on.
    ModulesNotRefreshed {
        /// Why (the first failure).
        reason: String,
    },
}

impl std::fmt::Display for ProfileWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProfileWarning::TargetExited => {
                write!(f, "partial: the target exited during the capture")
            }
            ProfileWarning::Interrupted {
                covered_seconds,
                asked_seconds,
            } => write!(
                f,
                "partial: interrupted, the profile covers {covered_seconds:.1} s of the {asked_seconds:.1} s asked for"
            ),
            ProfileWarning::StacksLost { events, stacks } => write!(
                f,
                "{events} events and {stacks} stacks lost to full kernel maps or collisions"
            ),
            ProfileWarning::UnwindTruncated { stacks } => write!(
                f,
                "{stacks} user stacks stop before their outermost frame (marked [truncated]): unwinding could not go on"
            ),
            ProfileWarning::NoFramePointers { shallow_ratio } => write!(
                f,
                "{:.0}% of user stacks have at most 2 frames: the target was probably built without frame pointers (-fno-omit-frame-pointer); kernel stacks are complete",
                shallow_ratio * 100.0
            ),
            ProfileWarning::NotSymbolized { reason } => {
                write!(f, "user frames left as addresses: {reason}")
            }
            ProfileWarning::ModulesNotRefreshed { reason } => write!(
                f,
                "modules mapped during the capture got no unwind rows ({reason}): their frames may be marked truncated"
            ),
        }
    }
}

/// One function's share of a profile ([`Profile::top_functions`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct FunctionShare {
    /// The plain name ([`Frame::name`]).
    pub function: String,
    /// Whether it is a kernel function.
    pub kernel: bool,
    /// Share (0-1) of the weight in stacks whose innermost frame it is.
    pub self_share: f64,
    /// Share (0-1) of the weight in stacks that hold it.
    pub total_share: f64,
}

/// One off-CPU cause's part of a profile ([`Profile::cause_split`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct CauseShare {
    /// Why the threads left the CPU.
    #[serde(serialize_with = "one_cause_name")]
    pub cause: OffCpuCause,
    /// Time off the CPU for it, ns (finished spans).
    pub total_ns: u64,
    /// Switches out for it.
    pub switches: u64,
    /// Share (0-1) of the profile's off-CPU time.
    pub share: f64,
}

fn one_cause_name<S: serde::Serializer>(c: &OffCpuCause, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.name())
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
    /// The mappings the frames fall in: the main executable first (when it
    /// has frames), then by address; the kernel last.
    pub mappings: Vec<ModuleMapping>,
    /// On-CPU: samples due (the CPU time of the process and of each thread
    /// during the capture × frequency) against
    /// samples written, per thread; `None` for other kinds.
    pub sampling: Option<crate::accounting::SampleAccounting>,
    /// User stacks that end before their outermost frame, by module and
    /// reason, most events first (see [`StackGap::UserTruncated`]).
    pub unwind_stops: Vec<crate::accounting::UnwindStopCount>,
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

    /// The functions with the largest share of the weight, by total
    /// (inclusive) share, at most `n`: [`FunctionShare::self_share`] counts
    /// stacks whose innermost frame is the function, `total_share` stacks
    /// that hold it anywhere (once per stack, however often it recurses).
    /// Functions are told apart by name and by kernel or user side.
    pub fn top_functions(&self, n: usize) -> Vec<FunctionShare> {
        let total = self.total_weight();
        if total == 0 || n == 0 {
            return Vec::new();
        }
        // (name, kernel) -> (self weight, total weight)
        let mut by_name: std::collections::HashMap<(String, bool), (u64, u64)> =
            std::collections::HashMap::new();
        let mut in_stack = std::collections::HashSet::new();
        for s in &self.samples {
            let w = s.weight(self.kind);
            in_stack.clear();
            for f in &s.frames {
                let key = (f.name(), f.kernel);
                if in_stack.insert(key.clone()) {
                    let e = by_name.entry(key).or_default();
                    e.1 = e.1.saturating_add(w);
                }
            }
            if let Some(leaf) = s.frames.last() {
                let e = by_name.entry((leaf.name(), leaf.kernel)).or_default();
                e.0 = e.0.saturating_add(w);
            }
        }
        let mut out: Vec<FunctionShare> = by_name
            .into_iter()
            .map(|((function, kernel), (own, all))| FunctionShare {
                function,
                kernel,
                self_share: own as f64 / total as f64,
                total_share: all as f64 / total as f64,
            })
            .collect();
        out.sort_by(|a, b| {
            b.total_share
                .total_cmp(&a.total_share)
                .then(b.self_share.total_cmp(&a.self_share))
                .then_with(|| a.function.cmp(&b.function))
        });
        out.truncate(n);
        out
    }

    /// Off-CPU profiles: the weight (ns off the CPU) and switch count per
    /// cause, heaviest first; empty for other kinds.
    pub fn cause_split(&self) -> Vec<CauseShare> {
        if self.kind != StackKind::OffCpu {
            return Vec::new();
        }
        let total = self.total_weight();
        let mut out: Vec<CauseShare> = Vec::new();
        for s in &self.samples {
            let Some(cause) = s.cause else { continue };
            let i = match out.iter().position(|c| c.cause == cause) {
                Some(i) => i,
                None => {
                    out.push(CauseShare {
                        cause,
                        total_ns: 0,
                        switches: 0,
                        share: 0.0,
                    });
                    out.len() - 1
                }
            };
            if let Some(c) = out.get_mut(i) {
                c.total_ns = c.total_ns.saturating_add(s.total_ns);
                c.switches = c.switches.saturating_add(s.count);
            }
        }
        for c in &mut out {
            c.share = if total == 0 {
                0.0
            } else {
                c.total_ns as f64 / total as f64
            };
        }
        out.sort_by(|a, b| {
            b.total_ns
                .cmp(&a.total_ns)
                .then(b.switches.cmp(&a.switches))
        });
        out
    }

    /// Whether the profile is partial: the target exited during it, or the
    /// capture was interrupted ([`Profile::mark_interrupted`]).
    pub fn is_partial(&self) -> bool {
        self.warnings.iter().any(|w| {
            matches!(
                w,
                ProfileWarning::TargetExited | ProfileWarning::Interrupted { .. }
            )
        })
    }

    /// Records that the capture was stopped before the `asked` length (a
    /// signal): adds [`ProfileWarning::Interrupted`] with the time covered
    /// ([`Profile::duration`]), so that every output says it is partial.
    pub fn mark_interrupted(&mut self, asked: Duration) {
        self.warnings.push(ProfileWarning::Interrupted {
            covered_seconds: self.duration.as_secs_f64(),
            asked_seconds: asked.as_secs_f64(),
        });
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
        let mapping = |m: &ModuleMapping| {
            size_of::<ModuleMapping>() + string(&m.path) + m.build_id.as_ref().map_or(0, string)
        };
        let warning = |w: &ProfileWarning| match w {
            ProfileWarning::NotSymbolized { reason } => string(reason),
            _ => 0,
        };
        let bytes = size_of::<Profile>()
            + (self.samples.capacity() - self.samples.len()) * size_of::<StackSample>()
            + self.samples.iter().map(sample).sum::<usize>()
            + self.warnings.capacity() * size_of::<ProfileWarning>()
            + self.warnings.iter().map(warning).sum::<usize>()
            + self.mappings.iter().map(mapping).sum::<usize>()
            + (self.mappings.capacity() - self.mappings.len()) * size_of::<ModuleMapping>();
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
            sampling: None,
            unwind_stops: Vec::new(),
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
            mappings: vec![
                ModuleMapping {
                    start: 0x5000,
                    end: 0x6000,
                    file_offset: 0,
                    path: "/usr/bin/app".into(),
                    build_id: Some("abcdef0123".into()),
                    kernel: false,
                },
                ModuleMapping {
                    start: KERNEL_START,
                    end: u64::MAX,
                    file_offset: 0,
                    path: KERNEL_MAPPING.into(),
                    build_id: None,
                    kernel: true,
                },
            ],
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
        let mut whole = off_cpu_profile();
        whole.warnings.clear();
        assert!(!whole.is_partial());
        whole.mark_interrupted(Duration::from_secs(30));
        assert!(whole.is_partial());
        assert!(
            whole.warnings[0]
                .to_string()
                .contains("covers 1.0 s of the 30.0 s asked for"),
            "{}",
            whole.warnings[0]
        );
        let labels: Vec<String> = p.samples[0].frames.iter().map(Frame::label).collect();
        assert_eq!(
            labels,
            ["main", "log_request", "/usr/bin/app+0x55", "pipe_write_[k]"]
        );
        assert_eq!(Frame::unresolved(0xab, false).label(), "0xab");
    }

    #[test]
    fn top_functions_by_self_and_total_share() {
        let mut p = off_cpu_profile();
        // main recurses in the second stack: counted once there.
        p.samples[1].frames.insert(1, frame("main", false));
        let top = p.top_functions(10);
        let get = |name: &str, kernel: bool| {
            top.iter()
                .find(|f| f.function == name && f.kernel == kernel)
                .unwrap_or_else(|| panic!("{name} in {top:?}"))
        };
        assert_eq!(top[0].function, "main");
        assert!((get("main", false).total_share - 1.0).abs() < 1e-9);
        assert_eq!(get("main", false).self_share, 0.0);
        assert!((get("pipe_write", true).self_share - 0.75).abs() < 1e-9);
        assert!((get("contended_path", false).self_share - 0.25).abs() < 1e-9);
        assert!((get("/usr/bin/app+0x55", false).total_share - 0.75).abs() < 1e-9);
        assert_eq!(top.len(), 5);
        assert_eq!(p.top_functions(2).len(), 2);
        let split = p.cause_split();
        assert_eq!(split.len(), 2);
        assert_eq!(split[0].cause, OffCpuCause::Other);
        assert_eq!((split[0].total_ns, split[0].switches), (3_000_000, 3));
        assert!((split[1].share - 0.25).abs() < 1e-9);
        let mut on_cpu = p.clone();
        on_cpu.kind = StackKind::OnCpu;
        assert!(on_cpu.cause_split().is_empty());
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

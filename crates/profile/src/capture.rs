//! One capture: attach the stack programs, wait, read, symbolize,
//! aggregate.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use wakemeter_ebpf::stacks::{MissingStack, StackCount, StackCounts};
use wakemeter_ebpf::{SamplingTimer, StackKind, StackSession, Target};

use crate::accounting::{self, CpuTimes, SampleAccounting, StopReason};
use crate::error::ProfileError;
use crate::maps;
use crate::model::{
    Frame, KERNEL_MAPPING, KERNEL_START, ModuleMapping, Profile, ProfileWarning, StackGap,
    StackSample,
};
use crate::symbolize::{self, ProcessView, Symbolizer};

/// Longest capture, 1 hour.
pub const MAX_CAPTURE: Duration = Duration::from_secs(3600);

/// How often a capture checks whether the target exited.
const POLL_EXIT: Duration = Duration::from_millis(100);

/// How often a capture looks for modules the target mapped since the last
/// look (see [`Capture::refresh_modules`]).
const MODULE_REFRESH: Duration = Duration::from_secs(1);

/// A user stack at most this deep counts as shallow (no frame pointers).
const SHALLOW_USER_FRAMES: usize = 2;

/// Share of the weight in shallow user stacks above which the profile
/// warns of missing frame pointers.
const SHALLOW_WARN_RATIO: f64 = 0.5;

/// What to capture.
#[derive(Debug, Clone)]
pub struct ProfileOptions {
    kind: StackKind,
    frequency_hz: u64,
    max_stacks: u32,
    max_entries: u32,
    thread: u32,
    timer: SamplingTimer,
    kernel_btf: Option<std::path::PathBuf>,
}

impl ProfileOptions {
    /// Defaults of [`wakemeter_ebpf::StackSessionBuilder`]: 99 Hz, 8192
    /// stacks (about 8.8 MiB of kernel memory), 16,384 counts.
    pub fn new(kind: StackKind) -> Self {
        ProfileOptions {
            kind,
            frequency_hz: wakemeter_ebpf::stacks::DEFAULT_FREQUENCY_HZ,
            max_stacks: wakemeter_ebpf::stacks::DEFAULT_MAX_STACKS,
            max_entries: wakemeter_ebpf::stacks::DEFAULT_MAX_ENTRIES,
            thread: 0,
            timer: SamplingTimer::PerCpu,
            kernel_btf: None,
        }
    }

    /// On-CPU sampling frequency, per second per CPU.
    pub fn with_frequency_hz(mut self, hz: u64) -> Self {
        self.frequency_hz = hz;
        self
    }

    /// The on-CPU timers: [`SamplingTimer::PerCpu`] (the default: no
    /// descriptor per thread taken from the host process) or
    /// [`SamplingTimer::PerThread`] (samples follow each thread's own time
    /// on a CPU; the CLI's default; see
    /// [`wakemeter_ebpf::StackSessionBuilder::with_timer`]; the profile's
    /// [`crate::TimerAccounting`] says which sampled, and why per thread
    /// fell back to per CPU).
    pub fn with_timer(mut self, timer: SamplingTimer) -> Self {
        self.timer = timer;
        self
    }

    /// The on-CPU timers asked for.
    pub fn timer(&self) -> SamplingTimer {
        self.timer
    }

    /// Capacity of the kernel stack map, in distinct stacks.
    pub fn with_max_stacks(mut self, n: u32) -> Self {
        self.max_stacks = n;
        self
    }

    /// Capacity of the kernel count map, in distinct entries.
    pub fn with_max_entries(mut self, n: u32) -> Self {
        self.max_entries = n;
        self
    }

    /// Sets what is captured.
    pub(crate) fn set_kind(&mut self, kind: StackKind) {
        self.kind = kind;
    }

    /// Captures one thread of the target only (its thread id; 0, the
    /// default: every thread). Filtered in the kernel (see
    /// [`wakemeter_ebpf::StackSessionBuilder::with_thread`]).
    pub fn with_thread(mut self, tid: u32) -> Self {
        self.thread = tid;
        self
    }

    /// Reads the kernel's BTF from the file `path` instead of
    /// `/sys/kernel/btf/vmlinux` (see
    /// [`wakemeter_ebpf::StackSessionBuilder::with_kernel_btf_path`]):
    /// meant for tests of a machine without BTF, where a capture fails with
    /// [`wakemeter_ebpf::EbpfError::NoKernelBtf`].
    pub fn with_kernel_btf_path(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.kernel_btf = Some(path.into());
        self
    }

    /// What is captured.
    pub fn kind(&self) -> StackKind {
        self.kind
    }

    /// The one thread captured, if any.
    pub fn thread(&self) -> Option<u32> {
        (self.thread != 0).then_some(self.thread)
    }
}

/// Captures profiles and symbolizes them, keeping blazesym's per-binary
/// caches from one capture to the next.
#[derive(Debug, Default)]
pub struct Profiler {
    symbolizer: Symbolizer,
}

/// A capture in progress; [`Capture::finish`] ends it.
#[derive(Debug)]
pub struct Capture {
    session: StackSession,
    started: Instant,
    start_unix_ns: u64,
    view: ProcessViewHolder,
    /// When the unwind table was last checked against the target's modules.
    modules_checked: Instant,
    /// The first failure to rebuild it, reported with the profile.
    refresh_error: Option<String>,
    /// On-CPU: the one thread captured, if any, and the CPU time of the
    /// target's threads at the start (see [`SampleAccounting`]).
    thread: Option<u32>,
    times_start: Option<CpuTimes>,
}

/// [`ProcessView`] is crate-private; this keeps `Capture`'s Debug simple.
struct ProcessViewHolder(ProcessView);

impl std::fmt::Debug for ProcessViewHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessView")
            .field("pid", &self.0.pid)
            .finish_non_exhaustive()
    }
}

impl Capture {
    /// Whether the target has exited (the capture then ends early).
    pub fn target_exited(&self) -> bool {
        self.session.target_exited()
    }

    /// Time since the capture started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Picks up modules the target mapped since the last call (`dlopen`,
    /// a new image after an exec), so that their frames are unwound from
    /// their `.eh_frame` too: at most once a second, however often it is
    /// called (see [`StackSession::refresh_modules`]). Call it from the
    /// loop that waits for the capture to end; [`Profiler::capture`] does.
    ///
    /// Returns whether the unwind table changed. A failure is kept and
    /// reported as [`ProfileWarning::ModulesNotRefreshed`] in the profile;
    /// the capture goes on.
    pub fn refresh_modules(&mut self) -> bool {
        if self.modules_checked.elapsed() < MODULE_REFRESH {
            return false;
        }
        self.modules_checked = Instant::now();
        match self.session.refresh_modules() {
            Ok(changed) => changed,
            Err(e) => {
                self.refresh_error.get_or_insert_with(|| e.to_string());
                false
            }
        }
    }

    /// Stops collecting, reads and symbolizes.
    ///
    /// # Errors
    /// [`ProfileError::Ebpf`] when the kernel maps cannot be read.
    pub fn finish(mut self, profiler: &Profiler) -> Result<Profile, ProfileError> {
        let duration = self.started.elapsed();
        // Read while sampling still runs: a sample is due for CPU time up to
        // here.
        let times = self
            .times_start
            .take()
            .map(|start| (start, CpuTimes::read(self.session.pid(), self.thread)));
        self.session.stop();
        let counts = self.session.read()?;
        let sampling = times.map(|(start, end)| {
            let written = |tid| -> u64 {
                counts
                    .entries
                    .iter()
                    .filter(|c| c.tid == tid)
                    .map(|c| c.count)
                    .sum()
            };
            let all: u64 = counts.entries.iter().map(|c| c.count).sum();
            SampleAccounting::new(
                counts.frequency_hz,
                &start,
                &end,
                written,
                all,
                counts.samples_taken,
                counts.lost.counts_full,
            )
            .with_timer(counts.frequency_hz, counts.timer)
        });
        profiler
            .symbolizer
            .refresh(&mut self.view.0, counts.target_exited);
        let mut profile = aggregate(
            &profiler.symbolizer,
            &self.view.0,
            counts,
            duration,
            self.start_unix_ns,
        );
        profile.sampling = sampling;
        if let Some(reason) = self.refresh_error.take() {
            profile
                .warnings
                .push(ProfileWarning::ModulesNotRefreshed { reason });
        }
        Ok(profile)
    }
}

impl Profiler {
    /// A profiler with a fresh symbolizer.
    pub fn new() -> Profiler {
        Profiler::default()
    }

    /// A profiler whose symbolizer also looks for separate debug files in
    /// `dirs` (each laid out as `/usr/lib/debug`: `.build-id/xx/yyyy.debug`),
    /// so that a stripped binary's frames get names from its debug file
    /// (see [`Symbolizer::with_debug_dirs`]).
    pub fn with_debug_dirs(dirs: &[std::path::PathBuf]) -> Profiler {
        Profiler {
            symbolizer: Symbolizer::with_debug_dirs(dirs),
        }
    }

    /// Starts collecting `options.kind()` stacks of `target`.
    ///
    /// # Errors
    /// [`ProfileError::Ebpf`]: no privilege, no kernel BTF, no such
    /// process, an option out of range, ...
    pub fn start(&self, target: Target, options: &ProfileOptions) -> Result<Capture, ProfileError> {
        let mut builder = StackSession::builder(target, options.kind)
            .with_frequency_hz(options.frequency_hz)
            .with_max_stacks(options.max_stacks)
            .with_max_entries(options.max_entries)
            .with_thread(options.thread)
            .with_timer(options.timer);
        if let Some(path) = &options.kernel_btf {
            builder = builder.with_kernel_btf_path(path);
        }
        let session = builder.attach()?;
        let thread = options.thread();
        let times_start =
            (options.kind == StackKind::OnCpu).then(|| CpuTimes::read(session.pid(), thread));
        let view = self.symbolizer.view(session.pid());
        let start_unix_ns = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        Ok(Capture {
            session,
            started: Instant::now(),
            start_unix_ns,
            view: ProcessViewHolder(view),
            modules_checked: Instant::now(),
            refresh_error: None,
            thread,
            times_start,
        })
    }

    /// Captures for `duration` (ending early if the target exits) and
    /// returns the symbolized stacks. Blocks the calling thread.
    ///
    /// # Errors
    /// [`ProfileError::DurationOutOfRange`] for 0 or more than
    /// [`MAX_CAPTURE`]; else as [`Profiler::start`] and [`Capture::finish`].
    pub fn capture(
        &self,
        target: Target,
        options: &ProfileOptions,
        duration: Duration,
    ) -> Result<Profile, ProfileError> {
        check_duration(duration)?;
        let mut capture = self.start(target, options)?;
        while capture.elapsed() < duration && !capture.target_exited() {
            std::thread::sleep(POLL_EXIT.min(duration.saturating_sub(capture.elapsed())));
            capture.refresh_modules();
        }
        capture.finish(self)
    }
}

/// Fails unless `0 < duration <= MAX_CAPTURE`.
pub(crate) fn check_duration(duration: Duration) -> Result<(), ProfileError> {
    if duration.is_zero() || duration > MAX_CAPTURE {
        return Err(ProfileError::DurationOutOfRange {
            seconds: duration.as_secs_f64(),
            max_seconds: MAX_CAPTURE.as_secs(),
        });
    }
    Ok(())
}

/// Symbolizes and aggregates the kernel's counts into a [`Profile`].
pub(crate) fn aggregate(
    symbolizer: &Symbolizer,
    view: &ProcessView,
    counts: StackCounts,
    duration: Duration,
    start_unix_ns: u64,
) -> Profile {
    let kind = counts.kind;
    let mut counts = counts;
    let mut unwind_stops = Vec::new();
    let truncated: Vec<bool> = counts
        .entries
        .iter_mut()
        .map(|c| match &mut c.user_stack {
            Ok(addrs) => {
                let marker = accounting::take_marker(addrs);
                let cut = cut_at_data(&view.maps, addrs);
                // A data word cuts the stack before the frame the walk
                // stopped at: that is where it went wrong.
                let reason = match (cut, marker) {
                    (true, _) => Some(StopReason::OutsideCode),
                    (false, Some(stop)) => Some(StopReason::Unwinder(stop)),
                    (false, None) => None,
                };
                if let Some(reason) = reason {
                    let module = stop_module(&view.maps, addrs);
                    accounting::add_stop(&mut unwind_stops, module, reason, c.count);
                }
                reason.is_some()
            }
            Err(_) => false,
        })
        .collect();
    unwind_stops.sort_by(|a, b| b.events.cmp(&a.events).then(a.reason.cmp(&b.reason)));
    // How deep the user stacks went, by weight.
    let (mut user_weight, mut shallow_weight) = (0u64, 0u64);
    for c in &counts.entries {
        if let Ok(frames) = &c.user_stack {
            let walked = frames.len();
            let weight = if kind == StackKind::OffCpu {
                c.total_ns
            } else {
                c.count
            };
            if !frames.is_empty() {
                user_weight = user_weight.saturating_add(weight);
                if walked <= SHALLOW_USER_FRAMES {
                    shallow_weight = shallow_weight.saturating_add(weight);
                }
            }
        }
    }
    let mut user_memo = HashMap::new();
    let mut kernel_memo = HashMap::new();
    let symbolized = counts.entries.into_iter().zip(truncated).map(|(c, cut)| {
        let mut s = sample(symbolizer, view, c, &mut user_memo, &mut kernel_memo);
        if cut {
            s.gaps.push(StackGap::UserTruncated);
        }
        s
    });
    let mut samples = merge_identical(symbolized);
    let mappings = module_mappings(view, &samples);
    samples.sort_by(|a, b| b.weight(kind).cmp(&a.weight(kind)).then(a.tid.cmp(&b.tid)));

    let mut warnings = Vec::new();
    if counts.target_exited {
        warnings.push(ProfileWarning::TargetExited);
        if let Some(reason) = &view.cache_error {
            warnings.push(ProfileWarning::NotSymbolized {
                reason: reason.clone(),
            });
        }
    }
    let lost = counts.lost;
    let events = lost.counts_full.saturating_add(lost.off_cpu_spans);
    let stacks = lost.stack_collisions.saturating_add(lost.stacks_full);
    if events > 0 || stacks > 0 {
        warnings.push(ProfileWarning::StacksLost { events, stacks });
    }
    if lost.truncated_unwinds > 0 {
        warnings.push(ProfileWarning::UnwindTruncated {
            stacks: lost.truncated_unwinds,
        });
    }
    let mut profile = Profile {
        kind,
        pid: counts.pid,
        duration,
        frequency_hz: counts.frequency_hz,
        start_unix_ns,
        samples,
        warnings,
        mappings,
        sampling: None,
        unwind_stops,
    };
    if kind != StackKind::Wakeups && user_weight > 0 {
        let shallow_ratio = shallow_weight as f64 / user_weight as f64;
        if shallow_ratio > SHALLOW_WARN_RATIO {
            profile
                .warnings
                .push(ProfileWarning::NoFramePointers { shallow_ratio });
        }
    }
    profile
}

/// Cuts a user stack (innermost first) at its first return address outside
/// every executable mapping in `maps`: such a word is data that a
/// frame-pointer walk read through a register that held no frame pointer
/// (code built without them), and every frame beyond it is made up. The
/// innermost address is the sampled instruction itself and is kept. Returns
/// whether the stack was cut. With no mappings known (they could not be
/// read) nothing can be told apart and the stack is kept.
fn cut_at_data(maps: &[maps::Mapping], addrs: &mut Vec<u64>) -> bool {
    if maps.is_empty() {
        return false;
    }
    let first_data = addrs
        .iter()
        .skip(1)
        .position(|a| maps::containing(maps, a.saturating_sub(1)).is_none());
    match first_data {
        Some(i) => {
            addrs.truncate(i + 1);
            true
        }
        None => false,
    }
}

/// The module of the outermost frame of a stack (innermost first) that
/// stopped early: a return address (looked up one byte earlier, at the
/// call) unless it is the only frame.
fn stop_module(maps: &[maps::Mapping], addrs: &[u64]) -> Option<String> {
    let last = *addrs.last()?;
    let at = if addrs.len() > 1 {
        last.saturating_sub(1)
    } else {
        last
    };
    maps::containing(maps, at).map(|m| m.path.clone())
}

/// The file mappings that user frames fall in, with their build IDs (the
/// main executable first), and the kernel's when there are kernel frames.
fn module_mappings(view: &ProcessView, samples: &[StackSample]) -> Vec<ModuleMapping> {
    let mut used: Vec<&maps::Mapping> = Vec::new();
    let mut kernel = false;
    for f in samples.iter().flat_map(|s| &s.frames) {
        if f.kernel {
            kernel = true;
        } else if let Some((m, _)) = maps::locate(&view.maps, f.address.saturating_sub(1))
            && !used.contains(&m)
        {
            used.push(m);
        }
    }
    let is_main = |m: &maps::Mapping| view.exe.as_deref() == Some(m.path.as_str());
    used.sort_by_key(|m| (!is_main(m), m.start));
    let mut ids: HashMap<&str, Option<String>> = HashMap::new();
    let mut out: Vec<ModuleMapping> = used
        .into_iter()
        .map(|m| ModuleMapping {
            start: m.start,
            end: m.end,
            file_offset: m.offset,
            path: m.path.clone(),
            build_id: ids
                .entry(m.path.as_str())
                .or_insert_with(|| symbolize::build_id(view, m))
                .clone(),
            kernel: false,
        })
        .collect();
    if kernel {
        out.push(ModuleMapping {
            start: KERNEL_START,
            end: u64::MAX,
            file_offset: 0,
            path: KERNEL_MAPPING.to_owned(),
            build_id: symbolize::kernel_build_id(),
            kernel: true,
        });
    }
    out
}

/// Innermost kernel frames that belong to the tracing machinery, not to
/// the traced code: the BPF program, `bpf_trace_run*` and the tracepoint's
/// `__traceiter_*`, which a stack taken in a scheduler tracepoint starts with.
const TRACING_FRAME_PREFIXES: [&str; 2] = ["__traceiter_", "bpf_trace_run"];
/// They are within this many innermost frames.
const TRACING_FRAMES_MAX: usize = 5;

/// Drops the tracing frames (see [`TRACING_FRAME_PREFIXES`]) and everything
/// inside them from a kernel stack, innermost first.
fn strip_tracing_frames(kernel: &mut Vec<Frame>) {
    let last = kernel.iter().take(TRACING_FRAMES_MAX).rposition(|f| {
        f.function
            .as_deref()
            .is_some_and(|n| TRACING_FRAME_PREFIXES.iter().any(|p| n.starts_with(p)))
    });
    if let Some(i) = last {
        kernel.drain(..=i);
    }
}

/// Adds up samples that read the same once symbolized: the same thread,
/// cause, waker and frame names (e.g. two leaf addresses in one function
/// that have separate stack ids in the kernel). The first keeps its
/// addresses.
fn merge_identical(samples: impl Iterator<Item = StackSample>) -> Vec<StackSample> {
    let mut index: HashMap<Vec<String>, usize> = HashMap::new();
    let mut out: Vec<StackSample> = Vec::new();
    for s in samples {
        let mut key = crate::folded::folded_frames(&s);
        key.push(s.tid.to_string());
        match index.get(&key).and_then(|i| out.get_mut(*i)) {
            Some(kept) => {
                kept.count = kept.count.saturating_add(s.count);
                kept.total_ns = kept.total_ns.saturating_add(s.total_ns);
            }
            None => {
                index.insert(key, out.len());
                out.push(s);
            }
        }
    }
    out
}

fn sample(
    symbolizer: &Symbolizer,
    view: &ProcessView,
    c: StackCount,
    user_memo: &mut HashMap<u64, Frame>,
    kernel_memo: &mut HashMap<u64, Frame>,
) -> StackSample {
    let mut gaps = Vec::new();
    let mut frames = Vec::new();
    // Root first: the user stack (outermost first), then the kernel stack.
    match &c.user_stack {
        Ok(addrs) => {
            let mut user = symbolizer.user_frames(view, addrs, user_memo);
            user.reverse();
            frames.extend(user);
        }
        Err(MissingStack::Lost | MissingStack::Evicted) => gaps.push(StackGap::UserLost),
        Err(_) => {}
    }
    match &c.kernel_stack {
        Ok(addrs) => {
            let mut kernel = symbolizer.kernel_frames(addrs, kernel_memo);
            strip_tracing_frames(&mut kernel);
            kernel.reverse();
            frames.extend(kernel);
        }
        Err(MissingStack::Lost | MissingStack::Evicted) => gaps.push(StackGap::KernelLost),
        Err(_) => {}
    }
    StackSample {
        tid: c.tid,
        thread_name: c.thread_name,
        cause: c.cause,
        waker: c.waker,
        frames,
        gaps,
        count: c.count,
        total_ns: c.total_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_return_address_outside_code_ends_the_stack() {
        let maps = maps::parse(
            "555500001000-555500002000 r-xp 00001000 08:01 1 /usr/bin/app\n\
             7f0000000000-7f0000100000 r-xp 00028000 08:01 2 /usr/lib/libc.so.6\n",
        );
        // Innermost first: leaf in libc, a caller in app, then the
        // `tv_nsec` of a sleep and the bytes of a buffer read as frames.
        let mut addrs = vec![
            0x7f0000000010,
            0x555500001100,
            0x4c4b40,
            0x6161616161616161,
            0x555500001200,
        ];
        assert!(cut_at_data(&maps, &mut addrs));
        assert_eq!(addrs, [0x7f0000000010, 0x555500001100]);
        // A return address just past the end of a mapping (a call as its
        // last instruction) is code; one at its start is not.
        let mut edge = vec![0x7f0000000010, 0x555500002000];
        assert!(!cut_at_data(&maps, &mut edge));
        let mut start = vec![0x7f0000000010, 0x555500001000];
        assert!(cut_at_data(&maps, &mut start));
        assert_eq!(start.len(), 1);
        // The sampled instruction itself is kept wherever it is.
        let mut leaf_only = vec![0x1234];
        assert!(!cut_at_data(&maps, &mut leaf_only));
        let mut whole = vec![0x7f0000000010, 0x555500001100, 0x555500001200];
        assert!(!cut_at_data(&maps, &mut whole));
        assert_eq!(whole.len(), 3);
        // Unknown mappings: nothing is cut.
        let mut unknown = vec![1, 2, 3];
        assert!(!cut_at_data(&[], &mut unknown));
        assert_eq!(unknown.len(), 3);
    }

    #[test]
    fn tracing_frames_are_stripped() {
        let named = |n: &str| {
            let mut f = Frame::unresolved(1, true);
            f.function = Some(n.to_owned());
            f
        };
        let mut k = vec![
            Frame::unresolved(9, true),
            named("bpf_trace_run4"),
            named("__traceiter_sched_switch"),
            named("__schedule"),
            named("schedule"),
        ];
        strip_tracing_frames(&mut k);
        let names: Vec<_> = k.iter().map(Frame::label).collect();
        assert_eq!(names, ["__schedule_[k]", "schedule_[k]"]);
        let mut untouched = vec![named("do_nanosleep"), named("schedule")];
        strip_tracing_frames(&mut untouched);
        assert_eq!(untouched.len(), 2);
    }
}

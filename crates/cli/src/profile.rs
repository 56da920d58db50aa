//! `wakemeter profile --pid P --on-cpu|--off-cpu|--wakeups`: where in the
//! code a process burns CPU, waits, or is woken from.

use std::error::Error;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;
use wakemeter_outfile::{Options as OutOptions, OutFile, Publish};

use wakemeter_profile::{
    Profile, ProfileOptions, ProfileWarning, Profiler, SamplingTimer, StackKind, Target,
};

use crate::{print, signals, target};

/// Stacks printed when no output file is asked for.
const TOP_STACKS: usize = 10;
/// Functions printed in the summary above the stacks.
const TOP_FUNCTIONS: usize = 15;
/// User-space frames printed per stack, innermost first.
const TOP_FRAMES: usize = 8;
/// Kernel frames printed per stack before "… N more kernel frames": an
/// off-CPU stack has 7–10 of them, which would otherwise leave no room for
/// the user's own code.
const KERNEL_FRAMES: usize = 3;

/// How often a capture checks whether its target exited or a signal asked
/// it to stop (it then ends early).
const EXIT_CHECK: Duration = signals::STOP_POLL;

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct Options {
    /// The process (or one of its threads).
    pub pid: u32,
    /// Which stacks.
    pub kind: StackKind,
    /// Capture length.
    pub seconds: Duration,
    /// On-CPU samples per second per CPU.
    pub frequency_hz: u64,
    /// Capacity of the kernel stack map (`--max-stacks`).
    pub max_stacks: u32,
    /// On-CPU timers (`--timer`).
    pub timer: SamplingTimer,
    /// Output files.
    pub svg: Option<PathBuf>,
    /// Folded stacks file (`-` for stdout).
    pub folded: Option<PathBuf>,
    /// pprof file (gzip protobuf).
    pub pprof: Option<PathBuf>,
    /// Directories searched first for separate debug files.
    pub debug_dirs: Vec<PathBuf>,
}

pub fn run(o: &Options) -> Result<ExitCode, Box<dyn Error>> {
    if o.seconds.is_zero() || o.seconds > wakemeter_profile::MAX_CAPTURE {
        return Err(format!(
            "--seconds must be more than 0 and at most {}",
            wakemeter_profile::MAX_CAPTURE.as_secs()
        )
        .into());
    }
    let resolved = target::resolve(o.pid)?;
    // SIGINT/SIGTERM end the capture early and the profile is still read
    // and written; a second one exits at once (reading a big profile and
    // symbolizing it can take seconds).
    let stop = signals::stop_then_exit_on_signals()?;
    if o.timer == SamplingTimer::PerThread {
        raise_open_file_limit();
    }
    let options = ProfileOptions::new(o.kind)
        .with_frequency_hz(o.frequency_hz)
        .with_max_stacks(o.max_stacks)
        .with_timer(o.timer);
    let profiler = Profiler::with_debug_dirs(&o.debug_dirs);
    // Attach first: without privilege (or BTF) this fails, and nothing has
    // been announced that will not happen.
    let mut capture = profiler.start(Target::Pid(resolved.pid), &options)?;
    print::note(&format!(
        "wakemeter: profiling {} of process {} ({}) for {} s",
        wakemeter_profile::kind_label(o.kind).replace('_', "-"),
        resolved.pid,
        resolved.name,
        o.seconds.as_secs_f64()
    ));
    let stopped = || stop.load(Ordering::Relaxed);
    while capture.elapsed() < o.seconds && !capture.target_exited() && !stopped() {
        std::thread::sleep(EXIT_CHECK.min(o.seconds.saturating_sub(capture.elapsed())));
        capture.refresh_modules();
    }
    let interrupted = stopped() && capture.elapsed() < o.seconds;
    if interrupted {
        print::note(
            "wakemeter: interrupted: stopping the capture and writing what it holds (again to quit at once)",
        );
    }
    let mut profile = capture.finish(&profiler)?;
    if interrupted {
        profile.mark_interrupted(o.seconds);
    }
    for w in &profile.warnings {
        print::note(&format!("wakemeter: {w}"));
        if let ProfileWarning::StacksLost { stacks, .. } = w
            && *stacks > 0
        {
            print::note(&format!(
                "wakemeter: the stack map held {} stacks: --max-stacks makes room for more",
                o.max_stacks
            ));
        }
    }
    let mut wrote = false;
    if let Some(path) = &o.svg {
        write_to(path, |f| wakemeter_profile::write_svg(&profile, f))?;
        wrote = true;
    }
    if let Some(path) = &o.folded {
        write_to(path, |f| wakemeter_profile::write_folded(&profile, f))?;
        wrote = true;
    }
    if let Some(path) = &o.pprof {
        write_to(path, |f| wakemeter_profile::write_pprof(&profile, f))?;
        wrote = true;
    }
    if !wrote || o.folded.as_deref() != Some(Path::new("-")) {
        summary(&mut io::stdout().lock(), &profile)?;
    }
    // Interrupted by the user: a success when something was captured (as
    // `record` and `watch`); a target that exited under it is a failure.
    let exited = profile.warnings.contains(&ProfileWarning::TargetExited);
    Ok(if exited || (interrupted && profile.samples.is_empty()) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Writes one output to `path` (`-`: stdout).
fn write_to(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> Result<(), wakemeter_profile::ProfileError>,
) -> Result<(), Box<dyn Error>> {
    if path == Path::new("-") {
        write(&mut io::stdout().lock())?;
    } else {
        // The one safe way: a new file renamed over the name once whole.
        let file = OutFile::create(path, OutOptions::new(Publish::AtFinish))
            .map_err(|e| print::safe(&e.to_string()).into_owned())?;
        let mut out = BufWriter::new(file);
        write(&mut out)?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.finish()
            .map_err(|e| print::safe(&e.to_string()).into_owned())?;
        print::note(&format!(
            "wakemeter: wrote {}",
            print::safe(&path.to_string_lossy())
        ));
    }
    Ok(())
}

/// The off-CPU split by cause, the top functions by total and self share,
/// then the heaviest stacks, innermost frames first.
fn summary(out: &mut impl Write, p: &Profile) -> io::Result<()> {
    let total = p.total_weight().max(1) as f64;
    let unit = wakemeter_profile::folded::value_unit(p.kind);
    let sum = p.samples.iter().fold(0u64, |a, s| {
        a.saturating_add(wakemeter_profile::folded::folded_value(p.kind, s))
    });
    // A partial profile says so first: the shares below cover less than
    // the window asked for.
    for w in p.warnings.iter().filter(|w| {
        matches!(
            w,
            ProfileWarning::TargetExited | ProfileWarning::Interrupted { .. }
        )
    }) {
        writeln!(out, "{w}")?;
    }
    writeln!(
        out,
        "{} distinct stacks, {sum} {unit} in all",
        p.samples.len()
    )?;
    sampling(out, p)?;
    let causes = p.cause_split();
    if !causes.is_empty() {
        writeln!(out, "off-CPU time by cause:")?;
        for c in &causes {
            writeln!(
                out,
                "{:5.1}%  {:<12} {:.3} s in {} switches",
                c.share * 100.0,
                c.cause.name(),
                c.total_ns as f64 / 1e9,
                c.switches
            )?;
        }
    }
    let top = p.top_functions(TOP_FUNCTIONS);
    if !top.is_empty() {
        writeln!(out, "top functions:   total    self")?;
        for f in &top {
            let side = if f.kernel { " [kernel]" } else { "" };
            writeln!(
                out,
                "               {:5.1}%  {:5.1}%  {}{side}",
                f.total_share * 100.0,
                f.self_share * 100.0,
                print::safe(&f.function)
            )?;
        }
    }
    writeln!(out, "top stacks:")?;
    for s in p.samples.iter().take(TOP_STACKS) {
        let share = s.weight(p.kind) as f64 / total * 100.0;
        let what = match (&s.cause, &s.waker) {
            (Some(c), _) => format!(" off-cpu: {}", c.name()),
            (_, Some((tid, name))) => format!(" woken by {} ({tid})", print::safe(name)),
            _ => String::new(),
        };
        writeln!(
            out,
            "{share:5.1}%  {} ({}){what}, count {}",
            print::safe(&s.thread_name),
            s.tid,
            s.count
        )?;
        for line in shown_frames(&s.frames) {
            writeln!(out, "         {line}")?;
        }
    }
    Ok(())
}

/// Threads listed under the samples-kept line.
const TOP_THREADS: usize = 8;
/// Unwinding stops listed, by module and reason.
const TOP_STOPS: usize = 8;

/// On-CPU: samples kept against samples due, in all and for the busiest
/// threads, and where the rest went; then why user stacks end early.
fn sampling(out: &mut impl Write, p: &Profile) -> io::Result<()> {
    if let Some(a) = &p.sampling {
        let ratio = a
            .kept_ratio
            .map_or_else(|| "-".to_owned(), |r| format!("{r:.3}"));
        writeln!(
            out,
            "samples kept: {} of {:.1} due ({:.3} s CPU at {} Hz, ratio {ratio}); {} taken by the kernel program, {} lost to a full count map, {:.1} never delivered",
            a.written,
            a.due,
            a.cpu_ns as f64 / 1e9,
            p.frequency_hz,
            a.taken,
            a.lost_counts_full,
            a.not_delivered
        )?;
        if let Some(t) = &a.timer {
            let ratio = t
                .kept_ratio
                .map_or_else(|| "-".to_owned(), |r| format!("{r:.3}"));
            writeln!(
                out,
                "  on a CPU (switch-in to switch-out): {:.3} s, {:.1} due, ratio {ratio}; timer periods skipped: {}; sampling program: {:.1} ms",
                t.on_cpu_ns as f64 / 1e9,
                t.due,
                t.skipped_periods,
                t.program_ns as f64 / 1e6
            )?;
            if let Some(line) = charged_before_switch_in(a.cpu_ns, t.on_cpu_ns, p.frequency_hz) {
                writeln!(out, "  {line}")?;
            }
            writeln!(out, "  {}", timer_line(t))?;
        }
        if a.threads_exited > 0 {
            writeln!(
                out,
                "  {} threads exited during the capture (in the figures above, not below)",
                a.threads_exited
            )?;
        }
        for t in a.threads.iter().take(TOP_THREADS) {
            let r = t
                .kept_ratio()
                .map_or_else(|| "-".to_owned(), |r| format!("{r:.3}"));
            writeln!(
                out,
                "  {:>8} {:<16} {:>8.3} s CPU  {:>7.1} due  {:>6} kept  {r}",
                t.tid,
                print::safe(&t.name),
                t.cpu_ns as f64 / 1e9,
                t.due,
                t.written
            )?;
        }
    }
    if !p.unwind_stops.is_empty() {
        writeln!(out, "user stacks ending early (events, reason, module):")?;
        for s in p.unwind_stops.iter().take(TOP_STOPS) {
            writeln!(
                out,
                "  {:>6}  {:<26} {}",
                s.events,
                s.reason.name(),
                print::safe(s.module.as_deref().unwrap_or("[no file mapping]"))
            )?;
        }
    }
    Ok(())
}

/// The line on the scheduler's CPU time beyond the time on a CPU (both ns)
/// of an on-CPU profile at `frequency_hz`, when it is more than 1% of the
/// CPU time (less is the two clocks' windows, not worth a line).
fn charged_before_switch_in(cpu_ns: u64, on_cpu_ns: u64, frequency_hz: u64) -> Option<String> {
    let more = cpu_ns.saturating_sub(on_cpu_ns);
    (more > cpu_ns / 100).then(|| {
        format!(
            "the scheduler's CPU time is {:.3} s more ({:.1} due): it charges a woken thread from its wakeup, not its switch-in, when the wakeup preempts what runs (an idle CPU too)",
            more as f64 / 1e9,
            more as f64 * frequency_hz as f64 / 1e9
        )
    })
}

/// The stack map's default capacity: the samples one CPU takes in the
/// capture, between [`MIN_DEFAULT_STACKS`] and [`MAX_DEFAULT_STACKS`]. A
/// map of 8,192 lost 2,870 stacks of squid (a C++ proxy) at 999 Hz over
/// 20 s; one of 32,768 lost none (ACCURACY.md).
pub fn default_max_stacks(frequency_hz: u64, seconds: Duration) -> u32 {
    let samples = (frequency_hz as f64 * seconds.as_secs_f64()).ceil();
    samples.clamp(f64::from(MIN_DEFAULT_STACKS), f64::from(MAX_DEFAULT_STACKS)) as u32
}

/// The smallest default stack map: the library's default, 8.8 MiB of
/// kernel memory.
const MIN_DEFAULT_STACKS: u32 = wakemeter_profile::DEFAULT_MAX_STACKS;
/// The largest default stack map, about 35 MiB of kernel memory; more
/// is `--max-stacks`.
const MAX_DEFAULT_STACKS: u32 = 32_768;

/// Raises this process's soft open-file limit to its hard limit, as `perf
/// record` does: per-thread timers take one descriptor per thread of the
/// target, and fall back to per CPU beyond half the soft limit (1,024 by
/// default, where the hard limit is often 500 to 1,000 times that). Left as
/// it was when the limit cannot be read or raised.
pub(crate) fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we own, and setrlimit reads it.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// Which timers sampled, and the other mode: per CPU samples where the
/// time goes but a bursty thread unevenly; per thread keeps CPU time ×
/// frequency but takes more samples on the switch-in path (ACCURACY.md).
fn timer_line(t: &wakemeter_profile::TimerAccounting) -> String {
    match (t.sampling_timer, &t.fallback) {
        ("thread", _) => format!(
            "timer: per thread ({} opened at attach, inherited by new threads; samples follow each thread's own CPU time, a few more as a thread is switched back in; periods skipped are of each thread's own timer)",
            t.thread_events
        ),
        (_, Some(f)) => format!(
            "timer: per CPU, not per thread as asked: {} threads, more than the budget of {} descriptors (half the open-file limit)",
            f.threads, f.fd_budget
        ),
        _ => "timer: per CPU, as asked (a bursty thread's samples can stray from its CPU time; --timer thread, the default, follows each thread's own CPU time)".to_owned(),
    }
}

/// The lines of one stack (`frames` outermost first), innermost first: at
/// most [`KERNEL_FRAMES`] kernel frames and a count of the rest, then at
/// most [`TOP_FRAMES`] user frames, so that the call site in the user's
/// code is shown under a deep kernel stack.
fn shown_frames(frames: &[wakemeter_profile::Frame]) -> Vec<String> {
    let kernel = frames.iter().filter(|f| f.kernel).count();
    let mut lines: Vec<String> = frames
        .iter()
        .rev()
        .filter(|f| f.kernel)
        .take(KERNEL_FRAMES)
        .map(|f| print::safe(&f.label()).into_owned())
        .collect();
    if kernel > KERNEL_FRAMES {
        lines.push(format!("… {} more kernel frames", kernel - KERNEL_FRAMES));
    }
    lines.extend(
        frames
            .iter()
            .rev()
            .filter(|f| !f.kernel)
            .take(TOP_FRAMES)
            .map(|f| print::safe(&f.label()).into_owned()),
    );
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use wakemeter_profile::Frame;

    fn frame(name: &str, kernel: bool) -> Frame {
        let mut f = Frame::unresolved(1, kernel);
        f.function = Some(name.to_string());
        f
    }

    #[test]
    fn the_time_charged_before_switch_in_is_said_past_one_percent() {
        // redis at 99 Hz: 9.269 s of CPU time, 8.298 s on a CPU.
        let line = charged_before_switch_in(9_269_000_000, 8_298_000_000, 99).unwrap();
        assert!(
            line.starts_with("the scheduler's CPU time is 0.971 s more (96.1 due):"),
            "{line}"
        );
        assert_eq!(
            charged_before_switch_in(1_000_000_000, 990_000_000, 99),
            None
        );
        assert!(charged_before_switch_in(1_000_000_000, 989_000_000, 99).is_some());
        // More time on a CPU than charged (the windows differ): nothing.
        assert_eq!(
            charged_before_switch_in(1_000_000_000, 1_100_000_000, 99),
            None
        );
        assert_eq!(charged_before_switch_in(0, 0, 99), None);
    }

    #[test]
    fn the_stack_map_is_sized_to_one_cpus_samples_within_bounds() {
        let s = Duration::from_secs;
        assert_eq!(default_max_stacks(99, s(10)), 8192);
        assert_eq!(default_max_stacks(999, s(20)), 19_980);
        assert_eq!(
            default_max_stacks(999, Duration::from_millis(20_500)),
            20_480
        );
        assert_eq!(default_max_stacks(999, s(600)), 32_768);
        assert_eq!(default_max_stacks(u64::MAX, s(1)), 32_768);
    }

    #[test]
    fn a_deep_kernel_stack_leaves_room_for_the_user_call_site() {
        // Outermost first, as a profile keeps them.
        let mut frames = vec![
            frame("main", false),
            frame("aeProcessEvents", false),
            frame("epoll_wait", false),
        ];
        for k in [
            "entry_SYSCALL_64",
            "do_syscall_64",
            "do_epoll_wait",
            "schedule",
            "__schedule",
        ] {
            frames.push(frame(k, true));
        }
        let lines = shown_frames(&frames);
        assert_eq!(lines.len(), 3 + 1 + 3, "{lines:?}");
        assert!(lines[0].starts_with("__schedule"), "{lines:?}");
        assert_eq!(lines[3], "… 2 more kernel frames");
        assert!(lines[4].starts_with("epoll_wait"), "{lines:?}");
        assert!(lines[5].starts_with("aeProcessEvents"), "{lines:?}");
        // User frames only: at most TOP_FRAMES of them, innermost first.
        let user: Vec<Frame> = (0..20).map(|i| frame(&format!("f{i}"), false)).collect();
        let lines = shown_frames(&user);
        assert_eq!(lines.len(), TOP_FRAMES);
        assert!(lines[0].starts_with("f19"), "{lines:?}");
    }
}

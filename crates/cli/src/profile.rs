//! `wakemeter profile --pid P --on-cpu|--off-cpu|--wakeups`: where in the
//! code a process burns CPU, waits, or is woken from.

use std::error::Error;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use wakemeter_profile::{Profile, ProfileOptions, Profiler, StackKind, Target};

use crate::{print, target};

/// Stacks printed when no output file is asked for.
const TOP_STACKS: usize = 10;
/// Innermost frames printed per stack.
const TOP_FRAMES: usize = 8;

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct Options {
    /// The process (or one of its threads).
    pub pid: u32,
    /// Which stacks.
    pub kind: StackKind,
    /// Capture length, s.
    pub seconds: f64,
    /// On-CPU samples per second per CPU.
    pub frequency_hz: u64,
    /// Output files.
    pub svg: Option<PathBuf>,
    /// Folded stacks file (`-` for stdout).
    pub folded: Option<PathBuf>,
    /// pprof file (gzip protobuf).
    pub pprof: Option<PathBuf>,
}

pub fn run(o: &Options) -> Result<ExitCode, Box<dyn Error>> {
    if !(o.seconds > 0.0 && o.seconds <= wakemeter_profile::MAX_CAPTURE.as_secs_f64()) {
        return Err(format!(
            "--seconds must be more than 0 and at most {}",
            wakemeter_profile::MAX_CAPTURE.as_secs()
        )
        .into());
    }
    let resolved = target::resolve(o.pid)?;
    let options = ProfileOptions::new(o.kind).with_frequency_hz(o.frequency_hz);
    let profiler = Profiler::new();
    print::note(&format!(
        "wakemeter: profiling {} of process {} ({}) for {} s",
        wakemeter_profile::kind_label(o.kind).replace('_', "-"),
        resolved.pid,
        resolved.name,
        o.seconds
    ));
    let profile = profiler.capture(
        Target::Pid(resolved.pid),
        &options,
        Duration::from_secs_f64(o.seconds),
    )?;
    for w in &profile.warnings {
        print::note(&format!("wakemeter: {w}"));
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
    Ok(if profile.is_partial() {
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
        let file = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut out = BufWriter::new(file);
        write(&mut out)?;
        out.flush()?;
        print::note(&format!("wakemeter: wrote {}", path.display()));
    }
    Ok(())
}

/// The heaviest stacks, innermost frames first.
fn summary(out: &mut impl Write, p: &Profile) -> io::Result<()> {
    let total = p.total_weight().max(1) as f64;
    let unit = wakemeter_profile::folded::value_unit(p.kind);
    let sum = p.samples.iter().fold(0u64, |a, s| {
        a.saturating_add(wakemeter_profile::folded::folded_value(p.kind, s))
    });
    writeln!(
        out,
        "{} distinct stacks, {sum} {unit} in all",
        p.samples.len()
    )?;
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
        for f in s.frames.iter().rev().take(TOP_FRAMES) {
            writeln!(out, "         {}", print::safe(&f.label()))?;
        }
    }
    Ok(())
}

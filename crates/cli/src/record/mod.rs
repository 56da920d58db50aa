//! `wakemeter record`: the processes of a control or a variant, for
//! `wakemeter diff` (`crate::diff`).
//!
//! A recording is NDJSON: a [`RecordingHeader`] per process (written with
//! its first interval), one [`IntervalSummary`] per sampling period of
//! each process, tagged with its PID (so that the processes' lines can
//! interleave as they are taken), and an end record ([`RecordingEnd`]).
//! Each line is written whole, with one `write`, when its interval is
//! taken: a recording killed mid-way holds every interval taken before,
//! and `diff` reads it, saying that it is partial. SIGINT and SIGTERM end
//! a recording cleanly, with its end record.
//!
//! Where it is written ([`Output`], the project's one way to write a file:
//! `wakemeter_outfile`): a new file created beside the name in its
//! directory (`O_EXCL|O_NOFOLLOW`; a directory other users can change is
//! refused) and renamed over the name at the end, so a file of that name
//! is either the previous one or a recording with everything taken; a
//! device or FIFO the name itself is (never through a link), or standard
//! output (`-`, `/dev/stdout`), is written to directly; anything else is
//! refused. A `SIGKILL` leaves `NAME.partial-PID` with every whole line.
//!
//! Files: `output.rs` (the file), `section.rs` (one process),
//! `recorder.rs` (the processes of one output, the end record).

pub mod output;
mod recorder;
mod section;

use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub use output::Output;
pub use recorder::{EndReason, Recorder};
pub use section::{Section, prepare_all};

use crate::print;
use crate::selection::{LeftOut, Selection};
use crate::signals::stop_on_signals;

/// What `record` was asked for.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// The processes: `--pid` (repeatable), `--name`, `--cgroup`.
    pub selection: Selection,
    /// How long to record, counted from the moment every selected process
    /// is measured (after the eBPF attach).
    pub duration: Duration,
    /// Sampling period (`--period`).
    pub period: Duration,
    pub output: PathBuf,
    pub kernel: crate::kernel::Choice,
    /// `--perfetto FILE`: the recorded processes in one trace too.
    pub perfetto: crate::perfetto::PerfettoArgs,
    /// Exit 0 even when some selected processes could not be recorded
    /// (`--allow-partial`).
    pub allow_partial: bool,
}

/// Longest `record --seconds`: one day.
pub const MAX_RECORD: Duration = Duration::from_secs(86_400);

pub fn record(o: &RecordOptions) -> Result<ExitCode, Box<dyn Error>> {
    if o.duration.is_zero() || o.duration > MAX_RECORD {
        return Err(format!(
            "--seconds must be more than 0 and at most {} (one day)",
            MAX_RECORD.as_secs()
        )
        .into());
    }
    if !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&o.period) {
        return Err("--period must be between 0.01 and 60 seconds".into());
    }
    let sel = &o.selection;
    // Every bad input is found here, before any file is created.
    sel.check()?;
    // Signals first: a wait for a FIFO's reader ends on Ctrl-C.
    let stop = stop_on_signals()?;
    let out = Output::open(&o.output, Some(&stop))?;
    let trace = match o.perfetto.create(Some(&stop)) {
        Ok(t) => t,
        Err(e) => {
            out.abandon();
            return Err(e.into());
        }
    };
    let follows = sel.name.is_some() || sel.cgroup.is_some();
    let many = follows || sel.pids.len() > 1;
    let mut last_dropped: Vec<u32> = Vec::new();
    let mut left_out = LeftOut::default();
    let first = sel.resolve_capped("recording", &mut last_dropped)?;
    let sections = prepare_all(first, o.period, o.kernel, |_| None, &mut left_out, &stop);
    let mut rec = Recorder::start_traced(out, sections, trace);
    // The window opens when every selected process is measured.
    let deadline = Instant::now()
        .checked_add(o.duration)
        .ok_or("--seconds is too large")?;
    // Looks at the samplers twice an interval (within 5 ms to 100 ms: the
    // stop flag is looked at as often).
    let step = (o.period / 2).clamp(Duration::from_millis(5), crate::signals::STOP_POLL);
    let resolve_every = o.period.max(Duration::from_secs(1));
    let mut next_resolve = Instant::now() + resolve_every;
    let reason = loop {
        if stop.load(Ordering::Relaxed) {
            break EndReason::Interrupted;
        }
        let now = Instant::now();
        if now >= deadline {
            break EndReason::Deadline;
        }
        if follows && now >= next_resolve {
            next_resolve = now + resolve_every;
            let kept = sel.resolve_capped("recording", &mut last_dropped)?;
            let new: Vec<u32> = kept.into_iter().filter(|p| !rec.has(*p)).collect();
            for s in prepare_all(new, o.period, o.kernel, |_| None, &mut left_out, &stop) {
                if many {
                    print::note(&format!("wakemeter: recording {}", s.label()));
                }
                rec.add(s);
            }
        }
        let (ok, ended) = rec.poll();
        if many {
            for e in ended {
                print::note(&format!("wakemeter: {e} exited"));
            }
        }
        if !ok {
            break EndReason::Deadline;
        }
        // Only a name or a cgroup can come back; fixed PIDs that are all
        // gone end the recording.
        if rec.is_empty() && !follows {
            break EndReason::Exited;
        }
        std::thread::sleep(step.min(deadline.saturating_duration_since(Instant::now())));
    };
    let mut trace = rec.perfetto.take();
    let finished = rec.finish(reason, None);
    // Said on every way out, the recording's failure included.
    let trace_ok = trace.as_mut().is_none_or(crate::perfetto::Trace::summary);
    let (kept, target) = finished?;
    let kept: Vec<&Section> = kept.iter().filter(|s| s.written > 0).collect();
    let written: u64 = kept.iter().map(|s| s.written).sum();
    let what = match &kept[..] {
        [one] => one.label(),
        many => format!(
            "{} processes ({})",
            many.len(),
            many.iter()
                .map(|s| format!("{} {}", s.target.pid, print::safe(&s.target.name)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let why = match reason {
        EndReason::Interrupted => " (interrupted: ended by a signal, with what was taken)",
        EndReason::Exited if kept.len() == 1 => " (the process exited before --seconds)",
        EndReason::Exited => " (the processes exited before --seconds)",
        _ => "",
    };
    print::note(&format!(
        "wakemeter: recorded {written} intervals of {what} to {}{why}",
        print::safe(&target.to_string_lossy())
    ));
    if !left_out.accept_missing("recorded", "recording", o.allow_partial) {
        return Ok(ExitCode::FAILURE);
    }
    if !trace_ok {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

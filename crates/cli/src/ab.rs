//! `wakemeter ab`: a whole control-vs-variant experiment in one command.
//!
//! For each run and side (sides alternate: control first in odd runs,
//! variant first in even ones, so a slow drift of the machine does not
//! favour one side), it optionally starts the side's command (`sh -c`, in
//! a process group of its own), waits until the selected processes are
//! there and stable, attaches to them (progress on stderr), then runs the
//! load command and records the processes for exactly as long as the load
//! runs. The load tool's output goes into the recording
//! ([`LoadRecord`]), with requests per second and latency percentiles
//! parsed from `wrk`, `hey`, `redis-benchmark` and `ab`. The side's
//! command is then stopped (SIGTERM to its group, SIGKILL after
//! [`SIDE_GRACE`]). A load that outlives `--load-timeout` gets SIGTERM,
//! then SIGKILL after [`LOAD_GRACE`], sampled all the while. Each run is
//! a normal recording (`DIR/control-1.ndjson`, …) that `diff` reads; at
//! the end the comparison is printed, tested over runs when there are two
//! or more per side.
//!
//! SIGINT and SIGTERM stop `ab` in every phase within a second: every
//! wait (for the selected processes, for the load, for a child to go)
//! looks at the flag at least every 100 ms, and once it is set the
//! children get SIGTERM, then SIGKILL after [`INTERRUPT_GRACE`].
//!
//! `DIR` (`--dir`, default `wakemeter-ab`) is made with `mkdir`, or taken
//! only when it exists, belongs to the caller and nobody else can write
//! to it; every file in it is created through that one directory
//! descriptor (`wakemeter_outfile`), never through a link.

use std::collections::BTreeSet;
use std::error::Error;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use wakemeter::compare::{Experiment, IdentityRule, LoadRecord, Side};
use wakemeter_outfile::{Dir, Options as OutOptions, Publish};

use crate::record::{self, EndReason, Output, Recorder};
use crate::selection::{LeftOut, MAX_PROCESSES_LIMIT, Selection};
use crate::{kernel, loadgen, print};

/// What `ab` was asked for.
#[derive(Debug, Clone)]
pub struct Options {
    pub selection: Selection,
    /// Starts the control's processes (optional).
    pub control: Option<String>,
    /// Starts the variant's processes (optional).
    pub variant: Option<String>,
    /// The load of the control side.
    pub control_load: String,
    /// The load of the variant side.
    pub variant_load: String,
    pub runs: u32,
    /// Sampling period (`--period`).
    pub period: Duration,
    /// How long the selected processes must stay the same before a run.
    pub settle: Duration,
    /// Longest wait for the selected processes.
    pub ready_timeout: Duration,
    /// Longest a load command may run.
    pub load_timeout: Duration,
    pub dir: PathBuf,
    pub json: bool,
    pub rule: IdentityRule,
    pub kernel: kernel::Choice,
}

/// Most runs per side.
pub const MAX_RUNS: u32 = 100;

/// How long a side's command has to exit after SIGTERM at the end of its
/// run, before SIGKILL.
pub const SIDE_GRACE: Duration = Duration::from_secs(10);
/// How long a load that outlived `--load-timeout` has to exit after
/// SIGTERM, before SIGKILL.
pub const LOAD_GRACE: Duration = Duration::from_secs(2);
/// How long any child has to exit after SIGTERM once `ab` itself was
/// interrupted (SIGINT, SIGTERM), before SIGKILL: `ab` ends within a
/// second of the signal.
pub const INTERRUPT_GRACE: Duration = Duration::from_millis(500);
/// Longest sleep of any wait: the stop flag is looked at this often.
const POLL: Duration = crate::signals::STOP_POLL;

/// Signals process group `pgid`.
fn signal_group(pgid: i32, sig: libc::c_int) -> bool {
    // SAFETY: kill(2) with a negative pid signals the process group we
    // created for a child (`process_group(0)`); no memory is involved.
    unsafe { libc::kill(-pgid, sig) == 0 }
}

/// SIGTERM to `child`'s process group, then SIGKILL once `grace` has
/// passed (or [`INTERRUPT_GRACE`] after `stop` is set); `meanwhile` runs
/// every few milliseconds up to [`POLL`] (sampling goes on). Reaps the
/// child; returns its status.
fn terminate(
    child: &mut Child,
    grace: Duration,
    stop: &AtomicBool,
    mut meanwhile: impl FnMut(),
    step: Duration,
) -> Option<std::process::ExitStatus> {
    let Ok(pgid) = i32::try_from(child.id()) else {
        return child.wait().ok();
    };
    signal_group(pgid, libc::SIGTERM);
    let began = Instant::now();
    let mut status = None;
    loop {
        if status.is_none() {
            status = child.try_wait().ok().flatten();
        }
        // The group may outlive its leader (a daemon's workers).
        if status.is_some() && !signal_group(pgid, 0) {
            return status;
        }
        let limit = if stop.load(Ordering::Relaxed) {
            grace.min(INTERRUPT_GRACE)
        } else {
            grace
        };
        if began.elapsed() >= limit {
            break;
        }
        meanwhile();
        std::thread::sleep(step.min(POLL));
    }
    signal_group(pgid, libc::SIGKILL);
    match status {
        Some(s) => Some(s),
        None => child.wait().ok(),
    }
}

/// A side's command, stopped (its whole process group) on drop.
struct Started {
    child: Child,
    stop: std::sync::Arc<AtomicBool>,
    /// Stopped and reaped: its group id may name another group now.
    stopped: bool,
}

impl Started {
    fn spawn(
        cmd: &str,
        dir: &Dir,
        log: &str,
        stop: std::sync::Arc<AtomicBool>,
    ) -> Result<Started, String> {
        let out = dir
            .create(log.as_ref(), OutOptions::new(Publish::Now))
            .map_err(|e| print::safe(&e.to_string()).into_owned())?
            .file()
            .try_clone()
            .map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new("sh")
            .args(["-c", cmd])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start `{cmd}`: {e}"))?;
        Ok(Started {
            child,
            stop,
            stopped: false,
        })
    }

    /// SIGTERM to the group, then SIGKILL after [`SIDE_GRACE`] (or
    /// [`INTERRUPT_GRACE`] once interrupted); reaps the child.
    fn stop(&mut self) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        let stop = self.stop.clone();
        terminate(&mut self.child, SIDE_GRACE, &stop, || {}, POLL);
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Waits until the selection names at least one process and has not
/// changed for `settle`; returns those processes.
fn wait_ready(
    o: &Options,
    started: &mut Option<Started>,
    stop: &AtomicBool,
) -> Result<BTreeSet<u32>, String> {
    let until = Instant::now()
        .checked_add(o.ready_timeout)
        .ok_or("--ready-timeout is too large")?;
    let mut last: Option<(BTreeSet<u32>, Instant)> = None;
    let mut dropped = Vec::new();
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(format!(
                "interrupted while waiting for {}",
                o.selection.describe()
            ));
        }
        let now = Instant::now();
        let pids = o.selection.resolve_capped("recording", &mut dropped)?;
        match &last {
            Some((prev, since)) if *prev == pids && !pids.is_empty() => {
                if now.duration_since(*since) >= o.settle {
                    return Ok(pids);
                }
            }
            _ => last = Some((pids, now)),
        }
        if let Some(s) = started
            && let Ok(Some(status)) = s.child.try_wait()
            && last.as_ref().is_some_and(|(p, _)| p.is_empty())
        {
            return Err(format!(
                "the side's command exited ({status}) before any of {} ran",
                o.selection.describe()
            ));
        }
        if now >= until {
            return Err(format!(
                "{} not there (or still changing) after {:.0} s (--ready-timeout)",
                o.selection.describe(),
                o.ready_timeout.as_secs_f64()
            ));
        }
        std::thread::sleep(POLL);
    }
}

/// The end of the load's output (its summary is at the end), at most
/// twice what a [`LoadRecord`] keeps; bytes that are not UTF-8 replaced.
fn tail_of(mut f: File) -> io::Result<String> {
    f.seek(SeekFrom::Start(0))?;
    let keep = wakemeter::compare::MAX_LOAD_OUTPUT as u64 * 2;
    let len = f.metadata()?.len();
    if len > keep {
        f.seek(SeekFrom::Start(len - keep))?;
    }
    let mut raw = Vec::new();
    f.take(keep).read_to_end(&mut raw)?;
    Ok(String::from_utf8_lossy(&raw).into_owned())
}

/// One run of one side: its recording's path.
fn run_side(
    o: &Options,
    dir: &Dir,
    side: Side,
    run: u32,
    stop: &std::sync::Arc<AtomicBool>,
) -> Result<PathBuf, Box<dyn Error>> {
    let (name, cmd, load) = match side {
        Side::Control => ("control", &o.control, &o.control_load),
        Side::Variant => ("variant", &o.variant, &o.variant_load),
    };
    print::note(&format!("wakemeter: {name}, run {run} of {}", o.runs));
    let mut started = match cmd {
        Some(c) => Some(Started::spawn(
            c,
            dir,
            &format!("{name}-{run}.cmd.log"),
            stop.clone(),
        )?),
        None => None,
    };
    let pids = wait_ready(o, &mut started, stop)?;
    let mut left_out = LeftOut::default();
    let sections = record::prepare_all(pids, o.period, o.kernel, |_| None, &mut left_out, stop);
    let file_name = format!("{name}-{run}.ndjson");
    let path = o.dir.join(&file_name);
    let out = Output::open_in(dir, &file_name)?;
    let log_name = format!("{name}-{run}.load.txt");
    let log = dir
        .create(log_name.as_ref(), OutOptions::new(Publish::Now))
        .map_err(|e| print::safe(&e.to_string()).into_owned())?
        .file()
        .try_clone()?;
    let mut rec = Recorder::start(out, sections);
    let began = Instant::now();
    let mut child = Command::new("sh")
        .args(["-c", load])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start the load `{load}`: {e}"))?;
    let deadline = began
        .checked_add(o.load_timeout)
        .ok_or("--load-timeout is too large")?;
    let step = (o.period / 2).clamp(Duration::from_millis(5), crate::signals::STOP_POLL);
    let mut dropped = Vec::new();
    let mut next_resolve = began + Duration::from_secs(1);
    let (status, reason) = loop {
        if let Some(st) = child.try_wait()? {
            break (Some(st), EndReason::LoadDone);
        }
        if stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
            // SIGTERM, SIGKILL after the grace; the processes are
            // sampled while the load goes.
            let st = terminate(
                &mut child,
                LOAD_GRACE,
                stop,
                || {
                    let _ = rec.poll();
                },
                step,
            );
            let why = if stop.load(Ordering::Relaxed) {
                EndReason::Interrupted
            } else {
                EndReason::Deadline
            };
            break (st, why);
        }
        if Instant::now() >= next_resolve {
            next_resolve += Duration::from_secs(1);
            let now = o.selection.resolve_capped("recording", &mut dropped)?;
            let new: Vec<u32> = now.into_iter().filter(|p| !rec.has(*p)).collect();
            for s in record::prepare_all(new, o.period, o.kernel, |_| None, &mut left_out, stop) {
                rec.add(s);
            }
        }
        let (ok, _) = rec.poll();
        if !ok {
            break (None, EndReason::Deadline);
        }
        std::thread::sleep(step);
    };
    let took = began.elapsed();
    let output = tail_of(
        dir.open_read(log_name.as_ref())
            .map_err(|e| print::safe(&e.to_string()).into_owned())?,
    )?;
    let parsed = loadgen::parse(&output);
    let mut l = LoadRecord::new(
        load.clone(),
        status.and_then(|s| s.code()),
        u64::try_from(took.as_nanos()).unwrap_or(u64::MAX),
        output,
    );
    l.tool = parsed.tool.map(str::to_string);
    l.requests = parsed.requests;
    l.requests_per_sec = parsed.requests_per_sec;
    l.latency_p50_ns = parsed.p50_ns;
    l.latency_p95_ns = parsed.p95_ns;
    l.latency_p99_ns = parsed.p99_ns;
    let summary = format!(
        "wakemeter: {name} run {run}: load ran {:.1} s{}{}",
        took.as_secs_f64(),
        match l.exit_code {
            Some(0) => String::new(),
            Some(c) => format!(", exit status {c}"),
            None => ", ended by a signal".to_string(),
        },
        match (l.tool.as_deref(), l.requests_per_sec) {
            (Some(t), Some(r)) => format!(", {t}: {r:.0} requests/s"),
            (Some(t), None) => format!(", {t}: no requests/s found in its output"),
            _ => ", unknown tool (its output is kept)".to_string(),
        }
    );
    rec.finish(reason, Some(l))?;
    print::note(&summary);
    if let Some(mut s) = started.take() {
        s.stop();
    }
    if reason == EndReason::Interrupted {
        return Err(format!(
            "interrupted; the recordings so far are in {}",
            o.dir.display()
        )
        .into());
    }
    Ok(path)
}

pub fn run(o: &Options) -> Result<ExitCode, Box<dyn Error>> {
    if !(1..=MAX_RUNS).contains(&o.runs) {
        return Err(format!("--runs must be between 1 and {MAX_RUNS}").into());
    }
    if !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&o.period) {
        return Err("--period must be between 0.01 and 60 seconds".into());
    }
    if !(1..=MAX_PROCESSES_LIMIT).contains(&o.selection.max_processes) {
        return Err(format!(
            "--max-processes must be between 1 and {}",
            MAX_PROCESSES_LIMIT
        )
        .into());
    }
    if o.selection.pids.is_empty() && o.selection.name.is_none() && o.selection.cgroup.is_none() {
        return Err("give the processes to record: --name, --pid or --cgroup".into());
    }
    let dir = Dir::create_own(&o.dir).map_err(|e| print::safe(&e.to_string()).into_owned())?;
    let stop = crate::signals::stop_on_signals()?;
    let mut files: Vec<(Side, PathBuf)> = Vec::new();
    for run in 1..=o.runs {
        let order = if run % 2 == 1 {
            [Side::Control, Side::Variant]
        } else {
            [Side::Variant, Side::Control]
        };
        for side in order {
            files.push((side, run_side(o, &dir, side, run, &stop)?));
        }
    }
    let mut exp = Experiment::new(o.rule);
    for (side, path) in &files {
        crate::diff::read_run(&mut exp, *side, path)?;
    }
    let cmp = exp.compare();
    let mut out = io::stdout().lock();
    if o.json {
        writeln!(out, "{}", print::json(&cmp)?)?;
    } else {
        writeln!(
            out,
            "recordings in {}",
            print::safe(&o.dir.to_string_lossy())
        )?;
        crate::diff::table(&mut out, &cmp)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

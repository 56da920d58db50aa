//! `wakemeter watch --pid`: the sidecar use.
//!
//! Reports come every `--every` seconds and once more at the `--seconds`
//! deadline. The watcher has no clock of its own between reports: it wakes
//! when the sampler stores a snapshot (`wait_for_sample`, every
//! [`SAMPLE_EVERY`]) and then checks that the target still exists, so it
//! stops at the deadline and within about a sampling interval of the
//! target's exit, whatever `--every` is. When the target has gone, sampling
//! is stopped first and one final report is printed (its `stats.running` is
//! false), then "target exited" on stderr.

use std::error::Error;
use std::io::{self, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use wakemeter::{Report, SampleWait, Target};

use crate::session::{self, End, SAMPLE_EVERY};
use crate::{kernel, metrics, print};

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct Options {
    /// The process (or one of its threads) to watch.
    pub pid: u32,
    /// Seconds between reports.
    pub every: u64,
    /// Stop after this many seconds.
    pub seconds: Option<u64>,
    /// One JSON line per report instead of tables.
    pub json: bool,
    /// Which kernel view to try to attach.
    pub kernel: kernel::Choice,
    /// Capture profiles when findings fire (`--profile-dir`).
    pub profile: Option<crate::autoprofile::Options>,
    /// Serve metrics on this address (`--listen`).
    pub listen: Option<String>,
    /// Allow a non-loopback `--listen` address.
    pub allow_non_loopback: bool,
}

pub fn run(o: &Options) -> Result<ExitCode, Box<dyn Error>> {
    if !(1..=3600).contains(&o.every) {
        return Err("--every must be between 1 and 3600 seconds".into());
    }
    if o.seconds == Some(0) {
        return Err("--seconds must be at least 1".into());
    }
    let target = session::resolve(o.pid)?;
    let pid = target.pid;
    // Bound before anything is measured or printed: a bad or busy
    // address is one clear error, with nothing half-started.
    let endpoint = match &o.listen {
        Some(addr) => Some(metrics::serve(addr, o.allow_non_loopback, None)?),
        None => None,
    };
    let kernel = match kernel::attach(Target::Pid(pid), o.kernel) {
        Ok(src) => Some(src),
        // Profiles need what the kernel source needs: say so now, not at
        // the first finding.
        Err(why) if o.kernel.ebpf && o.profile.is_some() => {
            return Err(format!("--profile-dir needs eBPF, which did not attach: {why}").into());
        }
        Err(why) => {
            print::note(&format!("eBPF: not attached ({why}); /proc sampling only"));
            None
        }
    };
    let sampler = session::sampler(pid, Duration::from_secs(o.every), kernel)?;
    let guard = sampler.start()?;
    let mut auto = crate::autoprofile::start(&sampler, o.profile.as_ref())?;
    let _updates = match &endpoint {
        Some(e) => Some(e.follow(&sampler)?),
        None => None,
    };
    let mut out = io::stdout().lock();
    let every = Duration::from_secs(o.every);
    let start = Instant::now();
    let deadline = o.seconds.map(|s| start + Duration::from_secs(s));
    let mut next = start + every;
    let mut measured = false;
    let mut reported_error: Option<String> = None;
    let mut last = None;
    let end = loop {
        let now = Instant::now();
        if now >= next || deadline.is_some_and(|d| now >= d) {
            measured |= write_report(&mut out, &sampler.report(), o.json, auto.as_ref())?;
            if deadline.is_some_and(|d| now >= d) {
                break End::Deadline;
            }
            while next <= now {
                next += every;
            }
        }
        // Wake on the next stored snapshot, or at the deadline if sooner.
        let until_deadline = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now));
        // A timeout or a stopped run: `check` below says what happened.
        if let SampleWait::Stored { seq } =
            sampler.wait_for_sample(last, until_deadline.min(2 * SAMPLE_EVERY))
        {
            last = Some(seq);
        }
        if let Some(a) = &mut auto {
            a.note_new();
        }
        if let Some(end) = session::check(&sampler, pid, &mut reported_error, |e| {
            print::note(&format!("wakemeter: sampling: {e}"));
        }) {
            break end;
        }
    };
    // Stop sampling before the final report, so that it says so.
    drop(guard);
    match end {
        End::Deadline => Ok(ExitCode::SUCCESS),
        End::TargetGone(how) => {
            measured |= write_report(&mut out, &sampler.report(), o.json, auto.as_ref())?;
            print::note(&format!(
                "wakemeter: target exited: process {pid} ({}) {}",
                target.name,
                session::how_gone(how)
            ));
            if measured {
                Ok(ExitCode::SUCCESS)
            } else {
                print::note("wakemeter: it exited before anything could be measured");
                Ok(ExitCode::FAILURE)
            }
        }
        End::SamplerStopped(why) => {
            print::note(&format!("wakemeter: sampling stopped: {why}"));
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Writes one report, with the profile captured for each finding when
/// there is one; returns whether it had a measured interval.
fn write_report(
    out: &mut impl Write,
    report: &Report,
    json: bool,
    auto: Option<&crate::autoprofile::Watcher>,
) -> io::Result<bool> {
    if json {
        let line = print::json(report).map_err(io::Error::other)?;
        writeln!(out, "{line}")?;
    } else if let Some(i) = &report.interval {
        print::threads(out, i)?;
        print::thread_groups(out, &report.thread_groups, report.threads_folded)?;
        print::kernel(out, i)?;
        print::findings_with(out, &report.findings, |f| auto.and_then(|a| a.path_for(f)))?;
        print::warnings(out, &report.warnings)?;
    }
    out.flush()?;
    Ok(report.interval.is_some())
}

//! `wakemeter watch --pid`: the sidecar use.
//!
//! Reports come every `--every` seconds and once more at the `--seconds`
//! deadline. The watcher has no clock of its own: it wakes when the
//! sampler stores a snapshot (`wait_for_sample`, every [`SAMPLE_EVERY`]),
//! reports on every `--every`th snapshot and on the deadline's, and then
//! checks that the target still exists, so it stops at the deadline and
//! within about a sampling period of the target's exit, whatever
//! `--every` is. When the target has gone, sampling
//! is stopped first and one final report is printed (its `stats.running` is
//! false), then "target exited" on stderr.

use std::error::Error;
use std::io::{self, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use wakemeter::{Report, SampleWait, Target};

use crate::print::Printed;
use crate::session::{self, End, SAMPLE_EVERY};
use crate::target::{self, Liveness};
use crate::{kernel, metrics, print};

/// A step of starting failed (eBPF attach, the sampler's first look at
/// the target): when the target has exited meanwhile, that is what
/// happened, and the exit status is the documented 1 ("the process exited
/// before a first measurement"), not the 2 of a bad argument.
pub(crate) fn exited_while_starting(
    pid: u32,
    name: &str,
    e: Box<dyn Error>,
) -> Result<ExitCode, Box<dyn Error>> {
    match target::liveness(pid) {
        Liveness::Alive => Err(e),
        how => {
            print::note(&format!(
                "wakemeter: target exited: process {pid} ({}) {} while wakemeter was starting",
                print::safe(name),
                session::how_gone(how)
            ));
            print::note("wakemeter: it exited before anything could be measured");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct Options {
    /// The process (or one of its threads) to watch.
    pub pid: u32,
    /// Seconds between reports.
    pub every: u64,
    /// Threads each report lists one by one (`--report-threads`).
    pub report_threads: u32,
    /// Stop after this long (at most [`crate::duration::MAX`]).
    pub seconds: Option<Duration>,
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
    /// `--perfetto FILE`.
    pub perfetto: crate::perfetto::PerfettoArgs,
}

pub fn run(o: &Options) -> Result<ExitCode, Box<dyn Error>> {
    if !(1..=3600).contains(&o.every) {
        return Err("--every must be between 1 and 3600 seconds".into());
    }
    if o.seconds.is_some_and(|s| s.is_zero()) {
        return Err("--seconds must be more than 0".into());
    }
    let target = session::resolve(o.pid)?;
    let pid = target.pid;
    // Bound before anything is measured or printed: a bad or busy
    // address is one clear error, with nothing half-started.
    let endpoint = match &o.listen {
        Some(addr) => Some(metrics::serve(addr, o.allow_non_loopback, None)?),
        None => None,
    };
    // Created before anything is sampled, like the endpoint; with a
    // trace, Ctrl-C ends the watch normally so the file is finished.
    // (Signals first: a wait for a FIFO's reader ends on Ctrl-C.)
    let interrupted = match &o.perfetto.perfetto {
        Some(_) => Some(crate::signals::stop_on_signals()?),
        None => None,
    };
    let mut trace = o.perfetto.create(interrupted.as_deref())?;
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
    // One target: no attach follows but a profile's, which needs the BTF.
    if o.profile.is_none() {
        kernel::attached_all();
    }
    let started = session::sampler(pid, Duration::from_secs(o.every), o.report_threads, kernel)
        .map_err(Box::<dyn Error>::from)
        .and_then(|s| {
            let traced = match &trace {
                Some(t) => Some(t.file.add(&s)?),
                None => None,
            };
            let guard = s.start()?;
            Ok((s, traced, guard))
        });
    let (sampler, mut traced, guard) = match started {
        Ok(started) => started,
        Err(e) => return exited_while_starting(pid, &target.name, e),
    };
    let mut auto = crate::autoprofile::start(&sampler, o.profile.as_ref())?;
    let _updates = match &endpoint {
        Some(e) => Some(e.follow(&sampler)?),
        None => None,
    };
    let mut out = io::stdout().lock();
    // Reports end on snapshots: snapshot 0 is taken at the start, then one
    // every SAMPLE_EVERY, so a report is due at every `per_report`th
    // snapshot and the last one at the snapshot of the `--seconds`
    // deadline. Waking on snapshots rather than on a clock of its own, the
    // watcher never reports between two samples (a report a sample late,
    // or one with nothing new).
    let per_report = session::samples_in(Duration::from_secs(o.every));
    let last_seq = o.seconds.map(session::samples_in);
    // If sampling stalls (a sample failed, a stopped machine), the
    // deadline still holds, a little late.
    let deadline = match o.seconds {
        Some(s) => Some(
            Instant::now()
                .checked_add(s)
                .and_then(|d| d.checked_add(2 * SAMPLE_EVERY))
                .ok_or("--seconds is too large")?,
        ),
        None => None,
    };
    let mut measured = false;
    let mut printed = Printed::default();
    let mut reported_error: Option<String> = None;
    let mut last = None;
    // The number of the last report due (`seq / per_report`).
    let mut reports_due = 0;
    let end = loop {
        let now = Instant::now();
        let until_deadline = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now));
        // A timeout or a stopped run: `check` below says what happened.
        // With a stop flag (a trace to finish), it is looked at every
        // STOP_POLL: Ctrl-C ends the watch within that.
        let most = match &interrupted {
            Some(_) => crate::signals::STOP_POLL,
            None => 2 * SAMPLE_EVERY,
        };
        let stored = match sampler.wait_for_sample(last, until_deadline.min(most)) {
            SampleWait::Stored { seq } => {
                last = Some(seq);
                Some(seq)
            }
            _ => None,
        };
        if let Some(a) = &mut auto {
            a.note_new();
        }
        if let (Some(p), Some(t)) = (&mut traced, &mut trace) {
            p.poll();
            t.note_end();
        }
        let stopped = interrupted
            .as_ref()
            .is_some_and(|i| i.load(std::sync::atomic::Ordering::Relaxed));
        let final_seq = stored.is_some_and(|seq| last_seq.is_some_and(|l| seq >= l));
        let ending = stopped || final_seq || deadline.is_some_and(|d| Instant::now() >= d);
        let due = stored.filter(|seq| seq / per_report > reports_due);
        if ending || due.is_some() {
            if let Some(seq) = due {
                reports_due = seq / per_report;
            }
            measured |= write_report(
                &mut out,
                &sampler.report(),
                o.json,
                auto.as_ref(),
                &mut printed,
            )?;
        }
        if ending {
            break End::Deadline;
        }
        if let Some(end) = session::check(&sampler, pid, &mut reported_error, |e| {
            print::note(&format!("wakemeter: sampling: {e}"));
        }) {
            break end;
        }
    };
    // Stop sampling before the final report, so that it says so.
    drop(guard);
    // The trace takes the last snapshots and ends its finding slices.
    drop(traced);
    // False when the asked-for trace was never written: exit 1.
    let trace_ok = trace.as_mut().is_none_or(crate::perfetto::Trace::summary);
    let code = match end {
        End::Deadline => Ok(ExitCode::SUCCESS),
        End::TargetGone(how) => {
            measured |= write_report(
                &mut out,
                &sampler.report(),
                o.json,
                auto.as_ref(),
                &mut printed,
            )?;
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
    };
    if trace_ok {
        code
    } else {
        Ok(ExitCode::FAILURE)
    }
}

/// Writes one report, with the profile captured for each finding when
/// there is one, unless it repeats the last one written; returns whether
/// it had a measured interval. In tables, a report whose interval ends
/// at the same snapshot as the last one is left out; in JSON too, except
/// the final line that says sampling stopped (`"running": false`), which
/// a consumer waits for.
fn write_report(
    out: &mut impl Write,
    report: &Report,
    json: bool,
    auto: Option<&crate::autoprofile::Watcher>,
    printed: &mut Printed,
) -> io::Result<bool> {
    let measured = report.interval.is_some();
    if printed.repeats(report, json) {
        return Ok(measured);
    }
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
    Ok(measured)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Starved sampling: the final report ends at the same snapshot as the
    /// last one written, and is left out; a new snapshot is written.
    #[test]
    fn one_interval_is_written_once() {
        let s = wakemeter::Sampler::new().expect("a sampler of this process");
        s.sample().expect("a first sample");
        s.sample().expect("a second sample");
        let mut printed = Printed::default();
        let mut out = Vec::new();
        assert!(write_report(&mut out, &s.report(), false, None, &mut printed).unwrap());
        let first = out.len();
        assert!(first > 0);
        assert!(write_report(&mut out, &s.report(), false, None, &mut printed).unwrap());
        assert_eq!(out.len(), first, "the same interval was written twice");
        s.sample().expect("a third sample");
        write_report(&mut out, &s.report(), false, None, &mut printed).unwrap();
        assert!(out.len() > first, "a new interval is written");
        let lines = out.len();
        write_report(&mut out, &s.report(), true, None, &mut printed).unwrap();
        assert_eq!(
            out.len(),
            lines,
            "JSON too, while the sampler state is the same"
        );
    }
}

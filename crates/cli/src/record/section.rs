//! One process of a recording: its sampler, its header, the lines of its
//! intervals.

use std::error::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use wakemeter::compare::{DEFAULT_MAX_GROUPS, IntervalSummary, RecordLine, RecordingHeader};
use wakemeter::{Sampler, SamplerBuilder, SamplingGuard, Target};

use super::output::Output;
use crate::selection::LeftOut;
use crate::target::{self, Resolved};
use crate::{kernel, print};

pub(super) fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// What a process does, to tell apart processes of one name: its command
/// line, after its parent's when the parent has the same name (an nginx
/// worker under its master, which names the configuration).
pub fn role(pid: u32) -> Option<String> {
    let cmdline = |pid: u32| -> Option<String> {
        let text = wakemeter_procfs::process::cmdline(pid).ok()?;
        // Bounded: a role is a name, not a document.
        Some(text.trim().chars().take(200).collect())
    };
    let comm = |pid: u32| {
        wakemeter_procfs::process::comm(wakemeter_procfs::process::Process::Pid(pid)).ok()
    };
    let own = cmdline(pid)?;
    let stat = wakemeter_procfs::process::stat(pid).ok()?;
    // Field 4, after the name in parentheses (which may hold spaces).
    let ppid = wakemeter_procfs::parse::stat_parent(&stat);
    match ppid {
        Some(pp) if pp > 1 && comm(pp).is_some() && comm(pp) == comm(pid) => {
            Some(format!("{} > {own}", cmdline(pp).unwrap_or_default()))
        }
        _ => Some(own),
    }
}

/// The recording of one process.
pub struct Section {
    pub target: Resolved,
    pub(super) sampler: Sampler,
    guard: Option<SamplingGuard>,
    header: Option<RecordingHeader>,
    /// The newest snapshot written up to.
    last: Option<u64>,
    pub written: u64,
    pub exited: bool,
    /// Its part of the `--perfetto` trace.
    pub(super) trace: Option<crate::perfetto::ProcessTrace>,
}

impl Section {
    /// Attaches to `pid` (eBPF when asked and allowed) and builds its
    /// sampler, without starting it.
    pub fn prepare(
        pid: u32,
        interval: Duration,
        choice: kernel::Choice,
        label: Option<String>,
    ) -> Result<Section, Box<dyn Error>> {
        let target = target::resolve(pid)?;
        let mut builder = SamplerBuilder::new()
            .with_target(Target::Pid(pid))
            .with_interval(interval)
            .with_switch_split_every(1);
        match kernel::attach(Target::Pid(pid), choice) {
            Ok(src) => builder = builder.with_kernel_source(src),
            Err(why) => print::note(&format!(
                "eBPF: not attached to process {pid} ({why}); /proc sampling only"
            )),
        }
        let sampler = builder.build()?;
        let header = RecordingHeader::of(&sampler, now_unix_ns()).with_role(role(pid), label);
        Ok(Section {
            target,
            sampler,
            guard: None,
            header: Some(header),
            last: None,
            written: 0,
            exited: false,
            trace: None,
        })
    }

    /// Starts sampling.
    pub fn start(&mut self) -> Result<(), Box<dyn Error>> {
        if let Some(h) = &mut self.header {
            h.start_unix_time_ns = now_unix_ns();
        }
        self.guard = Some(self.sampler.start()?);
        Ok(())
    }

    /// Writes one line per sampling period stored since the last call
    /// (the header before the first).
    pub(super) fn write_new(&mut self, out: &mut Output) -> Result<u64, Box<dyn Error>> {
        let Some(newest) = self.sampler.stats().total_samples.checked_sub(1) else {
            return Ok(0);
        };
        let Some(mut from) = self.last else {
            self.last = Some(newest);
            return Ok(0);
        };
        let mut n = 0;
        while from < newest {
            let to = from + 1;
            // The shared call: a `--perfetto` trace polled next takes
            // this interval rather than computing it again.
            if let Some(i) = self.sampler.interval_between_shared(from, to) {
                let line = self.sampler.account(|| {
                    print::json(&RecordLine::Interval(
                        IntervalSummary::of(&i, DEFAULT_MAX_GROUPS).for_pid(self.target.pid),
                    ))
                })?;
                if let Some(h) = self.header.take() {
                    out.line(&print::json(&RecordLine::Header(h))?)?;
                }
                out.line(&line)?;
                self.written += 1;
                n += 1;
            }
            from = to;
            self.last = Some(from);
        }
        Ok(n)
    }

    /// Stops sampling with one last sample now (so the window ends at the
    /// deadline or the load's end, not at the sample before), and writes
    /// what was stored.
    pub(super) fn stop(&mut self, out: &mut Output) -> Result<u64, Box<dyn Error>> {
        if self.guard.take().is_some() && !self.exited {
            // A process that has just exited has nothing more to give.
            let _ = self.sampler.sample();
        }
        // The trace takes the last snapshots and ends its finding slices.
        drop(self.trace.take());
        self.write_new(out)
    }

    pub fn label(&self) -> String {
        format!(
            "process {} ({})",
            self.target.pid,
            print::safe(&self.target.name)
        )
    }
}

/// Attaches to every process of `pids`, saying on stderr how long each
/// took and in total, so a loaded machine never looks hung.
pub fn prepare_all(
    pids: impl IntoIterator<Item = u32>,
    interval: Duration,
    choice: kernel::Choice,
    label: impl Fn(u32) -> Option<String>,
    left_out: &mut LeftOut,
    stop: &AtomicBool,
) -> Vec<Section> {
    left_out.begin();
    let all = Instant::now();
    let mut ready = Vec::new();
    let mut tried = 0;
    for pid in pids {
        // Ctrl-C between two attaches (one can take a second on a busy
        // machine): the rest are not attached.
        if stop.load(Ordering::Relaxed) {
            break;
        }
        tried += 1;
        let t = Instant::now();
        match Section::prepare(pid, interval, choice, label(pid)) {
            Ok(s) => {
                print::note(&format!(
                    "wakemeter: attached to {} in {:.1} s",
                    s.label(),
                    t.elapsed().as_secs_f64()
                ));
                left_out.started(pid);
                ready.push(s);
            }
            // Left out (e.g. out of descriptors), or exited between the
            // listing and the attach (then not named).
            Err(e) => left_out.failed(pid, e.to_string()),
        }
    }
    left_out.end("recorded");
    if tried == 0 {
        return ready;
    }
    print::note(&format!(
        "wakemeter: {} process{} ready in {:.1} s; measuring from now",
        ready.len(),
        if ready.len() == 1 { "" } else { "es" },
        all.elapsed().as_secs_f64()
    ));
    ready
}

//! `wakemeter watch` over several processes: `--pid` repeated, `--name`
//! (every process of that name, following restarts) and `--cgroup` (every
//! process of a cgroup v2 subtree, e.g. a pod).
//!
//! The core stays one-target: each process gets its own `Sampler` (and
//! eBPF source), owned by a [`Watched`] entry of the set. The selection is
//! resolved again at every report, so a restarted process (a new PID) is
//! picked up and an exited one is dropped, each with a line on stderr. The
//! set is bounded by `--max-processes` and by the descriptor limit
//! ([`DescriptorBudget`]); what does not fit is named in a warning, and
//! the exit status is 1 when part of the selection was never watched
//! (unless `--allow-partial`), as for `record`.

use std::collections::BTreeMap;
use std::error::Error;
use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wakemeter::{Sampler, SamplingGuard, Target};

use crate::selection::{LeftOut, Selection};
use crate::session::{self, SAMPLE_EVERY};
use crate::target::{self, Liveness, Resolved};
use crate::{kernel, metrics, print};

/// What `watch` over a selection was asked for.
#[derive(Debug, Clone)]
pub struct Options {
    pub selection: Selection,
    pub every: u64,
    pub report_threads: u32,
    pub seconds: Option<Duration>,
    pub json: bool,
    pub kernel: kernel::Choice,
    /// Serve metrics of every watched process on this address (`--listen`).
    pub listen: Option<String>,
    /// Allow a non-loopback `--listen` address.
    pub allow_non_loopback: bool,
    /// `--perfetto FILE`: every watched process in one trace.
    pub perfetto: crate::perfetto::PerfettoArgs,
    /// Exit 0 even when some selected processes were never watched.
    pub allow_partial: bool,
}

/// The descriptors a process's sampler may not take: the top of the table
/// the sampler itself refuses to be built on (the core's headroom for its
/// host, 64), which `watch` leaves to the samplers' own files and the
/// endpoint.
const DESCRIPTOR_HEADROOM: u64 = 64;

/// What starting one more process costs in descriptors before any was
/// measured: none. A sampler keeps its three process-level files (task
/// directory, `statm`, `status`) only while they fit in a fixed part of
/// the core's share (an eighth of the limit in all, whatever the number
/// of samplers); beyond it a sampler opens them for each sample and holds
/// none between samples. What an eBPF source adds is measured.
const DESCRIPTORS_PER_PROCESS_GUESS: u64 = 0;

/// The descriptor budget of `watch` over several processes, from the
/// real soft `RLIMIT_NOFILE` (read at start and at every look) and the
/// descriptors open then, with what each started process cost measured
/// as it starts (an eBPF source that joins the shared programs adds a
/// few; /proc sampling three for the first samplers, none after).
///
/// Why: under `ulimit -n 256`, 300 processes each built a sampler until
/// the table was full; every later look then attached eBPF to each of the
/// 237 left out (a "joined" line each, and 19.5 s instead of 1 s between
/// reports) before the sampler was refused. A process that cannot fit is
/// left out before anything is attached to it.
#[derive(Debug)]
struct DescriptorBudget {
    /// Descriptors the latest start took.
    per_process: u64,
    /// Why a start of this look failed for want of descriptors: the
    /// others of the look are refused before anything is attached to them.
    ///
    /// Why: a start that fails gives back what it took (with eBPF, the
    /// kernel programs it was the first to load), so the count alone would
    /// let the next process try again. Under `ulimit -n 80` with eBPF,
    /// every process of every look loaded the programs (1.5 s each) and
    /// failed: `--seconds 2` ran for minutes.
    exhausted: Option<String>,
}

/// Why a process could not be started.
struct StartFailure {
    why: String,
    /// The process or the system ran out of file descriptors.
    out_of_descriptors: bool,
}

impl DescriptorBudget {
    fn new() -> Self {
        DescriptorBudget {
            per_process: DESCRIPTORS_PER_PROCESS_GUESS,
            exhausted: None,
        }
    }

    /// A new look at the selection: starts may be tried again.
    fn begin_look(&mut self) {
        self.exhausted = None;
    }

    /// The soft limit and the descriptors open now; `None` when either
    /// cannot be read (then nothing is refused here).
    fn now() -> Option<(u64, u64)> {
        let limit = wakemeter_procfs::process::open_fd_limit()?;
        let open = wakemeter_procfs::process::open_fd_count().ok()?;
        Some((limit, open))
    }

    /// How many more processes fit now, `None` when unknown; unbounded
    /// (`u64::MAX`) while a start holds no descriptor and some are free.
    fn room(&self) -> Option<u64> {
        let (limit, open) = Self::now()?;
        let free = limit
            .saturating_sub(DESCRIPTOR_HEADROOM)
            .saturating_sub(open);
        Some(match self.per_process {
            0 if free > 0 => u64::MAX,
            0 => 0,
            n => free / n,
        })
    }

    /// Why one more process cannot be started now, if it cannot.
    fn refuse(&self) -> Option<String> {
        if let Some(why) = &self.exhausted {
            return Some(why.clone());
        }
        let (limit, open) = Self::now()?;
        (self.room()? == 0).then(|| {
            format!(
                "out of file descriptors: {open} of the limit of {limit} are open, the top \
                 {DESCRIPTOR_HEADROOM} are left to the samplers' own files, and each process \
                 takes about {}",
                self.per_process
            )
        })
    }

    /// Starts a process with `start`, measuring what it took.
    fn start<T>(&mut self, start: impl FnOnce() -> Result<T, StartFailure>) -> Result<T, String> {
        if let Some(why) = self.refuse() {
            return Err(why);
        }
        let before = Self::now().map(|(_, open)| open);
        let started = start().map_err(|f| {
            if f.out_of_descriptors {
                self.exhausted = Some(f.why.clone());
            }
            f.why
        })?;
        if let (Some(before), Some((_, after))) = (before, Self::now()) {
            self.per_process = after.saturating_sub(before);
        }
        Ok(started)
    }
}

/// One watched process.
struct Watched {
    target: Resolved,
    sampler: Sampler,
    guard: Option<SamplingGuard>,
    /// Its part of the `--perfetto` trace.
    trace: Option<crate::perfetto::ProcessTrace>,
    /// Its last report written: a report is never written twice.
    printed: crate::print::Printed,
}

impl Watched {
    fn start(pid: u32, o: &Options) -> Result<Watched, StartFailure> {
        let failed = |why: String| StartFailure {
            why,
            out_of_descriptors: false,
        };
        let target = target::resolve(pid).map_err(failed)?;
        let kernel = match kernel::attach(Target::Pid(pid), o.kernel) {
            Ok(src) => Some(src),
            Err(why) => {
                print::note(&format!(
                    "eBPF: not attached to process {pid} ({why}); /proc sampling only"
                ));
                None
            }
        };
        let sampler = session::sampler(pid, Duration::from_secs(o.every), o.report_threads, kernel)
            .map_err(|e| StartFailure {
                out_of_descriptors: matches!(e, wakemeter::Error::DescriptorsExhausted { .. }),
                why: e.to_string(),
            })?;
        let guard = sampler.start().map_err(|e| failed(e.to_string()))?;
        Ok(Watched {
            target,
            sampler,
            guard: Some(guard),
            trace: None,
            printed: crate::print::Printed::default(),
        })
    }

    fn label(&self) -> String {
        format!(
            "process {} ({})",
            self.target.pid,
            print::safe(&self.target.name)
        )
    }
}

/// Writes the report of one process: a JSON line (the report carries the
/// process as `target`), or its tables under a heading.
fn write_report(out: &mut impl Write, w: &mut Watched, json: bool) -> io::Result<bool> {
    let report = w.sampler.report();
    if w.printed.repeats(&report, json) {
        return Ok(report.interval.is_some());
    }
    if json {
        let line = print::json(&report).map_err(io::Error::other)?;
        writeln!(out, "{line}")?;
    } else if let Some(i) = &report.interval {
        // The name now: a process that called execve has a new one.
        writeln!(
            out,
            "== process {} ({}) ==",
            w.target.pid,
            print::safe(&report.target.name)
        )?;
        print::threads(out, i)?;
        print::thread_groups(out, &report.thread_groups, report.threads_folded)?;
        print::kernel(out, i)?;
        print::findings_with(out, &report.findings, |_| None)?;
        print::warnings(out, &report.warnings)?;
    }
    out.flush()?;
    Ok(report.interval.is_some())
}

pub fn run(o: &Options) -> Result<ExitCode, Box<dyn Error>> {
    if !(1..=3600).contains(&o.every) {
        return Err("--every must be between 1 and 3600 seconds".into());
    }
    if o.seconds.is_some_and(|s| s.is_zero()) {
        return Err("--seconds must be more than 0".into());
    }
    let sel = &o.selection;
    sel.check()?;
    // Bound before anything is measured or printed, as for one process.
    let endpoint = match &o.listen {
        Some(addr) => Some(metrics::serve(
            addr,
            o.allow_non_loopback,
            Some(sel.max_processes),
        )?),
        None => None,
    };
    // (Signals first: a wait for a FIFO's reader ends on Ctrl-C.)
    let interrupted = match &o.perfetto.perfetto {
        Some(_) => Some(crate::signals::stop_on_signals()?),
        None => None,
    };
    let mut trace = o.perfetto.create(interrupted.as_deref())?;
    let traced = |w: &mut Watched, trace: &Option<crate::perfetto::Trace>| {
        if let Some(t) = trace {
            match t.file.add(&w.sampler) {
                Ok(p) => w.trace = Some(p),
                Err(e) => print::note(&format!("wakemeter: {}: {e}", w.label())),
            }
        }
    };
    // The samplers the endpoint follows: kept equal to `set` below.
    let exposed: Arc<Mutex<Vec<Sampler>>> = Arc::new(Mutex::new(Vec::new()));
    let _updates = match &endpoint {
        Some(e) => Some(e.follow_set(&exposed)?),
        None => None,
    };
    let publish = |set: &BTreeMap<u32, Watched>| {
        if endpoint.is_some()
            && let Ok(mut e) = exposed.lock()
        {
            *e = set.values().map(|w| w.sampler.clone()).collect();
        }
    };
    // Only a name or a cgroup can come back (a restart, a new pod process);
    // a fixed list of PIDs ends when all of them are gone.
    let follows = sel.name.is_some() || sel.cgroup.is_some();
    let mut out = io::stdout().lock();
    let every = Duration::from_secs(o.every);
    let mut set: BTreeMap<u32, Watched> = BTreeMap::new();
    let mut last_dropped: Vec<u32> = Vec::new();
    // Attach to the processes there now before the clock starts: an eBPF
    // attach takes seconds (more under load), which must not eat into
    // --seconds. Each one and the total are said, so it never looks hung.
    let mut left_out = LeftOut::default();
    let mut budget = DescriptorBudget::new();
    let attaching = Instant::now();
    left_out.begin();
    budget.begin_look();
    let first = sel.resolve_capped("watching", &mut last_dropped)?;
    if let (Some(room), Some((limit, _))) = (budget.room(), DescriptorBudget::now())
        && (first.len() as u64) > room
    {
        print::note(&format!(
            "wakemeter: warning: the descriptor limit ({limit}, `ulimit -n`) leaves room for \
             about {room} of the {} selected processes",
            first.len()
        ));
    }
    for pid in first {
        let t = Instant::now();
        match budget.start(|| Watched::start(pid, o)) {
            Ok(mut w) => {
                traced(&mut w, &trace);
                print::note(&format!(
                    "wakemeter: watching {} (attached in {:.1} s)",
                    w.label(),
                    t.elapsed().as_secs_f64()
                ));
                set.insert(pid, w);
                left_out.started(pid);
            }
            Err(e) => left_out.failed(pid, e),
        }
    }
    left_out.end("watched");
    publish(&set);
    print::note(&format!(
        "wakemeter: {} processes measured after {:.1} s of attaching; the window starts now",
        set.len(),
        attaching.elapsed().as_secs_f64()
    ));
    let start = Instant::now();
    let deadline = match o.seconds {
        Some(s) => Some(start.checked_add(s).ok_or("--seconds is too large")?),
        None => None,
    };
    let mut next = if set.is_empty() { start } else { start + every };
    let mut waiting_said = false;
    let mut measured = false;
    loop {
        let now = Instant::now();
        let at_deadline = deadline.is_some_and(|d| now >= d);
        // Processes that exited since the last look: a last report, then out.
        // A sampler that stopped by itself met a fatal error: its target
        // exited, or its PID now names another process.
        let gone: Vec<u32> = set
            .iter()
            .filter(|(p, w)| target::liveness(**p) != Liveness::Alive || !w.sampler.is_running())
            .map(|(p, _)| *p)
            .collect();
        for pid in gone {
            if let Some(mut w) = set.remove(&pid) {
                publish(&set);
                drop(w.guard.take());
                drop(w.trace.take());
                measured |= write_report(&mut out, &mut w, o.json)?;
                let why = match w.sampler.stats().last_error {
                    Some(e) if target::liveness(pid) == Liveness::Alive => format!(": {e}"),
                    _ => " exited".to_string(),
                };
                print::note(&format!("wakemeter: {}{why}; no longer watched", w.label()));
            }
        }
        if now >= next || at_deadline {
            if !set.is_empty() {
                for w in set.values_mut() {
                    measured |= write_report(&mut out, w, o.json)?;
                }
            }
            if at_deadline {
                break;
            }
            while next <= now {
                next += every;
            }
            // Resolve again: new processes of the name or cgroup join.
            let kept = sel.resolve_capped("watching", &mut last_dropped)?;
            left_out.begin();
            budget.begin_look();
            for pid in kept {
                if set.contains_key(&pid) {
                    continue;
                }
                match budget.start(|| Watched::start(pid, o)) {
                    Ok(mut w) => {
                        traced(&mut w, &trace);
                        print::note(&format!("wakemeter: watching {}", w.label()));
                        left_out.started(pid);
                        set.insert(pid, w);
                        publish(&set);
                        waiting_said = false;
                    }
                    // Left out, or exited between the listing and the
                    // start: the next look tries again.
                    Err(e) => left_out.failed(pid, e),
                }
            }
            left_out.end("watched");
        }
        if set.is_empty() {
            if !follows {
                break;
            }
            if !waiting_said {
                print::note(&format!(
                    "wakemeter: waiting for {} (none is running)",
                    sel.describe()
                ));
                waiting_said = true;
            }
        }
        if let Some(t) = &mut trace {
            for w in set.values_mut() {
                if let Some(p) = &mut w.trace {
                    p.poll();
                }
            }
            t.note_end();
        }
        if interrupted
            .as_ref()
            .is_some_and(|i| i.load(std::sync::atomic::Ordering::Relaxed))
        {
            for w in set.values_mut() {
                measured |= write_report(&mut out, w, o.json)?;
            }
            break;
        }
        // Wake for the next report, the deadline, or a look at who exited,
        // whichever comes first.
        let now = Instant::now();
        let until = deadline.map_or(next, |d| d.min(next));
        let most = match &interrupted {
            Some(_) => crate::signals::STOP_POLL,
            None => SAMPLE_EVERY,
        };
        std::thread::sleep(until.saturating_duration_since(now).min(most));
    }
    for mut w in std::mem::take(&mut set).into_values() {
        drop(w.guard.take());
        drop(w.trace.take());
    }
    // False when the asked-for trace was never written: exit 1.
    let trace_ok = trace.as_mut().is_none_or(crate::perfetto::Trace::summary);
    if !measured {
        print::note("wakemeter: nothing was measured");
        return Ok(ExitCode::FAILURE);
    }
    if !trace_ok {
        return Ok(ExitCode::FAILURE);
    }
    if !left_out.accept_missing("watched", "watch", o.allow_partial) {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

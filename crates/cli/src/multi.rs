//! `wakemeter watch` over several processes: `--pid` repeated, `--name`
//! (every process of that name, following restarts) and `--cgroup` (every
//! process of a cgroup v2 subtree, e.g. a pod).
//!
//! The core stays one-target: each process gets its own `Sampler` (and
//! eBPF source), owned by a [`Watched`] entry of the set. The selection is
//! resolved again at every report, so a restarted process (a new PID) is
//! picked up and an exited one is dropped, each with a line on stderr. The
//! set is bounded by `--max-processes`; what does not fit is named in a
//! warning.

use std::collections::{BTreeMap, BTreeSet};
use std::error::Error;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wakemeter::{Sampler, SamplingGuard, Target};

use crate::session::{self, SAMPLE_EVERY};
use crate::target::{self, Liveness, Resolved};
use crate::{kernel, metrics, print};

/// Where cgroup v2 is usually mounted; a relative `--cgroup` is taken
/// below the mount point of the `cgroup2` filesystem ([`cgroup2_root`]),
/// this one when `/proc/self/mounts` names none.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The mount point of the cgroup v2 hierarchy: `/sys/fs/cgroup` on a pure
/// v2 host, `/sys/fs/cgroup/unified` on a hybrid (v1 + v2) one.
pub fn cgroup2_root() -> PathBuf {
    std::fs::read_to_string("/proc/self/mounts")
        .ok()
        .and_then(|m| {
            m.lines().find_map(|l| {
                let mut f = l.split_ascii_whitespace();
                let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
                // Mount points with spaces are octal-escaped; a cgroup2 root
                // has none in practice, and such a line is skipped.
                (fstype == "cgroup2" && !dir.contains('\\')).then(|| PathBuf::from(dir))
            })
        })
        .unwrap_or_else(|| PathBuf::from(CGROUP_ROOT))
}
/// Default of `--max-processes`.
pub const DEFAULT_MAX_PROCESSES: usize = 64;
/// Largest `--max-processes`: each process costs a sampler thread, its
/// descriptors and, with eBPF, five programs on the scheduler tracepoints.
pub const MAX_PROCESSES_LIMIT: usize = 1024;
/// Deepest cgroup subtree walked below `--cgroup` (the kernel allows more,
/// but no real hierarchy nests this far; the bound keeps a walk finite).
const MAX_CGROUP_DEPTH: usize = 32;

/// Which processes to watch or record: the union of all that is given.
/// One set of flags for `watch` and `record` (flattened into both); at
/// least one of `--pid`, `--name`, `--cgroup` is required.
#[derive(Debug, Clone, Default, clap::Args)]
#[group(skip)]
#[command(group(clap::ArgGroup::new("what").required(true).multiple(true).args(["pids", "name", "cgroup"])))]
pub struct Selection {
    /// Process to watch or record; repeat for several. The ID of one of
    /// its threads (a TID) also works: the whole process is taken, and
    /// stderr says so.
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Every process with this name (exact match on the kernel's 15-byte
    /// process name, Linux `comm`), looked up again as it goes (at every
    /// report, or every second when recording): a restarted process is
    /// picked up, an exited one dropped.
    #[arg(long)]
    pub name: Option<String>,
    /// Every process of this cgroup v2 directory and the cgroups below it
    /// (a pod, a systemd unit), looked up again like `--name`. Absolute,
    /// or relative to the cgroup v2 root (/sys/fs/cgroup, or
    /// /sys/fs/cgroup/unified on hybrid hosts).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// At most this many processes at once (1 to 1024); the lowest PIDs
    /// are kept and stderr names the others.
    #[arg(long, default_value_t = DEFAULT_MAX_PROCESSES)]
    pub max_processes: usize,
}

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
}

/// The cgroup directory `--cgroup` names: the path itself when it is a
/// cgroup directory (has `cgroup.procs`), else the path below the cgroup
/// v2 root (`/kubepods/pod…` as `/proc/<pid>/cgroup` shows it).
pub fn cgroup_dir(given: &Path) -> Result<PathBuf, String> {
    let is_cgroup = |p: &Path| p.join("cgroup.procs").is_file();
    if is_cgroup(given) {
        return Ok(given.to_path_buf());
    }
    let root = cgroup2_root();
    let below = root.join(given.strip_prefix("/").unwrap_or(given));
    if is_cgroup(&below) {
        return Ok(below);
    }
    Err(format!(
        "cgroup {} does not exist (no cgroup.procs there nor at {}; the cgroup v2 root is {})",
        print::safe(&given.to_string_lossy()),
        print::safe(&below.to_string_lossy()),
        print::safe(&root.to_string_lossy())
    ))
}

/// The processes of cgroup `dir` and of every cgroup below it.
pub fn cgroup_pids(dir: &Path) -> Result<BTreeSet<u32>, String> {
    let mut pids = BTreeSet::new();
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    while let Some((d, depth)) = stack.pop() {
        let procs = d.join("cgroup.procs");
        let text = match std::fs::read_to_string(&procs) {
            Ok(t) => t,
            // A child cgroup removed during the walk: nothing to read there.
            Err(e) if e.kind() == io::ErrorKind::NotFound && d != dir => continue,
            Err(e) => {
                return Err(format!(
                    "cannot read {}: {e}",
                    print::safe(&procs.to_string_lossy())
                ));
            }
        };
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        if depth >= MAX_CGROUP_DEPTH {
            continue;
        }
        if let Ok(entries) = std::fs::read_dir(&d) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push((e.path(), depth + 1));
                }
            }
        }
    }
    Ok(pids)
}

/// The processes named exactly `name` (`/proc/<pid>/comm`), this one excluded.
pub fn pids_named(name: &str) -> Result<BTreeSet<u32>, String> {
    let me = std::process::id();
    let entries = std::fs::read_dir("/proc").map_err(|e| format!("cannot list /proc: {e}"))?;
    Ok(entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.strip_suffix(b"\n").unwrap_or(&c) == name.as_bytes())
        })
        .collect())
}

/// Keeps the `max` lowest PIDs of `all`; returns the kept and the dropped.
pub fn cap(all: BTreeSet<u32>, max: usize) -> (BTreeSet<u32>, Vec<u32>) {
    let mut kept = all;
    let dropped: Vec<u32> = match kept.iter().nth(max) {
        Some(&first_over) => kept.split_off(&first_over).into_iter().collect(),
        None => Vec::new(),
    };
    (kept, dropped)
}

impl Selection {
    /// The selected processes now ([`Selection::resolve`]), at most
    /// `max_processes` of them ([`cap`]). When processes are left out, and
    /// they differ from `last_dropped`, stderr names them (`doing`:
    /// "watching", "recording"); `last_dropped` is updated.
    pub(crate) fn resolve_capped(
        &self,
        doing: &str,
        last_dropped: &mut Vec<u32>,
    ) -> Result<BTreeSet<u32>, String> {
        let (kept, dropped) = cap(self.resolve()?, self.max_processes);
        if !dropped.is_empty() && dropped != *last_dropped {
            let list: Vec<String> = dropped.iter().map(u32::to_string).collect();
            print::note(&format!(
                "wakemeter: warning: {} matches {} processes; {doing} the {} lowest PIDs, not {}",
                self.describe(),
                kept.len() + dropped.len(),
                kept.len(),
                list.join(", ")
            ));
        }
        *last_dropped = dropped;
        Ok(kept)
    }

    /// In words, for messages: "pid 12, processes named envoy, cgroup X".
    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.pids.is_empty() {
            let list: Vec<String> = self.pids.iter().map(u32::to_string).collect();
            parts.push(format!("pid {}", list.join(", ")));
        }
        if let Some(n) = &self.name {
            parts.push(format!("processes named {}", print::safe(n)));
        }
        if let Some(c) = &self.cgroup {
            parts.push(format!("cgroup {}", print::safe(&c.to_string_lossy())));
        }
        parts.join(" and ")
    }

    /// The processes the selection names now (thread ids resolved to their
    /// process; `--pid`s that are gone are left out).
    pub(crate) fn resolve(&self) -> Result<BTreeSet<u32>, String> {
        let mut all = BTreeSet::new();
        for &p in &self.pids {
            if let Ok(r) = target::resolve(p) {
                all.insert(r.pid);
            }
        }
        if let Some(n) = &self.name {
            all.extend(pids_named(n)?);
        }
        if let Some(c) = &self.cgroup {
            all.extend(cgroup_pids(&cgroup_dir(c)?)?);
        }
        all.remove(&std::process::id());
        Ok(all)
    }

    /// Checks at start: every `--pid` exists, the cgroup exists and is
    /// readable, and the name matches something. Errors are for the user.
    pub(crate) fn check(&self) -> Result<(), String> {
        if !(1..=MAX_PROCESSES_LIMIT).contains(&self.max_processes) {
            return Err(format!(
                "--max-processes must be between 1 and {MAX_PROCESSES_LIMIT}"
            ));
        }
        for &p in &self.pids {
            session::resolve(p)?;
        }
        if let Some(c) = &self.cgroup {
            cgroup_pids(&cgroup_dir(c)?)?;
        }
        if let Some(n) = &self.name
            && pids_named(n)?.is_empty()
        {
            return Err(format!(
                "no process named {} (the name is matched exactly against /proc/<pid>/comm, at most 15 bytes)",
                print::safe(n)
            ));
        }
        Ok(())
    }
}

/// Processes of the selection that could not be started (out of file
/// descriptors, unreadable, ...), named together in one warning instead of
/// one line per process at every look. A process that exited between the
/// listing and its start is not left out: it is gone.
#[derive(Debug, Default)]
pub(crate) struct LeftOut {
    /// Left out at the latest look, with the first reason seen.
    now: BTreeMap<u32, String>,
    /// Named by the last warning (so an unchanged set is not repeated).
    said: Vec<u32>,
    /// Every process left out at some look and never started since.
    never_started: BTreeSet<u32>,
}

impl LeftOut {
    /// Starts a look at the selection.
    pub(crate) fn begin(&mut self) {
        self.now.clear();
    }

    /// `pid` could not be started for `why` (it is checked here whether it
    /// simply exited meanwhile).
    pub(crate) fn failed(&mut self, pid: u32, why: String) {
        if target::liveness(pid) == Liveness::Alive {
            self.now.insert(pid, why);
            self.never_started.insert(pid);
        }
    }

    /// `pid` was started.
    pub(crate) fn started(&mut self, pid: u32) {
        self.never_started.remove(&pid);
    }

    /// Ends a look: one warning naming the processes left out (`doing`:
    /// "watched", "recorded"), when they differ from the last warning's.
    pub(crate) fn end(&mut self, doing: &str) {
        let pids: Vec<u32> = self.now.keys().copied().collect();
        if pids == self.said {
            return;
        }
        if let Some(why) = self.now.values().next() {
            let list: Vec<String> = pids.iter().map(u32::to_string).collect();
            let hint = if why.contains("file descriptors") {
                " (raise the descriptor limit, `ulimit -n`, or select fewer processes)"
            } else {
                ""
            };
            print::note(&format!(
                "wakemeter: warning: {} process{} not {doing}: {why}{hint}: {}",
                pids.len(),
                if pids.len() == 1 { " is" } else { "es are" },
                list.join(", ")
            ));
        } else if !self.said.is_empty() {
            print::note(&format!("wakemeter: every selected process is {doing} now"));
        }
        self.said = pids;
    }

    /// Processes left out at some look and never started since.
    pub(crate) fn never_started(&self) -> &BTreeSet<u32> {
        &self.never_started
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
    printed: crate::watch::Printed,
}

impl Watched {
    fn start(pid: u32, o: &Options) -> Result<Watched, String> {
        let target = target::resolve(pid)?;
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
            .map_err(|e| e.to_string())?;
        let guard = sampler.start().map_err(|e| e.to_string())?;
        Ok(Watched {
            target,
            sampler,
            guard: Some(guard),
            trace: None,
            printed: crate::watch::Printed::default(),
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
    let mut trace = o.perfetto.create()?;
    let interrupted = match &trace {
        Some(_) => Some(crate::record::stop_on_signals()?),
        None => None,
    };
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
    let attaching = Instant::now();
    left_out.begin();
    for pid in sel.resolve_capped("watching", &mut last_dropped)? {
        let t = Instant::now();
        match Watched::start(pid, o) {
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
            for pid in kept {
                if set.contains_key(&pid) {
                    continue;
                }
                match Watched::start(pid, o) {
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
        std::thread::sleep(until.saturating_duration_since(now).min(SAMPLE_EVERY));
    }
    for mut w in std::mem::take(&mut set).into_values() {
        drop(w.guard.take());
        drop(w.trace.take());
    }
    if let Some(t) = &mut trace {
        t.summary();
    }
    if measured {
        Ok(ExitCode::SUCCESS)
    } else {
        print::note("wakemeter: nothing was measured");
        Ok(ExitCode::FAILURE)
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn cap_keeps_the_lowest_and_names_the_rest() {
        let all: BTreeSet<u32> = [9, 3, 7, 1].into_iter().collect();
        let (kept, dropped) = cap(all.clone(), 2);
        assert_eq!(kept.into_iter().collect::<Vec<_>>(), [1, 3]);
        assert_eq!(dropped, [7, 9]);
        let (kept, dropped) = cap(all, 10);
        assert_eq!(kept.len(), 4);
        assert!(dropped.is_empty());
    }

    #[test]
    fn a_missing_cgroup_is_an_error_naming_both_places() {
        let e = cgroup_dir(Path::new("no-such-cgroup-for-wakemeter")).unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
        let below = cgroup2_root().join("no-such-cgroup-for-wakemeter");
        assert!(e.contains(below.to_str().unwrap()), "{e}");
    }

    #[test]
    fn this_process_is_never_matched_by_name() {
        let me = std::fs::read_to_string("/proc/self/comm").unwrap();
        assert!(
            !pids_named(me.trim_end())
                .unwrap()
                .contains(&std::process::id())
        );
    }
}

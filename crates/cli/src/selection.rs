//! Which processes `watch`, `record` and `ab` follow: the `--pid`,
//! `--name` and `--cgroup` selection, resolved again at every look, capped
//! at `--max-processes`, and the processes left out of it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::target::{self, Liveness};
use crate::{print, session};

/// The mount point of the cgroup v2 hierarchy, below which a relative
/// `--cgroup` is taken: `/sys/fs/cgroup` on a pure v2 host,
/// `/sys/fs/cgroup/unified` on a hybrid (v1 + v2) one.
pub fn cgroup2_root() -> PathBuf {
    wakemeter_procfs::cgroup::v2_root()
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

/// The cgroup directory `--cgroup` names: the path itself when it is a
/// cgroup directory (has `cgroup.procs`), else the path below the cgroup
/// v2 root (`/kubepods/pod…` as `/proc/<pid>/cgroup` shows it).
pub fn cgroup_dir(given: &Path) -> Result<PathBuf, String> {
    let is_cgroup = wakemeter_procfs::cgroup::is_cgroup;
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
    wakemeter_procfs::cgroup::pids(dir, MAX_CGROUP_DEPTH).map_err(|e| {
        format!(
            "cannot read {}: {}",
            print::safe(&e.path.to_string_lossy()),
            e.source
        )
    })
}

/// The processes named exactly `name` (`/proc/<pid>/comm`), this one excluded.
pub fn pids_named(name: &str) -> Result<BTreeSet<u32>, String> {
    use wakemeter_procfs::process::{self, Process};
    let me = std::process::id();
    let pids = process::pids().map_err(|e| format!("cannot list /proc: {e}"))?;
    Ok(pids
        .into_iter()
        .filter(|&pid| pid != me)
        .filter(|&pid| process::comm(Process::Pid(pid)).is_ok_and(|c| c == name.as_bytes()))
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

    /// Says which selected processes were never `done` (watched, recorded)
    /// and whether that makes the `run` (watch, recording) incomplete;
    /// returns whether the command may still succeed: nothing was left
    /// out, or `allow_partial` accepts it.
    pub(crate) fn accept_missing(&self, done: &str, run: &str, allow_partial: bool) -> bool {
        let missing = &self.never_started;
        if missing.is_empty() {
            return true;
        }
        let list: Vec<String> = missing.iter().map(u32::to_string).collect();
        print::note(&format!(
            "wakemeter: {}: {} selected process{} never {done}: {}",
            if allow_partial { "warning" } else { "error" },
            missing.len(),
            if missing.len() == 1 {
                " was"
            } else {
                "es were"
            },
            list.join(", ")
        ));
        if !allow_partial {
            print::note(&format!(
                "wakemeter: the {run} is incomplete (--allow-partial accepts that)"
            ));
        }
        allow_partial
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

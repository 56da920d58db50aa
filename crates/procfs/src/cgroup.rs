//! cgroup v2: where the hierarchy is mounted and which processes a cgroup
//! subtree holds.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

/// Where cgroup v2 is usually mounted; [`v2_root`] falls back on it when
/// `/proc/self/mounts` names no `cgroup2` filesystem.
pub const ROOT: &str = "/sys/fs/cgroup";

/// The mount point of the cgroup v2 hierarchy: `/sys/fs/cgroup` on a pure
/// v2 host, `/sys/fs/cgroup/unified` on a hybrid (v1 + v2) one.
pub fn v2_root() -> PathBuf {
    std::fs::read_to_string("/proc/self/mounts")
        .ok()
        .and_then(|m| crate::parse::cgroup2_mount_point(&m).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(ROOT))
}

/// Whether `dir` is a cgroup directory (it has `cgroup.procs`).
pub fn is_cgroup(dir: &Path) -> bool {
    dir.join("cgroup.procs").is_file()
}

/// A CPU quota (CFS bandwidth control) over a process, and how often it
/// throttled the cgroup that sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuQuota {
    /// The cgroup that sets the quota (the process's own or an ancestor).
    pub dir: PathBuf,
    /// CPU time allowed per period, in microseconds.
    pub quota_us: u64,
    /// The period, in microseconds (`quota_us / period_us` CPUs).
    pub period_us: u64,
    /// Periods in which the cgroup ran out of quota, since it was created.
    pub nr_throttled: u64,
    /// Time its threads were held off a CPU by the quota, since it was
    /// created, in microseconds.
    pub throttled_usec: u64,
}

/// The CPU quota that applies to process `pid`: the nearest cgroup, from
/// its own up to the root, whose quota is set — cgroup v2 (`cpu.max`,
/// `cpu.stat`) or, where the cpu controller is on a v1 hierarchy,
/// `cpu.cfs_quota_us`, `cpu.cfs_period_us` and `cpu.stat`. `None` when no
/// quota applies or the files cannot be read.
pub fn cpu_quota(pid: u32) -> Option<CpuQuota> {
    let text = crate::process::cgroup(pid).ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    if let (Some(root), Some(rel)) = (
        crate::parse::cgroup1_mount_point(&mounts, "cpu"),
        crate::parse::cgroup_v1_path(&text, "cpu"),
    ) {
        return nearest_quota(Path::new(root), rel, v1_quota);
    }
    let rel = crate::parse::cgroup_v2_path(&text)?;
    nearest_quota(&v2_root(), rel, v2_quota)
}

/// The first quota `read` finds from `root/rel` up to `root`.
fn nearest_quota(root: &Path, rel: &str, read: fn(&Path) -> Option<CpuQuota>) -> Option<CpuQuota> {
    let mut dir = root.join(rel.trim_start_matches('/'));
    // Bounded by the path's depth: each step drops one component.
    loop {
        if let Some(q) = read(&dir) {
            return Some(q);
        }
        if dir == root || !dir.pop() || !dir.starts_with(root) {
            return None;
        }
    }
}

fn v2_quota(dir: &Path) -> Option<CpuQuota> {
    let (quota, period_us) =
        crate::parse::cpu_max(&std::fs::read_to_string(dir.join("cpu.max")).ok()?)?;
    let stat = std::fs::read_to_string(dir.join("cpu.stat")).ok()?;
    Some(CpuQuota {
        dir: dir.to_path_buf(),
        quota_us: quota?,
        period_us,
        nr_throttled: crate::parse::flat_keyed(&stat, "nr_throttled")?,
        throttled_usec: crate::parse::flat_keyed(&stat, "throttled_usec")?,
    })
}

fn v1_quota(dir: &Path) -> Option<CpuQuota> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    // -1: no quota.
    let quota_us = read("cpu.cfs_quota_us")?.trim().parse::<u64>().ok()?;
    let period_us = read("cpu.cfs_period_us")?
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|p| *p > 0)?;
    let stat = read("cpu.stat")?;
    Some(CpuQuota {
        dir: dir.to_path_buf(),
        quota_us,
        period_us,
        nr_throttled: crate::parse::flat_keyed(&stat, "nr_throttled")?,
        throttled_usec: crate::parse::flat_keyed(&stat, "throttled_time")? / 1000,
    })
}

/// A cgroup file that could not be read.
#[derive(Debug)]
pub struct Unreadable {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub source: io::Error,
}

/// The processes of cgroup `dir` and of every cgroup below it, at most
/// `max_depth` levels down (a bound that keeps the walk finite).
///
/// # Errors
/// When `dir`'s own `cgroup.procs` cannot be read, or one below it for
/// another reason than its cgroup being removed during the walk.
pub fn pids(dir: &Path, max_depth: usize) -> Result<BTreeSet<u32>, Unreadable> {
    let mut pids = BTreeSet::new();
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    while let Some((d, depth)) = stack.pop() {
        let procs = d.join("cgroup.procs");
        let text = match std::fs::read_to_string(&procs) {
            Ok(t) => t,
            // A child cgroup removed during the walk: nothing to read there.
            Err(e) if e.kind() == io::ErrorKind::NotFound && d != dir => continue,
            Err(source) => {
                return Err(Unreadable {
                    path: procs,
                    source,
                });
            }
        };
        pids.extend(crate::parse::cgroup_procs(&text));
        if depth >= max_depth {
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

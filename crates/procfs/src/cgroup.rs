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

//! Observing from a PID namespace other than the initial one (a container
//! without the host's PID namespace, `unshare -p`).
//!
//! The kernel programs compare ids of the initial namespace, which such an
//! observer cannot see in its `/proc`. The target's initial-namespace ids
//! are found once at attach by a task iterator (`src/bpf/pid_ns.bpf.c`), so
//! the programs keep their one-comparison filter; the ids they report are
//! translated back in the kernel, for the target's events only (see
//! `src/bpf/pid_ns.h` for why there and not per event for every process).

use std::io::Read;

use aya::maps::Array;
use aya::programs::Iter;
use aya::{Btf, EbpfLoader};

use crate::error::EbpfError;

/// Inode of the initial PID namespace (`PROC_PID_INIT_INO`, a kernel ABI constant).
const INIT_PID_NS_INO: u64 = 0xEFFF_FFFC;

/// The namespace `/proc` numbers processes in: that of its process 1 (the
/// first process of a namespace lives in it), or this process's own when
/// process 1 cannot be inspected. `None` for the initial namespace, and
/// when neither link can be read (very old kernels, a restricted `/proc`:
/// nothing to translate with, so ids are taken as they are).
pub(crate) fn proc_namespace() -> Option<PidNamespace> {
    wakemeter_procfs::system::proc_pid_namespace()
        .filter(|&ino| ino != INIT_PID_NS_INO)
        .map(|ino| PidNamespace { ino })
}

/// A PID namespace other than the initial one, by its nsfs inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PidNamespace {
    pub(crate) ino: u64,
}

/// A task's ids in the initial namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HostIds {
    pub(crate) tid: u32,
    pub(crate) tgid: u32,
}

/// `struct wm_host_ids` of `pid_ns.bpf.c`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct RawHostIds {
    tid: u32,
    tgid: u32,
}

// SAFETY: two u32 fields, no padding; every bit pattern is valid.
unsafe impl aya::Pod for RawHostIds {}

/// The finder object, embedded with 8-byte alignment.
#[cfg(not(wakemeter_ebpf_no_clang))]
fn object() -> Result<&'static [u8], EbpfError> {
    Ok(aya::include_bytes_aligned!(concat!(
        env!("OUT_DIR"),
        "/pid_ns.bpf.o"
    )))
}

#[cfg(wakemeter_ebpf_no_clang)]
fn object() -> Result<&'static [u8], EbpfError> {
    Err(EbpfError::BuiltWithoutClang)
}

const FINDER: &str = "wm_find_task";

impl PidNamespace {
    /// `pid:[N]`, as `/proc/<pid>/ns/pid` shows it.
    pub(crate) fn name(self) -> String {
        format!("pid:[{}]", self.ino)
    }

    /// The initial-namespace ids of the task this namespace calls `tid`.
    ///
    /// # Errors
    /// [`EbpfError::PidNamespace`] when the kernel cannot run task
    /// iterators (before 5.8) or no task has that id;
    /// [`EbpfError::Load`] when the finder does not load.
    pub(crate) fn host_ids(self, tid: u32, btf: &Btf) -> Result<HostIds, EbpfError> {
        let fail = |reason: String| EbpfError::PidNamespace {
            namespace: self.name(),
            reason,
        };
        let mut ebpf = EbpfLoader::new()
            .btf(btf)
            .override_global("ns_ino", &self.ino, true)
            .override_global("ns_tid", &tid, true)
            .load(object()?)
            .map_err(|source| EbpfError::Load { source })?;
        let program: &mut Iter = ebpf
            .program_mut(FINDER)
            .ok_or(EbpfError::ObjectMismatch { name: FINDER })?
            .try_into()
            .map_err(|source| EbpfError::Program {
                program: FINDER,
                source,
            })?;
        let iterate = |program: &mut Iter| -> Result<(), String> {
            program.load("task", btf).map_err(|e| e.to_string())?;
            let link = program.attach().map_err(|e| e.to_string())?;
            let link = program.take_link(link).map_err(|e| e.to_string())?;
            let mut file = link.into_file().map_err(|e| e.to_string())?;
            // Reading runs the program over every task; it writes nothing.
            let mut sink = Vec::new();
            file.read_to_end(&mut sink).map_err(|e| e.to_string())?;
            Ok(())
        };
        iterate(program).map_err(|e| fail(format!("task iterator (Linux 5.8+) failed: {e}")))?;
        let found: Array<_, RawHostIds> = Array::try_from(
            ebpf.map("found")
                .ok_or(EbpfError::ObjectMismatch { name: "found" })?,
        )
        .map_err(|source| EbpfError::Map {
            map: "found",
            source,
        })?;
        let ids = found.get(&0, 0).map_err(|source| EbpfError::Map {
            map: "found",
            source,
        })?;
        if ids.tid == 0 {
            return Err(fail(format!(
                "no task has id {tid} there (it exited, or /proc is not this namespace's)"
            )));
        }
        Ok(HostIds {
            tid: ids.tid,
            tgid: ids.tgid,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_links() {
        let parse = wakemeter_procfs::parse::pid_namespace_inode;
        assert_eq!(parse("pid:[4026531836]"), Some(INIT_PID_NS_INO));
        assert_eq!(parse("pid:[4026532201]"), Some(4_026_532_201));
        assert_eq!(parse("net:[4026531840]"), None);
        assert_eq!(parse("pid:[x]"), None);
    }
}

//! Where the per-thread entries of a program set live, and how user space
//! reads, seeds and frees them: one type with two kinds behind it.
//!
//! - [`Store::Task`]: task-local storage (`thread_store`), written by the
//!   `tp_btf` programs from the task pointer each tracepoint hands over, so
//!   no event hashes a thread id. User space cannot look an entry up by
//!   thread id there; it runs the task iterator `wm_dump_threads`, which
//!   writes out the entries of one process (or all), seeds new ones and
//!   deletes those of processes that left the set.
//! - [`Store::Hash`]: a hash map keyed by thread id (`threads`), for the
//!   `raw_tp` programs (no typed task pointer there) and for a fixed
//!   capacity asked for with
//!   [`EbpfSourceBuilder::with_max_threads`](crate::EbpfSourceBuilder::with_max_threads).

use std::collections::HashSet;
use std::io::Read as _;
use std::os::fd::AsFd;

use aya::Ebpf;
use aya::maps::{Array, HashMap, Map, MapData, MapError};
use aya::programs::Iter;
use wakemeter::KernelSourceError;

use super::abi::{ITER_ROW_HEAD, WmIterCtl, WmThread};
use super::read_error;
use super::sys::{self, Batch};

/// Entries fetched per batch when reading the hash map (about 150 KiB of
/// buffers at 2.4 KiB an entry).
const READ_BATCH: usize = 64;

/// The task iterator program of the object.
pub(super) const ITERATOR: &str = "wm_dump_threads";

/// `iter_ctl.tgid` for a walk that writes nothing out (only frees the
/// entries of processes that left): no process has this id.
const NO_PROCESS: u32 = u32::MAX;

/// The per-thread entries of one program set.
pub(super) enum Store {
    /// A `BPF_MAP_TYPE_HASH` of thread id to [`WmThread`].
    Hash(HashStore),
    /// `BPF_MAP_TYPE_TASK_STORAGE`, read through the task iterator.
    Task(TaskStore),
}

pub(super) struct HashStore {
    map: Map,
    /// Capacity, in entries.
    max_threads: usize,
    /// Read buffers, kept from one read to the next.
    keys: Vec<u32>,
    values: Vec<WmThread>,
}

pub(super) struct TaskStore {
    ctl: Array<MapData, WmIterCtl>,
    seeds: Map,
    /// Where the iterator's output is read, [`READ_BATCH`] rows (and one
    /// part row) at a time, kept from one read to the next.
    buf: Vec<u8>,
    /// Whether the kernel refused a walk of one process's threads (before
    /// Linux 6.1): walks then cover every task.
    whole_walks_only: bool,
}

/// A map of thread id to [`WmThread`] (the hash store, the seeds), to
/// write; `None` if it is not one (checked when the store was made).
fn entries_mut(map: &mut Map) -> Option<HashMap<&mut MapData, u32, WmThread>> {
    HashMap::try_from(map).ok()
}

impl Store {
    /// The hash map store over `map` (checked to be a hash map of
    /// `u32` → [`WmThread`]).
    pub(super) fn hash(map: Map, max_threads: usize) -> Result<Store, MapError> {
        HashMap::<&MapData, u32, WmThread>::try_from(&map)?;
        Ok(Store::Hash(HashStore {
            map,
            max_threads,
            keys: Vec::new(),
            values: Vec::new(),
        }))
    }

    /// The task storage store, with its control map and seeds map.
    pub(super) fn task(ctl: Map, seeds: Map) -> Result<Store, MapError> {
        HashMap::<&MapData, u32, WmThread>::try_from(&seeds)?;
        Ok(Store::Task(TaskStore {
            ctl: Array::try_from(ctl)?,
            seeds,
            buf: Vec::new(),
            whole_walks_only: false,
        }))
    }

    /// Whether entries are in task storage.
    pub(super) fn is_task(&self) -> bool {
        matches!(self, Store::Task(_))
    }

    /// Calls `each` with every entry (of every watched process); returns
    /// how many entries were fetched.
    pub(super) fn for_each(
        &mut self,
        ebpf: &mut Ebpf,
        mut each: impl FnMut(u32, &WmThread),
    ) -> Result<u32, KernelSourceError> {
        match self {
            Store::Hash(h) => h.for_each(each),
            Store::Task(t) => t.walk(ebpf, WmIterCtl::default(), None, |tid, raw| {
                if let Some(raw) = raw {
                    each(tid, raw);
                }
            }),
        }
    }

    /// Calls `each` with the entry of every thread of process `tgid`
    /// (initial-namespace id; `pid` in this process's PID namespace), whose
    /// thread ids are `tids` (as listed from `/proc`): the hash map looks
    /// each up, whatever else it holds; the iterator walks that process's
    /// threads only.
    ///
    /// `reader` (not 0) names the caller to the iterator: an entry that
    /// reader got whole on its last walk and that has not changed since
    /// comes as `None` (the head alone: 8 bytes instead of 2.4 KiB), which
    /// the caller answers from what it kept. The hash map always hands
    /// entries whole.
    pub(super) fn for_each_of(
        &mut self,
        ebpf: &mut Ebpf,
        (tgid, pid): (u32, u32),
        tids: &[u32],
        reader: u64,
        mut each: impl FnMut(u32, Option<&WmThread>),
    ) -> Result<u32, KernelSourceError> {
        match self {
            Store::Hash(h) => h.for_each_listed(tids, |tid, raw| each(tid, Some(raw))),
            Store::Task(t) => {
                let ctl = WmIterCtl {
                    tgid,
                    seed: 0,
                    reader,
                };
                t.walk(ebpf, ctl, Some(pid), each)
            }
        }
    }

    /// Gives threads of process `tgid` (`pid` here) their first entry,
    /// `entry_of(tid)` for each of `tids` that has one, unless the programs
    /// made one first. Best effort. Each entry goes to the kernel as it is
    /// made: at 2.4 KiB an entry, a list of them for 20,000 threads would
    /// hold 44 MiB for the time of the attach.
    pub(super) fn seed(
        &mut self,
        ebpf: &mut Ebpf,
        (tgid, pid): (u32, u32),
        tids: &[u32],
        mut entry_of: impl FnMut(u32) -> Option<WmThread>,
    ) {
        match self {
            Store::Hash(h) => {
                let Some(mut map) = entries_mut(&mut h.map) else {
                    return;
                };
                for &tid in tids {
                    if let Some(entry) = entry_of(tid) {
                        // BPF_NOEXIST: an entry the programs made first stays.
                        let _ = map.insert(&tid, &entry, 1);
                    }
                }
            }
            Store::Task(t) => {
                let Some(mut seeds) = entries_mut(&mut t.seeds) else {
                    return;
                };
                let mut seeded = Vec::new();
                for &tid in tids {
                    if let Some(entry) = entry_of(tid)
                        && seeds.insert(&tid, &entry, 0).is_ok()
                    {
                        seeded.push(tid);
                    }
                }
                if seeded.is_empty() {
                    return;
                }
                // The walk moves each seed into its thread's storage,
                // unless the programs made one first.
                let ctl = WmIterCtl {
                    tgid,
                    seed: 1,
                    reader: 0,
                };
                let _ = t.walk(ebpf, ctl, Some(pid), |_, _| {});
                if let Some(mut seeds) = entries_mut(&mut t.seeds) {
                    for tid in seeded {
                        let _ = seeds.remove(&tid);
                    }
                }
            }
        }
    }

    /// Deletes the entries of process `tgid`, which has just left the
    /// watched set (its bit is clear, so no new ones are made).
    pub(super) fn forget_process(&mut self, ebpf: &mut Ebpf, tgid: u32) {
        match self {
            Store::Hash(h) => {
                let mut stale = Vec::new();
                let _ = h.for_each(|tid, raw| {
                    if raw.tgid == u64::from(tgid) {
                        stale.push(tid);
                    }
                });
                if let Some(mut map) = entries_mut(&mut h.map) {
                    for tid in stale {
                        let _ = map.remove(&tid);
                    }
                }
            }
            // Every walk deletes the entries of processes not watched.
            Store::Task(t) => {
                let ctl = WmIterCtl {
                    tgid: NO_PROCESS,
                    seed: 0,
                    reader: 0,
                };
                let _ = t.walk(ebpf, ctl, None, |_, _| {});
            }
        }
    }
}

impl TaskStore {
    /// Runs the task iterator once with `ctl`, over the threads of process
    /// `pid` (of this process's PID namespace) or of every process, and
    /// calls `each` with every entry it writes out (`None`: unchanged since
    /// `ctl.reader` last got it whole); returns how many.
    fn walk(
        &mut self,
        ebpf: &mut Ebpf,
        ctl: WmIterCtl,
        pid: Option<u32>,
        mut each: impl FnMut(u32, Option<&WmThread>),
    ) -> Result<u32, KernelSourceError> {
        let fail = |what: String| KernelSourceError::Read(format!("task iterator: {what}"));
        self.ctl.set(0, &ctl, 0).map_err(read_error("iter_ctl"))?;
        let program: &mut Iter = ebpf
            .program_mut(ITERATOR)
            .ok_or_else(|| fail("not in the object".into()))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| fail(e.to_string()))?;
        let mut one_process = None;
        if let Some(pid) = pid
            && !self.whole_walks_only
        {
            let prog = program.fd().map_err(|e| fail(e.to_string()))?;
            match sys::task_iter_of_process(prog.as_fd(), pid) {
                Ok(file) => one_process = Some(file),
                // Before 6.1 the kernel refuses the parameter.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.whole_walks_only = true,
                Err(e) => return Err(fail(e.to_string())),
            }
        }
        let mut file = match one_process {
            Some(file) => file,
            None => {
                let link = program.attach().map_err(|e| fail(e.to_string()))?;
                let link = program.take_link(link).map_err(|e| fail(e.to_string()))?;
                link.into_file().map_err(|e| fail(e.to_string()))?
            }
        };
        // Read in pieces of READ_BATCH rows, each row handed on as soon as
        // it is whole: the output of a whole walk is 2.4 KiB a thread
        // (48 MiB at 20,000 threads), and a buffer of it kept between reads
        // was most of the watcher's memory on a process with many threads.
        // A row is the head alone when the entry is unchanged.
        let row = ITER_ROW_HEAD + size_of::<WmThread>();
        let piece = row.saturating_mul(READ_BATCH);
        if self.buf.len() != piece.saturating_add(row) {
            self.buf = vec![0; piece.saturating_add(row)];
        }
        let mut fetched = 0u32;
        // Bytes at the start of `buf` not yet handed on (less than a row).
        let mut held = 0usize;
        loop {
            let end = held.saturating_add(piece).min(self.buf.len());
            let Some(free) = self.buf.get_mut(held..end) else {
                return Err(fail("read buffer out of bounds".into()));
            };
            let n = match file.read(free) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(fail(e.to_string())),
            };
            let filled = held.saturating_add(n);
            let Some(data) = self.buf.get(..filled) else {
                return Err(fail("read buffer out of bounds".into()));
            };
            let mut rest = data;
            while let Some((head, after)) = rest.split_first_chunk::<ITER_ROW_HEAD>() {
                let tid = u32::from_ne_bytes([head[0], head[1], head[2], head[3]]);
                let unchanged = u32::from_ne_bytes([head[4], head[5], head[6], head[7]]) != 0;
                if unchanged {
                    each(tid, None);
                    rest = after;
                } else {
                    let Some(body) = after.get(..size_of::<WmThread>()) else {
                        break; // the rest of the row comes with the next read
                    };
                    // SAFETY: `body` is exactly size_of::<WmThread>() bytes,
                    // WmThread is plain old data (repr(C), integers only,
                    // every bit pattern valid), and the read is unaligned-safe.
                    let raw: WmThread = unsafe { std::ptr::read_unaligned(body.as_ptr().cast()) };
                    each(tid, Some(&raw));
                    rest = after.get(size_of::<WmThread>()..).unwrap_or_default();
                }
                fetched = fetched.saturating_add(1);
            }
            held = rest.len();
            // Move the part row to the front for the next read.
            self.buf.copy_within(filled.saturating_sub(held)..filled, 0);
        }
        Ok(fetched)
    }
}

impl HashStore {
    /// Calls `each` with every entry of the map; returns how many entries
    /// were fetched. Batches walk the map's buckets once, so a read costs
    /// the live entries plus a fixed walk of the buckets; kernels without
    /// batch operations (before 5.6) are read key by key.
    fn for_each(&mut self, mut each: impl FnMut(u32, &WmThread)) -> Result<u32, KernelSourceError> {
        let Map::HashMap(data) = &self.map else {
            return Err(KernelSourceError::Read(
                "eBPF map threads is not a hash map".into(),
            ));
        };
        if self.keys.is_empty() {
            let len = READ_BATCH.min(self.max_threads.max(1));
            self.keys = vec![0; len];
            self.values = vec![WmThread::ZERO; len];
        }
        let mut cursor = None;
        let mut fetched = 0u32;
        loop {
            let step = sys::lookup_batch(
                data.fd().as_fd(),
                &mut cursor,
                &mut self.keys,
                &mut self.values,
            )
            .map_err(|e| KernelSourceError::Read(format!("eBPF map threads: {e}")))?;
            let (n, done) = match step {
                // Never seen: the kernel fills at least one entry or ends.
                Batch::More(0) => {
                    return Err(KernelSourceError::Read(
                        "eBPF map threads: batch lookup made no progress".into(),
                    ));
                }
                Batch::More(n) => (n, false),
                Batch::Done(n) => (n, true),
                Batch::TooSmall => {
                    let len = self.keys.len().saturating_mul(2).max(READ_BATCH);
                    self.keys.resize(len, 0);
                    self.values.resize(len, WmThread::ZERO);
                    continue;
                }
                Batch::Unsupported if cursor.is_none() => {
                    return self.for_each_by_key(each);
                }
                Batch::Unsupported => {
                    return Err(KernelSourceError::Read(
                        "eBPF map threads: batch lookup refused mid-walk".into(),
                    ));
                }
            };
            for (tid, raw) in self.keys.iter().zip(&self.values).take(n) {
                each(*tid, raw);
            }
            fetched = fetched.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
            if done {
                return Ok(fetched);
            }
        }
    }

    /// The key-by-key walk. A key deleted under it makes the kernel start
    /// over from the first key, so duplicates are skipped, and the walk
    /// stops after twice the map's capacity.
    fn for_each_by_key(
        &self,
        mut each: impl FnMut(u32, &WmThread),
    ) -> Result<u32, KernelSourceError> {
        let map: HashMap<&MapData, u32, WmThread> =
            HashMap::try_from(&self.map).map_err(read_error("threads"))?;
        let budget = self.max_threads.max(1).saturating_mul(2);
        let mut seen = HashSet::new();
        let mut fetched = 0u32;
        for item in map.iter().take(budget) {
            let (tid, raw) = item.map_err(read_error("threads"))?;
            fetched = fetched.saturating_add(1);
            if seen.insert(tid) {
                each(tid, &raw);
            }
        }
        Ok(fetched)
    }

    /// Calls `each` with the entry of every thread in `tids` that has one:
    /// one lookup per thread, whatever else the map holds.
    fn for_each_listed(
        &self,
        tids: &[u32],
        mut each: impl FnMut(u32, &WmThread),
    ) -> Result<u32, KernelSourceError> {
        let map: HashMap<&MapData, u32, WmThread> =
            HashMap::try_from(&self.map).map_err(read_error("threads"))?;
        let mut fetched = 0u32;
        for &tid in tids {
            match map.get(&tid, 0) {
                Ok(raw) => {
                    fetched = fetched.saturating_add(1);
                    each(tid, &raw);
                }
                // Not seen by the programs yet, or exited since the listing.
                Err(MapError::KeyNotFound) => {}
                Err(e) => return Err(read_error("threads")(e)),
            }
        }
        Ok(fetched)
    }
}

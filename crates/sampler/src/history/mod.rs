//! The bounded ring of stored snapshots.
//!
//! One storage shape for everything a snapshot holds:
//! - threads as [`ThreadRow`] (48 bytes on 64-bit targets: one shared
//!   identity pointer and five `u64` counters);
//! - probe and kernel counters as [`packed::Packed`] frames: each record the
//!   difference from a shared key frame, zero runs skipped, names stored in
//!   the key frame only.
//!
//! Snapshots are `Arc`s, so a reader copies the ring (one pointer per
//! snapshot) under the lock and does its work after releasing it. Thread
//! buffers of evicted snapshots are reused when no reader still holds them.

mod codec;
mod packed;

use std::collections::VecDeque;
use std::sync::Arc;

pub(crate) use packed::Encoder;
use packed::{Detail, KeyFrame, Packed, kernel_head, unpack_kernel, unpack_kernel_with};

use crate::kernel::KernelSample;
use crate::model::{LoopStats, SleepStats, ThreadRow, present};
use crate::model::{ProcessSample, SampleWarning, Snapshot, ThreadSample};

/// Bytes one stored thread-sample takes in history.
pub const BYTES_PER_STORED_THREAD_SAMPLE: usize = std::mem::size_of::<ThreadRow>();

/// Everything of a snapshot except its threads, probes and kernel counters.
#[derive(Debug, Clone)]
pub(crate) struct Header {
    pub seq: u64,
    pub monotonic_ns: u64,
    pub unix_time_ns: u64,
    pub process: ProcessSample,
    pub switch_split_read: bool,
    pub sampler_cost_ns: u64,
    pub total_sampler_cpu_time_ns: u64,
    pub warnings: Vec<SampleWarning>,
}

/// One stored snapshot.
#[derive(Debug)]
pub(crate) struct Stored {
    pub header: Header,
    pub threads: Vec<ThreadRow>,
    loops: Packed,
    sleeps: Packed,
    kernel: Option<Packed>,
}

/// The encoders of one sampler's probe and kernel frames; kept by the
/// sampler across snapshots.
#[derive(Debug, Default)]
pub(crate) struct Encoders {
    loops: Encoder,
    sleeps: Encoder,
    kernel: Encoder,
}

impl Stored {
    /// Packs a snapshot's probe and kernel counters for storage.
    pub(crate) fn new(
        encoders: &mut Encoders,
        header: Header,
        threads: Vec<ThreadRow>,
        loops: &[LoopStats],
        sleeps: &[SleepStats],
        kernel: Option<&KernelSample>,
    ) -> Stored {
        Stored {
            header,
            threads,
            loops: encoders.loops.encode(&[], loops),
            sleeps: encoders.sleeps.encode(&[], sleeps),
            kernel: kernel.map(|k| encoders.kernel.encode(&kernel_head(k), &k.threads)),
        }
    }

    /// The loop probes' counters, sorted by probe id.
    pub(crate) fn loops(&self) -> Vec<LoopStats> {
        self.loops.unpack().1
    }

    /// The sleep probes' counters, sorted by probe id.
    pub(crate) fn sleeps(&self) -> Vec<SleepStats> {
        self.sleeps.unpack().1
    }

    /// The kernel sample, threads sorted by TID.
    pub(crate) fn kernel(&self) -> Option<KernelSample> {
        self.kernel.as_ref().map(unpack_kernel)
    }

    /// The kernel sample with what an interval reads of each thread
    /// (`Detail::Counters`: no histograms, no name), threads sorted by
    /// TID: the interval's figures are the same as from
    /// [`Stored::kernel`], at a fraction of the allocations.
    pub(crate) fn kernel_counters(&self) -> Option<KernelSample> {
        self.kernel
            .as_ref()
            .map(|p| unpack_kernel_with(p, Detail::Counters))
    }

    /// Bytes this snapshot occupies, key frames excluded.
    fn size(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.threads.capacity() * BYTES_PER_STORED_THREAD_SAMPLE
            + self.header.warnings.capacity() * std::mem::size_of::<SampleWarning>()
            + self.loops.size()
            + self.sleeps.size()
            + self.kernel.as_ref().map_or(0, Packed::size)
    }

    fn key_frames(&self) -> impl Iterator<Item = &Arc<KeyFrame>> {
        [Some(&self.loops), Some(&self.sleeps), self.kernel.as_ref()]
            .into_iter()
            .flatten()
            .map(Packed::key_frame)
    }
}

impl ThreadRow {
    /// The public record of this row.
    pub(crate) fn to_sample(&self) -> ThreadSample {
        ThreadSample {
            tid: self.ident.tid,
            serial: self.ident.serial,
            name: self.ident.name.to_string(),
            total_cpu_time_ns: self.total_cpu_time_ns,
            cpu_time_source: self.ident.cpu_time_source,
            total_run_queue_wait_ns: present(self.total_run_queue_wait_ns),
            total_switches: present(self.total_switches),
            total_voluntary_switches: present(self.total_voluntary_switches),
            total_involuntary_switches: present(self.total_involuntary_switches),
        }
    }
}

impl Stored {
    /// The public record (allocates; not for the sampling path).
    pub(crate) fn to_snapshot(&self) -> Snapshot {
        let h = &self.header;
        Snapshot {
            seq: h.seq,
            monotonic_ns: h.monotonic_ns,
            unix_time_ns: h.unix_time_ns,
            process: h.process.clone(),
            threads: self.threads.iter().map(ThreadRow::to_sample).collect(),
            switch_split_read: h.switch_split_read,
            sampler_cost_ns: h.sampler_cost_ns,
            total_sampler_cpu_time_ns: h.total_sampler_cpu_time_ns,
            loops: self.loops(),
            sleeps: self.sleeps(),
            kernel: self.kernel(),
            warnings: h.warnings.clone(),
        }
    }
}

/// Snapshots the byte budget never drops: an interval needs two.
pub(crate) const MIN_KEPT_SNAPSHOTS: usize = 2;

/// A ring of at most `capacity` snapshots and, beyond its two newest, at
/// most `budget` bytes, oldest first. Cloning it copies one pointer per
/// snapshot: what a reader takes under the lock.
#[derive(Debug, Clone)]
pub(crate) struct History {
    capacity: usize,
    /// Byte budget (see [`crate::SamplerConfig::history_budget_bytes`]).
    budget: usize,
    ring: VecDeque<Arc<Stored>>,
    /// Bytes held by the stored snapshots, key frames included.
    bytes: usize,
    /// Snapshots dropped because `capacity` was reached.
    dropped_for_count: u64,
    /// Snapshots dropped early because `budget` was reached.
    dropped_for_bytes: u64,
}

fn same_key(a: &Arc<KeyFrame>, b: &Arc<KeyFrame>) -> bool {
    Arc::ptr_eq(a, b)
}

impl History {
    /// A ring of at most `capacity` snapshots (at least 1) and `budget` bytes.
    pub(crate) fn new(capacity: usize, budget: u64) -> Self {
        History {
            capacity: capacity.max(1),
            budget: usize::try_from(budget).unwrap_or(usize::MAX),
            ring: VecDeque::new(),
            bytes: 0,
            dropped_for_count: 0,
            dropped_for_bytes: 0,
        }
    }

    /// Stores a snapshot, then drops the oldest ones while more than
    /// `capacity` are stored, or while more than `budget` bytes are held
    /// and more than [`MIN_KEPT_SNAPSHOTS`] are stored. Returns a thread
    /// buffer to sample into next (a dropped snapshot's when no reader
    /// holds it, else an empty one).
    /// Stores a snapshot of `threads` alone (no probe, no kernel sample):
    /// the history the tests of the rules and intervals build.
    #[cfg(test)]
    pub(crate) fn push_rows(
        &mut self,
        enc: &mut Encoders,
        header: Header,
        threads: Vec<ThreadRow>,
    ) {
        self.push(Arc::new(Stored::new(enc, header, threads, &[], &[], None)));
    }

    pub(crate) fn push(&mut self, stored: Arc<Stored>) -> Vec<ThreadRow> {
        // Key frames are shared by consecutive snapshots: count each once,
        // when its first snapshot arrives and when its last one leaves.
        let prev = self.ring.back();
        for k in stored.key_frames() {
            if !prev.is_some_and(|p| p.key_frames().any(|pk| same_key(pk, k))) {
                self.bytes += k.size();
            }
        }
        self.bytes += stored.size();
        self.ring.push_back(stored);
        let mut buffer = Vec::new();
        loop {
            let for_count = self.ring.len() > self.capacity;
            let for_bytes = self.bytes > self.budget && self.ring.len() > MIN_KEPT_SNAPSHOTS;
            if !for_count && !for_bytes {
                break;
            }
            let Some(old) = self.ring.pop_front() else {
                break;
            };
            if for_count {
                self.dropped_for_count += 1;
            } else {
                self.dropped_for_bytes += 1;
            }
            let next = self.ring.front();
            for k in old.key_frames() {
                if !next.is_some_and(|n| n.key_frames().any(|nk| same_key(nk, k))) {
                    self.bytes = self.bytes.saturating_sub(k.size());
                }
            }
            self.bytes = self.bytes.saturating_sub(old.size());
            if buffer.capacity() == 0
                && let Ok(old) = Arc::try_unwrap(old)
            {
                buffer = old.threads;
                buffer.clear();
            }
        }
        buffer
    }

    /// Snapshots dropped so far because `history` snapshots were stored.
    pub(crate) fn dropped_for_count(&self) -> u64 {
        self.dropped_for_count
    }

    /// Snapshots dropped so far before `history` was reached, because the
    /// byte budget was.
    pub(crate) fn dropped_for_bytes(&self) -> u64 {
        self.dropped_for_bytes
    }

    /// The byte budget, in bytes.
    pub(crate) fn budget(&self) -> usize {
        self.budget
    }

    /// Bytes held by the stored snapshots (threads, probe and kernel
    /// counters, key frames, headers).
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn len(&self) -> usize {
        self.ring.len()
    }

    pub(crate) fn latest(&self) -> Option<&Stored> {
        self.ring.back().map(|s| &**s)
    }

    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = &Stored> + ExactSizeIterator {
        self.ring.iter().map(|s| &**s)
    }

    pub(crate) fn get(&self, index: usize) -> Option<&Stored> {
        self.ring.get(index).map(|s| &**s)
    }

    /// The outermost snapshots with `seq` in `from_seq..=to_seq` that read
    /// the voluntary/involuntary split, if there are two.
    pub(crate) fn split_bounds(&self, from_seq: u64, to_seq: u64) -> Option<(&Stored, &Stored)> {
        let within = |s: &&Stored| {
            s.header.switch_split_read && s.header.seq >= from_seq && s.header.seq <= to_seq
        };
        let a = self.iter().find(within)?;
        let b = self.iter().rev().find(within)?;
        (a.header.seq < b.header.seq).then_some((a, b))
    }

    /// The oldest stored snapshot taken at or after `monotonic_ns`.
    /// The newest snapshot taken at or before `monotonic_ns`, if any.
    pub(crate) fn last_at_or_before(&self, monotonic_ns: u64) -> Option<&Stored> {
        let i = self
            .ring
            .partition_point(|s| s.header.monotonic_ns <= monotonic_ns);
        self.get(i.checked_sub(1)?)
    }

    pub(crate) fn first_since(&self, monotonic_ns: u64) -> Option<&Stored> {
        let i = self
            .ring
            .partition_point(|s| s.header.monotonic_ns < monotonic_ns);
        self.get(i)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::ThreadIdent;

    fn header(seq: u64) -> Header {
        Header {
            seq,
            monotonic_ns: seq * 10,
            unix_time_ns: 0,
            process: ProcessSample::default(),
            switch_split_read: false,
            sampler_cost_ns: 0,
            total_sampler_cpu_time_ns: 0,
            warnings: Vec::new(),
        }
    }

    fn stored(enc: &mut Encoders, seq: u64, threads: Vec<ThreadRow>) -> Arc<Stored> {
        let probe = LoopStats {
            id: 1,
            name: "io".into(),
            total_wakeups: seq,
            ..Default::default()
        };
        Arc::new(Stored::new(enc, header(seq), threads, &[probe], &[], None))
    }

    /// The identity of one thread, shared by its samples.
    fn one_ident() -> Arc<ThreadIdent> {
        ThreadIdent::thread_clock(1, 0, "t")
    }

    /// A sample of `ident`'s thread with `cpu_ns` of CPU time.
    fn thread(ident: &Arc<ThreadIdent>, cpu_ns: u64) -> ThreadRow {
        ThreadRow {
            ident: ident.clone(),
            total_cpu_time_ns: cpu_ns,
            total_run_queue_wait_ns: 0,
            total_switches: 0,
            total_voluntary_switches: 0,
            total_involuntary_switches: 0,
        }
    }

    /// The bytes of `h` counted from scratch: every snapshot, and every
    /// distinct key frame once.
    fn recount(h: &History) -> usize {
        let mut keys: Vec<*const KeyFrame> = Vec::new();
        let mut bytes = 0;
        for s in h.iter() {
            bytes += s.size();
            for k in s.key_frames() {
                if !keys.contains(&Arc::as_ptr(k)) {
                    keys.push(Arc::as_ptr(k));
                    bytes += k.size();
                }
            }
        }
        bytes
    }

    #[test]
    fn thread_row_is_48_bytes_on_64_bit() {
        if cfg!(target_pointer_width = "64") {
            assert_eq!(BYTES_PER_STORED_THREAD_SAMPLE, 48);
        }
    }

    #[test]
    fn ring_is_bounded_reuses_buffers_and_counts_its_bytes() {
        let ident = one_ident();
        let mut enc = Encoders::default();
        let mut h = History::new(3, u64::MAX);
        let mut buf = Vec::new();
        let mut reused = 0;
        for seq in 0..100 {
            buf.push(thread(&ident, seq));
            let threads = std::mem::take(&mut buf);
            buf = h.push(stored(&mut enc, seq, threads));
            assert!(buf.is_empty());
            reused += usize::from(buf.capacity() >= 1);
            assert_eq!(h.bytes(), recount(&h), "after snapshot {seq}");
        }
        assert_eq!(h.len(), 3);
        assert_eq!((h.dropped_for_count(), h.dropped_for_bytes()), (97, 0));
        let seqs: Vec<u64> = h.iter().map(|s| s.header.seq).collect();
        assert_eq!(seqs, vec![97, 98, 99]);
        // Only the stored snapshots (and nothing evicted) keep the identity alive.
        assert_eq!(Arc::strong_count(&ident), 1 + 3);
        assert_eq!(reused, 97, "evicted buffers handed back for reuse");
        assert_eq!(h.first_since(975).map(|s| s.header.seq), Some(98));
        assert_eq!(h.last_at_or_before(975).map(|s| s.header.seq), Some(97));
        assert_eq!(h.last_at_or_before(980).map(|s| s.header.seq), Some(98));
        assert!(h.last_at_or_before(969).is_none());
        let latest = h.latest().unwrap().to_snapshot();
        assert_eq!(latest.threads[0].total_cpu_time_ns, 99);
        assert_eq!(latest.loops[0].total_wakeups, 99);
        assert_eq!(latest.loops[0].name, "io");
    }

    #[test]
    fn a_reader_copy_keeps_its_snapshots_and_the_ring_still_advances() {
        let mut enc = Encoders::default();
        let mut h = History::new(2, u64::MAX);
        for seq in 0..2 {
            h.push(stored(&mut enc, seq, Vec::with_capacity(4)));
        }
        let reader = h.clone();
        for seq in 2..5 {
            // The reader still holds snapshot 0 and 1: no buffer to reuse, no panic.
            let buf = h.push(stored(&mut enc, seq, Vec::with_capacity(4)));
            assert!(seq > 3 || buf.capacity() == 0);
            assert_eq!(h.bytes(), recount(&h));
        }
        let seqs: Vec<u64> = reader.iter().map(|s| s.header.seq).collect();
        assert_eq!(seqs, vec![0, 1]);
        assert_eq!(reader.get(1).unwrap().loops()[0].total_wakeups, 1);
    }

    #[test]
    fn the_byte_budget_drops_the_oldest_first_and_keeps_two() {
        let ident = one_ident();
        // Snapshots of 100 threads each (about 5 KB): a 64 KiB budget holds
        // about a dozen, far fewer than the 1,000 of the count.
        let mut enc = Encoders::default();
        let budget = 64 * 1024;
        let mut h = History::new(1000, budget);
        for seq in 0..200 {
            let threads = (0..100).map(|_| thread(&ident, seq)).collect();
            h.push(stored(&mut enc, seq, threads));
            assert!(h.bytes() <= budget as usize, "{} after {seq}", h.bytes());
            assert_eq!(h.bytes(), recount(&h), "after snapshot {seq}");
        }
        let kept = h.len() as u64;
        assert!((5..50).contains(&kept), "{kept}");
        assert_eq!(h.dropped_for_bytes(), 200 - kept);
        assert_eq!(h.dropped_for_count(), 0);
        let seqs: Vec<u64> = h.iter().map(|s| s.header.seq).collect();
        assert_eq!(
            seqs,
            (200 - kept..200).collect::<Vec<_>>(),
            "the newest stay"
        );

        // Snapshots bigger than the whole budget: the two newest stay.
        let mut h = History::new(1000, budget);
        for seq in 0..10 {
            let threads = (0..5000).map(|_| thread(&ident, seq)).collect();
            h.push(stored(&mut enc, seq, threads));
            assert!(h.len() <= MIN_KEPT_SNAPSHOTS);
            assert_eq!(h.bytes(), recount(&h));
        }
        assert_eq!(h.len(), MIN_KEPT_SNAPSHOTS);
        assert_eq!(h.dropped_for_bytes(), 8);
    }
}

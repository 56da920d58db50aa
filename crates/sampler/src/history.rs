//! The bounded ring of stored snapshots.
//!
//! Threads are stored packed ([`PackedThread`], 48 bytes on 64-bit targets:
//! one shared identity pointer and five `u64` counters), so the default
//! history of 300 samples of 256 threads holds ~3.5 MiB of thread samples.
//! Buffers of evicted snapshots are reused, so a full ring allocates nothing.

use std::collections::VecDeque;

use crate::kernel::KernelSample;
use crate::model::{ProcessSample, SampleWarning, Snapshot, ThreadSample};
use crate::platform::{PackedThread, present};
use crate::probe::{LoopStats, SleepStats};

/// Bytes one stored thread-sample takes in history.
pub const BYTES_PER_STORED_THREAD_SAMPLE: usize = std::mem::size_of::<PackedThread>();

/// Everything of a snapshot except its threads.
#[derive(Debug, Clone)]
pub(crate) struct Header {
    pub seq: u64,
    pub monotonic_ns: u64,
    pub unix_time_ns: u64,
    pub process: ProcessSample,
    pub switch_split_read: bool,
    pub sampler_cost_ns: u64,
    pub sampler_cpu_time_ns: u64,
    pub loops: Vec<LoopStats>,
    pub sleeps: Vec<SleepStats>,
    pub kernel: Option<KernelSample>,
    pub warnings: Vec<SampleWarning>,
}

/// One stored snapshot.
#[derive(Debug)]
pub(crate) struct Stored {
    pub header: Header,
    pub threads: Vec<PackedThread>,
}

impl PackedThread {
    /// The public record of this packed sample.
    pub(crate) fn to_sample(&self) -> ThreadSample {
        ThreadSample {
            tid: self.ident.tid,
            serial: self.ident.serial,
            name: self.ident.name.to_string(),
            cpu_time_ns: self.cpu_time_ns,
            cpu_time_source: self.ident.cpu_time_source,
            run_queue_wait_ns: present(self.run_queue_wait_ns),
            timeslices: present(self.timeslices),
            voluntary_switches: present(self.voluntary_switches),
            involuntary_switches: present(self.involuntary_switches),
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
            threads: self.threads.iter().map(PackedThread::to_sample).collect(),
            switch_split_read: h.switch_split_read,
            sampler_cost_ns: h.sampler_cost_ns,
            sampler_cpu_time_ns: h.sampler_cpu_time_ns,
            loops: h.loops.clone(),
            sleeps: h.sleeps.clone(),
            kernel: h.kernel.clone(),
            warnings: h.warnings.clone(),
        }
    }
}

/// A ring of at most `capacity` snapshots, oldest first.
#[derive(Debug)]
pub(crate) struct History {
    capacity: usize,
    ring: VecDeque<Stored>,
}

impl History {
    pub(crate) fn new(capacity: usize) -> Self {
        History {
            capacity: capacity.max(1),
            ring: VecDeque::new(),
        }
    }

    /// Stores a snapshot whose threads are in `threads`; afterwards `threads`
    /// holds an empty buffer to sample into next (the evicted snapshot's,
    /// once the ring is full).
    pub(crate) fn push(&mut self, header: Header, threads: &mut Vec<PackedThread>) {
        let mut buffer = if self.ring.len() >= self.capacity {
            self.ring.pop_front().map(|s| s.threads).unwrap_or_default()
        } else {
            Vec::with_capacity(threads.len())
        };
        buffer.clear();
        std::mem::swap(&mut buffer, threads);
        self.ring.push_back(Stored {
            header,
            threads: buffer,
        });
    }

    pub(crate) fn len(&self) -> usize {
        self.ring.len()
    }

    pub(crate) fn latest(&self) -> Option<&Stored> {
        self.ring.back()
    }

    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = &Stored> + ExactSizeIterator {
        self.ring.iter()
    }

    pub(crate) fn get(&self, index: usize) -> Option<&Stored> {
        self.ring.get(index)
    }

    /// The outermost snapshots with `seq` in `from_seq..=to_seq` that read
    /// the voluntary/involuntary split, if there are two.
    pub(crate) fn split_bounds(&self, from_seq: u64, to_seq: u64) -> Option<(&Stored, &Stored)> {
        let within = |s: &&Stored| {
            s.header.switch_split_read && s.header.seq >= from_seq && s.header.seq <= to_seq
        };
        let a = self.ring.iter().find(within)?;
        let b = self.ring.iter().rev().find(within)?;
        (a.header.seq < b.header.seq).then_some((a, b))
    }

    /// The oldest stored snapshot taken at or after `monotonic_ns`.
    pub(crate) fn first_since(&self, monotonic_ns: u64) -> Option<&Stored> {
        let i = self
            .ring
            .partition_point(|s| s.header.monotonic_ns < monotonic_ns);
        self.ring.get(i)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::CpuTimeSource;
    use crate::platform::ThreadIdent;

    fn header(seq: u64) -> Header {
        Header {
            seq,
            monotonic_ns: seq * 10,
            unix_time_ns: 0,
            process: ProcessSample::default(),
            switch_split_read: false,
            sampler_cost_ns: 0,
            sampler_cpu_time_ns: 0,
            loops: Vec::new(),
            sleeps: Vec::new(),
            kernel: None,
            warnings: Vec::new(),
        }
    }

    #[test]
    fn packed_thread_is_48_bytes_on_64_bit() {
        if cfg!(target_pointer_width = "64") {
            assert_eq!(BYTES_PER_STORED_THREAD_SAMPLE, 48);
        }
    }

    #[test]
    fn ring_is_bounded_and_reuses_buffers() {
        let ident = Arc::new(ThreadIdent {
            tid: 1,
            serial: 0,
            name: "t".into(),
            cpu_time_source: CpuTimeSource::ThreadClock,
        });
        let mut h = History::new(3);
        let mut buf = Vec::new();
        for seq in 0..10 {
            buf.push(PackedThread {
                ident: ident.clone(),
                cpu_time_ns: seq,
                run_queue_wait_ns: 0,
                timeslices: 0,
                voluntary_switches: 0,
                involuntary_switches: 0,
            });
            h.push(header(seq), &mut buf);
            assert!(buf.is_empty());
        }
        assert_eq!(h.len(), 3);
        let seqs: Vec<u64> = h.iter().map(|s| s.header.seq).collect();
        assert_eq!(seqs, vec![7, 8, 9]);
        // Only the stored snapshots (and nothing evicted) keep the identity alive.
        assert_eq!(Arc::strong_count(&ident), 1 + 3);
        assert!(buf.capacity() >= 1, "evicted buffer handed back for reuse");
        assert_eq!(h.first_since(75).map(|s| s.header.seq), Some(8));
        assert_eq!(h.latest().unwrap().to_snapshot().threads[0].cpu_time_ns, 9);
    }
}

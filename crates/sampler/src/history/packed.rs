//! Probe and kernel counters as stored in history: packed records, each the
//! difference from the same entity in a shared key frame.
//!
//! Every [`KEY_FRAME_EVERY`] snapshots the sampler writes a key frame: every
//! entity's fields against zeros. The snapshots in between store each
//! entity's difference from its key-frame record ([`super::codec`]), so
//! decoding any snapshot reads one key frame and one delta, and an unchanged
//! probe or idle thread costs two bytes. Key frames are shared (`Arc`) by the
//! snapshots that refer to them and freed with the last one.
//!
//! The field layout of each record type is written once, in its
//! [`Record`] implementation below; fields appended later read as 0 from
//! older records.

use std::sync::Arc;

use super::codec::{self, Fields, push_str};
use crate::histogram::{LOG2_BUCKETS, Log2Histogram};
use crate::kernel::{
    FdKind, KernelSample, KernelThreadStats, OffCpuTime, ReadyFd, Syscall, SyscallCalls, Waker,
};
use crate::model::{LoopKind, LoopStats, SleepStats};

/// A new key frame is written every this many snapshots (at most): a
/// longer period stores less, a shorter one keeps deltas smaller. 32 keeps
/// 256 eBPF threads × 300 snapshots under 16 MiB with every thread active
/// (see the memory test and BENCHMARKS.md, "History: bytes per stored
/// snapshot").
pub(crate) const KEY_FRAME_EVERY: u32 = 32;

/// An entity stored packed: a key unique within its snapshot and a list of fields.
pub(crate) trait Record: Sized {
    /// Identity within a snapshot (probe id, TID).
    fn key(&self) -> u64;
    /// Appends the fields, in this type's fixed order.
    fn pack(&self, fields: &mut Vec<u64>);
    /// Rebuilds the record from its key and fields.
    fn unpack(key: u64, fields: &[u64]) -> Self;
}

fn push_histogram(fields: &mut Vec<u64>, h: &Log2Histogram) {
    fields.extend((0..LOG2_BUCKETS).map(|i| h.buckets.get(i).copied().unwrap_or(0)));
}

fn histogram(f: &mut Fields<'_>) -> Log2Histogram {
    Log2Histogram::from_buckets(f.take(LOG2_BUCKETS))
}

fn optional(v: u64) -> Option<u64> {
    (v != 0).then_some(v)
}

impl Record for LoopStats {
    fn key(&self) -> u64 {
        self.id
    }
    fn pack(&self, f: &mut Vec<u64>) {
        f.extend([
            self.tid.unwrap_or(0),
            self.total_wakeups,
            self.total_idle_wakeups,
            self.total_timed_out_wakeups,
            self.total_early_wakeups,
            self.total_zero_timeout_waits,
            self.total_events,
            self.total_wait_ns,
            self.total_busy_ns,
            self.total_poll_delay_ns,
            self.total_unmatched_calls,
            self.current_wait_ns,
        ]);
        push_histogram(f, &self.poll_delay_histogram);
        push_str(f, &self.name);
        f.push(self.kind.code());
    }
    fn unpack(id: u64, fields: &[u64]) -> Self {
        let mut f = Fields::new(fields);
        LoopStats {
            id,
            tid: optional(f.next()),
            total_wakeups: f.next(),
            total_idle_wakeups: f.next(),
            total_timed_out_wakeups: f.next(),
            total_early_wakeups: f.next(),
            total_zero_timeout_waits: f.next(),
            total_events: f.next(),
            total_wait_ns: f.next(),
            total_busy_ns: f.next(),
            total_poll_delay_ns: f.next(),
            total_unmatched_calls: f.next(),
            current_wait_ns: f.next(),
            poll_delay_histogram: histogram(&mut f),
            name: f.string(),
            kind: LoopKind::from_code(f.next()),
        }
    }
}

impl Record for SleepStats {
    fn key(&self) -> u64 {
        self.id
    }
    fn pack(&self, f: &mut Vec<u64>) {
        f.extend([
            self.tid.unwrap_or(0),
            self.total_calls,
            self.total_requested_ns,
            self.total_actual_ns,
            self.total_cpu_ns,
            self.total_oversleep_ns,
            self.total_unmatched_calls,
        ]);
        push_histogram(f, &self.oversleep_histogram);
        push_str(f, &self.name);
    }
    fn unpack(id: u64, fields: &[u64]) -> Self {
        let mut f = Fields::new(fields);
        SleepStats {
            id,
            tid: optional(f.next()),
            total_calls: f.next(),
            total_requested_ns: f.next(),
            total_actual_ns: f.next(),
            total_cpu_ns: f.next(),
            total_oversleep_ns: f.next(),
            total_unmatched_calls: f.next(),
            oversleep_histogram: histogram(&mut f),
            name: f.string(),
        }
    }
}

impl Record for KernelThreadStats {
    fn key(&self) -> u64 {
        self.tid
    }
    fn pack(&self, f: &mut Vec<u64>) {
        let (p, s) = (&self.poll, &self.sleep);
        f.extend([
            self.total_on_cpu_ns,
            self.total_voluntary_switches,
            self.total_involuntary_switches,
        ]);
        f.extend(self.total_off_cpu.by_cause());
        f.extend([
            self.total_wakes,
            p.total_calls,
            p.total_idle_calls,
            p.total_zero_timeout_calls,
            p.total_infinite_timeout_calls,
            p.total_blocked_ns,
            s.total_calls,
            s.total_requested_ns,
            s.total_actual_ns,
        ]);
        push_histogram(f, &self.off_cpu_histogram);
        push_histogram(f, &self.run_queue_latency_histogram);
        push_histogram(f, &p.timeout_histogram);
        push_str(f, &self.name);
        f.push(self.top_wakers.len() as u64);
        for w in &self.top_wakers {
            f.extend([w.tid, w.total_wakes]);
            push_str(f, &w.name);
        }
        f.extend([
            p.total_blocked_calls,
            p.total_idle_nonblocking_calls,
            s.total_known_request_calls,
            s.total_interrupted_calls,
            s.total_interrupted_ns,
            self.total_interrupt_wakes,
            self.total_process_thread_wakes,
            self.total_other_process_wakes,
        ]);
        // One count per syscall of Syscall::ALL: fixed width, no tags.
        f.extend(Syscall::ALL.iter().map(|sc| {
            self.calls_by_syscall
                .iter()
                .find(|c| c.syscall == *sc)
                .map_or(0, |c| c.total_calls)
        }));
        f.extend([self.total_timed_futex_waits, self.total_futex_timeouts]);
        f.push(self.ready_fds.len() as u64);
        for r in &self.ready_fds {
            // The number as its 32 bits (a descriptor is never negative).
            f.extend([u64::from(r.fd.unsigned_abs()), r.kind.code()]);
        }
    }
    fn unpack(tid: u64, fields: &[u64]) -> Self {
        unpack_kernel_thread(tid, fields, Detail::Full)
    }
}

/// How much of a kernel thread record [`unpack_kernel_thread`] rebuilds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Detail {
    /// Every field.
    Full,
    /// Every field an interval reads
    /// ([`crate::interval::KernelThreadInterval`]): the counters, the
    /// calls by syscall, the top wakers and the ready descriptors. The
    /// three histograms and the thread's name are left empty (the
    /// interval takes the name from `/proc`): they were four of the
    /// record's allocations, and no interval or rule reads them.
    Counters,
}

/// Rebuilds a kernel thread record from its fields, with `detail`.
fn unpack_kernel_thread(tid: u64, fields: &[u64], detail: Detail) -> KernelThreadStats {
    let mut f = Fields::new(fields);
    let mut t = KernelThreadStats {
        tid,
        total_on_cpu_ns: f.next(),
        total_voluntary_switches: f.next(),
        total_involuntary_switches: f.next(),
        ..Default::default()
    };
    t.total_off_cpu = OffCpuTime::from_causes(std::array::from_fn(|_| f.next()));
    t.total_wakes = f.next();
    let p = &mut t.poll;
    p.total_calls = f.next();
    p.total_idle_calls = f.next();
    p.total_zero_timeout_calls = f.next();
    p.total_infinite_timeout_calls = f.next();
    p.total_blocked_ns = f.next();
    let s = &mut t.sleep;
    s.total_calls = f.next();
    s.total_requested_ns = f.next();
    s.total_actual_ns = f.next();
    if detail == Detail::Full {
        t.off_cpu_histogram = histogram(&mut f);
        t.run_queue_latency_histogram = histogram(&mut f);
        t.poll.timeout_histogram = histogram(&mut f);
        t.name = f.string();
    } else {
        f.take(3 * LOG2_BUCKETS);
        f.skip_string();
    }
    // Bounded by the fields present: a waker takes at least three.
    let wakers = usize::try_from(f.next()).unwrap_or(0).min(fields.len() / 3);
    t.top_wakers = (0..wakers)
        .map(|_| Waker {
            tid: f.next(),
            total_wakes: f.next(),
            name: f.string(),
        })
        .collect();
    t.poll.total_blocked_calls = f.next();
    t.poll.total_idle_nonblocking_calls = f.next();
    t.sleep.total_known_request_calls = f.next();
    t.sleep.total_interrupted_calls = f.next();
    t.sleep.total_interrupted_ns = f.next();
    t.total_interrupt_wakes = f.next();
    t.total_process_thread_wakes = f.next();
    t.total_other_process_wakes = f.next();
    t.calls_by_syscall = Syscall::ALL
        .iter()
        .map(|sc| SyscallCalls::new(*sc, f.next()))
        .filter(|c| c.total_calls > 0)
        .collect();
    t.total_timed_futex_waits = f.next();
    t.total_futex_timeouts = f.next();
    // Bounded by the fields present: a descriptor takes two.
    let ready = usize::try_from(f.next()).unwrap_or(0).min(fields.len() / 2);
    t.ready_fds = (0..ready)
        .map(|_| {
            let fd = i32::try_from(f.next()).unwrap_or(i32::MAX);
            ReadyFd::new(fd, FdKind::from_code(f.next()))
        })
        .collect();
    t
}

/// A key frame: every entity's fields against zeros.
#[derive(Debug)]
pub(crate) struct KeyFrame {
    bytes: Box<[u8]>,
}

impl KeyFrame {
    /// Bytes this key frame occupies.
    pub(crate) fn size(&self) -> usize {
        std::mem::size_of::<Self>() + self.bytes.len()
    }
}

/// One snapshot's entities of one kind (loops, sleeps or kernel threads).
#[derive(Debug, Clone)]
pub(crate) struct Packed {
    key: Arc<KeyFrame>,
    delta: Box<[u8]>,
}

/// Reads a frame's bytes entity by entity, in key order: the base of a
/// delta frame, looked up as the delta is written or read. Holds one
/// entity's fields, never the whole frame: a decoded frame of 20,000 kernel
/// threads is about 37 MiB (some 230 fields each), where its bytes are a
/// few hundred KiB.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Head fields of the frame.
    head: Vec<u64>,
    /// Entities not read yet.
    left: u64,
    key: u64,
    /// The entity last read: `(key, fields)`.
    current: Option<(u64, Vec<u64>)>,
}

impl<'a> Cursor<'a> {
    /// A cursor at the first entity of `bytes`; `None` if its head is corrupt.
    fn new(bytes: &'a [u8]) -> Option<Cursor<'a>> {
        let mut pos = 0;
        let mut head = Vec::new();
        codec::decode(&[], bytes, &mut pos, &mut head)?;
        let left = codec::get_varint(bytes, &mut pos)?;
        Some(Cursor {
            bytes,
            pos,
            head,
            left,
            key: 0,
            current: None,
        })
    }

    /// The fields of entity `key` (empty if the frame has none), for keys
    /// asked in ascending order; `None` if the bytes are corrupt.
    fn seek(&mut self, key: u64) -> Option<&[u64]> {
        loop {
            if let Some((k, _)) = &self.current
                && *k >= key
            {
                break;
            }
            if self.left == 0 {
                break;
            }
            self.left -= 1;
            self.key = self
                .key
                .wrapping_add(codec::get_varint(self.bytes, &mut self.pos)?);
            let (_, fields) = self.current.get_or_insert_with(|| (0, Vec::new()));
            codec::decode(&[], self.bytes, &mut self.pos, fields)?;
            if let Some(current) = &mut self.current {
                current.0 = self.key;
            }
        }
        Some(match &self.current {
            Some((k, fields)) if *k == key => fields.as_slice(),
            _ => &[],
        })
    }
}

/// Writes a frame of `records` (taken in the order of `order`, sorted by
/// key) with `head`, each entity against its namesake in `base` (a key
/// frame's bytes; `None` for zeros). `fields` is a scratch buffer.
fn write_frame<R: Record>(
    base: Option<&[u8]>,
    head: &[u64],
    records: &[R],
    order: &[(u64, usize)],
    fields: &mut Vec<u64>,
    out: &mut Vec<u8>,
) {
    let mut cursor = base.and_then(Cursor::new);
    let no_head: &[u64] = &[];
    codec::encode(cursor.as_ref().map_or(no_head, |c| &c.head), head, out);
    codec::put_varint(out, order.len() as u64);
    // Keys are sorted: each is stored as the step from the previous one.
    let mut prev = 0;
    for &(key, i) in order {
        codec::put_varint(out, key.wrapping_sub(prev));
        prev = key;
        fields.clear();
        if let Some(r) = records.get(i) {
            r.pack(fields);
        }
        // A key frame this encoder wrote is never corrupt: zeros otherwise.
        let base = cursor.as_mut().and_then(|c| c.seek(key)).unwrap_or(&[]);
        codec::encode(base, fields, out);
    }
}

impl Packed {
    /// Bytes this snapshot's delta occupies (its key frame is counted apart).
    pub(crate) fn size(&self) -> usize {
        std::mem::size_of::<Self>() + self.delta.len()
    }

    /// The shared key frame.
    pub(crate) fn key_frame(&self) -> &Arc<KeyFrame> {
        &self.key
    }

    /// The head fields and records of the delta, each rebuilt against its
    /// entity of the key frame as it is read.
    fn try_unpack<R: Record>(&self) -> Option<(Vec<u64>, Vec<R>)> {
        self.try_unpack_with(R::unpack)
    }

    /// [`Packed::try_unpack`], each record rebuilt by `unpack` from its
    /// key and fields.
    fn try_unpack_with<R>(&self, unpack: impl Fn(u64, &[u64]) -> R) -> Option<(Vec<u64>, Vec<R>)> {
        let mut base = Cursor::new(&self.key.bytes)?;
        let bytes = &self.delta;
        let mut pos = 0;
        let mut head = Vec::new();
        codec::decode(&base.head, bytes, &mut pos, &mut head)?;
        let count = usize::try_from(codec::get_varint(bytes, &mut pos)?).ok()?;
        // Each entity takes at least three bytes: no buffer backs a larger count.
        let mut records = Vec::with_capacity(count.min(bytes.len() / 3));
        let mut fields = Vec::new();
        let mut key = 0u64;
        for _ in 0..count {
            key = key.wrapping_add(codec::get_varint(bytes, &mut pos)?);
            codec::decode(base.seek(key)?, bytes, &mut pos, &mut fields)?;
            records.push(unpack(key, &fields));
        }
        Some((head, records))
    }

    /// The records, sorted by key, and the head fields. Empty when the
    /// bytes are corrupt, which [`Encoder`] never writes.
    pub(crate) fn unpack<R: Record>(&self) -> (Vec<u64>, Vec<R>) {
        self.try_unpack().unwrap_or_default()
    }
}

/// Writes the frames of one kind of entity, snapshot after snapshot.
///
/// It keeps the current key frame as bytes only and writes each record
/// against its entity there as it goes, so what it holds besides those
/// bytes is 16 bytes a record (the key order), not a decoded frame.
#[derive(Debug)]
pub(crate) struct Encoder {
    /// The current key frame.
    key: Arc<KeyFrame>,
    since_key: u32,
    /// `(key, index)` of the records, sorted (reused from call to call).
    order: Vec<(u64, usize)>,
    /// One record's fields (reused).
    fields: Vec<u64>,
    bytes: Vec<u8>,
}

impl Default for Encoder {
    fn default() -> Self {
        let mut bytes = Vec::new();
        write_frame::<LoopStats>(None, &[], &[], &[], &mut Vec::new(), &mut bytes);
        Encoder {
            key: Arc::new(KeyFrame {
                bytes: bytes.as_slice().into(),
            }),
            // The first call writes a key frame.
            since_key: KEY_FRAME_EVERY,
            order: Vec::new(),
            fields: Vec::new(),
            bytes,
        }
    }
}

impl Encoder {
    /// Packs `records` (any order) with the `head` fields; starts a new key
    /// frame every [`KEY_FRAME_EVERY`] calls.
    pub(crate) fn encode<R: Record>(&mut self, head: &[u64], records: &[R]) -> Packed {
        let Encoder {
            key,
            since_key,
            order,
            fields,
            bytes,
        } = self;
        order.clear();
        order.extend(records.iter().enumerate().map(|(i, r)| (r.key(), i)));
        order.sort_unstable();
        if order.capacity() > 2 * order.len().max(64) {
            // The process had far more threads once: give that back.
            order.shrink_to_fit();
        }

        if *since_key >= KEY_FRAME_EVERY {
            bytes.clear();
            write_frame(None, head, records, order, fields, bytes);
            *key = Arc::new(KeyFrame {
                bytes: bytes.as_slice().into(),
            });
            *since_key = 0;
        }
        *since_key += 1;
        bytes.clear();
        write_frame(Some(&key.bytes), head, records, order, fields, bytes);
        if bytes.capacity() > 2 * bytes.len().max(4096) {
            bytes.shrink_to_fit();
        }
        Packed {
            key: key.clone(),
            delta: bytes.as_slice().into(),
        }
    }
}

/// Head fields of a kernel frame: pid, dropped events and thread exits,
/// then the source name.
pub(crate) fn kernel_head(k: &KernelSample) -> Vec<u64> {
    let mut head = vec![
        u64::from(k.pid),
        k.total_dropped_events,
        k.total_thread_exits,
    ];
    push_str(&mut head, &k.source);
    head
}

/// Rebuilds a kernel sample from its packed frame.
pub(crate) fn unpack_kernel(p: &Packed) -> KernelSample {
    unpack_kernel_with(p, Detail::Full)
}

/// Rebuilds a kernel sample from its packed frame, its threads with
/// `detail`. Empty when the bytes are corrupt, as [`Packed::unpack`].
pub(crate) fn unpack_kernel_with(p: &Packed, detail: Detail) -> KernelSample {
    let (head, threads) = p
        .try_unpack_with(|tid, fields| unpack_kernel_thread(tid, fields, detail))
        .unwrap_or_default();
    let mut f = Fields::new(&head);
    KernelSample {
        pid: u32::try_from(f.next()).unwrap_or(u32::MAX),
        total_dropped_events: f.next(),
        total_thread_exits: f.next(),
        source: f.string(),
        threads,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{OffCpuTime, PollSyscallStats, SleepSyscallStats};

    fn kernel_thread(tid: u64, n: u64) -> KernelThreadStats {
        let mut h = Log2Histogram::default();
        for v in 0..n {
            h.record(v * 1000);
        }
        KernelThreadStats {
            tid,
            name: format!("worker-{tid}"),
            total_on_cpu_ns: n * 1_000_000,
            total_voluntary_switches: n,
            total_involuntary_switches: n / 3,
            total_off_cpu: OffCpuTime {
                sleep_ns: n * 7,
                poll_ns: n * 11,
                ..Default::default()
            },
            off_cpu_histogram: h.clone(),
            run_queue_latency_histogram: h,
            total_wakes: n,
            top_wakers: vec![
                Waker {
                    tid: 1,
                    name: "[interrupt]".into(),
                    total_wakes: n,
                },
                Waker {
                    tid: tid + 1,
                    name: "wäker".into(),
                    total_wakes: n / 2,
                },
            ],
            poll: PollSyscallStats {
                total_calls: 3 * n,
                total_blocked_calls: n,
                total_idle_nonblocking_calls: 2 * n,
                ..Default::default()
            },
            sleep: SleepSyscallStats {
                total_calls: n,
                total_known_request_calls: n / 2,
                total_interrupted_calls: n / 4,
                total_interrupted_ns: n * 13,
                ..Default::default()
            },
            total_interrupt_wakes: n / 5,
            total_process_thread_wakes: n / 6,
            total_other_process_wakes: n / 7,
            total_timed_futex_waits: n / 2,
            total_futex_timeouts: n / 3,
            ready_fds: (0..n.min(3))
                .map(|i| ReadyFd::new(i as i32 + 3, FdKind::from_code(i + 5)))
                .collect(),
            // Zero counts are left out, as the kernel source does.
            calls_by_syscall: [
                SyscallCalls::new(Syscall::Poll, 2 * n + 1),
                SyscallCalls::new(Syscall::EpollPwait, n),
                SyscallCalls::new(Syscall::ClockNanosleep, n + 2),
            ]
            .into_iter()
            .filter(|c| c.total_calls > 0)
            .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn kernel_samples_round_trip_across_key_frames() {
        let mut enc = Encoder::default();
        for round in 0..(2 * KEY_FRAME_EVERY as u64 + 3) {
            let sample = KernelSample {
                source: "ebpf".into(),
                pid: 42,
                // Threads come and go, and arrive in any order.
                threads: (0..20)
                    .rev()
                    .filter(|t| (t + round) % 7 != 0)
                    .map(|t| kernel_thread(100 + t, round * t))
                    .collect(),
                total_dropped_events: round,
                total_thread_exits: 3 * round,
            };
            let packed = enc.encode(&kernel_head(&sample), &sample.threads);
            let back = unpack_kernel(&packed);
            let mut want = sample.clone();
            want.threads.sort_by_key(|t| t.tid);
            assert_eq!(back, want, "round {round}");
        }
    }

    #[test]
    fn probes_round_trip_and_unchanged_ones_cost_a_few_bytes() {
        let mut enc = Encoder::default();
        let mut l = LoopStats {
            id: 3,
            name: "io-loop".into(),
            tid: Some(77),
            kind: LoopKind::TokioWorker,
            total_wakeups: 1000,
            ..Default::default()
        };
        l.poll_delay_histogram.record(5000);
        let first = enc.encode(&[], std::slice::from_ref(&l));
        let again = enc.encode(&[], std::slice::from_ref(&l));
        assert!(
            again.size() - std::mem::size_of::<Packed>() <= 8,
            "{}",
            again.size()
        );
        assert_eq!(first.unpack::<LoopStats>().1, vec![l.clone()]);
        let s = SleepStats {
            id: 9,
            name: "nap".into(),
            total_calls: 5,
            ..Default::default()
        };
        let p = Encoder::default().encode(&[], std::slice::from_ref(&s));
        assert_eq!(p.unpack::<SleepStats>().1, vec![s]);
    }

    mod properties {
        use proptest::collection::vec;
        use proptest::prelude::*;

        use super::super::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            /// Corrupt frame bytes and arbitrary fields never panic.
            #[test]
            fn arbitrary_frames_and_fields_never_panic(
                bytes in vec(any::<u8>(), 0..128),
                fields in vec(any::<u64>(), 0..300),
            ) {
                if let Some(mut c) = Cursor::new(&bytes) {
                    for key in 0..4 {
                        let _ = c.seek(key);
                    }
                }
                let p = Packed {
                    key: Arc::new(KeyFrame { bytes: bytes.as_slice().into() }),
                    delta: bytes.as_slice().into(),
                };
                let _ = p.unpack::<KernelThreadStats>();
                let _ = KernelThreadStats::unpack(1, &fields);
                let _ = LoopStats::unpack(2, &fields);
                let _ = SleepStats::unpack(3, &fields);
            }
        }
    }
}

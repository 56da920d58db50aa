//! The protobuf writer of the hot path: track descriptors and counter
//! values encoded field by field into batched packets.

use super::*;

/// Appends a track descriptor.
pub(super) fn describe(out: &mut Vec<u8>, seq: u32, d: TrackDescriptor) {
    push(
        out,
        &TracePacket {
            trusted_packet_sequence_id: Some(seq),
            track_descriptor: Some(d),
            ..Default::default()
        },
    );
}

/// The parts of the encoder one interval writes with.
pub(super) struct Writer<'a> {
    pub(super) seq: u32,
    pub(super) uuids: &'a mut Uuids,
    pub(super) batch: &'a mut Batch,
    pub(super) out: &'a mut Vec<u8>,
}

impl Writer<'_> {
    /// Sets counter `c` (of kind `kind`, under track `parent`) to
    /// `value`: describes the track on first use, and encodes the value
    /// if it differs from the last one written. `cause` names an off-CPU
    /// cause's track.
    #[inline(always)]
    pub(super) fn put(
        &mut self,
        parent: u64,
        c: &mut Counter,
        kind: CounterKind,
        cause: Option<&str>,
        value: Option<f64>,
    ) {
        let Some(value) = value.filter(|v| v.is_finite()) else {
            return;
        };
        if c.uuid == 0 {
            c.uuid = self.describe_counter(parent, kind, cause);
        }
        if c.last != value {
            c.last = value;
            self.batch.push(self.seq, c.uuid, value, self.out);
        }
    }

    /// Sets counter `k` of [`THREAD_COUNTERS`] of thread `t` to `value`,
    /// as [`Writer::put`].
    #[inline(always)]
    pub(super) fn put_thread(&mut self, t: &mut ThreadTracks, k: usize, value: Option<f64>) {
        let Some(value) = value.filter(|v| v.is_finite()) else {
            return;
        };
        let uuid = self.uuids.uuid(t.number + 1 + k as u64);
        if t.described & (1 << k) == 0 {
            t.described |= 1 << k;
            let parent = self.uuids.uuid(t.number);
            self.describe_counter_as(uuid, parent, THREAD_COUNTERS[k], None);
        }
        if t.last[k] != value {
            t.last[k] = value;
            self.batch.push(self.seq, uuid, value, self.out);
        }
    }

    /// Describes a new counter track; returns its uuid.
    #[cold]
    pub(super) fn describe_counter(
        &mut self,
        parent: u64,
        kind: CounterKind,
        cause: Option<&str>,
    ) -> u64 {
        let uuid = self.uuids.take();
        self.describe_counter_as(uuid, parent, kind, cause);
        uuid
    }

    /// Describes counter track `uuid`.
    #[cold]
    pub(super) fn describe_counter_as(
        &mut self,
        uuid: u64,
        parent: u64,
        kind: CounterKind,
        cause: Option<&str>,
    ) {
        let name = match cause {
            Some(cause) => format!("off-CPU {cause} %"),
            None => kind.name.to_string(),
        };
        describe(
            &mut self.batch.descriptors,
            self.seq,
            TrackDescriptor {
                uuid: Some(uuid),
                parent_uuid: Some(parent),
                name: Some(name),
                counter: Some(kind.descriptor()),
                ..Default::default()
            },
        );
    }
}

/// Writes thread `t`'s records: its track if new or renamed, then every
/// counter whose value changed.
#[inline(always)]
pub(super) fn thread(
    w: &mut Writer<'_>,
    tr: &mut ThreadTracks,
    t: &ThreadInterval,
    pid: u32,
    puuid: u64,
    secs: f64,
) {
    let seq = w.seq;
    let renamed = tr.number == 0 || !tr.name.is(&t.name);
    if renamed {
        if tr.number == 0 {
            // Its track and one number per counter.
            tr.number = w.uuids.block(1 + THREAD_COUNTERS.len() as u64);
        }
        tr.name = Name::new(&t.name);
        describe(
            &mut w.batch.descriptors,
            seq,
            TrackDescriptor {
                uuid: Some(w.uuids.uuid(tr.number)),
                parent_uuid: Some(puuid),
                thread: Some(ThreadDescriptor {
                    pid: Some(pid as i32),
                    tid: Some(t.tid as i32),
                    thread_name: Some(t.name.clone()),
                }),
                ..Default::default()
            },
        );
    }
    let k = t.kernel.as_ref();
    let vol = t
        .voluntary_switches_per_sec
        .or(k.map(|k| k.voluntary_switches_per_sec));
    let invol = t
        .involuntary_switches_per_sec
        .or(k.map(|k| k.involuntary_switches_per_sec));
    let values = [
        Some(t.cpu_percent),
        vol,
        invol,
        t.run_queue_wait_percent,
        k.map(|k| k.wakes_per_sec),
    ];
    for (n, v) in values.into_iter().enumerate() {
        w.put_thread(tr, n, v);
    }
    if let Some(k) = k
        && secs > 0.0
    {
        let parent = w.uuids.uuid(tr.number);
        for (n, ns) in k.off_cpu.by_cause().into_iter().enumerate() {
            // A cause never seen gets no track.
            if ns == 0 && tr.off_cpu.as_ref().is_none_or(|o| o[n].uuid == 0) {
                continue;
            }
            let pct = ns as f64 / (secs * 1e9) * 100.0;
            let off = tr.off_cpu.get_or_insert_with(|| Box::new([UNDESCRIBED; 6]));
            w.put(
                parent,
                &mut off[n],
                OFF_CPU,
                Some(OFF_CPU_CAUSES[n]),
                Some(pct),
            );
        }
    }
}

/// A probe's track (`label name` under the process), described when new.
pub(super) fn probe<'m, const N: usize>(
    w: &mut Writer<'_>,
    map: &'m mut Entities<Tracks<N>>,
    id: u64,
    name: &str,
    label: &str,
    parent: u64,
) -> &'m mut Tracks<N> {
    let at = map.slot(id, || Tracks::new(name));
    let tr = &mut map.tracks[at];
    if tr.uuid == 0 {
        tr.uuid = w.uuids.take();
        describe(
            &mut w.batch.descriptors,
            w.seq,
            TrackDescriptor {
                uuid: Some(tr.uuid),
                parent_uuid: Some(parent),
                name: Some(format!("{label} {name}")),
                ..Default::default()
            },
        );
    }
    tr
}

/// Appends one `Trace.packet` record.
pub(super) fn push(out: &mut Vec<u8>, p: &TracePacket) {
    // Field 1, wire type 2 (length-delimited).
    out.push(((proto::TRACE_PACKET_FIELD << 3) | 2) as u8);
    // Encoding into a Vec cannot fail (it grows).
    let _ = p.encode_length_delimited(out);
}

/// A field's key (`field << 3 | wire type`) as a two-byte varint, for
/// fields 16 to 2047.
pub(super) const fn key2(field: u32, wire_type: u32) -> [u8; 2] {
    assert!(field >= 16 && field < 2048);
    let key = (field << 3) | wire_type;
    [(key as u8) | 0x80, (key >> 7) as u8]
}

/// `TrackEvent.extra_double_counter_track_uuids` (45, varint), one per
/// record (the schema's repeated field is not packed).
pub(super) const EXTRA_UUID_KEY: [u8; 2] = key2(45, 0);
/// `TrackEvent.extra_double_counter_values` (46, fixed64).
pub(super) const EXTRA_VALUE_KEY: [u8; 2] = key2(46, 1);

/// Counter values at one timestamp, encoded as they come: one
/// `TYPE_COUNTER` event on the first track, the others as its extra
/// counter values, in packets of at most [`MAX_VALUES_PER_PACKET`]
/// values.
///
/// Encoded field by field rather than through the derived [`TrackEvent`]:
/// this is the writer's hot path (a thousand values per interval at 256
/// threads), and the derived message would copy every uuid and value into
/// two vectors and walk them twice (length, then bytes). Here each value
/// is encoded once, straight into the output: its extra uuid (45) and its
/// extra value (46) side by side (two repeated fields may interleave: a
/// reader takes each field's records in order, Perfetto's protozero as
/// any protobuf parser), behind a packet header whose two lengths are
/// three-byte varints filled in when the packet ends (a varint may carry
/// redundant bytes; Perfetto's own writer pads its nested lengths to four
/// bytes). Track descriptors made meanwhile go to a buffer of their own
/// and are put before the packets of their timestamp when it ends, so
/// that every track is described before its first value.
/// Same fields and numbers as [`TrackEvent`]; the tests read the result
/// with Perfetto's schema.
#[derive(Debug, Default)]
pub(super) struct Batch {
    /// The values' timestamp.
    pub(super) ts: u64,
    /// Where this timestamp's packets begin in the output.
    pub(super) start: usize,
    /// The packet being built: where its length and its event's length
    /// are in the output (three bytes each, filled in when it ends).
    pub(super) open: Option<(usize, usize)>,
    /// Values in the packet being built.
    pub(super) len: usize,
    /// Track descriptors made while the packets are built (kept to reuse).
    pub(super) descriptors: Vec<u8>,
}

/// Bytes of a length filled in when its message ends (lengths up to
/// 2 MiB; a packet holds at most [`MAX_VALUES_PER_PACKET`] values).
pub(super) const LENGTH_BYTES: usize = 3;

impl Batch {
    /// Starts the values stamped `ts`, at the end of `out`.
    pub(super) fn begin(&mut self, ts: u64, out: &[u8]) {
        self.ts = ts;
        self.start = out.len();
        self.open = None;
        self.len = 0;
        self.descriptors.clear();
    }

    #[inline(always)]
    pub(super) fn push(&mut self, seq: u32, uuid: u64, value: f64, out: &mut Vec<u8>) {
        if self.open.is_none() {
            self.open_packet(seq, uuid, value, out);
        } else {
            // A fixed-size copy (a few moves, where a copy of the
            // record's own length would call memcpy), then cut to length.
            let mut rec = [0u8; 22];
            rec[..2].copy_from_slice(&EXTRA_UUID_KEY);
            let n = 2 + varint(uuid, &mut rec[2..]);
            rec[n..n + 2].copy_from_slice(&EXTRA_VALUE_KEY);
            rec[n + 2..n + 10].copy_from_slice(&value.to_le_bytes());
            let end = out.len() + n + 10;
            out.extend_from_slice(&rec);
            out.truncate(end);
        }
        self.len += 1;
        if self.len == MAX_VALUES_PER_PACKET {
            self.close(out);
        }
    }

    /// Begins a packet with its first value (its event's own track and
    /// value).
    pub(super) fn open_packet(&mut self, seq: u32, uuid: u64, value: f64, out: &mut Vec<u8>) {
        use prost::encoding::{double, encode_key, uint32, uint64};
        // TracePacket: timestamp (8), its clock (58), the sequence (10),
        // the event (11); TrackEvent: type (9), track_uuid (11),
        // double_counter_value (44), then the extra uuids (45) and values
        // (46), not packed (the schema's repeated fields are not).
        out.push(((proto::TRACE_PACKET_FIELD << 3) | 2) as u8);
        let packet_at = out.len();
        out.extend_from_slice(&[0; LENGTH_BYTES]);
        uint64::encode(8, &self.ts, out);
        uint32::encode(58, &clock::MONOTONIC, out);
        uint32::encode(10, &seq, out);
        encode_key(11, prost::encoding::WireType::LengthDelimited, out);
        let event_at = out.len();
        out.extend_from_slice(&[0; LENGTH_BYTES]);
        uint32::encode(9, &(event_type::COUNTER as u32), out);
        uint64::encode(11, &uuid, out);
        double::encode(44, &value, out);
        self.open = Some((packet_at, event_at));
    }

    /// Ends the packet being built (if any): fills in its lengths.
    pub(super) fn close(&mut self, out: &mut [u8]) {
        if let Some((packet_at, event_at)) = self.open.take() {
            let end = out.len();
            fill_length(out, packet_at, end);
            fill_length(out, event_at, end);
        }
        self.len = 0;
    }

    /// Ends the values of this timestamp: their last packet, and the
    /// track descriptors made meanwhile put before their packets (only
    /// when a track was made: moves the packets once).
    pub(super) fn end(&mut self, out: &mut Vec<u8>) {
        self.close(out);
        if !self.descriptors.is_empty() {
            let at = self.start;
            out.splice(at..at, self.descriptors.drain(..));
        }
    }
}

/// Fills in the length at `at` (of [`LENGTH_BYTES`]) of the message that
/// runs from after it to `end`, as a varint with redundant bytes.
pub(super) fn fill_length(out: &mut [u8], at: usize, end: usize) {
    let len = end - at - LENGTH_BYTES;
    debug_assert!(len < 1 << (7 * LENGTH_BYTES));
    out[at] = (len as u8 & 0x7f) | 0x80;
    out[at + 1] = ((len >> 7) as u8 & 0x7f) | 0x80;
    out[at + 2] = (len >> 14) as u8 & 0x7f;
}

/// Writes `v` as a varint at the start of `buf` (10 bytes at least);
/// returns its length.
#[inline]
pub(super) fn varint(mut v: u64, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while v >= 0x80 {
        buf[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    buf[n] = v as u8;
    n + 1
}

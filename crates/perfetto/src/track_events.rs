//! The trace's tracks as track events, into the Perfetto sessions that
//! record the `wakemeter` category: a system trace that `traced` records
//! (Android, Linux) or a session of this process.
//!
//! The records are [`TraceEncoder`]'s, the very ones a trace file holds
//! (one list of tracks, names and units for both), written through the
//! Perfetto SDK's track-event data source: the SDK says which sessions
//! record the category and gives each one its packets, and the tracing
//! service stamps them with the writer's sequence. Each session (each
//! data-source instance) gets an encoder of its own, so that it has every
//! track described and every open finding's slice ended in its own
//! stream; so does a session whose incremental state was cleared (a ring
//! buffer that wraps: the tracks are described again).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use perfetto_sdk::producer::{Backends, Producer, ProducerInitArgsBuilder};
use perfetto_sdk::protos::trace::trace_packet::TracePacket;
use perfetto_sdk::track_event::{TraceContext, TrackEvent, TrackEventTrack};
use wakemeter::sync::lock;
use wakemeter::{Finding, Interval, SampleWait, Sampler};

use crate::encode::TraceEncoder;
use crate::error::Error;
use crate::proto;

/// The track-event category the tracks are emitted under: a trace config
/// enables it in its `track_event` data source
/// (`enabled_categories: "wakemeter"`). The SDK's macros below take it as
/// a literal.
pub const CATEGORY: &str = "wakemeter";

perfetto_sdk::track_event_categories! {
    pub(crate) mod wakemeter_te_ns {
        ("wakemeter", "wakemeter: per-thread, loop, sleep-site and process counters; findings as slices", []),
    }
}
// The SDK's macros look the categories up under this name.
use wakemeter_te_ns as perfetto_te_ns;

/// How often the emitter thread looks at its stop flag while no snapshot
/// comes (it bounds how long dropping the guard waits).
const STOP_CHECK_EVERY: Duration = Duration::from_millis(200);

/// Data-source instances the SDK tells apart (Perfetto's
/// `kMaxDataSourceInstances`).
const MAX_INSTANCES: usize = 8;

/// Per data-source instance, how many times a session started or stopped
/// on it (bumped by the category's callback): an emitter that finds it
/// changed knows its encoder for that instance wrote into a session that
/// is gone.
static SESSION_CHANGES: [AtomicU64; MAX_INSTANCES] = [const { AtomicU64::new(0) }; MAX_INSTANCES];

/// The next writer sequence of an encoder (the high 32 bits of its track
/// uuids), from a salt of this process: uuids stay apart from those of
/// other processes in one system trace, and from earlier encoders'.
static NEXT_SEQUENCE: AtomicU32 = AtomicU32::new(0);

/// The emitter threads parked while no session records the category:
/// the category's callback wakes them when one starts.
static PARKED: Mutex<Vec<Thread>> = Mutex::new(Vec::new());

/// Which Perfetto tracing backends the track events go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// The system tracing service (`traced` on Android and Linux), through
    /// its socket: the tracks go into the system trace it records, beside
    /// the scheduler. While none runs (or none records the category),
    /// nothing is emitted.
    System,
    /// Sessions started in this process
    /// (`perfetto_sdk::tracing_session::TracingSession::in_process`).
    InProcess,
    /// Both.
    SystemAndInProcess,
}

impl Backend {
    fn backends(self) -> Backends {
        match self {
            Backend::System => Backends::SYSTEM,
            Backend::InProcess => Backends::IN_PROCESS,
            Backend::SystemAndInProcess => Backends::SYSTEM | Backends::IN_PROCESS,
        }
    }
}

/// Initializes the Perfetto client with `backend` (more backends on later
/// calls; a backend is set up once per process) and registers the
/// category, once.
fn init(backend: Backend) {
    static REGISTERED: OnceLock<()> = OnceLock::new();
    Producer::init(
        ProducerInitArgsBuilder::new()
            .backends(backend.backends())
            .build(),
    );
    REGISTERED.get_or_init(|| {
        TrackEvent::init();
        // Registered once, here: the only error is "already registered".
        let _ = perfetto_te_ns::register();
        // Called after the SDK set the category's enabled flag.
        perfetto_sdk::track_event_set_category_callback!("wakemeter", |inst, enabled, _| {
            if let Some(starts) = SESSION_CHANGES.get(inst as usize) {
                starts.fetch_add(1, Ordering::AcqRel);
            }
            if enabled {
                for t in lock(&PARKED).iter() {
                    t.unpark();
                }
            }
        });
        let salt = TrackEventTrack::process_track_uuid();
        NEXT_SEQUENCE.store((salt ^ (salt >> 32)) as u32, Ordering::Relaxed);
    });
}

/// Whether a Perfetto session records the category now (one atomic load).
fn recording() -> bool {
    perfetto_sdk::track_event_category_enabled!("wakemeter")
}

/// A sequence for a new encoder (never 0).
fn next_sequence() -> u32 {
    loop {
        let s = NEXT_SEQUENCE.fetch_add(1, Ordering::Relaxed);
        if s != 0 {
            return s;
        }
    }
}

/// What [`TrackEvents`] emitted so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TrackEventStatus {
    /// Whether the emitter follows the sampler now: a session records the
    /// category (from the first snapshot stored once it began).
    pub recording: bool,
    /// Sampling periods emitted (into one session or more).
    pub intervals: u64,
    /// Encoders started: one per session, and one more each time a
    /// session's incremental state was cleared.
    pub streams: u64,
    /// Packets emitted, over all sessions.
    pub packets: u64,
}

#[derive(Debug, Default)]
struct Counts {
    recording: AtomicBool,
    intervals: AtomicU64,
    streams: AtomicU64,
    packets: AtomicU64,
}

/// The tracks of a [`Sampler`]'s process as track events, in every Perfetto
/// session that records the `wakemeter` category: the same tracks and
/// records as a trace file ([`crate::PerfettoTrace`]): counter tracks per
/// thread (under its real PID and TID), per loop probe and sleep site, the
/// process's, and each finding as a slice with its text as arguments.
///
/// A thread of its own follows the sampler ([`Sampler::wait_for_sample`])
/// while a session records the category; while none does, it sleeps
/// (parked: no wake-up per snapshot) until the SDK says one began. Its
/// first interval then ends at the first snapshot stored after it woke.
/// Its work while recording is counted as the sampler's overhead
/// ([`Sampler::account`]). Dropping it
/// (or [`TrackEvents::finish`]) emits the snapshots stored so far and
/// ends the open finding slices.
pub struct TrackEvents {
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
    handle: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for TrackEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrackEvents")
            .field("status", &self.status())
            .finish()
    }
}

impl TrackEvents {
    /// Connects the Perfetto client to `backend` (once per process),
    /// registers the `wakemeter` category and starts following `sampler`:
    /// one interval per stored snapshot while a session records.
    ///
    /// # Errors
    /// [`Error::Spawn`] when the thread cannot be started.
    pub fn start(sampler: &Sampler, backend: Backend) -> Result<TrackEvents, Error> {
        init(backend);
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        let mut emitter = Emitter {
            sampler: sampler.clone(),
            marker: u64::from(next_sequence()) << 32,
            streams: Vec::new(),
            buf: Vec::new(),
            packet: Vec::new(),
            counts: counts.clone(),
        };
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("wakemeter-te".to_string())
            .spawn(move || {
                lock(&PARKED).push(std::thread::current());
                emitter.run(&flag);
                let me = std::thread::current().id();
                lock(&PARKED).retain(|t| t.id() != me);
            })
            .map_err(Error::Spawn)?;
        Ok(TrackEvents {
            stop,
            counts,
            handle: Some(handle),
        })
    }

    /// Whether a Perfetto session records the `wakemeter` category now, in
    /// this process's view (one atomic load; false before the first
    /// [`TrackEvents::start`]).
    pub fn recording() -> bool {
        recording()
    }

    /// What was emitted so far.
    pub fn status(&self) -> TrackEventStatus {
        let c = &self.counts;
        TrackEventStatus {
            recording: c.recording.load(Ordering::Acquire),
            intervals: c.intervals.load(Ordering::Acquire),
            streams: c.streams.load(Ordering::Acquire),
            packets: c.packets.load(Ordering::Acquire),
        }
    }

    /// Emits the snapshots stored so far, ends the open finding slices,
    /// stops the thread and returns what was emitted.
    pub fn finish(mut self) -> TrackEventStatus {
        self.stop_thread();
        self.status()
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

impl Drop for TrackEvents {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// One session's encoder.
struct Stream {
    encoder: TraceEncoder,
    /// [`SESSION_CHANGES`] of its instance when it began.
    session: u64,
}

/// The emitter thread's state.
struct Emitter {
    sampler: Sampler,
    /// A uuid no track has (a sequence of its own, low bits 0): unseen in
    /// an instance's incremental state, it means the state is new.
    marker: u64,
    /// Per data-source instance.
    streams: Vec<Option<Stream>>,
    buf: Vec<u8>,
    packet: Vec<u8>,
    counts: Arc<Counts>,
}

impl Emitter {
    fn run(&mut self, stop: &AtomicBool) {
        let s = self.sampler.clone();
        let counts = self.counts.clone();
        let recording_now = &counts.recording;
        let mut last = None;
        while !stop.load(Ordering::Acquire) {
            if !recording() {
                // Parked until the category's callback (or the stop)
                // unparks it; a wake-up that finds no session parks again.
                recording_now.store(false, Ordering::Release);
                last = None;
                std::thread::park();
                continue;
            }
            if last.is_none() {
                // From the newest snapshot on (its seq, without a copy).
                last = match s.wait_for_sample(None, Duration::ZERO) {
                    SampleWait::Stored { seq } => Some(seq),
                    _ => None,
                };
                recording_now.store(true, Ordering::Release);
            }
            if let SampleWait::Stored { seq } = s.wait_for_sample(last, STOP_CHECK_EVERY) {
                let from = last.replace(seq);
                if let Some(from) = from {
                    self.interval(from, seq);
                }
            }
        }
        // What was stored since, then the open slices' ends.
        if let SampleWait::Stored { seq } = s.wait_for_sample(last, Duration::ZERO)
            && let Some(from) = last
        {
            self.interval(from, seq);
        }
        self.finish();
    }

    /// Emits the interval between two snapshots and the findings then, if
    /// a session records.
    fn interval(&mut self, from: u64, to: u64) {
        if !recording() {
            return;
        }
        let s = self.sampler.clone();
        // The interval and the findings every follower shares.
        let Some(i) = s
            .interval_between_shared(from, to)
            .or_else(|| s.latest_interval_shared())
        else {
            return;
        };
        s.with_findings(|findings| s.account(|| self.emit(&i, findings)));
    }

    fn emit(&mut self, i: &Interval, findings: &[Finding]) {
        let Emitter {
            sampler,
            marker,
            streams,
            buf,
            packet,
            counts,
        } = self;
        let mut emitted = false;
        perfetto_sdk::trace_for_category!("wakemeter", |ctx: &mut TraceContext| {
            let inst = ctx.instance_index() as usize;
            if streams.len() <= inst {
                streams.resize_with(inst + 1, || None);
            }
            let session = SESSION_CHANGES
                .get(inst)
                .map_or(0, |s| s.load(Ordering::Acquire));
            buf.clear();
            let slot = &mut streams[inst];
            if !ctx.track_seen(*marker) {
                // New incremental state: a new session, or the same one
                // cleared (its old tracks may be gone from a ring buffer).
                if let Some(mut old) = slot.take()
                    && old.session == session
                {
                    old.encoder.finish(buf);
                }
                let mut encoder =
                    TraceEncoder::for_system_trace(sampler.target_identity(), next_sequence());
                encoder.header(buf);
                *slot = Some(Stream { encoder, session });
                counts.streams.fetch_add(1, Ordering::AcqRel);
            }
            let Some(stream) = slot else { return };
            stream.encoder.interval(i, buf);
            stream.encoder.findings(i.end_monotonic_ns, findings, buf);
            let n = write_packets(ctx, buf, packet);
            counts.packets.fetch_add(n, Ordering::AcqRel);
            emitted = true;
        });
        if emitted {
            self.counts.intervals.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Ends the open finding slices in every session still recording.
    fn finish(&mut self) {
        let Emitter {
            marker,
            streams,
            buf,
            packet,
            counts,
            ..
        } = self;
        perfetto_sdk::trace_for_category!("wakemeter", |ctx: &mut TraceContext| {
            let inst = ctx.instance_index() as usize;
            // An instance whose state is new never saw these slices begin;
            // one that saw the marker has its stream from that state.
            let seen = ctx.track_seen(*marker);
            let Some(Some(stream)) = streams.get_mut(inst) else {
                return;
            };
            if !seen {
                return;
            }
            buf.clear();
            stream.encoder.finish(buf);
            let n = write_packets(ctx, buf, packet);
            counts.packets.fetch_add(n, Ordering::AcqRel);
        });
        self.streams.clear();
    }
}

/// Writes the encoder's records (`Trace.packet`s) as packets of the
/// track-event data source; returns how many.
fn write_packets(ctx: &mut TraceContext, records: &[u8], packet: &mut Vec<u8>) -> u64 {
    let mut n = 0;
    for body in Records(records) {
        producer_fields(body, packet);
        if packet.is_empty() {
            continue;
        }
        ctx.add_packet(|p: &mut TracePacket| p.msg.append_bytes(packet));
        n += 1;
    }
    n
}

/// The `Trace.packet` bodies of a buffer of whole records.
struct Records<'a>(&'a [u8]);

impl<'a> Iterator for Records<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let (key, mut rest) = self.0.split_first()?;
        debug_assert_eq!(u32::from(*key), (proto::TRACE_PACKET_FIELD << 3) | 2);
        let len = prost::encoding::decode_varint(&mut rest).ok()? as usize;
        let body = rest.get(..len)?;
        self.0 = &rest[len..];
        Some(body)
    }
}

/// `TracePacket` fields that only the tracing service or the SDK's trace
/// writer set: `trusted_packet_sequence_id` (10; the service drops a
/// packet that carries it), `sequence_flags` (13) and
/// `first_packet_on_sequence` (87), which describe the SDK's own sequence.
const NOT_FOR_PRODUCERS: [u64; 3] = [10, 13, 87];

/// Copies the fields of one packet body into `out`, less those of
/// [`NOT_FOR_PRODUCERS`] (a packet of only those leaves `out` empty).
fn producer_fields(body: &[u8], out: &mut Vec<u8>) {
    use prost::encoding::decode_varint;
    out.clear();
    let mut rest = body;
    while !rest.is_empty() {
        let field = rest;
        let Ok(key) = decode_varint(&mut rest) else {
            return;
        };
        let skip = match key & 7 {
            0 => decode_varint(&mut rest).map(|_| 0).unwrap_or(usize::MAX),
            1 => 8,
            2 => decode_varint(&mut rest).map_or(usize::MAX, |l| l as usize),
            5 => 4,
            _ => usize::MAX,
        };
        let Some(after) = rest.get(skip..) else {
            // Not a record the encoder writes: leave the packet out.
            out.clear();
            return;
        };
        rest = after;
        if !NOT_FOR_PRODUCERS.contains(&(key >> 3)) {
            out.extend_from_slice(&field[..field.len() - rest.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trusted_and_sequence_fields_are_left_out() {
        let p = proto::TracePacket {
            timestamp: Some(5),
            trusted_packet_sequence_id: Some(7),
            sequence_flags: Some(proto::SEQ_INCREMENTAL_STATE_CLEARED),
            first_packet_on_sequence: Some(true),
            track_descriptor: Some(proto::TrackDescriptor {
                uuid: Some(300),
                name: Some("x".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut records = vec![(proto::TRACE_PACKET_FIELD << 3 | 2) as u8];
        prost::Message::encode_length_delimited(&p, &mut records).expect("encode");
        let bodies: Vec<&[u8]> = Records(&records).collect();
        assert_eq!(bodies.len(), 1);
        let mut out = Vec::new();
        producer_fields(bodies[0], &mut out);
        let back: proto::TracePacket = prost::Message::decode(&out[..]).expect("decode");
        let want = proto::TracePacket {
            timestamp: Some(5),
            track_descriptor: p.track_descriptor.clone(),
            ..Default::default()
        };
        assert_eq!(back, want);
    }
}

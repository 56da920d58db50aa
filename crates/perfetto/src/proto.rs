//! The few messages of Perfetto's trace format (`protos/perfetto/trace/
//! perfetto_trace.proto`) this crate writes, declared with prost's derive
//! under Perfetto's own field numbers and types. Only the fields written
//! are declared; a reader skips nothing it needs. The tests parse every
//! trace with Perfetto's published schema (PyPI `perfetto`,
//! `perfetto_trace_pb2`), so a wrong number or type here fails them.
//!
//! Why not `perfetto-sdk` for the file: it builds here (1.2.1, vendored
//! C SDK; `cargo build -j1` of an empty program using it: 40 s wall, 23 s
//! CPU, 1.1 GB peak RSS for the C++ compile, 163 MB of target dir), but it
//! writes through a tracing session of its own: process-global
//! initialisation (clashing with a host app that uses Perfetto itself),
//! its own buffers, flushed to the file when the session is flushed or
//! stopped. A Ctrl-C, a crash or a full disk between flushes loses the
//! buffer, and a byte cap is a property of its buffer, not of the file.
//! This writer must follow the sampler's snapshots and leave a valid file
//! after each one, which a plain stream of `TracePacket`s gives directly:
//! a trace file is a sequence of `Trace.packet` (field 1) records, so
//! every prefix made of whole records is itself a complete trace. prost
//! is already built by the workspace (pprof).

/// `Trace.packet`: the field number of every record of a trace file.
pub(crate) const TRACE_PACKET_FIELD: u32 = 1;

/// `TracePacket` (subset).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TracePacket {
    /// Timestamp in the clock `timestamp_clock_id`, ns.
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    /// Builtin clock of `timestamp` (3 = MONOTONIC).
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
    /// Writer sequence of this packet.
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    /// `SequenceFlags` bits.
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    /// Clocks read at one instant, to convert between them.
    #[prost(message, optional, tag = "6")]
    pub clock_snapshot: Option<ClockSnapshot>,
    /// A track event (counter values, slice begin or end).
    #[prost(message, optional, tag = "11")]
    pub track_event: Option<TrackEvent>,
    /// A track's description.
    #[prost(message, optional, tag = "60")]
    pub track_descriptor: Option<TrackDescriptor>,
    /// Set on the first packet of a sequence.
    #[prost(bool, optional, tag = "87")]
    pub first_packet_on_sequence: Option<bool>,
}

/// `ClockSnapshot`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ClockSnapshot {
    /// The clocks read.
    #[prost(message, repeated, tag = "1")]
    pub clocks: Vec<Clock>,
}

/// `ClockSnapshot.Clock`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Clock {
    /// Builtin clock id (1 REALTIME, 3 MONOTONIC, 6 BOOTTIME).
    #[prost(uint32, optional, tag = "1")]
    pub clock_id: Option<u32>,
    /// Its reading, ns.
    #[prost(uint64, optional, tag = "2")]
    pub timestamp: Option<u64>,
}

/// `TrackDescriptor` (subset).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TrackDescriptor {
    /// The track's id, unique in the trace.
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    /// The track it is nested under.
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
    /// Display name.
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    /// Longer text shown with the track.
    #[prost(string, optional, tag = "14")]
    pub description: Option<String>,
    /// Set on a process's track.
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    /// Set on a thread's track.
    #[prost(message, optional, tag = "4")]
    pub thread: Option<ThreadDescriptor>,
    /// Set on a counter track.
    #[prost(message, optional, tag = "8")]
    pub counter: Option<CounterDescriptor>,
}

/// `ProcessDescriptor` (subset).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ProcessDescriptor {
    /// PID.
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    /// Process name.
    #[prost(string, optional, tag = "6")]
    pub process_name: Option<String>,
}

/// `ThreadDescriptor` (subset).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ThreadDescriptor {
    /// PID of its process.
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    /// TID.
    #[prost(int32, optional, tag = "2")]
    pub tid: Option<i32>,
    /// Thread name.
    #[prost(string, optional, tag = "5")]
    pub thread_name: Option<String>,
}

/// `CounterDescriptor` (subset).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct CounterDescriptor {
    /// `CounterDescriptor.Unit` (1 TIME_NS, 2 COUNT, 3 SIZE_BYTES).
    #[prost(int32, optional, tag = "3")]
    pub unit: Option<i32>,
    /// Free-form unit ("%", "/s").
    #[prost(string, optional, tag = "6")]
    pub unit_name: Option<String>,
}

/// `TrackEvent` (subset).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TrackEvent {
    /// `TrackEvent.Type` (1 SLICE_BEGIN, 2 SLICE_END, 3 INSTANT, 4 COUNTER).
    #[prost(int32, optional, tag = "9")]
    pub r#type: Option<i32>,
    /// The track it is on.
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    /// Event name.
    #[prost(string, optional, tag = "23")]
    pub name: Option<String>,
    /// Categories.
    #[prost(string, repeated, tag = "22")]
    pub categories: Vec<String>,
    /// Value of a counter event.
    #[prost(double, optional, tag = "44")]
    pub double_counter_value: Option<f64>,
    /// More counter tracks set at the same timestamp, paired in order with
    /// `extra_double_counter_values`.
    #[prost(uint64, repeated, packed = "false", tag = "45")]
    pub extra_double_counter_track_uuids: Vec<u64>,
    /// Their values.
    #[prost(double, repeated, packed = "false", tag = "46")]
    pub extra_double_counter_values: Vec<f64>,
    /// Arguments shown with a slice.
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
}

/// `DebugAnnotation` (subset).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct DebugAnnotation {
    /// Argument name.
    #[prost(string, optional, tag = "10")]
    pub name: Option<String>,
    /// A text value.
    #[prost(string, optional, tag = "6")]
    pub string_value: Option<String>,
    /// A number.
    #[prost(double, optional, tag = "5")]
    pub double_value: Option<f64>,
    /// Nested named values.
    #[prost(message, repeated, tag = "11")]
    pub dict_entries: Vec<DebugAnnotation>,
}

/// `TrackEvent.Type` values.
pub(crate) mod event_type {
    pub(crate) const SLICE_BEGIN: i32 = 1;
    pub(crate) const SLICE_END: i32 = 2;
    pub(crate) const COUNTER: i32 = 4;
}

/// `CounterDescriptor.Unit` values.
pub(crate) mod unit {
    pub(crate) const TIME_NS: i32 = 1;
    pub(crate) const SIZE_BYTES: i32 = 3;
}

/// Builtin clock ids.
pub(crate) mod clock {
    pub(crate) const REALTIME: u32 = 1;
    pub(crate) const MONOTONIC: u32 = 3;
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    pub(crate) const BOOTTIME: u32 = 6;
}

/// `TracePacket.SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED`.
pub(crate) const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;

#!/usr/bin/env python3
"""Reads a wakemeter Perfetto trace with Perfetto's own schema (PyPI
`perfetto`, perfetto_trace_pb2) and checks it.

    check_trace.py [--sdk] TRACE [EXPECTED.json]

Always: the file parses as a `Trace` with no field unknown to the schema;
each process (a process descriptor with its PID) writes on a sequence of
its own; every thread track has a TID, a name and the PID of the process
track it is under; every counter track hangs under a described
track; every counter event and extra value is on a described counter
track; every slice begin has an end on its track, with its summary,
severity, kind, subject, evidence and advice as arguments.

With EXPECTED (written by the Rust test from the sampler's own intervals
and findings): the process and thread names (control characters
included), and for every interval, the value each counter holds at the
interval's start equals the interval's number; every finding appears as
a slice with its text, under its subject's track.

With --sdk, the trace was recorded by a Perfetto session from the track
events of the `track-events` feature: the packets that the SDK and the
tracing service write themselves (those with sequence flags, trace
config and stats, clock snapshots) are left out and the rest is checked
as above; each of those carries the sequence and PID the service
stamped, and the service's stats count no packet it refused.

Prints a summary line (packets, tracks, counter values, slices) and exits
non-zero with the reason on the first failure.
"""
import json
import math
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

TE = pb.TrackEvent


def fail(msg):
    print(f"check_trace: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def unknown_fields(msg, where="Trace"):
    """Paths of fields the schema does not know (a wrong field number)."""
    from google.protobuf.unknown_fields import UnknownFieldSet
    found = [f"{where}#{f.field_number}" for f in UnknownFieldSet(msg)]
    for fd, value in msg.ListFields():
        if fd.type != fd.TYPE_MESSAGE:
            continue
        items = value if fd.is_repeated else [value]
        for n, v in enumerate(items):
            found += unknown_fields(v, f"{where}.{fd.name}[{n}]")
            if len(found) > 5:
                return found
    return found


def close(a, b):
    return a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


def ours(p):
    """A packet of the track-event emitter (--sdk): a track descriptor or
    event without sequence flags (the SDK's own packets have them)."""
    return (p.HasField("track_descriptor") or p.HasField("track_event")) \
        and not p.HasField("sequence_flags")


def check_session(trace):
    """--sdk: the service refused no packet, and stamped each of ours."""
    for p in trace.packet:
        if p.HasField("trace_stats") and p.trace_stats.invalid_packets:
            fail(f"the tracing service refused {p.trace_stats.invalid_packets} packets")
        if ours(p) and (not p.trusted_packet_sequence_id or not p.HasField("trusted_pid")):
            fail(f"packet without the service's sequence and PID: {p}")


def main():
    sdk = "--sdk" in sys.argv
    if sdk:
        sys.argv.remove("--sdk")
    path = sys.argv[1]
    data = open(path, "rb").read()
    trace = pb.Trace()
    trace.ParseFromString(data)
    unknown = unknown_fields(trace)
    if unknown:
        fail(f"{path}: fields unknown to Perfetto's schema: {unknown}")
    if sdk:
        check_session(trace)
    tracks = {}
    processes = {}
    # Per counter track: [(ts, value)] in file order.
    series = {}
    slices = []  # (track, begin_ts, end_ts or None, event)
    open_slices = {}
    seqs = set()
    for p in trace.packet:
        if sdk and not ours(p):
            continue
        seqs.add(p.trusted_packet_sequence_id)
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            if d.HasField("parent_uuid") and d.parent_uuid not in tracks:
                fail(f"track {d.uuid} ({d.name!r}) names parent {d.parent_uuid} before it is described")
            tracks[d.uuid] = d
            if d.HasField("process"):
                processes[d.process.pid] = d
        if p.HasField("track_event"):
            e = p.track_event
            if not p.HasField("timestamp") or p.timestamp_clock_id != 3:
                fail("track event without a MONOTONIC timestamp")
            if e.track_uuid not in tracks:
                fail(f"event on undescribed track {e.track_uuid}")
            if e.type == TE.TYPE_COUNTER:
                pairs = [(e.track_uuid, e.double_counter_value)]
                if len(e.extra_double_counter_track_uuids) != len(e.extra_double_counter_values):
                    fail("extra counter uuids and values differ in length")
                pairs += zip(e.extra_double_counter_track_uuids, e.extra_double_counter_values)
                for u, v in pairs:
                    if u not in tracks or not tracks[u].HasField("counter"):
                        fail(f"counter value on track {u}, not a counter track")
                    series.setdefault(u, []).append((p.timestamp, v))
            elif e.type == TE.TYPE_SLICE_BEGIN:
                if e.track_uuid in open_slices:
                    fail(f"two open slices on track {e.track_uuid}")
                args = {a.name: a for a in e.debug_annotations}
                for k in ("summary", "kind", "severity", "subject", "advice", "evidence"):
                    if k not in args:
                        fail(f"finding slice {e.name!r} without {k}")
                if args["summary"].string_value != e.name:
                    fail("slice name is not the finding's summary")
                s = [e.track_uuid, p.timestamp, None, e]
                open_slices[e.track_uuid] = s
                slices.append(s)
            elif e.type == TE.TYPE_SLICE_END:
                s = open_slices.pop(e.track_uuid, None)
                if s is None:
                    fail(f"slice end without begin on track {e.track_uuid}")
                if p.timestamp < s[1]:
                    fail("slice ends before it begins")
                s[2] = p.timestamp
    if 0 in seqs or len(seqs) != len(processes):
        fail(f"packets on sequences {seqs} for {len(processes)} processes: expected one non-zero sequence each")
    if not processes:
        fail("no process descriptor")
    threads = {}
    for d in tracks.values():
        if d.HasField("thread"):
            t = d.thread
            if t.pid not in processes or not t.HasField("tid") or not t.HasField("thread_name"):
                fail(f"thread track {d.uuid} without the pid of a process, a tid and a name: {t}")
            if tracks[d.parent_uuid].process.pid != t.pid:
                fail(f"thread {t.tid} is not under its process's track")
            threads[(t.pid, t.tid)] = d
        if d.HasField("counter") and not d.HasField("parent_uuid"):
            fail(f"counter track {d.name!r} has no parent")
    strict = len(sys.argv) > 2
    if strict:
        exp = json.load(open(sys.argv[2]))
        if exp["pid"] not in processes:
            fail(f"no process {exp['pid']} in the trace")
        mine = {tid: d for (pid, tid), d in threads.items() if pid == exp["pid"]}
        check_expected(exp, processes[exp["pid"]], tracks, mine, series, slices)
    values = sum(len(v) for v in series.values())
    print(f"check_trace: ok: {path}: {len(data)} bytes, {len(trace.packet)} packets, "
          f"{len(tracks)} tracks ({len(processes)} processes, {len(threads)} threads), {values} counter values, "
          f"{len(slices)} finding slices{', checked against the report' if strict else ''}")


def child(tracks, parent, name):
    for d in tracks.values():
        if d.parent_uuid == parent and d.name == name:
            return d.uuid
    return None


def value_at(series, uuid, ts):
    """The value a counter holds at ts: the last written at or before it."""
    held = None
    for t, v in series.get(uuid, []):
        if t <= ts:
            held = v
    return held


def check_expected(exp, process, tracks, threads, series, slices):
    if process.process.pid != exp["pid"] or process.process.process_name != exp["name"]:
        fail(f"process {process.process} is not {exp['pid']} {exp['name']!r}")
    checked = 0

    def expect(parent, name, ts, want, what):
        nonlocal checked
        if want is None:
            return
        u = child(tracks, parent, name)
        if u is None:
            fail(f"{what}: no counter track {name!r}")
        got = value_at(series, u, ts)
        if got is None or not close(got, want):
            fail(f"{what}: {name} at {ts} is {got}, the report says {want}")
        checked += 1

    for i in exp["intervals"]:
        ts = i["start_ns"]
        expect(process.uuid, "process CPU %", ts, i["process_cpu_percent"], "process")
        expect(process.uuid, "RSS", i["end_ns"], i["rss_bytes"], "process")
        for t in i["threads"]:
            d = threads.get(t["tid"])
            if d is None:
                fail(f"no track for thread {t['tid']} {t['name']!r}")
            what = f"thread {t['tid']}"
            expect(d.uuid, "CPU %", ts, t["cpu_percent"], what)
            expect(d.uuid, "voluntary switches/s", ts, t["voluntary_switches_per_sec"], what)
            expect(d.uuid, "involuntary switches/s", ts, t["involuntary_switches_per_sec"], what)
            expect(d.uuid, "run-queue wait %", ts, t["run_queue_wait_percent"], what)
        for kind, label, names in (("loops", "loop", ("wakeups/s", "idle-wakeup ratio", "utilization", "mean poll delay")),
                                   ("sleeps", "sleep site", ("sleeps/s", "mean oversleep", "CPU in sleep %"))):
            for l in i[kind]:
                parent = next((d.uuid for d in tracks.values()
                               if d.parent_uuid == process.uuid and d.name == f"{label} {l['name']}"), None)
                if parent is None:
                    fail(f"no track for {label} {l['name']!r}")
                for name, want in zip(names, l["values"]):
                    expect(parent, name, ts, want, f"{label} {l['name']}")
    for tid, name in exp["thread_names"]:
        d = threads.get(tid)
        if d is None or d.thread.thread_name != name:
            fail(f"thread {tid}: name {d.thread.thread_name if d else None!r}, expected {name!r}")
    for f in exp["findings"]:
        hit = [s for s in slices if s[3].name == f["summary"]]
        if not hit:
            fail(f"finding {f['summary']!r} not in the trace")
        for s in hit:
            args = {a.name: a for a in s[3].debug_annotations}
            if args["advice"].string_value != f["advice"] or args["severity"].string_value != f["severity"] \
                    or args["subject"].string_value != f["subject"] or args["kind"].string_value != f["kind"]:
                fail(f"finding {f['summary']!r}: arguments {args} differ from the report")
            if s[2] is None:
                fail(f"finding {f['summary']!r} never ends")
            parent = tracks[s[0]].parent_uuid
            if f["subject_tid"] is not None and f["subject_kind"] == "thread":
                if threads.get(f["subject_tid"]) is None or parent != threads[f["subject_tid"]].uuid:
                    fail(f"finding {f['summary']!r} is not under its thread's track")
            if f["subject_kind"] in ("loop", "sleep_site"):
                label = "loop" if f["subject_kind"] == "loop" else "sleep site"
                if tracks[parent].name != f"{label} {f['subject_name']}":
                    fail(f"finding {f['summary']!r} is under {tracks[parent].name!r}")
            ev = {a.name: a.double_value for a in args["evidence"].dict_entries}
            for e in f["evidence"]:
                key = f"{e['name']} ({e['unit']})" if e["unit"] else e["name"]
                if key not in ev:
                    fail(f"finding {f['summary']!r}: evidence {key} missing")
    if checked == 0:
        fail("no counter value was checked")
    print(f"check_trace: {checked} counter values equal the report's, {len(exp['findings'])} findings found")


if __name__ == "__main__":
    main()

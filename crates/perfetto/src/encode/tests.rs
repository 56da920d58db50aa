//! Tests of the encoder, reading its records back with prost.

use std::collections::{HashMap, HashSet};

use prost::Message;
use wakemeter::SamplerBuilder;

use super::*;

#[test]
fn uuids_are_unique_in_a_file_of_many_sequences() {
    for short in [true, false] {
        let mut seen = HashSet::new();
        for sequence in 1..=20 {
            let mut u = Uuids::new(sequence, short);
            let first = u.block(6);
            for n in first..first + 6 {
                assert!(seen.insert(u.uuid(n)), "{sequence} {n}");
            }
            for _ in 0..3000 {
                let uuid = u.take();
                assert_ne!(uuid, 0);
                assert!(seen.insert(uuid), "{sequence} {uuid}");
            }
        }
    }
    // Short: two bytes on the wire up to track 2047.
    assert!(Uuids::new(7, true).uuid(2047) < 1 << 14);
    assert_eq!(Uuids::new(8, true).uuid(5), (8 << 32) | 5);
    assert_eq!(Uuids::new(1, false).uuid(5), (1 << 32) | 5);
}

#[test]
fn index_finds_dense_and_scattered_keys() {
    let mut index = Index::default();
    let keys: Vec<u64> = (0..300).chain([100_000, 7, 5_000_000]).collect();
    let mut added = Vec::new();
    for &k in &keys {
        if index.get(k).is_none() {
            index.insert(k, added.len() as u32, added.len());
            added.push(k);
        }
    }
    for (at, &k) in added.iter().enumerate() {
        assert_eq!(index.get(k), Some(at as u32), "{k}");
    }
    assert_eq!(index.get(300), None);
    assert_eq!(index.get(99_999), None);
    // Dense after a rebuild of close keys, a map for scattered ones.
    for kept in [vec![250u64, 260, 299, 280], vec![3, 1_000_000, 40]] {
        index.rebuild(kept.iter().copied());
        for (at, &k) in kept.iter().enumerate() {
            assert_eq!(index.get(k), Some(at as u32), "{k}");
        }
        assert_eq!(index.get(0), None);
        assert_eq!(index.get(270), None);
    }
    index.rebuild(std::iter::empty());
    assert_eq!(index.get(3), None);
    index.insert(12, 0, 0);
    assert_eq!(index.get(12), Some(0));
}

#[test]
fn short_names_compare_by_words() {
    for len in 0..=22usize {
        let a: Vec<u8> = (0..len as u8).map(|b| b'a' + b).collect();
        assert!(same_short(&a, &a.clone()));
        for at in 0..len {
            let mut b = a.clone();
            b[at] ^= 0x20;
            assert!(!same_short(&a, &b), "{len} {at}");
        }
        let name = std::str::from_utf8(&a).expect("ascii");
        assert!(Name::new(name).is(name));
        assert!(!Name::new(name).is(&format!("{name}x")));
    }
}

/// Reads records back: track names by uuid, and the last value of each
/// counter track.
fn read(bytes: &[u8]) -> (HashMap<u64, TrackDescriptor>, HashMap<u64, f64>) {
    let (mut tracks, mut values) = (HashMap::new(), HashMap::new());
    let mut buf = bytes;
    while !buf.is_empty() {
        assert_eq!(buf[0], 0x0a);
        buf = &buf[1..];
        let p = TracePacket::decode_length_delimited(&mut buf).expect("packet");
        if let Some(d) = p.track_descriptor {
            tracks.insert(d.uuid.expect("uuid"), d);
        }
        if let Some(e) = p.track_event {
            values.insert(
                e.track_uuid.expect("track"),
                e.double_counter_value.expect("v"),
            );
            for (u, v) in e
                .extra_double_counter_track_uuids
                .iter()
                .zip(&e.extra_double_counter_values)
            {
                values.insert(*u, *v);
            }
        }
    }
    (tracks, values)
}

/// Threads in any order, with scattered serials and a serial listed
/// twice: each thread's CPU % is its last listing's.
#[test]
fn threads_in_any_order_with_scattered_and_repeated_serials() {
    let _workers: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_secs(2))))
        .collect();
    let s = SamplerBuilder::new().build().expect("sampler");
    s.sample().expect("sample");
    s.sample().expect("sample");
    let base = s.latest_interval().expect("interval");
    assert!(base.threads.len() >= 5);
    let mut e = TraceEncoder::new(s.target_identity(), 2);
    let mut out = Vec::new();
    e.header(&mut out);
    for round in 0..4u64 {
        let mut i = base.clone();
        for (n, t) in i.threads.iter_mut().enumerate() {
            // From round 2 on, other serials (new threads with the
            // same TIDs, as reused TIDs), scattered: a map, not a table.
            t.serial = if round >= 2 {
                n as u64 * 1_000_003 + 1_000
            } else {
                n as u64
            };
            t.cpu_percent = (round * 100 + n as u64) as f64;
        }
        i.threads.reverse();
        if round % 2 == 1 {
            // Round 1 and 3: the first thread again, later, with
            // another value.
            let mut again = i.threads[0].clone();
            again.cpu_percent = 0.5 + round as f64;
            i.threads.push(again);
        }
        e.interval(&i, &mut out);
        let (tracks, values) = read(&out);
        // A reused TID's newest track (uuids grow).
        let mut by_tid: HashMap<u64, u64> = HashMap::new();
        for (u, d) in &tracks {
            if let Some(tid) = d.thread.as_ref().and_then(|t| t.tid) {
                let newest = by_tid.entry(tid as u64).or_insert(*u);
                *newest = (*newest).max(*u);
            }
        }
        let mut want: HashMap<u64, f64> = HashMap::new();
        for t in &i.threads {
            want.insert(t.tid, t.cpu_percent);
        }
        for (tid, v) in want {
            let thread = by_tid[&tid];
            let cpu = tracks
                .iter()
                .find(|(_, d)| d.parent_uuid == Some(thread) && d.name.as_deref() == Some("CPU %"))
                .map(|(u, _)| *u)
                .expect("CPU % track");
            assert_eq!(values[&cpu], v, "round {round} tid {tid}");
        }
    }
}

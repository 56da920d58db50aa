//! The byte format of packed counter records: the difference of a record
//! from a base record, zero runs skipped.
//!
//! A record is a list of `u64` fields (counters, gauges, histogram buckets,
//! string bytes). Consecutive snapshots of the same thread or probe differ in
//! a few fields, and mostly by small amounts, so a record is stored as its
//! field-wise difference from a base (the same entity in the current key
//! frame, or zeros):
//!
//! ```text
//! record  := varint(len) varint(pairs) pair*
//! pair    := varint(zigzag(field - base_field) << 3 | min(skip, 7)) [varint(skip - 7)]
//! ```
//!
//! `skip` counts the unchanged fields before the changed one; it shares a
//! byte with the difference, so a counter that moved by less than 16 costs
//! one byte. The pair word is up to 67 bits wide. Differences
//! wrap (`u64::wrapping_sub`), so any change round-trips exactly, including
//! gauges that go down. An idle thread's record is 2 bytes; a
//! 65-bucket histogram that did not change costs nothing.
//!
//! Written by hand rather than with a general-purpose compressor: records are
//! tiny (tens of bytes) and decoded individually, where a compressor's
//! framing would cost more than the data.

const SKIP_BITS: u32 = 3;
const SKIP_INLINE: u64 = (1 << SKIP_BITS) - 1;

/// Most fields a record may have; a longer length can only come from a
/// corrupted buffer, and is refused rather than allocated.
pub(crate) const MAX_FIELDS: usize = 1 << 16;

/// Appends `v` as a LEB128 varint (7 bits per byte, low bits first).
#[inline]
fn put_wide(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a LEB128 varint of at most `bits` bits at `*pos`, advancing it;
/// `None` on truncated or over-long input.
#[inline]
fn get_wide(bytes: &[u8], pos: &mut usize, bits: u32) -> Option<u128> {
    let mut v: u128 = 0;
    let mut shift = 0;
    while shift < bits {
        let b = *bytes.get(*pos)?;
        *pos += 1;
        v |= u128::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
    }
    None
}

/// Appends `v` as a LEB128 varint.
#[inline]
pub(crate) fn put_varint(out: &mut Vec<u8>, v: u64) {
    put_wide(out, u128::from(v));
}

/// Reads a varint written by [`put_varint`].
#[inline]
pub(crate) fn get_varint(bytes: &[u8], pos: &mut usize) -> Option<u64> {
    u64::try_from(get_wide(bytes, pos, 64)?).ok()
}

#[inline]
fn zigzag(d: u64) -> u64 {
    let s = d as i64;
    ((s << 1) ^ (s >> 63)) as u64
}

#[inline]
fn unzigzag(z: u64) -> u64 {
    ((z >> 1) as i64 ^ -((z & 1) as i64)) as u64
}

/// Appends the encoding of `record` against `base` (fields missing from
/// `base` count as 0).
pub(crate) fn encode(base: &[u64], record: &[u64], out: &mut Vec<u8>) {
    put_varint(out, record.len() as u64);
    // The fields `base` has, compared pairwise over two slices (which the
    // compiler vectorizes), and those past its end, against 0. Most
    // records equal their base but for a field or two (a blocked thread's
    // off-CPU time): comparing field by field through bounds-checked
    // indexes, twice, was 10% of a 1,000-thread eBPF watcher's CPU.
    let common = base.len().min(record.len());
    let (shared, tail) = record.split_at(common);
    let base = base.get(..common).unwrap_or(&[]);
    let pairs = shared.iter().zip(base).filter(|(r, b)| r != b).count()
        + tail.iter().filter(|&&r| r != 0).count();
    put_varint(out, pairs as u64);
    if pairs == 0 {
        return;
    }
    let mut last = 0usize;
    let mut put = |i: usize, diff: u64| {
        let skip = (i - last) as u64;
        put_wide(
            out,
            (u128::from(zigzag(diff)) << SKIP_BITS) | u128::from(skip.min(SKIP_INLINE)),
        );
        if skip >= SKIP_INLINE {
            put_varint(out, skip - SKIP_INLINE);
        }
        last = i + 1;
    };
    for (i, (&r, &b)) in shared.iter().zip(base).enumerate() {
        if r != b {
            put(i, r.wrapping_sub(b));
        }
    }
    for (i, &r) in tail.iter().enumerate() {
        if r != 0 {
            put(common + i, r);
        }
    }
}

/// Decodes one record at `*pos` against `base` into `out` (cleared first),
/// advancing `*pos`. `None` when the bytes are not a valid record (they
/// always are when written by [`encode`]; the check keeps a corrupted
/// buffer from panicking).
pub(crate) fn decode(
    base: &[u64],
    bytes: &[u8],
    pos: &mut usize,
    out: &mut Vec<u64>,
) -> Option<()> {
    let len = usize::try_from(get_varint(bytes, pos)?).ok()?;
    let pairs = get_varint(bytes, pos)?;
    if len > MAX_FIELDS || pairs > len as u64 {
        return None;
    }
    out.clear();
    out.extend_from_slice(base.get(..len).unwrap_or(base));
    out.resize(len, 0);
    let mut i = 0usize;
    for _ in 0..pairs {
        let word = get_wide(bytes, pos, 64 + SKIP_BITS)?;
        let mut skip = (word as u64) & SKIP_INLINE;
        if skip == SKIP_INLINE {
            skip = skip.checked_add(get_varint(bytes, pos)?)?;
        }
        i = i.checked_add(usize::try_from(skip).ok()?)?;
        let d = unzigzag(u64::try_from(word >> SKIP_BITS).ok()?);
        let field = out.get_mut(i)?;
        *field = field.wrapping_add(d);
        i += 1;
    }
    Some(())
}

/// Appends `s` to `fields` as its byte length and then its bytes, eight to
/// a field (little-endian, zero-padded).
pub(crate) fn push_str(fields: &mut Vec<u64>, s: &str) {
    fields.push(s.len() as u64);
    for chunk in s.as_bytes().chunks(8) {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        fields.push(u64::from_le_bytes(b));
    }
}

/// Reads fields one at a time; a missing field reads as 0, so records
/// written before a field was added still decode.
pub(crate) struct Fields<'a> {
    fields: &'a [u64],
    pos: usize,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(fields: &'a [u64]) -> Self {
        Fields { fields, pos: 0 }
    }

    /// The next field.
    pub(crate) fn next(&mut self) -> u64 {
        let v = self.fields.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        v
    }

    /// The next `n` fields.
    pub(crate) fn take(&mut self, n: usize) -> &'a [u64] {
        let start = self.pos.min(self.fields.len());
        let end = self.pos.saturating_add(n).min(self.fields.len());
        self.pos = self.pos.saturating_add(n);
        &self.fields[start..end]
    }

    /// Moves past a string written by [`push_str`] without reading it.
    pub(crate) fn skip_string(&mut self) {
        let len = usize::try_from(self.next()).unwrap_or(usize::MAX);
        self.take(len.div_ceil(8).min(self.fields.len()));
    }

    /// A string written by [`push_str`] (invalid UTF-8 replaced).
    pub(crate) fn string(&mut self) -> String {
        let len = usize::try_from(self.next()).unwrap_or(usize::MAX);
        let words = self.take(len.div_ceil(8).min(self.fields.len()));
        let bytes: Vec<u8> = words
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .take(len)
            .collect();
        String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(base: &[u64], record: &[u64]) -> usize {
        let mut bytes = Vec::new();
        encode(base, record, &mut bytes);
        let mut pos = 0;
        let mut out = Vec::new();
        decode(base, &bytes, &mut pos, &mut out).expect("valid record");
        assert_eq!(out, record);
        assert_eq!(pos, bytes.len());
        bytes.len()
    }

    #[test]
    fn records_round_trip_against_any_base() {
        assert_eq!(round_trip(&[], &[]), 2);
        assert_eq!(
            round_trip(&[5, 6, 7], &[5, 6, 7]),
            2,
            "unchanged costs two bytes"
        );
        round_trip(&[], &[u64::MAX, 0, 1, 1 << 63]);
        round_trip(&[10, 20, 30], &[9, 25, 30, 4]); // a gauge went down; a field was added
        round_trip(&[1, 2, 3, 4], &[1]); // fewer fields than the base
        let mut hist = vec![0u64; 65];
        hist[12] = 1000;
        assert!(round_trip(&vec![0u64; 65], &hist) <= 6);
    }

    #[test]
    fn corrupt_bytes_do_not_panic() {
        let mut out = Vec::new();
        for bytes in [
            &[][..],
            &[0x80][..],
            &[3, 9, 0, 1][..],
            &[0xff; 12][..],
            &[2, 1, 7, 2][..],
        ] {
            let mut pos = 0;
            assert!(
                decode(&[], bytes, &mut pos, &mut out).is_none(),
                "{bytes:?}"
            );
        }
    }

    #[test]
    fn strings_round_trip() {
        for s in [
            "",
            "a",
            "worker-12345678",
            "ünïcødé thread name, longer than sixteen bytes",
        ] {
            let mut f = vec![7];
            push_str(&mut f, s);
            f.push(9);
            let mut r = Fields::new(&f);
            assert_eq!(r.next(), 7);
            assert_eq!(r.string(), s);
            assert_eq!(r.next(), 9);
            assert_eq!(r.next(), 0, "past the end reads 0");
            let mut skipped = Fields::new(&f);
            assert_eq!(skipped.next(), 7);
            skipped.skip_string();
            assert_eq!(skipped.next(), 9, "skipped as read: {s:?}");
        }
    }

    mod properties {
        use proptest::collection::vec;
        use proptest::prelude::*;

        use super::super::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            /// Any record round-trips against any base.
            #[test]
            fn any_record_round_trips(base in vec(any::<u64>(), 0..80), record in vec(any::<u64>(), 0..80)) {
                let mut bytes = Vec::new();
                encode(&base, &record, &mut bytes);
                let (mut pos, mut out) = (0, Vec::new());
                prop_assert!(decode(&base, &bytes, &mut pos, &mut out).is_some());
                prop_assert_eq!(out, record);
                prop_assert_eq!(pos, bytes.len());
            }

            /// Arbitrary bytes never panic nor allocate past the field limit.
            #[test]
            fn arbitrary_bytes_never_panic(base in vec(any::<u64>(), 0..8), bytes in vec(any::<u8>(), 0..64)) {
                let (mut pos, mut out) = (0, Vec::new());
                if decode(&base, &bytes, &mut pos, &mut out).is_some() {
                    prop_assert!(out.len() <= MAX_FIELDS && pos <= bytes.len());
                }
                let _ = Fields::new(&out).string();
            }
        }
    }
}

//! Track bookkeeping: the tracks of threads, loops, sleep sites and
//! findings, found by key, with uuids unique in a file.

use super::*;

/// A track with counters under it: a loop or a sleep site.
#[derive(Debug)]
pub(super) struct Tracks<const N: usize> {
    /// Its key in [`Entities`]: the probe's id.
    pub(super) key: u64,
    /// 0 until described.
    pub(super) uuid: u64,
    /// Generation of the last interval that listed it (to drop the gone).
    pub(super) seen: u64,
    pub(super) name: Name,
    pub(super) counters: [Counter; N],
}

impl<const N: usize> Tracks<N> {
    pub(super) fn new(name: &str) -> Self {
        Tracks {
            key: 0,
            uuid: 0,
            seen: 0,
            name: Name::new(name),
            counters: [UNDESCRIBED; N],
        }
    }
}

/// A thread's tracks: its own and its [`THREAD_COUNTERS`], whose uuids
/// are the next numbers after its track's ([`Uuids::block`]), so that
/// only their last values are kept. The writer reads every thread's
/// entry at every interval, a second after the last time (out of cache):
/// it is kept small (112 bytes, where a [`Tracks`] of five counters takes
/// 144) and read in order.
#[derive(Debug)]
pub(super) struct ThreadTracks {
    /// Its key in [`Entities`]: the thread's serial.
    pub(super) key: u64,
    /// Generation of the last interval that listed it (to drop the gone).
    pub(super) seen: u64,
    /// The number of its track ([`Uuids::uuid`]); counter `k` of
    /// [`THREAD_COUNTERS`] is number `+ 1 + k`. 0 until described.
    pub(super) number: u64,
    pub(super) name: Name,
    /// The last value written on each of [`THREAD_COUNTERS`]; NaN before
    /// the first (values written are finite, and NaN differs from every
    /// value).
    pub(super) last: [f64; 5],
    /// Bit `k`: counter `k` of [`THREAD_COUNTERS`] is described.
    pub(super) described: u8,
    /// OS thread id.
    pub(super) tid: u64,
    /// Off-CPU time by cause (threads with eBPF only), made on first use
    /// (boxed: most threads never have it, and the entry stays small).
    pub(super) off_cpu: Option<Box<[Counter; 6]>>,
}

impl ThreadTracks {
    pub(super) fn new(tid: u64) -> Self {
        ThreadTracks {
            key: 0,
            seen: 0,
            number: 0,
            name: Name::new(""),
            last: [f64::NAN; 5],
            described: 0,
            tid,
            off_cpu: None,
        }
    }
}

/// In [`TraceEncoder`]'s `by_entry`: an entry no thread of the interval
/// names.
pub(super) const NOT_LISTED: u32 = u32::MAX;

/// What [`Entities`] needs of an entry.
pub(super) trait Entity {
    fn key(&self) -> u64;
    fn set_key(&mut self, key: u64);
    fn seen(&mut self) -> &mut u64;

    /// Marks it listed in interval `generation`; true the first time in
    /// that interval.
    fn see(&mut self, generation: u64) -> bool {
        let seen = self.seen();
        let fresh = *seen != generation;
        *seen = generation;
        fresh
    }
}

/// [`Entity`] for entries with `key` and `seen` fields.
macro_rules! entity {
    ($([$($generics:tt)*] $t:ty),*) => {$(
        impl<$($generics)*> Entity for $t {
            fn key(&self) -> u64 {
                self.key
            }
            fn set_key(&mut self, key: u64) {
                self.key = key;
            }
            fn seen(&mut self) -> &mut u64 {
                &mut self.seen
            }
        }
    )*};
}

entity!([const N: usize] Tracks<N>, [] ThreadTracks);

/// A thread's or probe's name, kept inline when short (a Linux thread
/// name is 15 bytes at most), so that comparing it with the interval's
/// reads no cache line but its [`Tracks`]'.
#[derive(Debug)]
pub(super) enum Name {
    Inline { len: u8, bytes: [u8; 22] },
    Heap(Box<str>),
}

impl Name {
    pub(super) fn new(name: &str) -> Name {
        let mut bytes = [0u8; 22];
        match bytes.get_mut(..name.len()) {
            Some(head) => {
                head.copy_from_slice(name.as_bytes());
                Name::Inline {
                    len: name.len() as u8,
                    bytes,
                }
            }
            None => Name::Heap(name.into()),
        }
    }

    /// Whether it is `name`.
    #[inline(always)]
    pub(super) fn is(&self, name: &str) -> bool {
        match self {
            Name::Inline { len, bytes } => {
                let name = name.as_bytes();
                name.len() == usize::from(*len) && same_short(&bytes[..name.len()], name)
            }
            Name::Heap(s) => **s == *name,
        }
    }
}

/// Whether `a` and `b`, of one length (at most 22 bytes, a [`Name`]
/// inline), hold the same bytes: a few overlapping word compares, inline,
/// where `==` on slices calls `memcmp` (a call per thread per interval on
/// the writer's hot path).
#[inline(always)]
pub(super) fn same_short(a: &[u8], b: &[u8]) -> bool {
    fn word(s: &[u8], at: usize) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[at..at + 8]);
        u64::from_ne_bytes(w)
    }
    fn half(s: &[u8], at: usize) -> u32 {
        let mut w = [0u8; 4];
        w.copy_from_slice(&s[at..at + 4]);
        u32::from_ne_bytes(w)
    }
    let n = a.len();
    debug_assert_eq!(n, b.len());
    match n {
        16..=22 => {
            word(a, 0) == word(b, 0) && word(a, 8) == word(b, 8) && word(a, n - 8) == word(b, n - 8)
        }
        8..=15 => word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8),
        4..=7 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        _ => a == b,
    }
}

/// The hasher of the per-entity maps, keyed by the sampler's thread
/// serials and probe ids: small counters the sampler assigns, not input
/// an attacker picks, so one multiply (as rustc's FxHash) serves where
/// SipHash would cost several times more on the writer's hot path.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct IdHasher(pub(super) u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

/// Entities by serial or probe id.
pub(super) type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// Where each entity's entry is, by key: the sampler's thread serials and
/// probe ids are small counters it assigns from 0, so the keys of the
/// entities alive usually span not much more than their count, and a
/// plain table indexed by `key - base` (four bytes per key, a few cache
/// lines in all) finds an entry with no hashing and no second cold read;
/// keys outside the table's span (many threads came and went, so that it
/// would be mostly holes) go into a map.
#[derive(Debug, Default)]
pub(super) struct Index {
    /// The key at `dense[0]`.
    pub(super) base: u64,
    /// Entry positions by `key - base`; [`Index::NONE`] for none.
    pub(super) dense: Vec<u32>,
    /// The keys outside `dense`.
    pub(super) sparse: IdMap<u32>,
}

impl Index {
    pub(super) const NONE: u32 = u32::MAX;
    /// Holes the table may hold beyond one per entity before keys go to
    /// the map.
    pub(super) const SLACK: u64 = 64;

    /// The position of `key`, if it has one.
    #[inline(always)]
    pub(super) fn get(&self, key: u64) -> Option<u32> {
        match self.dense.get(key.wrapping_sub(self.base) as usize) {
            Some(&at) if at != Self::NONE => Some(at),
            Some(_) => None,
            None => self.sparse.get(&key).copied(),
        }
    }

    /// Sets the position of a key that has none; `len` entities are
    /// indexed.
    pub(super) fn insert(&mut self, key: u64, at: u32, len: usize) {
        let off = key.wrapping_sub(self.base);
        if self.dense.is_empty() && self.sparse.is_empty() {
            self.base = key;
            self.dense.push(at);
        } else if let Some(slot) = self.dense.get_mut(off as usize) {
            *slot = at;
        } else if key >= self.base && off < 2 * len as u64 + Self::SLACK {
            self.dense.resize(off as usize, Self::NONE);
            self.dense.push(at);
        } else {
            self.sparse.insert(key, at);
        }
    }

    /// Indexes `keys` (in entry order) anew.
    pub(super) fn rebuild(&mut self, keys: impl Iterator<Item = u64> + Clone) {
        self.dense.clear();
        self.sparse.clear();
        let (len, low, high) = keys.clone().fold((0u64, u64::MAX, 0), |(n, lo, hi), k| {
            (n + 1, lo.min(k), hi.max(k))
        });
        if len == 0 {
            return;
        }
        self.base = low;
        if high - low < 2 * len + Self::SLACK {
            self.dense.resize((high - low + 1) as usize, Self::NONE);
            for (at, k) in keys.enumerate() {
                self.dense[(k - low) as usize] = at as u32;
            }
        } else {
            self.sparse
                .extend(keys.enumerate().map(|(at, k)| (k, at as u32)));
        }
    }
}

/// The threads, loops or sleep sites of a trace by key (serial or probe
/// id): their tracks side by side in one vector, found through a compact
/// [`Index`].
#[derive(Debug)]
pub(super) struct Entities<T> {
    pub(super) index: Index,
    pub(super) tracks: Vec<T>,
}

impl<T> Default for Entities<T> {
    fn default() -> Self {
        Entities {
            index: Index::default(),
            tracks: Vec::new(),
        }
    }
}

impl<T: Entity> Entities<T> {
    /// Where `key`'s tracks are, made by `new` when it has none.
    #[inline]
    pub(super) fn slot(&mut self, key: u64, new: impl FnOnce() -> T) -> usize {
        if let Some(at) = self.index.get(key) {
            return at as usize;
        }
        let at = self.tracks.len();
        self.index.insert(key, at as u32, at);
        let mut t = new();
        t.set_key(key);
        self.tracks.push(t);
        at
    }

    pub(super) fn values(&self) -> std::slice::Iter<'_, T> {
        self.tracks.iter()
    }

    /// Drops the entities not listed in interval `generation`, unless all
    /// `listed` of them were (the usual case: no pass over them).
    pub(super) fn forget_gone(&mut self, listed: usize, generation: u64) {
        if listed != self.tracks.len() {
            self.tracks.retain_mut(|t| *t.seen() == generation);
            self.index.rebuild(self.tracks.iter().map(Entity::key));
        }
    }
}

/// Track uuids of one writer sequence: track number `n` (1, 2, 3… in the
/// order tracks are made) gets a uuid no other track of the file has.
///
/// Short (the default, [`TraceEncoder::new`]): for sequences 1 to 7,
/// `n << 3 | sequence`, two bytes on the wire up to track 2047 (a trace of
/// 256 threads) where a sequence in the high 32 bits takes five, and
/// every counter value carries its track's uuid; from sequence 8 on,
/// `sequence << 32 | n`. The two never meet (the first are below
/// `2^35`, the second above, for fewer than `2^32` tracks per sequence,
/// which no file holds), and each is one-to-one: unique in a file whose
/// processes have sequences of their own. Wide
/// ([`TraceEncoder::for_system_trace`]): always `sequence << 32 | n`, so
/// that with a sequence salted per process the uuids stay apart from
/// those of other processes in a system trace. No uuid is 0.
#[derive(Debug, Clone, Copy)]
pub(super) struct Uuids {
    pub(super) sequence: u32,
    pub(super) short: bool,
    /// The next track number.
    pub(super) next: u64,
}

impl Uuids {
    /// Sequences whose uuids are short.
    pub(super) const SHORT_SEQUENCES: u32 = 8;

    pub(super) fn new(sequence: u32, short: bool) -> Self {
        Uuids {
            sequence,
            short: short && sequence < Self::SHORT_SEQUENCES,
            next: 1,
        }
    }

    /// The uuid of track number `n`.
    #[inline(always)]
    pub(super) fn uuid(&self, n: u64) -> u64 {
        if self.short {
            (n << 3) | u64::from(self.sequence)
        } else {
            (u64::from(self.sequence) << 32) | n
        }
    }

    /// A new track's uuid.
    pub(super) fn take(&mut self) -> u64 {
        let n = self.block(1);
        self.uuid(n)
    }

    /// Numbers for `len` new tracks: the first of them.
    pub(super) fn block(&mut self, len: u64) -> u64 {
        let n = self.next;
        self.next += len;
        n
    }
}

/// A finding's track and, while it is reported, its open slice.
#[derive(Debug)]
pub(super) struct FindingTrack {
    pub(super) uuid: u64,
    /// When the open slice began (None: no slice open).
    pub(super) open_since_ns: Option<u64>,
    /// The last time it was reported (where its open slice will end).
    pub(super) last_seen_ns: u64,
    /// The end of its last closed slice: a new one never begins before
    /// it, so that slices of one track never overlap.
    pub(super) closed_at_ns: u64,
}

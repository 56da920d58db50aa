#![doc = include_str!("../README.md")]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A Rust type whose objects can be behind a handle.
pub trait Kind: 'static {
    /// The tag of this type's slots: not 0, and unique among the types
    /// whose handles are given out in one process.
    const TAG: u32;
}

/// Why a handle was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The handle is 0 (NULL).
    Null,
    /// The slot holds an object of another kind: the tag of that kind.
    WrongKind(u32),
    /// The handle's object was removed (a stale handle).
    Freed,
    /// Not a handle this table gave out.
    Bad,
}

/// Bits of a handle that hold its slot's index (plus one, so that no
/// handle is 0); the bits above hold the generation.
const INDEX_BITS: u32 = if usize::BITS >= 64 { 32 } else { 20 };
/// The index bits of a handle.
const INDEX_MASK: usize = (1 << INDEX_BITS) - 1;
/// The generation bits a handle carries (a slot counts generations in
/// 32 bits; a handle carries the low ones).
const GENERATION_MASK: u32 = if usize::BITS - INDEX_BITS >= 32 {
    u32::MAX
} else {
    (1 << (usize::BITS - INDEX_BITS)) - 1
};
/// Most slots the table holds: every index + 1 fits in [`INDEX_MASK`].
const MAX_SLOTS: usize = INDEX_MASK;

/// Slots of the first chunk; chunk `k` has `FIRST_CHUNK << k`.
const FIRST_CHUNK: usize = 64;
/// Chunks enough for [`MAX_SLOTS`] (`FIRST_CHUNK * (2^CHUNKS - 1)` slots).
const CHUNKS: usize = 27;

/// What a handle names.
struct Slot {
    /// The generation (high 32 bits) and the tag of the object held (low
    /// 32 bits; 0 when it holds none).
    stamp: AtomicU64,
    /// The object, from [`Arc::into_raw`], while the tag is not 0.
    object: AtomicPtr<()>,
}

/// The chunks of slots, allocated as the table grows and never freed.
static TABLE: [AtomicPtr<Slot>; CHUNKS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS];

/// Which slots are free: changed only under this lock (lookups never take it).
struct FreeSlots {
    /// Slots handed out so far (the next never-used index).
    used: usize,
    /// Indexes of freed slots, oldest freed first.
    freed: VecDeque<usize>,
}

static FREE: Mutex<FreeSlots> = Mutex::new(FreeSlots {
    used: 0,
    freed: VecDeque::new(),
});

/// The free list, recovering from poisoning (it is consistent after every
/// statement that changes it).
fn free_slots() -> MutexGuard<'static, FreeSlots> {
    FREE.lock().unwrap_or_else(|e| e.into_inner())
}

fn stamp(generation: u32, tag: u32) -> u64 {
    (u64::from(generation) << 32) | u64::from(tag)
}

fn split(stamp: u64) -> (u32, u32) {
    ((stamp >> 32) as u32, stamp as u32)
}

/// The generation after `generation`, skipping those a handle would carry as 0.
fn next_generation(generation: u32) -> u32 {
    let next = generation.wrapping_add(1);
    if next & GENERATION_MASK == 0 {
        next.wrapping_add(1)
    } else {
        next
    }
}

/// Chunk and position in it of slot `index`.
fn locate(index: usize) -> (usize, usize) {
    let chunk = (index / FIRST_CHUNK + 1).ilog2() as usize;
    (chunk, index - FIRST_CHUNK * ((1 << chunk) - 1))
}

/// Slot `index`, if its chunk exists.
fn slot(index: usize) -> Option<&'static Slot> {
    let (chunk, at) = locate(index);
    let start = TABLE.get(chunk)?.load(Ordering::Acquire);
    if start.is_null() {
        return None;
    }
    // SAFETY: a non-null chunk pointer is the start of a leaked boxed
    // slice of `FIRST_CHUNK << chunk` slots (`grow`), published with
    // Release after its slots were made and never freed; `locate` puts
    // `at` below that length.
    Some(unsafe { &*start.add(at) })
}

/// Makes the chunk of slot `index` if it is the first slot of a chunk
/// not made yet. Called under the free-list lock, for `used` only.
fn grow(index: usize) {
    let (chunk, at) = locate(index);
    if at == 0 && TABLE[chunk].load(Ordering::Acquire).is_null() {
        let slots: Box<[Slot]> = (0..FIRST_CHUNK << chunk)
            .map(|_| Slot {
                stamp: AtomicU64::new(stamp(1, 0)),
                object: AtomicPtr::new(std::ptr::null_mut()),
            })
            .collect();
        TABLE[chunk].store(Box::leak(slots).as_mut_ptr(), Ordering::Release);
    }
}

fn handle_of(index: usize, generation: u32) -> usize {
    (((generation & GENERATION_MASK) as usize) << INDEX_BITS) | (index + 1)
}

/// Puts `object` in a free slot and returns its handle (never 0); `None`
/// when the table is full (2^32 - 1 live handles on 64-bit targets, 2^20 - 1
/// on 32-bit ones), the object dropped.
pub fn insert<T: Kind>(object: Arc<T>) -> Option<usize> {
    let index = {
        let mut free = free_slots();
        match free.freed.pop_front() {
            Some(index) => index,
            None if free.used < MAX_SLOTS => {
                grow(free.used);
                free.used += 1;
                free.used - 1
            }
            None => return None,
        }
    };
    let slot = slot(index)?;
    // Nothing else writes this slot: it is neither free nor live.
    let (generation, _) = split(slot.stamp.load(Ordering::Relaxed));
    slot.object
        .store(Arc::into_raw(object).cast_mut().cast(), Ordering::Relaxed);
    slot.stamp
        .store(stamp(generation, T::TAG), Ordering::Release);
    Some(handle_of(index, generation))
}

/// The slot of `handle` and its stamp, if it holds a `T` of the handle's generation.
fn lookup<T: Kind>(handle: usize) -> Result<(usize, &'static Slot, u64), Refused> {
    if handle == 0 {
        return Err(Refused::Null);
    }
    let index = (handle & INDEX_MASK).checked_sub(1).ok_or(Refused::Bad)?;
    let generation = (handle >> INDEX_BITS) as u32;
    if generation == 0 {
        return Err(Refused::Bad);
    }
    let slot = slot(index).ok_or(Refused::Bad)?;
    let now = slot.stamp.load(Ordering::Acquire);
    check::<T>(now, generation).map(|()| (index, slot, now))
}

/// Whether a slot stamped `now` holds a `T` for a handle of `generation`.
fn check<T: Kind>(now: u64, generation: u32) -> Result<(), Refused> {
    let (slot_generation, tag) = split(now);
    if slot_generation & GENERATION_MASK != generation {
        let behind = slot_generation.wrapping_sub(generation) & GENERATION_MASK;
        return Err(if behind <= GENERATION_MASK / 2 {
            Refused::Freed
        } else {
            Refused::Bad
        });
    }
    match tag {
        t if t == T::TAG => Ok(()),
        // A generation that never held an object (only a forged handle has it).
        0 => Err(Refused::Bad),
        other => Err(Refused::WrongKind(other)),
    }
}

/// The `T` behind `handle`.
///
/// # Errors
/// [`Refused`]: NULL, a stale handle, another kind, a forged number.
///
/// # Safety
/// The object is not removed ([`remove`], by any thread) while the
/// returned reference is in use; when `T` is not `Sync`, the caller keeps
/// to one thread at a time.
#[inline]
pub unsafe fn get<'a, T: Kind>(handle: usize) -> Result<&'a T, Refused> {
    let (_, slot, _) = lookup::<T>(handle)?;
    let object = slot.object.load(Ordering::Relaxed).cast::<T>();
    // SAFETY: the stamp, read with Acquire after the Release store that
    // followed the object's store in `insert`, says the slot holds a `T`
    // from `Arc::into_raw`; the caller does not remove it while the
    // reference is in use.
    Ok(unsafe { &*object })
}

/// Takes the `T` behind `handle` out of the table (the caller drops it);
/// the handle is stale from then on and its slot is free for reuse. Of two
/// racing removals of one handle only one succeeds.
///
/// # Errors
/// As [`get`]; nothing is removed.
///
/// # Safety
/// No reference from [`get`] on this handle is in use, by any thread.
pub unsafe fn remove<T: Kind>(handle: usize) -> Result<Arc<T>, Refused> {
    let (index, slot, now) = lookup::<T>(handle)?;
    let (generation, _) = split(now);
    slot.stamp
        .compare_exchange(
            now,
            stamp(next_generation(generation), 0),
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .map_err(|now| match check::<T>(now, generation & GENERATION_MASK) {
            Err(refused) => refused,
            Ok(()) => Refused::Freed,
        })?;
    let object = slot
        .object
        .swap(std::ptr::null_mut(), Ordering::Relaxed)
        .cast::<T>()
        .cast_const();
    free_slots().freed.push_back(index);
    // SAFETY: the slot held a `T` from `Arc::into_raw` (its stamp said so)
    // and the compare-exchange made this the one removal of it.
    Ok(unsafe { Arc::from_raw(object) })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Apple(u32);
    impl Kind for Apple {
        const TAG: u32 = u32::from_be_bytes(*b"tApl");
    }
    struct Pear;
    impl Kind for Pear {
        const TAG: u32 = u32::from_be_bytes(*b"tPea");
    }

    #[test]
    fn handles_are_checked_for_kind_and_refused_once_removed() {
        let apple = Arc::new(Apple(7));
        let h = insert(apple.clone()).expect("room");
        assert_ne!(h, 0);
        // SAFETY: nothing is removed while the references are used.
        unsafe {
            assert_eq!(get::<Apple>(h).map(|a| a.0), Ok(7));
            assert_eq!(get::<Pear>(h).err(), Some(Refused::WrongKind(Apple::TAG)));
            assert_eq!(
                remove::<Pear>(h).err(),
                Some(Refused::WrongKind(Apple::TAG))
            );
            let taken = remove::<Apple>(h).expect("live");
            assert!(Arc::ptr_eq(&taken, &apple));
            assert_eq!(get::<Apple>(h).err(), Some(Refused::Freed));
            assert_eq!(remove::<Apple>(h).err(), Some(Refused::Freed));
        }
        assert_eq!(Arc::strong_count(&apple), 1);
    }

    #[test]
    fn a_stale_handle_stays_refused_when_its_slot_is_reused() {
        // Fill the free list's front with this test's slots until one is reused.
        let first = insert(Arc::new(Apple(1))).expect("room");
        // SAFETY: no reference is in use.
        drop(unsafe { remove::<Apple>(first) }.expect("live"));
        let mut live = Vec::new();
        let reused = loop {
            let h = insert(Arc::new(Pear)).expect("room");
            live.push(h);
            if h & INDEX_MASK == first & INDEX_MASK {
                break h;
            }
            assert!(live.len() < 1 << 16, "the freed slot is reused");
        };
        assert_ne!(reused, first);
        // SAFETY: as above.
        unsafe {
            assert_eq!(get::<Apple>(first).err(), Some(Refused::Freed));
            assert_eq!(get::<Pear>(first).err(), Some(Refused::Freed));
            assert!(get::<Pear>(reused).is_ok());
            for h in live {
                drop(remove::<Pear>(h).expect("live"));
            }
        }
    }

    #[test]
    fn forged_numbers_are_refused_without_reading_an_object() {
        // SAFETY: nothing is ever returned for these numbers.
        unsafe {
            assert_eq!(get::<Apple>(0).err(), Some(Refused::Null));
            // Index bits 0, generation 0, a never-made chunk, a misaligned address.
            for forged in [1, 1 << INDEX_BITS, INDEX_MASK, 0x7ff0_1234_usize] {
                assert!(
                    matches!(get::<Apple>(forged), Err(Refused::Bad | Refused::Freed)),
                    "{forged:#x}"
                );
            }
            let h = insert(Arc::new(Apple(3))).expect("room");
            let ahead = h.wrapping_add(5 << INDEX_BITS);
            assert_eq!(get::<Apple>(ahead).err(), Some(Refused::Bad));
            drop(remove::<Apple>(h).expect("live"));
        }
    }

    #[test]
    fn generations_skip_the_one_a_handle_cannot_carry() {
        assert_eq!(next_generation(1), 2);
        assert_ne!(next_generation(GENERATION_MASK) & GENERATION_MASK, 0);
        assert_ne!(next_generation(u32::MAX) & GENERATION_MASK, 0);
    }

    #[test]
    fn slots_are_located_in_growing_chunks() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(63), (0, 63));
        assert_eq!(locate(64), (1, 0));
        assert_eq!(locate(191), (1, 127));
        assert_eq!(locate(192), (2, 0));
        assert!(locate(MAX_SLOTS - 1).0 < CHUNKS);
    }
}

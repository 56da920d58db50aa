//! Typed opaque handles: slots of a pool that is never returned to the
//! allocator.
//!
//! A C handle (`wm_sampler*`, `wm_loop_probe*`, ...) is the address of a
//! [`Slot`]: a kind tag, then a pointer to the boxed Rust object. Every call
//! reads the tag first, so a loop handle passed where a sleep handle is
//! expected returns `WM_ERR_WRONG_KIND` without touching the object.
//!
//! Slots live in chunks that are never freed, so a freed handle still points
//! at a slot: freeing overwrites its tag with [`FREED`] (atomically, so two
//! frees of one handle cannot both succeed), drops the object and puts the
//! slot at the back of a FIFO free list. A stale handle whose slot has not
//! been reused yet is refused with `WM_ERR_FREED` instead of reading freed
//! memory (which AddressSanitizer would report). This is best effort: once
//! the slot is reused, a stale handle aliases the new one. A use after free
//! is still the caller's bug.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Tag of a slot whose object was freed.
pub(crate) const FREED: u64 = 0x776d_6672_6565_6400;
/// Tag of a slot that never held an object.
const UNUSED: u64 = 0;

/// Slots per chunk.
const CHUNK: usize = 64;

/// What a handle points at.
#[repr(C)]
pub(crate) struct Slot {
    /// [`Kind::TAG`] of the object while live, [`FREED`] after, 0 if never used.
    tag: AtomicU64,
    /// The boxed object (a `Box<T>` of the tag's kind) while live.
    obj: AtomicPtr<()>,
}

impl Slot {
    const fn new() -> Self {
        Slot {
            tag: AtomicU64::new(UNUSED),
            obj: AtomicPtr::new(std::ptr::null_mut()),
        }
    }
}

/// A Rust object that can be behind a handle.
pub(crate) trait Kind: Sized {
    /// The tag stored in this type's slots; unique per type.
    const TAG: u64;
    /// What the C API calls it, for error messages.
    const NAME: &'static str;
}

/// The tags of every kind, with their names.
pub(crate) const KINDS: [(u64, &str); 4] = [
    (crate::SamplerObj::TAG, crate::SamplerObj::NAME),
    (crate::LoopObj::TAG, crate::LoopObj::NAME),
    (crate::SleepObj::TAG, crate::SleepObj::NAME),
    (crate::FindingsObj::TAG, crate::FindingsObj::NAME),
];

struct Pool {
    chunks: Vec<Box<[Slot]>>,
    /// Free slots as (chunk, index), oldest freed first.
    free: VecDeque<(usize, usize)>,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    chunks: Vec::new(),
    free: VecDeque::new(),
});

fn pool() -> std::sync::MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Why a handle was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The pointer is NULL.
    Null,
    /// The slot holds another kind; the name of that kind.
    WrongKind(&'static str),
    /// The slot's object was freed.
    Freed,
    /// Not a slot this library made (misaligned, or an unknown tag).
    Bad,
}

/// Stores `obj` in a free slot and returns the slot's address.
pub(crate) fn alloc<T: Kind>(obj: T) -> *mut Slot {
    let raw = Box::into_raw(Box::new(obj)).cast::<()>();
    let mut p = pool();
    let (c, i) = match p.free.pop_front() {
        Some(ci) => ci,
        None => {
            let chunk: Box<[Slot]> = (0..CHUNK).map(|_| Slot::new()).collect();
            p.chunks.push(chunk);
            let c = p.chunks.len() - 1;
            p.free.extend((1..CHUNK).map(|i| (c, i)));
            (c, 0)
        }
    };
    let slot = &p.chunks[c][i];
    slot.obj.store(raw, Ordering::Relaxed);
    slot.tag.store(T::TAG, Ordering::Release);
    std::ptr::from_ref(slot).cast_mut()
}

/// The object behind `handle` if its tag says it is a `T`.
///
/// # Safety
/// `handle` is NULL or an address returned by [`alloc`] (for any kind,
/// live or freed); a live `T` is not freed while the reference is used.
#[inline]
pub(crate) unsafe fn get<'a, T: Kind>(handle: *const Slot) -> Result<&'a T, Refused> {
    if handle.is_null() {
        return Err(Refused::Null);
    }
    if !handle.addr().is_multiple_of(align_of::<Slot>()) {
        return Err(Refused::Bad);
    }
    // SAFETY: per the contract a non-NULL handle is the address of a slot,
    // and slots are never deallocated, so the read is of live memory.
    let slot = unsafe { &*handle };
    let tag = slot.tag.load(Ordering::Acquire);
    if tag == T::TAG {
        let obj = slot.obj.load(Ordering::Relaxed).cast::<T>();
        // SAFETY: the tag (read with Acquire after the Release store in
        // `alloc`) says `obj` is a live `Box<T>`; the caller does not free
        // it while the reference is in use.
        Ok(unsafe { &*obj })
    } else {
        Err(refusal(tag))
    }
}

#[cold]
fn refusal(tag: u64) -> Refused {
    if tag == FREED {
        return Refused::Freed;
    }
    match KINDS.iter().find(|(t, _)| *t == tag) {
        Some((_, name)) => Refused::WrongKind(name),
        None => Refused::Bad,
    }
}

/// Frees the `T` behind `handle`: marks the slot [`FREED`], then drops the
/// object (a panic in its destructor is caught and reported as `Err(None)`).
///
/// # Safety
/// As [`get`]; no other call uses the handle during or after this one.
pub(crate) unsafe fn free<T: Kind>(handle: *const Slot) -> Result<(), Option<Refused>> {
    // SAFETY: forwarded contract.
    let _ = unsafe { get::<T>(handle) }.map_err(Some)?;
    // SAFETY: `get` checked it is a slot.
    let slot = unsafe { &*handle };
    // Claim it: of two racing frees only one sees its own tag.
    slot.tag
        .compare_exchange(T::TAG, FREED, Ordering::AcqRel, Ordering::Acquire)
        .map_err(|t| Some(refusal(t)))?;
    let obj = slot
        .obj
        .swap(std::ptr::null_mut(), Ordering::Relaxed)
        .cast::<T>();
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `obj` came from `Box::into_raw` in `alloc` as a `T` (the
        // tag said so); the compare-exchange made this the only free.
        drop(unsafe { Box::from_raw(obj) });
    }));
    let mut p = pool();
    let index = p.chunks.iter().enumerate().find_map(|(c, chunk)| {
        let start = chunk.as_ptr().addr();
        let at = handle.addr().wrapping_sub(start) / size_of::<Slot>();
        (handle.addr() >= start && at < chunk.len()).then_some((c, at))
    });
    if let Some(ci) = index {
        p.free.push_back(ci);
    }
    dropped.map_err(|_| None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LoopObj, SleepObj};

    #[test]
    fn tags_are_checked_and_freed_slots_are_refused_then_reused_last() {
        let s = wakemeter::Sampler::new().unwrap();
        let lp = alloc(LoopObj::new(s.loop_probe("x").unwrap()));
        // SAFETY: addresses from alloc.
        unsafe {
            assert!(get::<LoopObj>(lp).is_ok());
            assert_eq!(
                get::<SleepObj>(lp).err(),
                Some(Refused::WrongKind("wm_loop_probe"))
            );
            assert!(free::<LoopObj>(lp).is_ok());
            assert_eq!(get::<LoopObj>(lp).err(), Some(Refused::Freed));
            assert_eq!(free::<LoopObj>(lp).err(), Some(Some(Refused::Freed)));
            assert_eq!(get::<LoopObj>(std::ptr::null()).err(), Some(Refused::Null));
        }
    }
}

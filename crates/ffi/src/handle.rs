//! Raw handles of the JVM fast path: `Sampler.raw_handle()`,
//! `LoopProbe.raw_handle()` and `SleepProbe.raw_handle()`, as numbers of
//! the handle table shared with the C API (`wakemeter_handles`).
//!
//! A handle owns a strong reference to its object until it is released.
//! Every use checks the handle's kind and generation first, so a loop
//! handle given to a sleep function is refused as another kind, and 0, a
//! released handle (even once its slot holds a newer object) or a number
//! no handle has is refused as a bad handle, never read as an object. The
//! check takes no lock and allocates nothing.
//!
//! What the owner guarantees: a handle is not released while a call on it
//! is in flight. The Kotlin layer (`dev.wakemeter.RawHandle`) counts the
//! calls in flight on a handle and releases it once, after the last one.

use std::sync::Arc;

pub(crate) use wakemeter_handles::{Kind, Refused};

/// A new handle owning a strong reference to `object`; 0 (refused by
/// every call) when the process already holds the most handles the table
/// has room for.
pub(crate) fn into_handle<T: Kind>(object: Arc<T>) -> u64 {
    wakemeter_handles::insert(object).map_or(0, |h| h as u64)
}

/// The object behind `handle` if it is a `T`.
///
/// # Safety
/// The handle is not released while the reference is in use.
#[inline]
pub(crate) unsafe fn get<'a, T: Kind>(handle: u64) -> Result<&'a T, Refused> {
    let handle = usize::try_from(handle).map_err(|_| Refused::Bad)?;
    // SAFETY: forwarded from this function's contract.
    unsafe { wakemeter_handles::get(handle) }
}

/// Takes the handle's strong reference back (the caller drops it); the
/// handle is refused from then on.
///
/// # Safety
/// No call on the handle is in flight.
pub(crate) unsafe fn release<T: Kind>(handle: u64) -> Result<Arc<T>, Refused> {
    let handle = usize::try_from(handle).map_err(|_| Refused::Bad)?;
    // SAFETY: forwarded from this function's contract.
    unsafe { wakemeter_handles::remove(handle) }
}

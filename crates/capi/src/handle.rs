//! Typed opaque handles of the C API, in the handle table shared with the
//! JVM fast path (`wakemeter_handles`).
//!
//! A C handle (`wm_sampler*`, `wm_loop_probe*`, ...) is a number of that
//! table, typed as a pointer that C never dereferences. Every call checks
//! the handle's kind tag and generation first, so a loop handle passed
//! where a sleep handle is expected returns `WM_ERR_WRONG_KIND` without
//! touching the object, and a freed handle returns `WM_ERR_FREED`, also
//! once a newer handle reuses its slot: it is never read as an object.
//! What the caller still guarantees: no handle is freed while another
//! thread's call on it is in flight.

use std::sync::Arc;

/// A Rust object that can be behind a C handle.
pub(crate) trait Kind: wakemeter_handles::Kind {
    /// What the C API calls it, for error messages.
    const NAME: &'static str;
}

/// The tag and the name of each kind of C handle (the tags differ from
/// those of the JVM fast path's handles, which share the table).
pub(crate) const SAMPLER: (u32, &str) = (u32::from_be_bytes(*b"cSmp"), "wm_sampler");
/// See [`SAMPLER`].
pub(crate) const LOOP_PROBE: (u32, &str) = (u32::from_be_bytes(*b"cLoo"), "wm_loop_probe");
/// See [`SAMPLER`].
pub(crate) const SLEEP_PROBE: (u32, &str) = (u32::from_be_bytes(*b"cSlp"), "wm_sleep_probe");
/// See [`SAMPLER`].
pub(crate) const FINDINGS: (u32, &str) = (u32::from_be_bytes(*b"cFnd"), "wm_findings");

/// Every kind of C handle.
const KINDS: [(u32, &str); 4] = [SAMPLER, LOOP_PROBE, SLEEP_PROBE, FINDINGS];

/// Why a handle was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The pointer is NULL.
    Null,
    /// The slot holds another kind; the name of that kind.
    WrongKind(&'static str),
    /// The handle was freed.
    Freed,
    /// Not a handle this library made (or one of the JVM fast path).
    Bad,
}

#[cold]
fn refusal(r: wakemeter_handles::Refused) -> Refused {
    use wakemeter_handles::Refused as R;
    match r {
        R::Null => Refused::Null,
        R::Freed => Refused::Freed,
        R::Bad => Refused::Bad,
        R::WrongKind(tag) => match KINDS.iter().find(|(t, _)| *t == tag) {
            Some((_, name)) => Refused::WrongKind(name),
            None => Refused::Bad,
        },
    }
}

/// A new handle of `obj`; `None` when the table is full (`obj` dropped).
pub(crate) fn alloc<T: Kind, H>(obj: T) -> Option<*mut H> {
    wakemeter_handles::insert(Arc::new(obj)).map(std::ptr::without_provenance_mut)
}

/// The object behind `handle` if it is a `T`.
///
/// # Safety
/// The handle is not freed while the reference is in use; a `T` that is
/// not `Sync` is used by one thread at a time.
#[inline]
pub(crate) unsafe fn get<'a, T: Kind, H>(handle: *const H) -> Result<&'a T, Refused> {
    // SAFETY: forwarded contract.
    unsafe { wakemeter_handles::get::<T>(handle.addr()) }.map_err(refusal)
}

/// Frees the `T` behind `handle`: the handle is refused from then on,
/// then the object is dropped (a panic in its destructor is caught and
/// reported as `Err(None)`).
///
/// # Safety
/// No other call uses the handle during this one.
pub(crate) unsafe fn free<T: Kind, H>(handle: *const H) -> Result<(), Option<Refused>> {
    // SAFETY: forwarded contract.
    let obj =
        unsafe { wakemeter_handles::remove::<T>(handle.addr()) }.map_err(|r| Some(refusal(r)))?;
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(obj))).map_err(|_| None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::{LoopObj, SleepObj};

    #[test]
    fn tags_are_checked_and_freed_slots_are_refused_then_reused_last() {
        let s = wakemeter::Sampler::new().unwrap();
        let lp: *mut () = alloc(LoopObj::new(s.loop_probe("x").unwrap())).unwrap();
        // SAFETY: handles from alloc.
        unsafe {
            assert!(get::<LoopObj, _>(lp).is_ok());
            assert_eq!(
                get::<SleepObj, _>(lp).err(),
                Some(Refused::WrongKind("wm_loop_probe"))
            );
            assert!(free::<LoopObj, _>(lp).is_ok());
            assert_eq!(get::<LoopObj, _>(lp).err(), Some(Refused::Freed));
            assert_eq!(free::<LoopObj, _>(lp).err(), Some(Some(Refused::Freed)));
            assert_eq!(
                get::<LoopObj, _>(std::ptr::null::<()>()).err(),
                Some(Refused::Null)
            );
        }
    }
}

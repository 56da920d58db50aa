//! Plain C entry points for the JVM: the probes' hot path and every
//! record the Kotlin layer reads.
//!
//! Every uniffi call from Kotlin allocates JNA `Structure`s for its call
//! status and its returned buffer (native memory tracked by JNA until the
//! garbage collector frees it), and a method call makes two native calls
//! (clone the object's handle, then call): tens of microseconds per call
//! and, in a call loop, long GC pauses (BENCHMARKS.md, "JVM calls from
//! Kotlin"). These
//! functions take and return only integers and addresses, so JNA's direct
//! mapping calls them without allocating. Swift calls the uniffi functions
//! directly (its call status lives on the stack) and does not need them.
//!
//! # Handles
//!
//! A handle is the address of a small box made by `Sampler.raw_handle()`,
//! `LoopProbe.raw_handle()` or `SleepProbe.raw_handle()`: a kind tag saying
//! which object type it holds, then a strong reference to the object. Every
//! function checks the tag before it touches the object, so a loop handle
//! given to a sleep function returns [`WRONG_KIND`] instead of reading a
//! `LoopProbe` as a `SleepProbe`, and 0 (or an address no box can have)
//! returns [`BAD_HANDLE`]. The check costs one relaxed atomic load and a
//! compare: the hot path takes no lock and allocates nothing.
//!
//! The tag cannot make a released handle safe: the matching `*_release`
//! function frees the box, and anything may live at that address
//! afterwards. Release overwrites the tag first, so a stale handle whose
//! memory has not been reused yet is refused with [`BAD_HANDLE`], but that
//! is a diagnostic, not a guarantee. The guarantee comes from the owner:
//! the Kotlin layer (`dev.wakemeter.RawHandle`) counts the calls in flight
//! on a handle, releases it exactly once, after the last of them, and
//! refuses calls once it is closed.
//!
//! # Records
//!
//! Records cross in a buffer the caller owns (a direct `ByteBuffer` reused
//! per thread in Kotlin), in uniffi's own serialization: Rust writes them
//! with `uniffi::Lower::write` and Kotlin reads them with the generated
//! converters (`FfiConverterTypeReport.read` …), so no record is described
//! twice. See `answer` for the layout and the return value.
//!
//! Return codes: [`OK`], [`SAMPLER_GONE`], [`BAD_HANDLE`], [`PANICKED`],
//! [`WRONG_KIND`], [`BAD_INPUT`] (the record calls return them negated).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use uniffi::Lower;

use crate::UniFfiTag;
use crate::error::WakemeterError;
use crate::probe::{LoopProbe, SleepProbe};
use crate::sampler::Sampler;

mod sampler;

pub use sampler::*;

/// The call succeeded.
pub const OK: i32 = 0;
/// The probe's sampler is gone (`WakemeterError::SamplerGone`).
pub const SAMPLER_GONE: i32 = 1;
/// The handle is 0, or not the address of a live handle (a released one
/// whose memory was not reused yet, or a number no handle can have).
pub const BAD_HANDLE: i32 = 2;
/// The call panicked (a bug); nothing was recorded.
pub const PANICKED: i32 = 3;
/// The handle is of another object type (a loop handle given to a sleep
/// function or the reverse, a probe handle given to a sampler function…);
/// nothing was read or recorded.
pub const WRONG_KIND: i32 = 4;
/// A record call's input could not be read, its operation is unknown, or
/// its buffer is invalid (null, or shorter than the input); nothing was done.
pub const BAD_INPUT: i32 = 5;

/// The smallest buffer a record call accepts: below it the call returns
/// this size and does nothing, so an answer holding a new handle always
/// fits and is never dropped (leaking the handle).
pub const MIN_CAPACITY: u64 = 64;

/// Tag of a box holding a `LoopProbe` ("wmloop" in ASCII, then 1).
const LOOP_KIND: u64 = 0x776d_6c6f_6f70_0001;
/// Tag of a box holding a `SleepProbe` ("wmslep" in ASCII, then 2).
const SLEEP_KIND: u64 = 0x776d_736c_6570_0002;
/// Tag of a box holding a `Sampler` ("wmsamp" in ASCII, then 3).
const SAMPLER_KIND: u64 = 0x776d_7361_6d70_0003;
/// Tag written by the release functions just before the box is freed.
const RELEASED: u64 = 0x776d_6465_6164_0000;

/// An object type that can be behind a handle, with the tag of its boxes.
pub(crate) trait Kind {
    /// The tag stored at the start of this type's boxes.
    const KIND: u64;
}

impl Kind for LoopProbe {
    const KIND: u64 = LOOP_KIND;
}

impl Kind for SleepProbe {
    const KIND: u64 = SLEEP_KIND;
}

impl Kind for Sampler {
    const KIND: u64 = SAMPLER_KIND;
}

/// What a handle points at.
///
/// `repr(C)` puts `kind` first for every `T`, so the tag of any handle can
/// be read before its type is known.
#[repr(C)]
struct Handle<T> {
    /// [`Kind::KIND`] of `T` while the handle is live, [`RELEASED`] after.
    kind: AtomicU64,
    object: Arc<T>,
}

/// A new handle owning a strong reference to `object` (see the module docs).
pub(crate) fn into_handle<T: Kind>(object: Arc<T>) -> u64 {
    let boxed = Box::new(Handle {
        kind: AtomicU64::new(T::KIND),
        object,
    });
    // Non-zero: a box's address is never null. On 32-bit targets the
    // address fits, and `tagged` refuses anything above `usize::MAX`.
    Box::into_raw(boxed).expose_provenance() as u64
}

/// The box behind `handle` if its tag says it holds a `T`, else the code to
/// return.
///
/// # Safety
/// `handle` is 0, or was returned by `into_handle` (for any object type) and
/// not yet released; the box stays live for `'a`.
unsafe fn tagged<'a, T: Kind>(handle: u64) -> Result<&'a Handle<T>, i32> {
    let Ok(address) = usize::try_from(handle) else {
        return Err(BAD_HANDLE);
    };
    // Boxes of every kind share the alignment of their first two fields.
    if address == 0 || !address.is_multiple_of(align_of::<Handle<T>>()) {
        return Err(BAD_HANDLE);
    }
    let tag = std::ptr::with_exposed_provenance::<AtomicU64>(address);
    // SAFETY: per this function's contract the non-zero `handle` is the
    // address of a live `Handle<_>` box made by `into_handle`; whatever
    // its type, it is `repr(C)` with an `AtomicU64` as first field, so the
    // address is valid for an atomic read of that field.
    let kind = unsafe { &*tag }.load(Ordering::Relaxed);
    if kind == T::KIND {
        // SAFETY: live box (contract) whose tag says it was made as a
        // `Handle<T>`; only shared references to it are ever created.
        Ok(unsafe { &*tag.cast::<Handle<T>>() })
    } else if kind == LOOP_KIND || kind == SLEEP_KIND || kind == SAMPLER_KIND {
        Err(WRONG_KIND)
    } else {
        Err(BAD_HANDLE)
    }
}

fn code(r: std::thread::Result<Result<(), WakemeterError>>) -> i32 {
    match r {
        Ok(Ok(())) => OK,
        Ok(Err(_)) => SAMPLER_GONE,
        Err(_) => PANICKED,
    }
}

/// Runs `f` on the object behind `handle` if it is a `T`.
///
/// # Safety
/// As [`tagged`]; the handle is not released while this runs.
unsafe fn with<T: Kind>(handle: u64, f: impl FnOnce(&T) -> Result<(), WakemeterError>) -> i32 {
    // SAFETY: forwarded from this function's contract; the box outlives
    // this call because the caller does not release it meanwhile.
    match unsafe { tagged::<T>(handle) } {
        Ok(h) => code(catch_unwind(AssertUnwindSafe(|| f(&h.object)))),
        Err(code) => code,
    }
}

/// Releases a handle if it is a `T`; returns [`OK`] or why it did not.
///
/// # Safety
/// As [`tagged`]; the handle is not used again, by any thread, once this
/// returns [`OK`].
unsafe fn release<T: Kind>(handle: u64) -> i32 {
    // SAFETY: forwarded from this function's contract.
    let h = match unsafe { tagged::<T>(handle) } {
        Ok(h) => h,
        Err(code) => return code,
    };
    h.kind.store(RELEASED, Ordering::Relaxed);
    let boxed = std::ptr::from_ref(h).cast_mut();
    // Dropping the object's last reference runs its destructor; a panic there
    // must not cross the C boundary.
    let dropped = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the box was made by `Box::into_raw` as a `Handle<T>` (its
        // tag said so) and the caller owns it and never uses it again, so
        // it is freed exactly once; `h` is not used after this.
        drop(unsafe { Box::from_raw(boxed) });
    }));
    if dropped.is_ok() { OK } else { PANICKED }
}

/// A record call's answer, before it is copied into the caller's buffer,
/// or the code to return instead.
type Answer = Result<Vec<u8>, i32>;

/// Writes `result` as a record call's answer: a tag byte (0 = `Ok`, 1 =
/// `Err`), then the value or the `WakemeterError`, each as uniffi writes it.
fn put<R: Lower<UniFfiTag>>(result: Result<R, WakemeterError>) -> Answer {
    let mut out = Vec::new();
    match result {
        Ok(value) => {
            out.push(0);
            R::write(value, &mut out);
        }
        Err(error) => {
            out.push(1);
            <WakemeterError as Lower<UniFfiTag>>::write(error, &mut out);
        }
    }
    Ok(out)
}

/// Runs a record call: `f` gets the object behind `handle` and the first
/// `in_len` bytes of `buf` (the call's input, written by the generated
/// converters), and its answer is copied into `buf`.
///
/// Returns the answer's length. When that is more than `cap`, nothing was
/// copied: the caller calls again with a buffer of at least that size (the
/// answer is computed again, and may have grown meanwhile). Below
/// [`MIN_CAPACITY`] the call returns [`MIN_CAPACITY`] without running `f`.
/// Errors are negative: `-BAD_HANDLE`, `-WRONG_KIND`, `-BAD_INPUT`,
/// `-PANICKED`; a `WakemeterError` is an answer (tag 1), not a code.
///
/// # Safety
/// As [`tagged`]; `buf` is valid for reads and writes of `cap` bytes and
/// nothing else reads or writes it during the call.
unsafe fn answer<T: Kind>(
    handle: u64,
    buf: *mut u8,
    cap: u64,
    in_len: u64,
    f: impl FnOnce(&T, &[u8]) -> Answer,
) -> i64 {
    // SAFETY: forwarded from this function's contract; the box outlives
    // this call because the caller does not release it meanwhile.
    let h = match unsafe { tagged::<T>(handle) } {
        Ok(h) => h,
        Err(code) => return -i64::from(code),
    };
    if buf.is_null() || in_len > cap {
        return -i64::from(BAD_INPUT);
    }
    if cap < MIN_CAPACITY {
        return MIN_CAPACITY as i64;
    }
    let (Ok(cap), Ok(in_len)) = (usize::try_from(cap), usize::try_from(in_len)) else {
        return -i64::from(BAD_INPUT);
    };
    let answered = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `buf` is non-null and valid for reads of `cap >= in_len`
        // bytes that nothing writes during the call (contract); the slice
        // is dropped before the answer is copied into `buf`.
        let input = unsafe { std::slice::from_raw_parts(buf, in_len) };
        f(&h.object, input)
    }));
    match answered {
        Ok(Ok(out)) => {
            if out.len() <= cap {
                // SAFETY: `buf` is valid for writes of `cap >= out.len()`
                // bytes (contract) and cannot overlap the fresh `out`.
                unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), buf, out.len()) };
            }
            i64::try_from(out.len()).unwrap_or(i64::MAX)
        }
        Ok(Err(code)) => -i64::from(code),
        Err(_) => -i64::from(PANICKED),
    }
}

/// `LoopProbe.before_wait(timeout_ns)` on a raw handle.
///
/// Returns [`OK`], [`SAMPLER_GONE`], [`BAD_HANDLE`], [`WRONG_KIND`] or [`PANICKED`].
///
/// # Safety
/// `handle` is 0 or a live handle from `raw_handle()`, not released during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wakemeter_loop_probe_before_wait(handle: u64, timeout_ns: i64) -> i32 {
    // SAFETY: forwarded from this function's contract.
    unsafe { with(handle, |p: &LoopProbe| p.before_wait(timeout_ns)) }
}

/// `LoopProbe.after_wait(events)` on a raw handle.
///
/// Returns [`OK`], [`SAMPLER_GONE`], [`BAD_HANDLE`], [`WRONG_KIND`] or [`PANICKED`].
///
/// # Safety
/// `handle` is 0 or a live handle from `raw_handle()`, not released during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wakemeter_loop_probe_after_wait(handle: u64, events: u32) -> i32 {
    // SAFETY: forwarded from this function's contract.
    unsafe { with(handle, |p: &LoopProbe| p.after_wait(events)) }
}

/// Releases a handle from `LoopProbe.raw_handle()`.
///
/// Returns [`OK`] when released; [`BAD_HANDLE`] or [`WRONG_KIND`] (nothing
/// released); [`PANICKED`] if the probe's destructor panicked (the memory is
/// still freed).
///
/// # Safety
/// `handle` is 0 or a live handle from `raw_handle()`, never used again once released.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wakemeter_loop_probe_release(handle: u64) -> i32 {
    // SAFETY: forwarded from this function's contract.
    unsafe { release::<LoopProbe>(handle) }
}

/// `SleepProbe.begin(requested_ns)` on a raw handle.
///
/// Returns [`OK`], [`SAMPLER_GONE`], [`BAD_HANDLE`], [`WRONG_KIND`] or [`PANICKED`].
///
/// # Safety
/// `handle` is 0 or a live handle from `raw_handle()`, not released during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wakemeter_sleep_probe_begin(handle: u64, requested_ns: u64) -> i32 {
    // SAFETY: forwarded from this function's contract.
    unsafe { with(handle, |p: &SleepProbe| p.begin(requested_ns)) }
}

/// `SleepProbe.end()` on a raw handle.
///
/// Returns [`OK`], [`SAMPLER_GONE`], [`BAD_HANDLE`], [`WRONG_KIND`] or [`PANICKED`].
///
/// # Safety
/// `handle` is 0 or a live handle from `raw_handle()`, not released during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wakemeter_sleep_probe_end(handle: u64) -> i32 {
    // SAFETY: forwarded from this function's contract.
    unsafe { with(handle, |p: &SleepProbe| p.end()) }
}

/// Releases a handle from `SleepProbe.raw_handle()`.
///
/// Returns as [`wakemeter_loop_probe_release`].
///
/// # Safety
/// `handle` is 0 or a live handle from `raw_handle()`, never used again once released.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wakemeter_sleep_probe_release(handle: u64) -> i32 {
    // SAFETY: forwarded from this function's contract.
    unsafe { release::<SleepProbe>(handle) }
}

/// `LoopProbe.stats()` on a raw handle, as a record call (see `answer`):
/// the answer is a `Result<LoopStats, WakemeterError>`.
///
/// # Safety
/// `handle` is 0 or a live handle from `raw_handle()`, not released during
/// the call; `buf` is valid for reads and writes of `cap` bytes, used by
/// nothing else during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wakemeter_loop_probe_stats(handle: u64, buf: *mut u8, cap: u64) -> i64 {
    // SAFETY: forwarded from this function's contract.
    unsafe { answer(handle, buf, cap, 0, |p: &LoopProbe, _| put(p.stats())) }
}

/// `SleepProbe.stats()` on a raw handle, as [`wakemeter_loop_probe_stats`].
///
/// # Safety
/// As [`wakemeter_loop_probe_stats`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wakemeter_sleep_probe_stats(handle: u64, buf: *mut u8, cap: u64) -> i64 {
    // SAFETY: forwarded from this function's contract.
    unsafe { answer(handle, buf, cap, 0, |p: &SleepProbe, _| put(p.stats())) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Sampler;
    use wakemeter::SamplerConfig;

    #[test]
    fn raw_handles_record_and_report_a_gone_sampler() {
        let s = Sampler::new(SamplerConfig::default()).unwrap();
        let lp = s.loop_probe("fast".into()).unwrap();
        let sp = s.sleep_probe("nap".into()).unwrap();
        let (lh, sh) = (lp.clone().raw_handle(), sp.clone().raw_handle());
        // SAFETY: live handles from raw_handle(), released once below.
        unsafe {
            assert_eq!(wakemeter_loop_probe_before_wait(lh, 0), OK);
            assert_eq!(wakemeter_loop_probe_after_wait(lh, 3), OK);
            assert_eq!(wakemeter_sleep_probe_begin(sh, 10), OK);
            assert_eq!(wakemeter_sleep_probe_end(sh), OK);
            assert_eq!(wakemeter_loop_probe_before_wait(0, 0), BAD_HANDLE);
        }
        assert_eq!(lp.stats().unwrap().total_events, 3);
        assert_eq!(sp.stats().unwrap().total_calls, 1);
        s.shutdown();
        // SAFETY: as above.
        unsafe {
            assert_eq!(wakemeter_loop_probe_before_wait(lh, 0), SAMPLER_GONE);
            assert_eq!(wakemeter_sleep_probe_end(sh), SAMPLER_GONE);
            assert_eq!(wakemeter_loop_probe_release(lh), OK);
            assert_eq!(wakemeter_sleep_probe_release(sh), OK);
        }
        assert_eq!(Arc::strong_count(&lp), 1);
        assert_eq!(Arc::strong_count(&sp), 1);
    }

    #[test]
    fn a_handle_of_the_other_kind_is_refused_untouched() {
        let s = Sampler::new(SamplerConfig::default()).unwrap();
        let lp = s.loop_probe("loop".into()).unwrap();
        let sp = s.sleep_probe("nap".into()).unwrap();
        let (lh, sh) = (lp.clone().raw_handle(), sp.clone().raw_handle());
        let (loop_before, sleep_before) = (lp.stats().unwrap(), sp.stats().unwrap());
        // SAFETY: live handles from raw_handle(), released once below; the
        // wrong-kind calls only read the tag.
        unsafe {
            assert_eq!(wakemeter_sleep_probe_begin(lh, 10), WRONG_KIND);
            assert_eq!(wakemeter_sleep_probe_end(lh), WRONG_KIND);
            assert_eq!(wakemeter_sleep_probe_release(lh), WRONG_KIND);
            assert_eq!(wakemeter_loop_probe_before_wait(sh, -1), WRONG_KIND);
            assert_eq!(wakemeter_loop_probe_after_wait(sh, 1), WRONG_KIND);
            assert_eq!(wakemeter_loop_probe_release(sh), WRONG_KIND);
        }
        // Nothing recorded, nothing released.
        assert_eq!(lp.stats().unwrap(), loop_before);
        assert_eq!(sp.stats().unwrap(), sleep_before);
        assert_eq!(Arc::strong_count(&lp), 2);
        assert_eq!(Arc::strong_count(&sp), 2);
        // The handles still work for their own kind.
        // SAFETY: as above.
        unsafe {
            assert_eq!(wakemeter_loop_probe_before_wait(lh, 0), OK);
            assert_eq!(wakemeter_loop_probe_after_wait(lh, 2), OK);
            assert_eq!(wakemeter_loop_probe_release(lh), OK);
            assert_eq!(wakemeter_sleep_probe_release(sh), OK);
        }
        assert_eq!(lp.stats().unwrap().total_events, 2);
        assert_eq!(Arc::strong_count(&lp), 1);
        assert_eq!(Arc::strong_count(&sp), 1);
    }

    #[test]
    fn zero_and_misaligned_numbers_are_refused_without_reading() {
        // SAFETY: 0 is allowed by the contract; 1 is refused by the
        // alignment check before any read.
        unsafe {
            for bad in [0, 1] {
                assert_eq!(wakemeter_loop_probe_before_wait(bad, 0), BAD_HANDLE);
                assert_eq!(wakemeter_loop_probe_after_wait(bad, 0), BAD_HANDLE);
                assert_eq!(wakemeter_loop_probe_release(bad), BAD_HANDLE);
                assert_eq!(wakemeter_sleep_probe_begin(bad, 0), BAD_HANDLE);
                assert_eq!(wakemeter_sleep_probe_end(bad), BAD_HANDLE);
                assert_eq!(wakemeter_sleep_probe_release(bad), BAD_HANDLE);
            }
        }
    }
}

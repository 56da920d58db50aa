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
//! A handle comes from `Sampler.raw_handle()`, `LoopProbe.raw_handle()` or
//! `SleepProbe.raw_handle()` (see the `handle` module): a number of the
//! handle table shared with the C API, holding a strong reference to the
//! object. Every function checks the handle before it touches the object:
//! a loop handle given to a sleep function returns [`WRONG_KIND`] instead
//! of reading a `LoopProbe` as a `SleepProbe`; 0, a released handle (also
//! once its slot holds a newer object) or a number no handle has returns
//! [`BAD_HANDLE`]. The check takes no lock and allocates nothing.
//!
//! What the owner still guarantees: a handle is not released while a call
//! on it is in flight. The Kotlin layer (`dev.wakemeter.RawHandle`) counts
//! the calls in flight on a handle, releases it exactly once, after the
//! last of them, and refuses calls once it is closed.
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

use uniffi::Lower;

use crate::UniFfiTag;
use crate::error::WakemeterError;
use crate::handle::{self, Kind, Refused};
use crate::probe::{LoopProbe, SleepProbe};

mod sampler_calls;

pub use sampler_calls::*;

/// The call succeeded.
pub const OK: i32 = 0;
/// The probe's sampler is gone (`WakemeterError::SamplerGone`).
pub const SAMPLER_GONE: i32 = 1;
/// The handle is 0, released, or a number no handle has.
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

/// The code of a refused handle.
fn refused(r: Refused) -> i32 {
    match r {
        Refused::WrongKind(_) => WRONG_KIND,
        Refused::Null | Refused::Freed | Refused::Bad => BAD_HANDLE,
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
/// The handle is not released while this runs.
unsafe fn with<T: Kind>(handle: u64, f: impl FnOnce(&T) -> Result<(), WakemeterError>) -> i32 {
    // SAFETY: forwarded from this function's contract.
    match unsafe { handle::get::<T>(handle) } {
        Ok(object) => code(catch_unwind(AssertUnwindSafe(|| f(object)))),
        Err(r) => refused(r),
    }
}

/// Releases a handle if it is a `T`; returns [`OK`] or why it did not.
///
/// # Safety
/// No call on the handle is in flight, by any thread.
unsafe fn release<T: Kind>(handle: u64) -> i32 {
    // SAFETY: forwarded from this function's contract.
    let object = match unsafe { handle::release::<T>(handle) } {
        Ok(object) => object,
        Err(r) => return refused(r),
    };
    // Dropping the object's last reference runs its destructor; a panic there
    // must not cross the C boundary.
    let dropped = catch_unwind(AssertUnwindSafe(|| drop(object)));
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
/// The handle is not released during the call; `buf` is valid for reads
/// and writes of `cap` bytes and nothing else reads or writes it during
/// the call.
unsafe fn answer<T: Kind>(
    handle: u64,
    buf: *mut u8,
    cap: u64,
    in_len: u64,
    f: impl FnOnce(&T, &[u8]) -> Answer,
) -> i64 {
    // SAFETY: forwarded from this function's contract.
    let object = match unsafe { handle::get::<T>(handle) } {
        Ok(object) => object,
        Err(r) => return -i64::from(refused(r)),
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
        f(object, input)
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
/// `handle` is any number; a live one is not released during the call.
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
/// `handle` is any number; a live one is not released during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wakemeter_loop_probe_after_wait(handle: u64, events: u32) -> i32 {
    // SAFETY: forwarded from this function's contract.
    unsafe { with(handle, |p: &LoopProbe| p.after_wait(events)) }
}

/// Releases a handle from `LoopProbe.raw_handle()`.
///
/// Returns [`OK`] when released; [`BAD_HANDLE`] or [`WRONG_KIND`] (nothing
/// released); [`PANICKED`] if the probe's destructor panicked (the handle
/// is still released).
///
/// # Safety
/// `handle` is any number; no call on a live one is in flight.
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
/// `handle` is any number; a live one is not released during the call.
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
/// `handle` is any number; a live one is not released during the call.
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
/// `handle` is any number; no call on a live one is in flight.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wakemeter_sleep_probe_release(handle: u64) -> i32 {
    // SAFETY: forwarded from this function's contract.
    unsafe { release::<SleepProbe>(handle) }
}

/// `LoopProbe.stats()` on a raw handle, as a record call (see `answer`):
/// the answer is a `Result<LoopStats, WakemeterError>`.
///
/// # Safety
/// `handle` is any number; a live one is not released during the call; `buf` is valid for reads and writes of `cap` bytes, used by
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
    use std::sync::Arc;

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
        // SAFETY: any number is allowed by the contract; neither 0 nor 1 is
        // a handle (1 would carry generation 0, which no handle has).
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

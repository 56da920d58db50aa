//! A plain C entry point for the probes' hot path, for the JVM.
//!
//! Every uniffi call from Kotlin allocates a JNA `Structure` for its call
//! status (native memory tracked by JNA until the garbage collector frees
//! it); on this kind of machine that costs 25–60 µs per call, far above the
//! 2 µs budget of a wait pair. These functions take and return only
//! integers, so JNA's direct mapping calls them without allocating.
//! Swift calls the uniffi functions directly (its call status lives on the
//! stack) and does not need them.
//!
//! A handle is a strong reference to a probe, made by
//! `LoopProbe.raw_handle()` / `SleepProbe.raw_handle()` and released exactly
//! once by the matching `*_release` function. The Kotlin layer
//! (`dev.wakemeter.FastLoopProbe`) owns handles and never uses one after
//! releasing it.
//!
//! Return codes: [`OK`], [`SAMPLER_GONE`], [`BAD_HANDLE`], [`PANICKED`].

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use crate::error::WakemeterError;
use crate::probe::{LoopProbe, SleepProbe};

/// The call succeeded.
pub const OK: i32 = 0;
/// The probe's sampler is gone (`WakemeterError::SamplerGone`).
pub const SAMPLER_GONE: i32 = 1;
/// The handle was 0.
pub const BAD_HANDLE: i32 = 2;
/// The call panicked (a bug); nothing was recorded.
pub const PANICKED: i32 = 3;

fn code(r: std::thread::Result<Result<(), WakemeterError>>) -> i32 {
    match r {
        Ok(Ok(())) => OK,
        Ok(Err(_)) => SAMPLER_GONE,
        Err(_) => PANICKED,
    }
}

/// Runs `f` on the object behind `handle`.
///
/// # Safety
/// `handle` is 0 or was returned by `raw_handle()` of a `T` and not yet released.
unsafe fn with<T>(handle: u64, f: impl FnOnce(&T) -> Result<(), WakemeterError>) -> i32 {
    if handle == 0 {
        return BAD_HANDLE;
    }
    // SAFETY: per this function's contract the handle is `Arc::into_raw` of
    // a live `T` whose strong reference is held by the caller until it calls
    // the release function; we only borrow it for the duration of `f`.
    let object = unsafe { &*(handle as usize as *const T) };
    code(catch_unwind(AssertUnwindSafe(|| f(object))))
}

/// Releases a handle.
///
/// # Safety
/// As [`with`]; the handle must not be used afterwards.
unsafe fn release<T>(handle: u64) {
    if handle != 0 {
        // SAFETY: the handle is `Arc::into_raw` of a live `T` (this
        // function's contract), and this consumes the reference it owns.
        drop(unsafe { Arc::from_raw(handle as usize as *const T) });
    }
}

/// A new strong reference to `object` as a number (see the module docs).
pub(crate) fn into_handle<T>(object: Arc<T>) -> u64 {
    Arc::into_raw(object) as usize as u64
}

/// `LoopProbe.before_wait(timeout_ns)` on a raw handle.
///
/// # Safety
/// `handle` is 0 or a live handle from `LoopProbe.raw_handle()`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wakemeter_loop_probe_before_wait(handle: u64, timeout_ns: i64) -> i32 {
    // SAFETY: forwarded from this function's contract.
    unsafe { with(handle, |p: &LoopProbe| p.before_wait(timeout_ns)) }
}

/// `LoopProbe.after_wait(events)` on a raw handle.
///
/// # Safety
/// `handle` is 0 or a live handle from `LoopProbe.raw_handle()`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wakemeter_loop_probe_after_wait(handle: u64, events: u32) -> i32 {
    // SAFETY: forwarded from this function's contract.
    unsafe { with(handle, |p: &LoopProbe| p.after_wait(events)) }
}

/// Releases a handle from `LoopProbe.raw_handle()`.
///
/// # Safety
/// `handle` is 0 or a live handle from `LoopProbe.raw_handle()`, never used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wakemeter_loop_probe_release(handle: u64) {
    // SAFETY: forwarded from this function's contract.
    unsafe { release::<LoopProbe>(handle) }
}

/// `SleepProbe.begin(requested_ns)` on a raw handle.
///
/// # Safety
/// `handle` is 0 or a live handle from `SleepProbe.raw_handle()`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wakemeter_sleep_probe_begin(handle: u64, requested_ns: u64) -> i32 {
    // SAFETY: forwarded from this function's contract.
    unsafe { with(handle, |p: &SleepProbe| p.begin(requested_ns)) }
}

/// `SleepProbe.end()` on a raw handle.
///
/// # Safety
/// `handle` is 0 or a live handle from `SleepProbe.raw_handle()`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wakemeter_sleep_probe_end(handle: u64) -> i32 {
    // SAFETY: forwarded from this function's contract.
    unsafe { with(handle, |p: &SleepProbe| p.end()) }
}

/// Releases a handle from `SleepProbe.raw_handle()`.
///
/// # Safety
/// `handle` is 0 or a live handle from `SleepProbe.raw_handle()`, never used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wakemeter_sleep_probe_release(handle: u64) {
    // SAFETY: forwarded from this function's contract.
    unsafe { release::<SleepProbe>(handle) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Sampler, SamplerConfig};

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
            wakemeter_loop_probe_release(lh);
            wakemeter_sleep_probe_release(sh);
        }
        assert_eq!(Arc::strong_count(&lp), 1);
        assert_eq!(Arc::strong_count(&sp), 1);
    }
}

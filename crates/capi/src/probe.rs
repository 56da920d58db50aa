//! Loop and sleep probes: created from a sampler, used by one thread at a
//! time, unlocked on the hot path.

use std::cell::UnsafeCell;
use std::ffi::c_char;
use std::time::Duration;

use wakemeter::{LoopProbe, SleepProbe};

use crate::error::wm_status;
use crate::error::{free_handle, guard, new_handle, obj, sampler_error, str_arg, write_out};
use crate::handle::{self, Kind};
use crate::sampler::{SamplerObj, wm_sampler};

/// A loop probe (opaque): instruments one event loop.
pub struct wm_loop_probe {
    _opaque: [u8; 0],
}

/// A sleep probe (opaque): instruments one sleep site.
pub struct wm_sleep_probe {
    _opaque: [u8; 0],
}

/// What a `wm_loop_probe` handle holds: a probe used by one thread at a
/// time (C contract), so no lock on the hot path.
pub(crate) struct LoopObj(UnsafeCell<LoopProbe>);
/// What a `wm_sleep_probe` handle holds, as [`LoopObj`].
pub(crate) struct SleepObj(UnsafeCell<SleepProbe>);

impl LoopObj {
    pub(crate) fn new(p: LoopProbe) -> Self {
        LoopObj(UnsafeCell::new(p))
    }
}

impl wakemeter_handles::Kind for LoopObj {
    const TAG: u32 = handle::LOOP_PROBE.0;
}
impl Kind for LoopObj {
    const NAME: &'static str = handle::LOOP_PROBE.1;
}
impl wakemeter_handles::Kind for SleepObj {
    const TAG: u32 = handle::SLEEP_PROBE.0;
}
impl Kind for SleepObj {
    const NAME: &'static str = handle::SLEEP_PROBE.1;
}

/// Creates a probe with `make` and writes its handle to `*out` (NULL on
/// failure): the body of both `wm_*_probe_create` functions.
///
/// # Safety
/// As [`wm_loop_probe_create`].
unsafe fn create_probe<T: Kind, H>(
    sampler: *mut wm_sampler,
    name: *const c_char,
    out: *mut *mut H,
    make: impl FnOnce(&wakemeter::Sampler, &str) -> wakemeter::Result<T>,
) -> wm_status {
    let make = || {
        // SAFETY: forwarded contract.
        let s: &SamplerObj = unsafe { obj(sampler, "sampler") }?;
        // SAFETY: forwarded contract.
        let name = unsafe { str_arg(name, "name") }?;
        let p = make(&s.sampler, name).map_err(|e| sampler_error(&e))?;
        new_handle(p)
    };
    // SAFETY: forwarded contract.
    unsafe { write_out(out, make) }
}

/// Creates a loop probe named `name` (UTF-8, at most 64 bytes) reported by
/// `sampler`; `*out` is the new handle or NULL on failure. A probe is used
/// by one thread at a time.
///
/// # Safety
/// `sampler` as [`wm_sampler_start`]; `name` is NULL or NUL-terminated;
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_loop_probe_create(
    sampler: *mut wm_sampler,
    name: *const c_char,
    out: *mut *mut wm_loop_probe,
) -> wm_status {
    // SAFETY: forwarded contract.
    unsafe {
        create_probe(sampler, name, out, |s, name| {
            s.loop_probe(name).map(LoopObj::new)
        })
    }
}

/// Frees a loop probe. NULL is a no-op.
///
/// # Safety
/// `probe` is NULL or a handle from this library, used by no other call
/// during or after this one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_loop_probe_free(probe: *mut wm_loop_probe) -> wm_status {
    // SAFETY: forwarded contract.
    unsafe { free_handle::<LoopObj, _>(probe) }
}

/// The loop is about to wait; `timeout_ns` is the timeout it passes to the
/// wait: negative = none (block until an event), 0 = non-blocking poll.
///
/// # Safety
/// `probe` is NULL or a handle from this library, not freed during the
/// call and not used by another thread at the same time.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_loop_probe_before_wait(
    probe: *mut wm_loop_probe,
    timeout_ns: i64,
) -> wm_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let p: &LoopObj = unsafe { obj(probe, "probe") }?;
        let timeout = u64::try_from(timeout_ns).ok().map(Duration::from_nanos);
        // SAFETY: one thread at a time per the contract, so this is the
        // only reference to the probe.
        unsafe { &mut *p.0.get() }.before_wait(timeout);
        Ok(())
    })
}

/// The wait returned with `events` ready events (0: timed out or woke for nothing).
///
/// # Safety
/// As [`wm_loop_probe_before_wait`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_loop_probe_after_wait(
    probe: *mut wm_loop_probe,
    events: u32,
) -> wm_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let p: &LoopObj = unsafe { obj(probe, "probe") }?;
        // SAFETY: as in wm_loop_probe_before_wait.
        unsafe { &mut *p.0.get() }.after_wait(events as usize);
        Ok(())
    })
}

/// Creates a sleep probe named `name` (as [`wm_loop_probe_create`]).
///
/// # Safety
/// As [`wm_loop_probe_create`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_sleep_probe_create(
    sampler: *mut wm_sampler,
    name: *const c_char,
    out: *mut *mut wm_sleep_probe,
) -> wm_status {
    // SAFETY: forwarded contract.
    unsafe {
        create_probe(sampler, name, out, |s, name| {
            s.sleep_probe(name).map(|p| SleepObj(UnsafeCell::new(p)))
        })
    }
}

/// Frees a sleep probe. NULL is a no-op.
///
/// # Safety
/// As [`wm_loop_probe_free`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_sleep_probe_free(probe: *mut wm_sleep_probe) -> wm_status {
    // SAFETY: forwarded contract.
    unsafe { free_handle::<SleepObj, _>(probe) }
}

/// A sleep of `requested_ns` is about to start.
///
/// # Safety
/// As [`wm_loop_probe_before_wait`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_sleep_probe_begin(
    probe: *mut wm_sleep_probe,
    requested_ns: u64,
) -> wm_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let p: &SleepObj = unsafe { obj(probe, "probe") }?;
        // SAFETY: one thread at a time per the contract.
        unsafe { &mut *p.0.get() }.begin(Duration::from_nanos(requested_ns));
        Ok(())
    })
}

/// The sleep started by [`wm_sleep_probe_begin`] returned.
///
/// # Safety
/// As [`wm_loop_probe_before_wait`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_sleep_probe_end(probe: *mut wm_sleep_probe) -> wm_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let p: &SleepObj = unsafe { obj(probe, "probe") }?;
        // SAFETY: one thread at a time per the contract.
        unsafe { &mut *p.0.get() }.end();
        Ok(())
    })
}

//! Statuses and errors of the C API: the status every call returns, the
//! message of the last failure on each thread, and the checks every call
//! makes of its arguments (handles, NULL pointers, strings).

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::handle::{self, Kind, Refused};

/// Result of every call that can fail.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum wm_status {
    /// Success.
    WM_OK = 0,
    /// A required pointer argument is NULL.
    WM_ERR_NULL = 1,
    /// The handle is of another kind (a loop probe where a sleep probe is expected...).
    WM_ERR_WRONG_KIND = 2,
    /// The handle was freed (also once a newer handle reuses its slot).
    WM_ERR_FREED = 3,
    /// Not a handle made by this library.
    WM_ERR_BAD_HANDLE = 4,
    /// A value is out of range (config field, UTF-8 of a name, probe name too long...).
    WM_ERR_INVALID_ARGUMENT = 5,
    /// Background sampling is already running.
    WM_ERR_ALREADY_RUNNING = 6,
    /// Background sampling is not running.
    WM_ERR_NOT_RUNNING = 7,
    /// The caller's buffer is too small; the needed size was written.
    WM_ERR_BUFFER_TOO_SMALL = 8,
    /// An index is past the end.
    WM_ERR_OUT_OF_RANGE = 9,
    /// The sampler failed (unreadable /proc, thread spawn, too many probes...).
    WM_ERR_SAMPLER = 10,
    /// A bug: the call panicked; nothing else happened.
    WM_ERR_PANIC = 11,
}

use wm_status::*;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// A failed call: its status and message.
pub(crate) struct Fail(pub(crate) wm_status, pub(crate) String);

pub(crate) type Res<T = ()> = Result<T, Fail>;

fn set_last_error(msg: String) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// Runs `f`, turning a failure or a panic into a status and a last error.
#[inline]
pub(crate) fn guard(f: impl FnOnce() -> Res) -> wm_status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => WM_OK,
        Ok(Err(Fail(code, msg))) => {
            set_last_error(msg);
            code
        }
        Err(_) => {
            set_last_error("internal error: the call panicked (a bug in wakemeter)".into());
            WM_ERR_PANIC
        }
    }
}

#[cold]
pub(crate) fn refused<T: Kind>(r: Refused, arg: &str) -> Fail {
    match r {
        Refused::Null => Fail(WM_ERR_NULL, format!("{arg}: NULL {} handle", T::NAME)),
        Refused::WrongKind(k) => Fail(
            WM_ERR_WRONG_KIND,
            format!("{arg}: expected a {} handle, got a {k}", T::NAME),
        ),
        Refused::Freed => Fail(
            WM_ERR_FREED,
            format!("{arg}: this {} handle was already freed", T::NAME),
        ),
        Refused::Bad => Fail(
            WM_ERR_BAD_HANDLE,
            format!("{arg}: not a handle made by wakemeter"),
        ),
    }
}

/// The object behind a handle, or why not.
///
/// # Safety
/// `h` is NULL or a handle from this library not freed during the use.
#[inline]
pub(crate) unsafe fn obj<'a, T: Kind, H>(h: *const H, arg: &str) -> Res<&'a T> {
    // SAFETY: forwarded contract.
    unsafe { handle::get::<T, H>(h) }.map_err(|r| refused::<T>(r, arg))
}

/// Frees the handle `h` of kind `T`; NULL is a no-op.
///
/// # Safety
/// As [`obj`]; `h` is not used again.
pub(crate) unsafe fn free_handle<T: Kind, H>(h: *const H) -> wm_status {
    if h.is_null() {
        return WM_OK;
    }
    guard(|| {
        // SAFETY: forwarded contract.
        match unsafe { handle::free::<T, H>(h) } {
            Ok(()) => Ok(()),
            Err(Some(r)) => Err(refused::<T>(r, "handle")),
            Err(None) => Err(Fail(
                WM_ERR_PANIC,
                format!("{}: its destructor panicked (memory freed)", T::NAME),
            )),
        }
    })
}

/// A new handle of `obj`, or `WM_ERR_SAMPLER` when the process holds the
/// most handles the table has room for (the object is dropped).
pub(crate) fn new_handle<T: Kind, H>(obj: T) -> Res<*mut H> {
    handle::alloc(obj).ok_or_else(|| {
        Fail(
            WM_ERR_SAMPLER,
            format!("{}: no room for another handle", T::NAME),
        )
    })
}

pub(crate) fn sampler_error(e: &wakemeter::Error) -> Fail {
    use wakemeter::Error as E;
    let code = match e {
        E::InvalidConfig { .. } | E::ProbeNameTooLong { .. } => WM_ERR_INVALID_ARGUMENT,
        E::AlreadyRunning => WM_ERR_ALREADY_RUNNING,
        _ => WM_ERR_SAMPLER,
    };
    Fail(code, e.to_string())
}

pub(crate) fn null(arg: &str) -> Fail {
    Fail(WM_ERR_NULL, format!("{arg} is NULL"))
}

/// The body of every call that returns a pointer through `out`: refuses a
/// NULL `out`, sets `*out` to NULL first (so a failure leaves NULL there),
/// then to what `make` returns.
///
/// # Safety
/// `out` is NULL or writable.
pub(crate) unsafe fn write_out<T>(
    out: *mut *mut T,
    make: impl FnOnce() -> Res<*mut T>,
) -> wm_status {
    guard(|| {
        if out.is_null() {
            return Err(null("out"));
        }
        // SAFETY: checked non-NULL, writable per the contract.
        unsafe { out.write(std::ptr::null_mut()) };
        let v = make()?;
        // SAFETY: as above.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// A UTF-8 C string argument.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string valid for the call.
pub(crate) unsafe fn str_arg<'a>(s: *const c_char, arg: &str) -> Res<&'a str> {
    if s.is_null() {
        return Err(null(arg));
    }
    // SAFETY: non-NULL and NUL-terminated per the contract.
    unsafe { CStr::from_ptr(s) }
        .to_str()
        .map_err(|_| Fail(WM_ERR_INVALID_ARGUMENT, format!("{arg} is not valid UTF-8")))
}

/// Writes `v` to `out` if it is not NULL.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
pub(crate) unsafe fn put<T>(out: *mut T, v: T, arg: &str) -> Res {
    if out.is_null() {
        return Err(null(arg));
    }
    // SAFETY: non-NULL and writable per the contract.
    unsafe { out.write(v) };
    Ok(())
}

/// The message of the last failed call on this thread ("" if none). Valid
/// until the next wakemeter call on this thread.
#[unsafe(no_mangle)]
pub extern "C" fn wm_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|e| e.borrow().as_ptr())
        .unwrap_or(c"thread is exiting".as_ptr())
}

/// The name of a status code, e.g. "WM_ERR_NULL" (static string;
/// "WM_ERR_UNKNOWN" for a number that is no status).
#[unsafe(no_mangle)]
pub extern "C" fn wm_status_str(status: i32) -> *const c_char {
    let s: &CStr = match status {
        0 => c"WM_OK",
        1 => c"WM_ERR_NULL",
        2 => c"WM_ERR_WRONG_KIND",
        3 => c"WM_ERR_FREED",
        4 => c"WM_ERR_BAD_HANDLE",
        5 => c"WM_ERR_INVALID_ARGUMENT",
        6 => c"WM_ERR_ALREADY_RUNNING",
        7 => c"WM_ERR_NOT_RUNNING",
        8 => c"WM_ERR_BUFFER_TOO_SMALL",
        9 => c"WM_ERR_OUT_OF_RANGE",
        10 => c"WM_ERR_SAMPLER",
        11 => c"WM_ERR_PANIC",
        _ => c"WM_ERR_UNKNOWN",
    };
    s.as_ptr()
}

#![doc = include_str!("../README.md")]
#![allow(non_camel_case_types)]

use std::cell::{RefCell, UnsafeCell};
use std::ffi::{CStr, CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::time::Duration;

use wakemeter::{Finding, LoopProbe, Sampler, SamplerBuilder, SamplingGuard, SleepProbe};

mod handle;

use handle::{Kind, Refused, Slot};

/// Version of the C ABI: changes when a signature or a struct layout changes.
pub const WM_ABI_VERSION: u32 = 1;

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
    /// The handle was freed (best effort detection).
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

/// A sampler (opaque).
pub struct wm_sampler {
    _opaque: [u8; 0],
}

/// A loop probe (opaque): instruments one event loop.
pub struct wm_loop_probe {
    _opaque: [u8; 0],
}

/// A sleep probe (opaque): instruments one sleep site.
pub struct wm_sleep_probe {
    _opaque: [u8; 0],
}

/// A list of findings taken at one moment (opaque, read-only).
pub struct wm_findings {
    _opaque: [u8; 0],
}

/// Sampler configuration. Fill it with [`wm_config_default`], then change
/// fields; `size` must stay `sizeof(wm_config)`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct wm_config {
    /// `sizeof(wm_config)`, set by [`wm_config_default`] (guards against a
    /// header/library mismatch).
    pub size: usize,
    /// Time between background samples, ns (default 1 s; at least 1 ms).
    pub interval_ns: u64,
    /// Snapshots kept (default 300; 1 to 100000), within `history_budget_bytes`.
    pub history: u32,
    /// Read voluntary/involuntary switches every n-th sample (default 10).
    pub switch_split_every: u32,
    /// Window of the rate-based findings (busy poller, sleep overhead), ns. Default 10 s.
    pub window_ns: u64,
    /// Least history a finding needs, ns (at most `window_ns`). Default 2 s.
    pub min_window_ns: u64,
    /// Busy poller: wakeups per second of a loop. Default 1000.
    pub busy_poll_wakeups_per_sec: f64,
    /// Busy poller: share of wakeups that found nothing (0-1). Default 0.9.
    pub busy_poll_idle_ratio: f64,
    /// Busy poller: share of waits with a zero timeout (0-1). Default 0.5.
    pub busy_poll_zero_timeout_ratio: f64,
    /// Sleep overhead: sleeps per second of one site. Default 100.
    pub sleep_calls_per_sec: f64,
    /// Sleep overhead: CPU inside sleeps, % of a core. Default 1.
    pub sleep_cpu_percent: f64,
    /// Threads a report lists one by one; the others are counted in its
    /// groups by name only (`thread_groups`, `threads_folded`). Default 64.
    pub report_threads: u32,
    /// Every other threshold of the findings: NULL (the default), or a
    /// NUL-terminated JSON object with any of the fields of a report's
    /// `config.thresholds` (the same names and units; durations as
    /// `{"secs": 60, "nanos": 0}`), applied over the fields above, e.g.
    /// `{"cpu_hog_percent": 50.0}`. An unknown field, a value of the wrong
    /// type or out of range is `WM_ERR_INVALID_ARGUMENT` naming it. Read
    /// only while the sampler is created.
    pub thresholds_json: *const c_char,
    /// Byte budget of the history, in bytes (default 32 MiB; 64 KiB to
    /// 1 GiB): the oldest snapshots are dropped when it is reached, before
    /// `history` is, so memory stays bounded whatever `history`,
    /// `interval_ns` and the thread count (the two newest snapshots are
    /// always kept). Out of range is `WM_ERR_INVALID_ARGUMENT`.
    pub history_budget_bytes: u64,
}

/// One finding, borrowed from a [`wm_findings`] list: the strings stay
/// valid until the list is freed.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct wm_finding {
    /// Kind, e.g. "busy_poller", "sleep_overhead".
    pub kind: *const c_char,
    /// "info", "warning" or "critical".
    pub severity: *const c_char,
    /// "process", "thread", "loop" or "sleep_site".
    pub subject_type: *const c_char,
    /// Thread or probe name ("" for the process).
    pub subject_name: *const c_char,
    /// Thread id of the subject, 0 when unknown.
    pub subject_tid: u64,
    /// One line a developer acts on.
    pub summary: *const c_char,
    /// What to do about it.
    pub advice: *const c_char,
    /// Length of the window the finding looked at, ns.
    pub window_ns: u64,
}

// ---------------------------------------------------------------------------
// Objects behind the handles.

pub(crate) struct SamplerObj {
    sampler: Sampler,
    guard: Mutex<Option<SamplingGuard>>,
}

/// A probe used by one thread at a time (C contract): no lock on the hot path.
pub(crate) struct LoopObj(UnsafeCell<LoopProbe>);
pub(crate) struct SleepObj(UnsafeCell<SleepProbe>);

pub(crate) struct FindingsObj {
    /// The strings the `wm_finding` pointers point into.
    _strings: Vec<CString>,
    items: Vec<wm_finding>,
}

impl LoopObj {
    pub(crate) fn new(p: LoopProbe) -> Self {
        LoopObj(UnsafeCell::new(p))
    }
}

impl Kind for SamplerObj {
    const TAG: u64 = 0x776d_7361_6d70_0001;
    const NAME: &'static str = "wm_sampler";
}
impl Kind for LoopObj {
    const TAG: u64 = 0x776d_6c6f_6f70_0002;
    const NAME: &'static str = "wm_loop_probe";
}
impl Kind for SleepObj {
    const TAG: u64 = 0x776d_736c_6570_0003;
    const NAME: &'static str = "wm_sleep_probe";
}
impl Kind for FindingsObj {
    const TAG: u64 = 0x776d_6669_6e64_0004;
    const NAME: &'static str = "wm_findings";
}

// ---------------------------------------------------------------------------
// Errors.

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// A failed call: its status and message.
struct Fail(wm_status, String);

type Res<T = ()> = Result<T, Fail>;

fn set_last_error(msg: String) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// Runs `f`, turning a failure or a panic into a status and a last error.
#[inline]
fn guard(f: impl FnOnce() -> Res) -> wm_status {
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
fn refused<T: Kind>(r: Refused, arg: &str) -> Fail {
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
unsafe fn obj<'a, T: Kind, H>(h: *const H, arg: &str) -> Res<&'a T> {
    // SAFETY: forwarded contract.
    unsafe { handle::get::<T>(h.cast::<Slot>()) }.map_err(|r| refused::<T>(r, arg))
}

/// Frees the handle `h` of kind `T`; NULL is a no-op.
///
/// # Safety
/// As [`obj`]; `h` is not used again.
unsafe fn free_handle<T: Kind, H>(h: *const H) -> wm_status {
    if h.is_null() {
        return WM_OK;
    }
    guard(|| {
        // SAFETY: forwarded contract.
        match unsafe { handle::free::<T>(h.cast::<Slot>()) } {
            Ok(()) => Ok(()),
            Err(Some(r)) => Err(refused::<T>(r, "handle")),
            Err(None) => Err(Fail(
                WM_ERR_PANIC,
                format!("{}: its destructor panicked (memory freed)", T::NAME),
            )),
        }
    })
}

fn sampler_error(e: &wakemeter::Error) -> Fail {
    use wakemeter::Error as E;
    let code = match e {
        E::InvalidConfig { .. } | E::ProbeNameTooLong { .. } => WM_ERR_INVALID_ARGUMENT,
        E::AlreadyRunning => WM_ERR_ALREADY_RUNNING,
        _ => WM_ERR_SAMPLER,
    };
    Fail(code, e.to_string())
}

fn null(arg: &str) -> Fail {
    Fail(WM_ERR_NULL, format!("{arg} is NULL"))
}

/// The body of every call that returns a pointer through `out`: refuses a
/// NULL `out`, sets `*out` to NULL first (so a failure leaves NULL there),
/// then to what `make` returns.
///
/// # Safety
/// `out` is NULL or writable.
unsafe fn write_out<T>(out: *mut *mut T, make: impl FnOnce() -> Res<*mut T>) -> wm_status {
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
unsafe fn str_arg<'a>(s: *const c_char, arg: &str) -> Res<&'a str> {
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
unsafe fn put<T>(out: *mut T, v: T, arg: &str) -> Res {
    if out.is_null() {
        return Err(null(arg));
    }
    // SAFETY: non-NULL and writable per the contract.
    unsafe { out.write(v) };
    Ok(())
}

// ---------------------------------------------------------------------------
// Misc.

/// The library version, e.g. "0.1.0" (static string).
#[unsafe(no_mangle)]
pub extern "C" fn wm_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
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

// ---------------------------------------------------------------------------
// Sampler.

fn default_config() -> wm_config {
    // The library's one set of defaults.
    let d = wakemeter::SamplerConfig::default();
    let t = &d.thresholds;
    wm_config {
        size: size_of::<wm_config>(),
        interval_ns: duration_ns(d.interval),
        history: d.history,
        switch_split_every: d.switch_split_every,
        window_ns: duration_ns(t.window),
        min_window_ns: duration_ns(t.min_window),
        busy_poll_wakeups_per_sec: t.busy_poll_wakeups_per_sec,
        busy_poll_idle_ratio: t.busy_poll_idle_ratio,
        busy_poll_zero_timeout_ratio: t.busy_poll_zero_timeout_ratio,
        sleep_calls_per_sec: t.sleep_calls_per_sec,
        sleep_cpu_percent: t.sleep_cpu_percent,
        report_threads: d.report_threads,
        thresholds_json: std::ptr::null(),
        history_budget_bytes: d.history_budget_bytes,
    }
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Fills `*config` with the defaults (those of `wakemeter::SamplerConfig`).
///
/// # Safety
/// `config` is NULL or valid for a write of `wm_config`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_config_default(config: *mut wm_config) -> wm_status {
    // SAFETY: forwarded contract.
    guard(|| unsafe { put(config, default_config(), "config") })
}

/// `json` (a JSON object of `Thresholds` fields) applied over `t`.
fn thresholds_over(t: wakemeter::Thresholds, json: &str) -> Res<wakemeter::Thresholds> {
    let bad = |why: String| {
        Fail(
            WM_ERR_INVALID_ARGUMENT,
            format!("config.thresholds_json: {why}"),
        )
    };
    let serde_json::Value::Object(given) =
        serde_json::from_str(json).map_err(|e| bad(e.to_string()))?
    else {
        return Err(bad("not a JSON object".to_string()));
    };
    let mut all = serde_json::to_value(&t).map_err(|e| bad(e.to_string()))?;
    let Some(fields) = all.as_object_mut() else {
        return Err(bad("the thresholds are not an object".to_string()));
    };
    for (name, value) in given {
        match fields.get_mut(&name) {
            Some(field) => *field = value,
            None => return Err(bad(format!("no threshold is named {name:?}"))),
        }
    }
    serde_json::from_value(all).map_err(|e| bad(e.to_string()))
}

/// # Safety
/// `c.thresholds_json` is NULL or a NUL-terminated string valid for reads.
unsafe fn builder(c: &wm_config) -> Res<SamplerBuilder> {
    if c.size != size_of::<wm_config>() {
        return Err(Fail(
            WM_ERR_INVALID_ARGUMENT,
            format!(
                "config.size is {}, expected {} (fill the config with wm_config_default)",
                c.size,
                size_of::<wm_config>()
            ),
        ));
    }
    let t = wakemeter::SamplerConfig::default()
        .thresholds
        .with_window(Duration::from_nanos(c.window_ns))
        .with_min_window(Duration::from_nanos(c.min_window_ns))
        .with_busy_poll_wakeups_per_sec(c.busy_poll_wakeups_per_sec)
        .with_busy_poll_idle_ratio(c.busy_poll_idle_ratio)
        .with_busy_poll_zero_timeout_ratio(c.busy_poll_zero_timeout_ratio)
        .with_sleep_calls_per_sec(c.sleep_calls_per_sec)
        .with_sleep_cpu_percent(c.sleep_cpu_percent);
    let t = if c.thresholds_json.is_null() {
        t
    } else {
        // SAFETY: non-NULL, NUL-terminated and readable per the contract.
        let json = unsafe { CStr::from_ptr(c.thresholds_json) };
        let json = json.to_str().map_err(|_| {
            Fail(
                WM_ERR_INVALID_ARGUMENT,
                "config.thresholds_json is not UTF-8".to_string(),
            )
        })?;
        thresholds_over(t, json)?
    };
    Ok(SamplerBuilder::new()
        .with_interval(Duration::from_nanos(c.interval_ns))
        .with_history(c.history)
        .with_history_budget_bytes(c.history_budget_bytes)
        .with_switch_split_every(c.switch_split_every)
        .with_report_threads(c.report_threads)
        .with_thresholds(t))
}

/// Creates a sampler of this process; `config` NULL means the defaults.
/// `*out` is set to the new handle, or NULL on failure.
///
/// # Safety
/// `config` is NULL or a valid `wm_config` (its `thresholds_json` NULL or
/// a NUL-terminated string); `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_sampler_create(
    config: *const wm_config,
    out: *mut *mut wm_sampler,
) -> wm_status {
    let make = || {
        let c = if config.is_null() {
            default_config()
        } else {
            // SAFETY: non-NULL, a valid wm_config per the contract.
            unsafe { config.read() }
        };
        // SAFETY: `thresholds_json` is NULL or a readable C string per the
        // contract of this function.
        let sampler = unsafe { builder(&c) }?
            .build()
            .map_err(|e| sampler_error(&e))?;
        Ok(handle::alloc(SamplerObj {
            sampler,
            guard: Mutex::new(None),
        })
        .cast())
    };
    // SAFETY: forwarded contract.
    unsafe { write_out(out, make) }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts background sampling (a thread named "wakemeter").
/// `WM_ERR_ALREADY_RUNNING` if it runs.
///
/// # Safety
/// `sampler` is NULL or a handle from this library, not freed during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_sampler_start(sampler: *mut wm_sampler) -> wm_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let s: &SamplerObj = unsafe { obj(sampler, "sampler") }?;
        let mut g = lock(&s.guard);
        if g.is_some() {
            return Err(Fail(
                WM_ERR_ALREADY_RUNNING,
                "background sampling is already running".into(),
            ));
        }
        *g = Some(s.sampler.start().map_err(|e| sampler_error(&e))?);
        Ok(())
    })
}

/// Stops background sampling and waits for its thread.
/// `WM_ERR_NOT_RUNNING` if it was not running.
///
/// # Safety
/// As [`wm_sampler_start`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_sampler_stop(sampler: *mut wm_sampler) -> wm_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let s: &SamplerObj = unsafe { obj(sampler, "sampler") }?;
        let g = lock(&s.guard).take();
        match g {
            Some(g) => {
                drop(g);
                Ok(())
            }
            None => Err(Fail(
                WM_ERR_NOT_RUNNING,
                "background sampling is not running".into(),
            )),
        }
    })
}

/// Takes one sample now (without background sampling).
///
/// # Safety
/// As [`wm_sampler_start`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_sampler_sample(sampler: *mut wm_sampler) -> wm_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let s: &SamplerObj = unsafe { obj(sampler, "sampler") }?;
        s.sampler.sample().map_err(|e| sampler_error(&e))?;
        Ok(())
    })
}

/// Stops sampling and frees the sampler. NULL is a no-op. Probes made from
/// it stay valid (they record, nobody reads them) until freed.
///
/// # Safety
/// `sampler` is NULL or a handle from this library, used by no other call
/// during or after this one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_sampler_free(sampler: *mut wm_sampler) -> wm_status {
    // SAFETY: forwarded contract.
    unsafe { free_handle::<SamplerObj, _>(sampler) }
}

/// The report (machine, sampler cost, interval over the findings window,
/// findings) as JSON.
fn report_json(s: &SamplerObj) -> Res<CString> {
    let json = serde_json::to_string(&s.sampler.report())
        .map_err(|e| Fail(WM_ERR_SAMPLER, format!("report serialization: {e}")))?;
    CString::new(json).map_err(|_| Fail(WM_ERR_SAMPLER, "report contains NUL".into()))
}

/// Writes the report as NUL-terminated JSON into `buf` (`cap` bytes) and
/// its length without the NUL into `*len`. If `cap` is too small, writes
/// nothing into `buf`, sets `*len` to the length needed (without the NUL)
/// and returns `WM_ERR_BUFFER_TOO_SMALL`; `buf` may be NULL when `cap` is 0.
/// Each call makes a new report, whose length may differ: leave slack or
/// use [`wm_sampler_report_json_alloc`].
///
/// # Safety
/// `sampler` as [`wm_sampler_start`]; `buf` is NULL or writable for `cap`
/// bytes; `len` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_sampler_report_json(
    sampler: *mut wm_sampler,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> wm_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let s: &SamplerObj = unsafe { obj(sampler, "sampler") }?;
        if len.is_null() {
            return Err(null("len"));
        }
        if buf.is_null() && cap != 0 {
            return Err(null("buf (with cap > 0)"));
        }
        let json = report_json(s)?;
        let bytes = json.as_bytes_with_nul();
        // SAFETY: `len` checked non-NULL, writable per the contract.
        unsafe { len.write(bytes.len() - 1) };
        if bytes.len() > cap {
            return Err(Fail(
                WM_ERR_BUFFER_TOO_SMALL,
                format!("buffer of {cap} bytes, the report needs {}", bytes.len()),
            ));
        }
        // SAFETY: `buf` is non-NULL here (cap >= bytes.len() > 0) and
        // writable for `cap` bytes per the contract; the source is ours.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr().cast(), buf, bytes.len()) };
        Ok(())
    })
}

/// Sets `*out` to the report as a NUL-terminated JSON string owned by the
/// caller (free it with [`wm_string_free`]), or NULL on failure.
///
/// # Safety
/// `sampler` as [`wm_sampler_start`]; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_sampler_report_json_alloc(
    sampler: *mut wm_sampler,
    out: *mut *mut c_char,
) -> wm_status {
    let make = || {
        // SAFETY: forwarded contract.
        let s: &SamplerObj = unsafe { obj(sampler, "sampler") }?;
        Ok(report_json(s)?.into_raw())
    };
    // SAFETY: forwarded contract.
    unsafe { write_out(out, make) }
}

/// Frees a string returned by this library. NULL is a no-op.
///
/// # Safety
/// `s` is NULL or a string from [`wm_sampler_report_json_alloc`] not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_string_free(s: *mut c_char) {
    if s.is_null() {
        return;
    }
    // SAFETY: made by CString::into_raw and freed once, per the contract.
    drop(unsafe { CString::from_raw(s) });
}

// ---------------------------------------------------------------------------
// Findings.

fn findings_obj(findings: Vec<Finding>) -> Res<FindingsObj> {
    let mut strings = Vec::new();
    let mut items = Vec::with_capacity(findings.len());
    let mut keep = |s: &str| -> *const c_char {
        let c = CString::new(s.replace('\0', " ")).unwrap_or_default();
        let p = c.as_ptr();
        strings.push(c); // moving a CString does not move its heap bytes
        p
    };
    for f in &findings {
        let v = serde_json::to_value(f)
            .map_err(|e| Fail(WM_ERR_SAMPLER, format!("finding serialization: {e}")))?;
        let text = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
        let subject = &v["subject"];
        items.push(wm_finding {
            kind: keep(&text(&v["kind"])),
            severity: keep(&text(&v["severity"])),
            subject_type: keep(&text(&subject["type"])),
            subject_name: keep(&text(&subject["name"])),
            subject_tid: subject["tid"].as_u64().unwrap_or(0),
            summary: keep(&f.summary),
            advice: keep(&f.advice),
            window_ns: f.window_ns,
        });
    }
    Ok(FindingsObj {
        _strings: strings,
        items,
    })
}

/// Sets `*out` to the sampler's current findings (most severe first), a
/// list to read with [`wm_findings_count`] / [`wm_findings_get`] and free
/// with [`wm_findings_free`]; NULL on failure.
///
/// # Safety
/// `sampler` as [`wm_sampler_start`]; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_sampler_findings(
    sampler: *mut wm_sampler,
    out: *mut *mut wm_findings,
) -> wm_status {
    let make = || {
        // SAFETY: forwarded contract.
        let s: &SamplerObj = unsafe { obj(sampler, "sampler") }?;
        Ok(handle::alloc(findings_obj(s.sampler.findings())?).cast())
    };
    // SAFETY: forwarded contract.
    unsafe { write_out(out, make) }
}

/// Writes the number of findings in the list to `*count`.
///
/// # Safety
/// `findings` is NULL or a handle from this library not freed during the
/// call; `count` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_findings_count(
    findings: *const wm_findings,
    count: *mut usize,
) -> wm_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let f: &FindingsObj = unsafe { obj(findings, "findings") }?;
        // SAFETY: forwarded contract.
        unsafe { put(count, f.items.len(), "count") }
    })
}

/// Copies finding `index` into `*out`; its strings stay valid until the
/// list is freed. `WM_ERR_OUT_OF_RANGE` past the end.
///
/// # Safety
/// As [`wm_findings_count`]; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_findings_get(
    findings: *const wm_findings,
    index: usize,
    out: *mut wm_finding,
) -> wm_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let f: &FindingsObj = unsafe { obj(findings, "findings") }?;
        let item = *f.items.get(index).ok_or_else(|| {
            Fail(
                WM_ERR_OUT_OF_RANGE,
                format!("index {index}, the list has {} findings", f.items.len()),
            )
        })?;
        // SAFETY: forwarded contract.
        unsafe { put(out, item, "out") }
    })
}

/// Frees a findings list. NULL is a no-op.
///
/// # Safety
/// `findings` is NULL or a handle from this library, not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wm_findings_free(findings: *mut wm_findings) -> wm_status {
    // SAFETY: forwarded contract.
    unsafe { free_handle::<FindingsObj, _>(findings) }
}

// ---------------------------------------------------------------------------
// Probes.

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
        Ok(handle::alloc(p).cast())
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A `wm_config` filled by `wm_config_default`, as a C host makes one.
    fn filled_default() -> wm_config {
        let mut cfg = std::mem::MaybeUninit::<wm_config>::uninit();
        // SAFETY: a valid place for one wm_config.
        assert_eq!(unsafe { wm_config_default(cfg.as_mut_ptr()) }, WM_OK);
        // SAFETY: filled by wm_config_default.
        unsafe { cfg.assume_init() }
    }

    #[test]
    fn history_budget_bytes_defaults_with_the_library_and_out_of_range_is_refused() {
        let mut cfg = filled_default();
        assert_eq!(
            cfg.history_budget_bytes,
            wakemeter::SamplerConfig::default().history_budget_bytes
        );
        for bad in [0, wakemeter::config::MAX_HISTORY_BUDGET_BYTES + 1] {
            cfg.history_budget_bytes = bad;
            let mut s: *mut wm_sampler = std::ptr::null_mut();
            // SAFETY: a valid config and out pointer.
            let status = unsafe { wm_sampler_create(&cfg, &mut s) };
            assert_eq!(status, WM_ERR_INVALID_ARGUMENT, "{bad}");
            assert!(s.is_null());
        }
        // The C host of issue 29: 100,000 snapshots of 1 ms are permitted,
        // and the budget (here the smallest) bounds what they hold.
        cfg.history_budget_bytes = wakemeter::config::MIN_HISTORY_BUDGET_BYTES;
        cfg.history = wakemeter::config::MAX_HISTORY;
        cfg.interval_ns = 1_000_000;
        let mut s: *mut wm_sampler = std::ptr::null_mut();
        // SAFETY: a valid config and out pointer.
        assert_eq!(unsafe { wm_sampler_create(&cfg, &mut s) }, WM_OK);
        for _ in 0..300 {
            // SAFETY: a live handle.
            assert_eq!(unsafe { wm_sampler_sample(s) }, WM_OK);
        }
        // SAFETY: a live handle of this library.
        let Ok(live) = (unsafe { obj::<SamplerObj, _>(s, "sampler") }) else {
            panic!("the handle is live");
        };
        let stats = live.sampler.stats();
        // SAFETY: the handle, freed once.
        unsafe { wm_sampler_free(s) };
        assert!(stats.history_bytes <= wakemeter::config::MIN_HISTORY_BUDGET_BYTES);
        assert!(stats.total_history_dropped_for_bytes > 0, "{stats:?}");
    }

    #[test]
    fn report_threads_defaults_with_the_library_and_bounds_the_report() {
        let mut cfg = filled_default();
        assert_eq!(
            cfg.report_threads,
            wakemeter::SamplerConfig::default().report_threads
        );
        // This test's process has several threads; a report lists one.
        let (parked, waits): (Vec<_>, Vec<_>) = (0..3)
            .map(|_| {
                let (tx, rx) = std::sync::mpsc::channel::<()>();
                (tx, std::thread::spawn(move || rx.recv()))
            })
            .unzip();
        cfg.report_threads = 1;
        let mut s: *mut wm_sampler = std::ptr::null_mut();
        // SAFETY: a valid config and out pointer.
        assert_eq!(unsafe { wm_sampler_create(&cfg, &mut s) }, WM_OK);
        for _ in 0..2 {
            // SAFETY: a live handle.
            assert_eq!(unsafe { wm_sampler_sample(s) }, WM_OK);
        }
        let mut json: *mut c_char = std::ptr::null_mut();
        // SAFETY: a live handle and a writable out pointer.
        assert_eq!(unsafe { wm_sampler_report_json_alloc(s, &mut json) }, WM_OK);
        // SAFETY: a NUL-terminated string from the call above.
        let text = unsafe { std::ffi::CStr::from_ptr(json) }
            .to_str()
            .unwrap()
            .to_owned();
        // SAFETY: the string and the handle, each freed once.
        unsafe {
            wm_string_free(json);
            wm_sampler_free(s);
        }
        drop(parked);
        for w in waits {
            let _ = w.join();
        }
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let listed = v["interval"]["threads"].as_array().unwrap().len();
        let count = v["interval"]["process"]["thread_count"].as_u64().unwrap();
        assert_eq!(listed, 1);
        assert!(count >= 4, "{count} threads");
        assert_eq!(v["threads_folded"].as_u64().unwrap(), count - 1);
        assert_eq!(v["config"]["report_threads"], 1);
    }

    /// A sampler made from `cfg` with `json` as its `thresholds_json`: its
    /// config as a report says it, or the status and last error.
    fn thresholds_from(json: &str) -> Result<serde_json::Value, (wm_status, String)> {
        let mut cfg = filled_default();
        assert!(cfg.thresholds_json.is_null());
        cfg.sleep_cpu_percent = 3.0;
        let json = CString::new(json).unwrap();
        cfg.thresholds_json = json.as_ptr();
        let mut s: *mut wm_sampler = std::ptr::null_mut();
        // SAFETY: a valid config (its string lives past the call) and out pointer.
        let status = unsafe { wm_sampler_create(&cfg, &mut s) };
        if status != WM_OK {
            assert!(s.is_null());
            // SAFETY: the message of this thread's last error.
            let msg = unsafe { CStr::from_ptr(wm_last_error()) };
            return Err((status, msg.to_string_lossy().into_owned()));
        }
        let mut out: *mut c_char = std::ptr::null_mut();
        // SAFETY: a live handle and a writable out pointer.
        assert_eq!(unsafe { wm_sampler_report_json_alloc(s, &mut out) }, WM_OK);
        // SAFETY: a NUL-terminated string from the call above.
        let text = unsafe { CStr::from_ptr(out) }.to_str().unwrap().to_owned();
        // SAFETY: the string and the handle, each freed once.
        unsafe {
            wm_string_free(out);
            wm_sampler_free(s);
        }
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        Ok(v["config"]["thresholds"].clone())
    }

    #[test]
    fn thresholds_json_sets_any_threshold_over_the_fields() {
        let t = thresholds_from(
            r#"{"cpu_hog_percent": 50.0, "cpu_window": {"secs": 120, "nanos": 0}}"#,
        )
        .unwrap();
        assert_eq!(t["cpu_hog_percent"], 50.0);
        assert_eq!(t["cpu_window"]["secs"], 120);
        // The struct's own fields still apply, the rest keep the defaults.
        assert_eq!(t["sleep_cpu_percent"], 3.0);
        let d = wakemeter::SamplerConfig::default().thresholds;
        assert_eq!(t["cpu_min_window"]["secs"], d.cpu_min_window.as_secs());
        // A field set both ways: the JSON wins.
        let t = thresholds_from(r#"{"sleep_cpu_percent": 7.5}"#).unwrap();
        assert_eq!(t["sleep_cpu_percent"], 7.5);
        assert_eq!(thresholds_from("{}").unwrap()["sleep_cpu_percent"], 3.0);
    }

    #[test]
    fn bad_thresholds_json_is_an_invalid_argument_naming_the_problem() {
        let cases = [
            (r#"{"cpu_hog_pct": 50}"#, "cpu_hog_pct"),
            (r#"{"cpu_hog_percent": "high"}"#, "thresholds_json"),
            ("[1, 2]", "not a JSON object"),
            ("{", "thresholds_json"),
            // Valid JSON, but a window shorter than its minimum.
            (
                r#"{"cpu_window": {"secs": 5, "nanos": 0}}"#,
                "cpu_min_window",
            ),
        ];
        for (json, named) in cases {
            let (status, msg) = thresholds_from(json).expect_err(json);
            assert_eq!(status, WM_ERR_INVALID_ARGUMENT, "{json}: {msg}");
            assert!(msg.contains(named), "{json}: {msg}");
        }
    }
}

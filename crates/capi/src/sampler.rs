//! The sampler: its configuration ([`wm_config`]), creating, starting,
//! stopping and freeing it, and its report as JSON.

use std::ffi::{CStr, CString, c_char};
use std::sync::Mutex;
use std::time::Duration;

use wakemeter::sync::lock;
use wakemeter::{Sampler, SamplerBuilder, SamplingGuard};

use crate::error::wm_status::{self, *};
use crate::error::{
    Fail, Res, free_handle, guard, new_handle, null, obj, put, sampler_error, write_out,
};
use crate::handle::{self, Kind};

/// A sampler (opaque).
pub struct wm_sampler {
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

/// What a `wm_sampler` handle holds.
pub(crate) struct SamplerObj {
    pub(crate) sampler: Sampler,
    guard: Mutex<Option<SamplingGuard>>,
}

impl wakemeter_handles::Kind for SamplerObj {
    const TAG: u32 = handle::SAMPLER.0;
}
impl Kind for SamplerObj {
    const NAME: &'static str = handle::SAMPLER.1;
}

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
        new_handle(SamplerObj {
            sampler,
            guard: Mutex::new(None),
        })
    };
    // SAFETY: forwarded contract.
    unsafe { write_out(out, make) }
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

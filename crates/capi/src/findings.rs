//! Findings: a list taken from a sampler at one moment, read one
//! [`wm_finding`] at a time.

use std::ffi::{CString, c_char};

use wakemeter::Finding;

use crate::error::wm_status::{self, *};
use crate::error::{Fail, Res, free_handle, guard, new_handle, obj, put, write_out};
use crate::handle::{self, Kind};
use crate::sampler::{SamplerObj, wm_sampler};

/// A list of findings taken at one moment (opaque, read-only).
pub struct wm_findings {
    _opaque: [u8; 0],
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

/// What a `wm_findings` handle holds.
pub(crate) struct FindingsObj {
    /// The strings the `wm_finding` pointers point into.
    _strings: Vec<CString>,
    items: Vec<wm_finding>,
}

impl wakemeter_handles::Kind for FindingsObj {
    const TAG: u32 = handle::FINDINGS.0;
}
impl Kind for FindingsObj {
    const NAME: &'static str = handle::FINDINGS.1;
}

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
            kind: keep(f.kind.as_str()),
            severity: keep(f.severity.as_str()),
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
        new_handle(findings_obj(s.sampler.findings())?)
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

//! Unit tests of the C API that need its internals (the sampler behind a
//! handle); the C programs in `c/tests` test it as a C host does.
#![allow(clippy::unwrap_used)]

use std::ffi::{CStr, CString, c_char};

use crate::error::obj;
use crate::error::wm_last_error;
use crate::error::wm_status::{self, *};
use crate::sampler::{
    SamplerObj, wm_config, wm_config_default, wm_sampler, wm_sampler_create, wm_sampler_free,
    wm_sampler_report_json_alloc, wm_sampler_sample, wm_string_free,
};

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
    let t =
        thresholds_from(r#"{"cpu_hog_percent": 50.0, "cpu_window": {"secs": 120, "nanos": 0}}"#)
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

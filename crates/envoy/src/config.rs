//! The module's JSON config (the `dynamic_module_config`'s
//! `extension_config`), parsed so that every error names its field.

use std::time::Duration;

use serde_json::{Map, Value};
use wakemeter::Thresholds;
use wakemeter::config::MIN_INTERVAL;

/// Where a test makes the module panic, to check that a panic never
/// crosses into Envoy (`"test_panic"`; not for production configs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PanicSite {
    /// In the `admin_request` hook (a `GET` of the module's admin path).
    AdminRequest,
    /// In the main-thread hook that publishes the stats after a sample.
    Publish,
}

/// The module's config.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ModuleConfig {
    /// Sampling period (`"interval_ms"`, milliseconds). Default 1000.
    pub interval: Duration,
    /// Snapshots kept (`"history"`). Default: the core's
    /// ([`wakemeter::config::DEFAULT_HISTORY`]).
    pub history: Option<u32>,
    /// The module's own eBPF view (`"ebpf"`): per-thread wakes and poll
    /// syscalls (`epoll_wait` calls per dispatcher). Needs root and the
    /// crate's `ebpf` feature. Default false.
    pub ebpf: bool,
    /// The admin path (`"admin_path"`). Default `/wakemeter`.
    pub admin_path: String,
    /// Threads a report lists (`"report_threads"`). Default: the core's.
    pub report_threads: Option<u32>,
    /// The findings' thresholds (`"thresholds"`: any field of
    /// [`wakemeter::Thresholds`], durations as `{"secs": S, "nanos": N}`).
    pub thresholds: Thresholds,
    /// Test only: where to inject a panic (`"test_panic"`:
    /// `"admin_request"` or `"publish"`).
    pub test_panic: Option<PanicSite>,
}

impl Default for ModuleConfig {
    fn default() -> Self {
        ModuleConfig {
            interval: Duration::from_secs(1),
            history: None,
            ebpf: false,
            admin_path: "/wakemeter".to_owned(),
            report_threads: None,
            thresholds: Thresholds::default(),
            test_panic: None,
        }
    }
}

/// The fields a config may have.
pub const FIELDS: [&str; 7] = [
    "interval_ms",
    "history",
    "ebpf",
    "admin_path",
    "report_threads",
    "thresholds",
    "test_panic",
];

fn field_error(field: &str, what: &str) -> String {
    format!("wakemeter config: field `{field}`: {what}")
}

fn u64_field(field: &str, v: &Value) -> Result<u64, String> {
    v.as_u64()
        .ok_or_else(|| field_error(field, &format!("expected a non-negative integer, got {v}")))
}

fn u32_field(field: &str, v: &Value) -> Result<u32, String> {
    let n = u64_field(field, v)?;
    u32::try_from(n).map_err(|_| field_error(field, &format!("{n} is too large")))
}

/// The thresholds of `v`, each field checked alone first so that an error
/// names it.
fn thresholds_field(v: &Value) -> Result<Thresholds, String> {
    let obj = v
        .as_object()
        .ok_or_else(|| field_error("thresholds", &format!("expected an object, got {v}")))?;
    let known = serde_json::to_value(Thresholds::default())
        .map_err(|e| field_error("thresholds", &e.to_string()))?;
    for (k, val) in obj {
        if known.get(k).is_none() {
            return Err(field_error(&format!("thresholds.{k}"), "unknown threshold"));
        }
        let mut one = Map::new();
        one.insert(k.clone(), val.clone());
        serde_json::from_value::<Thresholds>(Value::Object(one))
            .map_err(|e| field_error(&format!("thresholds.{k}"), &e.to_string()))?;
    }
    let t: Thresholds =
        serde_json::from_value(v.clone()).map_err(|e| field_error("thresholds", &e.to_string()))?;
    t.validate()
        .map_err(|e| field_error("thresholds", &e.to_string()))?;
    Ok(t)
}

impl ModuleConfig {
    /// Parses the module's config. Empty (or all blanks) is the default.
    ///
    /// # Errors
    /// A sentence naming the field at fault (`wakemeter config: field
    /// `interval_ms`: …`), or saying the text is not a JSON object.
    pub fn parse(text: &[u8]) -> Result<ModuleConfig, String> {
        let mut c = ModuleConfig::default();
        if text.iter().all(u8::is_ascii_whitespace) {
            return Ok(c);
        }
        let v: Value = serde_json::from_slice(text)
            .map_err(|e| format!("wakemeter config: not valid JSON: {e}"))?;
        // Envoy hands a google.protobuf.StringValue's text as is, and a
        // Struct as its JSON: both arrive here as a JSON object.
        let obj = v
            .as_object()
            .ok_or_else(|| format!("wakemeter config: expected a JSON object, got {v}"))?;
        for (k, val) in obj {
            match k.as_str() {
                "interval_ms" => {
                    let ms = u64_field(k, val)?;
                    let d = Duration::from_millis(ms);
                    if d < MIN_INTERVAL {
                        return Err(field_error(
                            k,
                            &format!(
                                "{ms} ms is below the least interval, {} ms",
                                MIN_INTERVAL.as_millis()
                            ),
                        ));
                    }
                    c.interval = d;
                }
                "history" => c.history = Some(u32_field(k, val)?),
                "ebpf" => {
                    c.ebpf = val.as_bool().ok_or_else(|| {
                        field_error(k, &format!("expected true or false, got {val}"))
                    })?;
                }
                "admin_path" => {
                    let p = val
                        .as_str()
                        .ok_or_else(|| field_error(k, &format!("expected a string, got {val}")))?;
                    if !p.starts_with('/') || p.len() < 2 || p.contains(['?', ' ']) {
                        return Err(field_error(
                            k,
                            &format!("{p:?} is not a path such as \"/wakemeter\""),
                        ));
                    }
                    c.admin_path = p.to_owned();
                }
                "report_threads" => c.report_threads = Some(u32_field(k, val)?),
                "thresholds" => c.thresholds = thresholds_field(val)?,
                "test_panic" => {
                    c.test_panic = Some(match val.as_str() {
                        Some("admin_request") => PanicSite::AdminRequest,
                        Some("publish") => PanicSite::Publish,
                        _ => {
                            return Err(field_error(
                                k,
                                &format!("expected \"admin_request\" or \"publish\", got {val}"),
                            ));
                        }
                    });
                }
                _ => {
                    return Err(field_error(
                        k,
                        &format!("unknown field; the fields are {}", FIELDS.join(", ")),
                    ));
                }
            }
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_default() {
        assert_eq!(ModuleConfig::parse(b""), Ok(ModuleConfig::default()));
        assert_eq!(ModuleConfig::parse(b" {} "), Ok(ModuleConfig::default()));
    }

    #[test]
    fn fields_are_read() {
        let c = ModuleConfig::parse(
            br#"{"interval_ms": 250, "history": 100, "ebpf": true, "admin_path": "/wm",
                 "report_threads": 5, "thresholds": {"cpu_hog_percent": 70.0}}"#,
        );
        let c = c.expect("valid config");
        assert_eq!(c.interval, Duration::from_millis(250));
        assert_eq!(c.history, Some(100));
        assert!(c.ebpf);
        assert_eq!(c.admin_path, "/wm");
        assert_eq!(c.report_threads, Some(5));
        assert_eq!(c.thresholds.cpu_hog_percent, 70.0);
    }

    fn err(text: &str) -> String {
        ModuleConfig::parse(text.as_bytes()).expect_err("must be refused")
    }

    #[test]
    fn errors_name_the_field() {
        assert!(err(r#"{"interval_ms": "1s"}"#).contains("`interval_ms`"));
        assert!(err(r#"{"interval_ms": 0}"#).contains("`interval_ms`"));
        assert!(err(r#"{"intervall_ms": 100}"#).contains("`intervall_ms`: unknown field"));
        assert!(err(r#"{"ebpf": "yes"}"#).contains("`ebpf`"));
        assert!(err(r#"{"admin_path": "wakemeter"}"#).contains("`admin_path`"));
        assert!(err(r#"{"history": -1}"#).contains("`history`"));
        assert!(
            err(r#"{"thresholds": {"cpu_hog_percent": "high"}}"#)
                .contains("`thresholds.cpu_hog_percent`")
        );
        assert!(err(r#"{"thresholds": {"cpu_hogg": 1}}"#).contains("`thresholds.cpu_hogg`"));
        assert!(err(r#"{"test_panic": "everywhere"}"#).contains("`test_panic`"));
        assert!(err("[1]").contains("expected a JSON object"));
        assert!(err("{").contains("not valid JSON"));
    }
}

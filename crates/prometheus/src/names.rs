//! Label values for thread, loop and sleep-site names: numbers collapsed
//! ([`wakemeter::compare::group_name`], the groups of `wakemeter diff`
//! too), so that `worker-0` … `worker-999` are one series, not a thousand.

/// The label of the bucket that holds every group outside the top N.
pub const OTHER: &str = "other";

/// `name` with every run of ASCII digits replaced by `{n}`
/// (`wrk:worker_12` → `wrk:worker_{n}`). An empty name becomes
/// `{unnamed}`; a name that collapses to [`OTHER`] becomes `other_`, so
/// that a real thread never shares the bucket's series.
pub fn collapse(name: &str) -> String {
    let mut out = wakemeter::compare::group_name(name);
    if out == OTHER {
        out.push('_');
    }
    out
}

/// A label value that shows every control character but the newline
/// as visible text (`\x1b` for ESC): no raw control byte reaches a
/// scraper, a log or a terminal that prints the label. The encoder then
/// escapes `\`, `"` and newline as OpenMetrics asks (`\\`, `\"`, `\n`),
/// so ESC arrives as the four characters `\x1b`.
pub(crate) fn label_value(v: &str) -> String {
    if !v.chars().any(|c| c.is_control() && c != '\n') {
        return v.to_string();
    }
    let mut out = String::with_capacity(v.len() + 8);
    for c in v.chars() {
        if c.is_control() && c != '\n' {
            // C0, DEL and C1 controls are all below U+0100.
            out.push_str(&format!("\\x{:02x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_collapse_and_the_bucket_name_stays_the_buckets() {
        assert_eq!(collapse("worker-12"), "worker-{n}");
        assert_eq!(collapse("wrk:worker_0"), "wrk:worker_{n}");
        assert_eq!(collapse("a1b22c333"), "a{n}b{n}c{n}");
        assert_eq!(collapse("42"), "{n}");
        assert_eq!(collapse("envoy"), "envoy");
        assert_eq!(collapse(""), "{unnamed}");
        assert_eq!(collapse("other"), "other_");
        assert_eq!(collapse("工作-3"), "工作-{n}");
    }

    #[test]
    fn control_characters_become_visible_text() {
        assert_eq!(label_value("plain"), "plain");
        assert_eq!(label_value("a\x1b[31mred"), "a\\x1b[31mred");
        assert_eq!(label_value("\t\r\x7f\u{85}"), "\\x09\\x0d\\x7f\\x85");
        // Left to the encoder, which escapes them as OpenMetrics says.
        assert_eq!(label_value("a\nb\\c\"d"), "a\nb\\c\"d");
        assert_eq!(label_value("工作"), "工作");
    }
}

//! The Prometheus text format 0.0.4 from our OpenMetrics text, for
//! clients that do not ask for OpenMetrics (curl, `promtool check
//! metrics`, older scrapers).
//!
//! The two formats differ, for what the exporter writes, only in
//! metadata: OpenMetrics names a counter family without `_total` and an
//! info family without `_info`, and has `# UNIT` and `# EOF`. The sample
//! lines are the same.

/// Converts the exporter's OpenMetrics text (see the module docs; no
/// exemplars, no `_created` samples) to the Prometheus text format.
pub fn openmetrics_to_prometheus(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    let mut help: Option<(&str, &str)> = None;
    for line in om.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help = Some((name, text));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (name, ty) = match ty {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "unknown" => (name.to_string(), "untyped"),
                other => (name.to_string(), other),
            };
            if let Some((_, text)) = help.take() {
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {ty}\n"));
        } else if line.starts_with("# UNIT ") || line == "# EOF" {
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_infos_are_renamed_and_openmetrics_lines_dropped() {
        let om = "# HELP a_seconds CPU.\n# TYPE a_seconds counter\n# UNIT a_seconds seconds\n\
                  a_seconds_total{thread=\"x\"} 1.5\n# HELP t Target.\n# TYPE t info\nt_info{pid=\"1\"} 1\n\
                  # HELP g Gauge.\n# TYPE g gauge\ng 3\n# EOF\n";
        assert_eq!(
            openmetrics_to_prometheus(om),
            "# HELP a_seconds_total CPU.\n# TYPE a_seconds_total counter\n\
             a_seconds_total{thread=\"x\"} 1.5\n# HELP t_info Target.\n# TYPE t_info gauge\nt_info{pid=\"1\"} 1\n\
             # HELP g Gauge.\n# TYPE g gauge\ng 3\n"
        );
    }
}

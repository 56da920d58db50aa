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
}

//! What load tools print: requests per second and latency percentiles
//! from `wrk`, `hey`, `redis-benchmark` and ApacheBench (`ab`), read
//! from their standard output. Hand-written: no crate parses these, and
//! each is a few lines of a stable, documented format. The tests read
//! outputs captured from the Debian 12 packages.

/// The figures found in a load tool's output.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parsed {
    /// The tool recognised.
    pub tool: Option<&'static str>,
    /// Requests completed.
    pub requests: Option<u64>,
    /// Requests per second.
    pub requests_per_sec: Option<f64>,
    /// Latency percentiles, in nanoseconds.
    pub p50_ns: Option<f64>,
    pub p95_ns: Option<f64>,
    pub p99_ns: Option<f64>,
}

/// Reads `output` (stdout and stderr of one run); unknown tools give
/// nothing.
pub fn parse(output: &str) -> Parsed {
    // redis-benchmark redraws its progress line with \r.
    let text = output.replace('\r', "\n");
    let p = if text.contains("Requests/sec:") && text.contains("Thread Stats") {
        wrk(&text)
    } else if text.contains("Summary:") && text.contains("Requests/sec:") {
        hey(&text)
    } else if text.contains("This is ApacheBench") {
        apache_bench(&text)
    } else if text.contains("requests per second") {
        redis_benchmark(&text)
    } else {
        Parsed::default()
    };
    // Figures that are not finite numbers are not figures.
    let ok = |v: Option<f64>| v.filter(|x| x.is_finite() && *x >= 0.0);
    Parsed {
        requests_per_sec: ok(p.requests_per_sec),
        p50_ns: ok(p.p50_ns),
        p95_ns: ok(p.p95_ns),
        p99_ns: ok(p.p99_ns),
        ..p
    }
}

/// `1.23ms`, `153.00us`, `2.5s`, `1.2m` in nanoseconds (wrk's units).
fn wrk_time(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().ok()?;
    let scale = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" => 60e9,
        "h" => 3600e9,
        _ => return None,
    };
    Some(v * scale)
}

/// The value after `label` on the first line that starts with it.
fn after<'a>(text: &'a str, label: &str) -> Option<&'a str> {
    text.lines()
        .map(str::trim_start)
        .find_map(|l| l.strip_prefix(label))
        .map(str::trim)
}

fn first_number<T: std::str::FromStr>(s: &str) -> Option<T> {
    s.split_whitespace().next()?.parse().ok()
}

fn wrk(text: &str) -> Parsed {
    let mut p = Parsed {
        tool: Some("wrk"),
        requests_per_sec: after(text, "Requests/sec:").and_then(first_number),
        ..Default::default()
    };
    // "130859 requests in 3.02s, 720.83MB read"
    p.requests = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .and_then(first_number);
    // With --latency: "     50%  153.00us"
    if let Some(i) = text.find("Latency Distribution") {
        for l in text[i..].lines().skip(1) {
            let mut w = l.split_whitespace();
            let (Some(q), Some(t)) = (w.next(), w.next()) else {
                break;
            };
            let Some(q) = q.strip_suffix('%') else { break };
            let v = wrk_time(t);
            match q {
                "50" | "50.000" => p.p50_ns = v,
                "95" | "95.000" => p.p95_ns = v,
                "99" | "99.000" => p.p99_ns = v,
                _ => {}
            }
        }
    }
    p
}

fn hey(text: &str) -> Parsed {
    let mut p = Parsed {
        tool: Some("hey"),
        requests_per_sec: after(text, "Requests/sec:").and_then(first_number),
        ..Default::default()
    };
    // "  50% in 0.0004 secs"
    for l in text.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if let [q, "in", v, "secs"] = w[..] {
            let v = v.parse::<f64>().ok().map(|s| s * 1e9);
            match q {
                "50%" => p.p50_ns = v,
                "95%" => p.p95_ns = v,
                "99%" => p.p99_ns = v,
                _ => {}
            }
        }
    }
    // "  [200]	138575 responses": every status counts as a request.
    let responses: u64 = text
        .lines()
        .filter(|l| l.trim_start().starts_with('[') && l.trim_end().ends_with("responses"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    p.requests = (responses > 0).then_some(responses);
    p
}

fn apache_bench(text: &str) -> Parsed {
    let mut p = Parsed {
        tool: Some("ab"),
        requests: after(text, "Complete requests:").and_then(first_number),
        requests_per_sec: after(text, "Requests per second:").and_then(first_number),
        ..Default::default()
    };
    // "  95%      1" in milliseconds (whole: ab rounds them).
    if let Some(i) = text.find("Percentage of the requests served") {
        for l in text[i..].lines().skip(1) {
            let w: Vec<&str> = l.split_whitespace().collect();
            let [q, v, ..] = w[..] else { break };
            let v = v.parse::<f64>().ok().map(|ms| ms * 1e6);
            match q {
                "50%" => p.p50_ns = v,
                "95%" => p.p95_ns = v,
                "99%" => p.p99_ns = v,
                _ => {}
            }
        }
    }
    p
}

/// redis-benchmark: one section per test (`====== SET ======`), or one
/// line per test with `-q`. With several tests, requests and their
/// seconds are summed (requests per second over the whole run);
/// percentiles are given for a single test only (they do not combine).
fn redis_benchmark(text: &str) -> Parsed {
    let mut p = Parsed {
        tool: Some("redis-benchmark"),
        ..Default::default()
    };
    let (mut requests, mut seconds, mut tests) = (0u64, 0.0f64, 0u32);
    let lines: Vec<&str> = text.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let w: Vec<&str> = l.split_whitespace().collect();
        // "  20000 requests completed in 0.18 seconds"
        if let [n, "requests", "completed", "in", s, "seconds"] = w[..]
            && let (Ok(n), Ok(s)) = (n.parse::<u64>(), s.parse::<f64>())
        {
            requests += n;
            seconds += s;
            tests += 1;
        }
        // "  throughput summary: 109890.11 requests per second"
        if let ["throughput", "summary:", r, "requests", "per", "second"] = w[..] {
            p.requests_per_sec = r.parse().ok();
        }
        // "latency summary (msec):" then a header and a values line.
        if l.trim_start().starts_with("latency summary (msec)")
            && let (Some(h), Some(v)) = (lines.get(i + 1), lines.get(i + 2))
        {
            for (name, value) in h.split_whitespace().zip(v.split_whitespace()) {
                let ns = value.parse::<f64>().ok().map(|ms| ms * 1e6);
                match name {
                    "p50" => p.p50_ns = ns,
                    "p95" => p.p95_ns = ns,
                    "p99" => p.p99_ns = ns,
                    _ => {}
                }
            }
        }
    }
    if tests == 0 {
        // -q: "SET: 127388.53 requests per second, p50=0.183 msec"
        let quiet: Vec<(f64, Option<f64>)> = lines
            .iter()
            .filter(|l| l.contains(" requests per second") && !l.contains("rps="))
            .filter_map(|l| {
                let (_, rest) = l.split_once(": ")?;
                let rps = first_number::<f64>(rest)?;
                let p50 = rest
                    .split_once("p50=")
                    .and_then(|(_, v)| first_number::<f64>(v))
                    .map(|ms| ms * 1e6);
                Some((rps, p50))
            })
            .collect();
        if let [(rps, p50)] = quiet[..] {
            p.requests_per_sec = Some(rps);
            p.p50_ns = p50;
        }
        return p;
    }
    p.requests = Some(requests);
    if tests > 1 {
        p.requests_per_sec = (seconds > 0.0).then(|| requests as f64 / seconds);
        (p.p50_ns, p.p95_ns, p.p99_ns) = (None, None, None);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(name: &str) -> String {
        let path = format!("{}/tests/data/load/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() <= b.abs() * 1e-9)
    }

    #[test]
    fn wrk_with_and_without_latency() {
        let p = parse(&data("wrk-latency.txt"));
        assert_eq!(p.tool, Some("wrk"));
        assert_eq!(p.requests, Some(130_859));
        assert!(close(p.requests_per_sec, 43_358.42), "{p:?}");
        assert!(close(p.p50_ns, 153_000.0), "{p:?}");
        assert!(close(p.p99_ns, 11.15e6), "{p:?}");
        assert_eq!(p.p95_ns, None, "wrk prints no p95");
        let p = parse(&data("wrk.txt"));
        assert_eq!((p.requests, p.p50_ns), (Some(145_235), None));
        assert!(close(p.requests_per_sec, 72_299.96), "{p:?}");
    }

    #[test]
    fn hey() {
        let p = parse(&data("hey.txt"));
        assert_eq!(p.tool, Some("hey"));
        assert_eq!(p.requests, Some(138_575));
        assert!(close(p.requests_per_sec, 46_185.391), "{p:?}");
        assert!(close(p.p50_ns, 0.0004e9), "{p:?}");
        assert!(close(p.p95_ns, 0.0007e9), "{p:?}");
        assert!(close(p.p99_ns, 0.0026e9), "{p:?}");
    }

    #[test]
    fn apache_bench() {
        let p = parse(&data("ab.txt"));
        assert_eq!(p.tool, Some("ab"));
        assert_eq!(p.requests, Some(5000));
        assert!(close(p.requests_per_sec, 26_575.53), "{p:?}");
        assert!(close(p.p95_ns, 1e6) && close(p.p99_ns, 4e6), "{p:?}");
    }

    #[test]
    fn redis_benchmark_one_test_several_and_quiet() {
        let p = parse(&data("redis-benchmark.txt"));
        assert_eq!(p.tool, Some("redis-benchmark"));
        assert_eq!(p.requests, Some(20_000));
        assert!(close(p.requests_per_sec, 109_890.11), "{p:?}");
        assert!(
            close(p.p50_ns, 0.191e6) && close(p.p95_ns, 0.367e6),
            "{p:?}"
        );
        assert!(close(p.p99_ns, 4.047e6), "{p:?}");
        let p = parse(&data("redis-benchmark-2.txt"));
        assert_eq!(p.requests, Some(40_000));
        assert!(p.requests_per_sec.is_some_and(|r| r > 1000.0), "{p:?}");
        assert_eq!(p.p50_ns, None, "percentiles of two tests do not combine");
        let p = parse(&data("redis-benchmark-q.txt"));
        assert_eq!(p.requests_per_sec, None, "two quiet tests: no total time");
    }

    #[test]
    fn unknown_output_and_nonsense_give_nothing() {
        assert_eq!(parse("hello\n"), Parsed::default());
        let p = parse("Running\n  Thread Stats\nRequests/sec: inf\n");
        assert_eq!(p.requests_per_sec, None);
        let p = parse("Running\n  Thread Stats\nRequests/sec: NaN\n");
        assert_eq!(p.requests_per_sec, None);
    }
}

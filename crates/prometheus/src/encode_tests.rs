//! Tests of the exposition: histogram buckets and the series shared in turns.

use super::*;

#[test]
fn log2_buckets_become_cumulative_power_of_two_bounds() {
    // 3 values of 0 ns, one of 1000 ns (bucket 10), one of 2^20 ns
    // (bucket 21), one of 2^40 ns (beyond the last bound).
    let mut log2 = vec![0u64; 42];
    log2[0] = 3;
    log2[10] = 1;
    log2[21] = 1;
    log2[41] = 1;
    let (b, count) = prometheus_buckets(&log2);
    assert_eq!(count, 6);
    assert_eq!(b.len(), HISTOGRAM_SERIES - 2);
    assert_eq!(b[0], (1024.0 / 1e9, 4));
    // 2^20 ns is in bucket 21 = [2^20, 2^21): within le = 2^21 ns.
    assert_eq!(
        b[(21 - HISTOGRAM_LOW_POW2) as usize],
        ((1u64 << 21) as f64 / 1e9, 1)
    );
    assert_eq!(b.last(), Some(&(f64::INFINITY, 1)));
    assert_eq!(prometheus_buckets(&[]).1, 0);
}

#[test]
fn series_are_shared_in_turns_and_each_process_keeps_its_first_items() {
    // Three processes of 4, 1 and 3 items; room for 5 items of cost 2
    // (and 1 series over): turns give a0 b0 c0 a1 c1, the rest is out.
    let mut lists = vec![
        vec!["a0", "a1", "a2", "a3"],
        vec!["b0"],
        vec!["c0", "c1", "c2"],
    ];
    let mut left = 11;
    let dropped = fit_in_turns(&mut lists, |_| 2, &mut left);
    assert_eq!(lists, [vec!["a0", "a1"], vec!["b0"], vec!["c0", "c1"]]);
    assert_eq!((left, dropped), (1, 6));
    // A costlier process is left out first; a cheaper one goes on.
    let mut lists = vec![vec![1, 2, 3], vec![1, 2, 3]];
    let mut left = 7;
    let dropped = fit_in_turns(&mut lists, |p| if p == 0 { 4 } else { 1 }, &mut left);
    assert_eq!(lists, [vec![1], vec![1, 2, 3]]);
    assert_eq!((left, dropped), (0, 8));
}

/// A process with every kind of group: two thread groups with switch
/// counts and the eBPF view, a loop, a sleep site and a peak RSS.
fn full_state(pid: u32, config: &ExporterConfig) -> State {
    let mut target = wakemeter::TargetIdentity::default();
    target.pid = pid;
    target.name = format!("proc{pid}");
    let mut s = State::new(config, target);
    s.peak_rss_bytes = Some(4096);
    s.switches_seen = true;
    s.kernel_seen = true;
    let thread = |cpu_ns| ThreadTotals {
        cpu_ns,
        switches: 3,
        run_queue_wait_ns: 5,
        wakes: 7,
        off_cpu_ns: [1; 6],
        kernel: [2; KERNEL_COUNTS.len()],
    };
    s.threads.add([
        ("main".to_string(), thread(10), 10.0),
        ("worker-{n}".to_string(), thread(20), 20.0),
    ]);
    let mut hist = vec![0u64; 40];
    hist[12] = 3;
    s.loops.add([(
        "io".to_string(),
        LoopTotals {
            wakeups: 4,
            poll_delay_buckets: hist.clone(),
            ..LoopTotals::default()
        },
        4.0,
    )]);
    s.sleeps.add([(
        "tick".to_string(),
        SleepTotals {
            calls: 2,
            oversleep_buckets: hist,
            ..SleepTotals::default()
        },
        2.0,
    )]);
    s
}

/// The text of `exposed` as the exporter writes it.
fn text_of(exposed: Exposed) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(exposed));
    let mut out = String::new();
    assert!(prometheus_client::encoding::text::encode(&mut out, &registry).is_ok());
    out
}

/// The label names of a sample line (`name{a="x",b="y"} 1`).
fn label_names(line: &str) -> Vec<String> {
    let Some((_, rest)) = line.split_once('{') else {
        return Vec::new();
    };
    let mut names = Vec::new();
    let mut in_value = false;
    let mut escaped = false;
    let mut name = String::new();
    for c in rest.chars() {
        if in_value {
            match (escaped, c) {
                (false, '\\') => escaped = true,
                (false, '"') => in_value = false,
                _ => escaped = false,
            }
        } else if c == '=' {
            names.push(std::mem::take(&mut name));
        } else if c == '"' {
            in_value = true;
        } else if c == '}' {
            break;
        } else if c != ',' {
            name.push(c);
        }
    }
    names
}

/// Every family written is declared in [`FAMILIES`] with the same type,
/// unit, help and labels; every declared family is written when each
/// kind of group is present; and the series written are exactly those
/// the budgets (summed from the declarations) counted.
#[test]
fn every_family_written_is_declared_and_counted() {
    // (written name, type, unit, help, labels) of each declaration.
    let mut declared: Vec<(String, &str, &str, &str, Vec<&str>)> = Vec::new();
    for fam in FAMILIES {
        let ty = match fam.ty {
            Type::Counter => "counter",
            Type::Gauge => "gauge",
            Type::Histogram => "histogram",
            Type::Info => "info",
        };
        let unit = match fam.base {
            Base::Count => "",
            Base::Seconds => "seconds",
            Base::Bytes => "bytes",
        };
        let suffixed = |n: &str| {
            if unit.is_empty() {
                n.to_string()
            } else {
                format!("{n}_{unit}")
            }
        };
        if matches!(fam.rows, Rows::ThreadKernel) {
            for (name, help, _) in KERNEL_COUNTS {
                let n = suffixed(&format!("{}{name}", fam.name));
                declared.push((n, ty, unit, help, fam.labels.to_vec()));
            }
        } else {
            declared.push((suffixed(fam.name), ty, unit, fam.help, fam.labels.to_vec()));
        }
    }
    for per_process in [false, true] {
        let config = ExporterConfig::default().with_per_process(per_process);
        let one = full_state(100, &config);
        let two = full_state(200, &config);
        let states: Vec<&State> = if per_process {
            vec![&one, &two]
        } else {
            vec![&one]
        };
        let (exposed, dropped) = Exposed::plan(&states, &config);
        assert_eq!(dropped, 0);
        let counted = exposed.series;
        let om = text_of(exposed);
        let mut written: Vec<&str> = Vec::new();
        let mut samples = 0usize;
        let mut current: Option<&(String, &str, &str, &str, Vec<&str>)> = None;
        let mut lines = om.lines().peekable();
        while let Some(line) = lines.next() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
                let d = declared.iter().find(|d| d.0 == name);
                assert!(
                    d.is_some(),
                    "family {name} is written but not declared\n{om}"
                );
                let d = d.unwrap_or_else(|| unreachable!());
                assert_eq!(help, d.3, "help of {name}");
                assert_eq!(
                    lines.next(),
                    Some(format!("# TYPE {name} {}", d.1).as_str())
                );
                if !d.2.is_empty() {
                    assert_eq!(
                        lines.next(),
                        Some(format!("# UNIT {name} {}", d.2).as_str())
                    );
                }
                written.push(name);
                current = Some(d);
            } else if line.starts_with('#') {
                assert!(line == "# EOF", "{line}");
            } else {
                samples += 1;
                let d = current.unwrap_or_else(|| panic!("sample before any family: {line}"));
                let mut allowed: Vec<&str> = d.4.clone();
                if per_process {
                    allowed.extend(["pid", "process"]);
                } else if d.1 == "info" {
                    allowed.extend(["pid", "name"]);
                }
                if d.1 == "histogram" {
                    allowed.push("le");
                }
                let names = label_names(line);
                for n in &names {
                    assert!(
                        allowed.contains(&n.as_str()),
                        "label {n} of {line} not declared"
                    );
                }
                for n in &d.4 {
                    assert!(
                        names.iter().any(|m| m == n),
                        "{line} lacks declared label {n}"
                    );
                }
            }
        }
        let all: Vec<&str> = declared.iter().map(|d| d.0.as_str()).collect();
        assert_eq!(written, all, "every declared family, in order");
        assert_eq!(
            samples, counted,
            "series written vs counted from the declarations (per_process {per_process})"
        );
    }
}

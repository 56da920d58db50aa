//! The kernel's own accounting of BPF programs (`run_time_ns`, `run_cnt`),
//! read for every loaded program and differenced between two moments.

use std::collections::HashMap;

/// Program id -> (kernel name, run_time_ns, run_cnt).
pub type Snapshot = HashMap<u32, (String, u64, u64)>;
/// (kernel name, run_time_ns, run_cnt) differences, summed by name.
pub type Deltas = Vec<(String, u64, u64)>;

/// `(run_time_ns, run_cnt)` of every loaded BPF program in the system, by id.
pub fn program_stats() -> Snapshot {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .map(|p| {
            let name = p.name_as_str().unwrap_or("?").to_owned();
            let ns = u64::try_from(p.run_time().as_nanos()).unwrap_or(u64::MAX);
            (p.id(), (name, ns, p.run_count()))
        })
        .collect()
}

/// Per-program deltas between two snapshots: name -> (ns, runs), for
/// the programs of `ids` (summed by name).
pub fn deltas(before: &Snapshot, after: &Snapshot, ids: &[u32]) -> Deltas {
    let mut by_name: Deltas = Vec::new();
    for id in ids {
        let (Some((name, ns1, n1)), Some((_, ns0, n0))) = (after.get(id), before.get(id)) else {
            continue;
        };
        let (dns, dn) = (ns1.saturating_sub(*ns0), n1.saturating_sub(*n0));
        match by_name.iter_mut().find(|(n, _, _)| n == name) {
            Some(e) => {
                e.1 += dns;
                e.2 += dn;
            }
            None => by_name.push((name.clone(), dns, dn)),
        }
    }
    by_name
}

/// Whether a (kernel-truncated) program name is one of ours.
pub fn is_ours(name: &str) -> bool {
    name.starts_with("tpbtf_") || name.starts_with("rawtp_") || name == "tp_sys_exits"
}

/// Ids of our programs among `stats`.
pub fn ours(stats: &Snapshot) -> Vec<u32> {
    stats
        .iter()
        .filter(|(_, (n, _, _))| is_ours(n))
        .map(|(id, _)| *id)
        .collect()
}

/// Mean ns per run, and runs, of the programs whose name contains `name_part`.
pub fn ns_per_event(d: &Deltas, name_part: &str) -> Option<(f64, u64)> {
    let (ns, n) = d
        .iter()
        .filter(|(n, _, _)| n.contains(name_part))
        .fold((0u64, 0u64), |a, (_, ns, n)| (a.0 + ns, a.1 + n));
    (n > 0).then(|| (ns as f64 / n as f64, n))
}

pub fn print_programs(label: &str, d: &Deltas) {
    for (name, ns, n) in d {
        if *n > 0 {
            println!(
                "    {label:<20} {name:<16} {:>9} runs {:>8.1} ns/run",
                n,
                *ns as f64 / *n as f64
            );
        }
    }
}

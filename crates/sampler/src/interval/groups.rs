//! Threads folded into groups by name (numbers collapsed): the groups a
//! report lists, a recording stores and findings name.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::ThreadInterval;

/// Thread groups kept per interval by default; the rest are summed into
/// one group named [`OTHER_GROUP`].
pub const DEFAULT_MAX_GROUPS: usize = 32;

/// Name of the group that holds the threads outside the kept groups.
pub const OTHER_GROUP: &str = "other";

/// `name` with every run of ASCII digits replaced by `{n}`
/// (`wrk:worker_12` → `wrk:worker_{n}`): the group a thread, loop or
/// sleep site belongs to. An empty name is `{unnamed}`.
pub fn group_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    group_name_into(name, &mut out);
    out
}

/// [`group_name`] written into `out` (cleared first), so that grouping
/// many threads reuses one buffer and allocates once per group only.
fn group_name_into(name: &str, out: &mut String) {
    out.clear();
    let mut in_digits = false;
    for c in name.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push_str("{n}");
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    if out.is_empty() {
        out.push_str("{unnamed}");
    }
}

/// The threads of one name (numbers collapsed) over one interval: a
/// recording's groups, and a report's `thread_groups`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct ThreadGroupInterval {
    /// The group name ([`group_name`]), or [`OTHER_GROUP`].
    pub name: String,
    /// Threads of the group alive at the end of the interval.
    pub threads: u32,
    /// CPU of all of them, in percent of one core.
    pub cpu_percent: f64,
    /// Their context switches per second; `None` where no thread had them.
    pub switches_per_sec: Option<f64>,
    /// Their voluntary switches (blocking waits) per second, where read.
    pub voluntary_switches_per_sec: Option<f64>,
    /// Their run-queue wait, in percent of one thread's time (summed).
    pub run_queue_wait_percent: Option<f64>,
    /// Times they were made runnable per second (eBPF), where attached.
    pub wakes_per_sec: Option<f64>,
}

fn add_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    }
}

impl ThreadGroupInterval {
    pub(crate) fn empty(name: String) -> Self {
        ThreadGroupInterval {
            name,
            threads: 0,
            cpu_percent: 0.0,
            switches_per_sec: None,
            voluntary_switches_per_sec: None,
            run_queue_wait_percent: None,
            wakes_per_sec: None,
        }
    }

    fn add(&mut self, o: &ThreadGroupInterval) {
        self.threads = self.threads.saturating_add(o.threads);
        self.cpu_percent += o.cpu_percent;
        self.switches_per_sec = add_opt(self.switches_per_sec, o.switches_per_sec);
        self.voluntary_switches_per_sec = add_opt(
            self.voluntary_switches_per_sec,
            o.voluntary_switches_per_sec,
        );
        self.run_queue_wait_percent =
            add_opt(self.run_queue_wait_percent, o.run_queue_wait_percent);
        self.wakes_per_sec = add_opt(self.wakes_per_sec, o.wakes_per_sec);
    }
}

/// `threads` folded into groups by [`group_name`], most CPU first: at
/// most `max_groups` groups, plus one [`OTHER_GROUP`] that sums the rest.
/// Also returns the sum of every thread (its `name` empty).
pub fn thread_groups(
    threads: &[ThreadInterval],
    max_groups: usize,
) -> (Vec<ThreadGroupInterval>, ThreadGroupInterval) {
    let mut by_name: HashMap<String, ThreadGroupInterval> = HashMap::new();
    let mut all = ThreadGroupInterval::empty(String::new());
    let mut name = String::new();
    for t in threads {
        let one = ThreadGroupInterval {
            name: String::new(),
            threads: 1,
            cpu_percent: t.cpu_percent,
            switches_per_sec: t.switches_per_sec,
            voluntary_switches_per_sec: t.voluntary_switches_per_sec,
            run_queue_wait_percent: t.run_queue_wait_percent,
            wakes_per_sec: t.kernel.as_ref().map(|k| k.wakes_per_sec),
        };
        all.add(&one);
        group_name_into(&t.name, &mut name);
        match by_name.get_mut(name.as_str()) {
            Some(g) => g.add(&one),
            None => {
                let mut g = ThreadGroupInterval::empty(name.clone());
                g.add(&one);
                by_name.insert(name.clone(), g);
            }
        }
    }
    let mut groups: Vec<ThreadGroupInterval> = by_name.into_values().collect();
    groups.sort_by(|a, b| {
        b.cpu_percent
            .total_cmp(&a.cpu_percent)
            .then_with(|| a.name.cmp(&b.name))
    });
    if groups.len() > max_groups {
        let mut other = ThreadGroupInterval::empty(OTHER_GROUP.to_string());
        for g in groups.drain(max_groups..) {
            other.add(&g);
        }
        groups.push(other);
    }
    (groups, all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_names_collapse_numbers() {
        assert_eq!(group_name("worker-12"), "worker-{n}");
        assert_eq!(group_name("wrk:worker_0"), "wrk:worker_{n}");
        assert_eq!(group_name("a1b22"), "a{n}b{n}");
        assert_eq!(group_name(""), "{unnamed}");
    }
}

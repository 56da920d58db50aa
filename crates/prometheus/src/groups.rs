//! Counters grouped by collapsed name, with a bounded number of labelled
//! groups and one `other` bucket.
//!
//! A group gets a label when it is among the top N of an update (by the
//! weight its caller gives, e.g. CPU time) and a slot is free, and keeps it
//! while it is seen, so that its counters only ever grow; everything
//! without a label is added to `other`. A group unseen for
//! [`EVICT_AFTER_UPDATES`] updates loses its label and its series end
//! (Prometheus marks them stale; a later return starts a new counter,
//! which `rate()` reads as a reset).

use std::collections::HashMap;

/// Updates a labelled group may go unseen before its slot is freed.
pub const EVICT_AFTER_UPDATES: u32 = 120;

/// Counters that add up.
pub trait Totals: Default + Clone {
    /// Adds `other` into `self` (saturating).
    fn add(&mut self, other: &Self);
}

/// One labelled group.
#[derive(Debug, Clone)]
pub struct Group<T> {
    /// The collapsed name (the label value).
    pub name: String,
    /// Counters since the group got its label.
    pub totals: T,
    /// Members seen in the latest update (threads, probes).
    pub members: u32,
    /// Weight in the latest update (for ordering in the exposition).
    pub weight: f64,
    unseen: u32,
}

/// Top-N groups plus `other`.
#[derive(Debug, Clone)]
pub struct Groups<T> {
    top_n: usize,
    labelled: Vec<Group<T>>,
    /// Everything outside the labelled groups.
    pub other: T,
    /// Members of `other` in the latest update.
    pub other_members: u32,
}

impl<T: Totals> Groups<T> {
    /// At most `top_n` labelled groups.
    pub fn new(top_n: usize) -> Self {
        Groups {
            top_n,
            labelled: Vec::new(),
            other: T::default(),
            other_members: 0,
        }
    }

    /// The labelled groups, heaviest in the latest update first.
    pub fn labelled(&self) -> &[Group<T>] {
        &self.labelled
    }

    /// Adds one update: `(collapsed name, delta, weight)` per member
    /// (several members may share a name).
    pub fn add(&mut self, members: impl IntoIterator<Item = (String, T, f64)>) {
        let mut merged: HashMap<String, (T, f64, u32)> = HashMap::new();
        for (name, delta, weight) in members {
            let e = merged.entry(name).or_default();
            e.0.add(&delta);
            e.1 += weight;
            e.2 += 1;
        }
        let mut ranked: Vec<(String, (T, f64, u32))> = merged.into_iter().collect();
        ranked.sort_by(|a, b| b.1.1.total_cmp(&a.1.1).then_with(|| a.0.cmp(&b.0)));
        for g in &mut self.labelled {
            g.unseen = g.unseen.saturating_add(1);
            g.members = 0;
            g.weight = 0.0;
        }
        self.other_members = 0;
        for (rank, (name, (delta, weight, members))) in ranked.into_iter().enumerate() {
            let slot = match self.labelled.iter().position(|g| g.name == name) {
                Some(i) => Some(i),
                None if rank < self.top_n && self.labelled.len() < self.top_n => {
                    self.labelled.push(Group {
                        name,
                        totals: T::default(),
                        members: 0,
                        weight: 0.0,
                        unseen: 0,
                    });
                    Some(self.labelled.len() - 1)
                }
                None => None,
            };
            match slot.and_then(|i| self.labelled.get_mut(i)) {
                Some(g) => {
                    g.totals.add(&delta);
                    g.members = members;
                    g.weight = weight;
                    g.unseen = 0;
                }
                None => {
                    self.other.add(&delta);
                    self.other_members = self.other_members.saturating_add(members);
                }
            }
        }
        self.labelled.retain(|g| g.unseen <= EVICT_AFTER_UPDATES);
        self.labelled.sort_by(|a, b| {
            b.weight
                .total_cmp(&a.weight)
                .then_with(|| a.name.cmp(&b.name))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Default, PartialEq)]
    struct N(u64);
    impl Totals for N {
        fn add(&mut self, o: &Self) {
            self.0 += o.0;
        }
    }

    fn m(name: &str, v: u64) -> (String, N, f64) {
        (name.to_string(), N(v), v as f64)
    }

    #[test]
    fn top_n_keep_their_labels_and_the_rest_goes_to_other() {
        let mut g = Groups::new(2);
        g.add([m("a", 10), m("b", 5), m("c", 1), m("a", 10)]);
        let names: Vec<_> = g.labelled().iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(g.labelled()[0].totals, N(20));
        assert_eq!(g.labelled()[0].members, 2);
        assert_eq!((g.other.clone(), g.other_members), (N(1), 1));
        // c becomes the heaviest, but the slots are taken: counters of a
        // and b must not jump, so c stays in other.
        g.add([m("c", 100), m("a", 1), m("b", 1)]);
        assert_eq!(g.other, N(101));
        assert_eq!(g.labelled()[0].totals, N(21));
    }

    #[test]
    fn an_unseen_group_frees_its_slot() {
        let mut g = Groups::new(1);
        g.add([m("a", 1)]);
        for _ in 0..=EVICT_AFTER_UPDATES {
            g.add([m("b", 1)]);
        }
        assert!(g.labelled().is_empty());
        g.add([m("b", 1)]);
        assert_eq!(g.labelled()[0].name, "b");
    }
}

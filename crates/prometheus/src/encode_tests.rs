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

//! RSS accounting (its own test binary: no other test allocates meanwhile).
#![cfg(target_os = "linux")]

use wakemeter::SamplerBuilder;

#[test]
fn rss_rises_by_64_mib_when_64_mib_are_touched() {
    const SIZE: usize = 64 << 20;
    let s = SamplerBuilder::new().build().unwrap();
    let before = s.sample_now().unwrap();
    let mut block = vec![0u8; SIZE];
    for i in (0..SIZE).step_by(4096) {
        block[i] = 1;
    }
    std::hint::black_box(&block);
    let after = s.sample_now().unwrap();
    let grew = after.process.rss_bytes as i64 - before.process.rss_bytes as i64;
    let mib = grew as f64 / (1 << 20) as f64;
    assert!((60.0..=70.0).contains(&mib), "rss grew by {mib:.1} MiB");
    assert!(after.process.peak_rss_bytes.unwrap() >= after.process.rss_bytes);
    let i = s.latest_interval().unwrap();
    assert_eq!(i.process.rss_change_bytes, grew);
    drop(block);
}

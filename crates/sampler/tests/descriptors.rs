//! Descriptor exhaustion (its own test binary: it lowers RLIMIT_NOFILE).
#![cfg(target_os = "linux")]

mod common;

use std::sync::mpsc;

use wakemeter::{Error, SampleWarning, SamplerBuilder};

fn set_nofile(soft: u64) -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid out-pointer / in-pointer.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        let old = r.rlim_cur;
        r.rlim_cur = soft;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
        old
    }
}

#[test]
fn emfile_degrades_with_a_typed_warning_and_recovers() {
    let s = SamplerBuilder::new().build().unwrap();
    s.sample_now().unwrap();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let stop_rx = std::sync::Arc::new(std::sync::Mutex::new(stop_rx));
    let workers: Vec<_> = (0..16)
        .map(|_| {
            let rx = stop_rx.clone();
            std::thread::spawn(move || {
                let _ = rx.lock().map(|r| r.recv());
            })
        })
        .collect();
    let used = common::open_fds() as u64;
    let old = set_nofile(used + 4);
    let snap = s.sample_now().expect("sampling keeps working");
    let new_builder = SamplerBuilder::new().build();
    set_nofile(old);
    let w = snap.warnings.iter().find_map(|w| match w {
        SampleWarning::DescriptorsExhausted {
            threads_without_descriptors,
        } => Some(*threads_without_descriptors),
        _ => None,
    });
    assert!(
        w.unwrap_or(0) >= 10,
        "warning expected: {:?}",
        snap.warnings
    );
    assert!(
        snap.threads.len() >= 17,
        "every thread still sampled (CPU from its clock)"
    );
    // A new sampler with no descriptor left fails with a typed error.
    let _ = new_builder; // may or may not have had room, depending on the limit
    let old = set_nofile(common::open_fds() as u64);
    let err = SamplerBuilder::new().build().unwrap_err();
    set_nofile(old);
    assert!(matches!(err, Error::DescriptorsExhausted { .. }), "{err}");
    let snap = s.sample_now().unwrap();
    assert!(
        snap.warnings.is_empty(),
        "recovers once descriptors are available: {:?}",
        snap.warnings
    );
    drop(stop_tx);
    for w in workers {
        w.join().unwrap();
    }
}

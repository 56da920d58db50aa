//! Process-wide counts: alone in their test binary, so no other test's
//! thread adds switches while they measure.

#![cfg(any(target_os = "linux", target_os = "android"))]

use std::sync::{Arc, Condvar, Mutex};

use criterion::measurement::Measurement;
use wakemeter_criterion::{ContextSwitches, Wakeups};

/// A condvar ping-pong between the caller and a partner thread: each round
/// trip the caller hands the turn over and blocks, the partner wakes, hands
/// it back and blocks. Two voluntary switches (= two wakeups) of the
/// process per round trip, one of them the caller's. (std's mpsc channels
/// spin and yield before blocking, so a channel round trip does not have an
/// exact count; a condvar does not spin.) Both threads run SCHED_FIFO on
/// one CPU: on two CPUs the partner may reply before the caller reaches its
/// wait, and the caller then does not block at all.
#[test]
#[ignore = "needs root (SCHED_FIFO)"]
fn condvar_round_trip_costs_two_wakeups_of_the_process() {
    const N: u64 = 50;
    assert!(
        pin_fifo(),
        "needs CAP_SYS_NICE for SCHED_FIFO (the exact count needs a deterministic schedule): run as root"
    );
    let state = Arc::new((Mutex::new((false, false)), Condvar::new())); // (partner's turn, stop)
    let partner = {
        let state = Arc::clone(&state);
        std::thread::spawn(move || {
            pin_fifo();
            let (m, cv) = &*state;
            loop {
                let Ok(mut g) = m.lock() else { return };
                while !g.0 && !g.1 {
                    g = match cv.wait(g) {
                        Ok(g) => g,
                        Err(_) => return,
                    };
                }
                if g.1 {
                    return;
                }
                g.0 = false;
                // Notify after unlocking, so the woken thread does not
                // block again on the mutex (an extra switch).
                drop(g);
                cv.notify_one();
            }
        })
    };
    // Let the partner start and block.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (m, cv) = &*state;
    let w = Wakeups::process();
    let t = ContextSwitches::voluntary();
    let (ws, ts) = (w.start(), t.start());
    for _ in 0..N {
        let Ok(mut g) = m.lock() else {
            panic!("poisoned")
        };
        g.0 = true;
        drop(g);
        cv.notify_one();
        let Ok(mut g) = m.lock() else {
            panic!("poisoned")
        };
        while g.0 {
            g = match cv.wait(g) {
                Ok(g) => g,
                Err(_) => panic!("poisoned"),
            };
        }
    }
    let (tv, wv) = (t.end(ts), w.end(ws));
    if let Ok(mut g) = m.lock() {
        g.1 = true;
        cv.notify_one();
    }
    assert!(partner.join().is_ok());
    assert_eq!(tv, N, "the caller blocks once per round trip");
    assert_eq!(
        wv,
        2 * N,
        "caller and partner each block (and are woken) once per round trip"
    );
}

include!("common/rt.rs");

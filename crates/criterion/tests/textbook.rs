//! Textbook cases whose switch counts are known exactly. Counts are kernel
//! counters, so they are asserted exactly; times never are.

#![cfg(any(target_os = "linux", target_os = "android"))]

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use criterion::measurement::Measurement;
use wakemeter_criterion::{ContextSwitches, ThreadCpuTime, Wakeups};

const N: u64 = 20;

fn measure<M: Measurement<Value = u64>>(m: &M, mut f: impl FnMut()) -> u64 {
    let s = m.start();
    for _ in 0..N {
        f();
    }
    m.end(s)
}

#[test]
fn sleep_1ms_costs_exactly_one_voluntary_switch() {
    let v = measure(&ContextSwitches::voluntary(), || {
        std::thread::sleep(Duration::from_millis(1))
    });
    assert_eq!(v, N, "one voluntary switch per thread::sleep(1 ms)");
    let w = measure(&Wakeups::thread(), || {
        std::thread::sleep(Duration::from_millis(1))
    });
    assert_eq!(w, N, "one wakeup per sleep");
}

#[test]
fn spin_wait_costs_zero_voluntary_switches() {
    let v = measure(&ContextSwitches::voluntary(), || {
        let t = Instant::now();
        while t.elapsed() < Duration::from_micros(200) {
            std::hint::spin_loop();
        }
    });
    assert_eq!(v, 0);
    // ... and burns CPU: at least the spun time is thread CPU time (a
    // preempted spinner spins longer, never shorter). Not a timing
    // assertion on speed: a lower bound the kernel guarantees.
    let cpu = ThreadCpuTime;
    let s = cpu.start();
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(5) {}
    let ns = cpu.end(s);
    assert!(ns > 0);
}

/// Ping-pong over one mutex + condvar. Each round trip the main thread
/// hands the turn over and blocks until it comes back: exactly one
/// voluntary switch of the main thread per round trip, and one of the
/// partner: two for the process. Both run SCHED_FIFO on one CPU (see
/// `pin_fifo`); on two CPUs the partner may answer before the caller waits.
fn ping_pong(rounds: u64) -> impl FnMut() -> u64 {
    #[derive(PartialEq)]
    enum Turn {
        Main,
        Partner,
        Stop,
    }
    let state = Arc::new((Mutex::new(Turn::Main), Condvar::new()));
    let partner = {
        let state = Arc::clone(&state);
        std::thread::spawn(move || {
            pin_fifo();
            let (m, cv) = &*state;
            loop {
                let Ok(mut g) = m.lock() else { return };
                while *g == Turn::Main {
                    g = match cv.wait(g) {
                        Ok(g) => g,
                        Err(_) => return,
                    };
                }
                if *g == Turn::Stop {
                    return;
                }
                *g = Turn::Main;
                // Notify after unlocking: the woken thread must not block
                // again on the mutex.
                drop(g);
                cv.notify_one();
            }
        })
    };
    let mut partner = Some(partner);
    move || {
        let (m, cv) = &*state;
        let sw = ContextSwitches::voluntary();
        let s = sw.start();
        for _ in 0..rounds {
            let Ok(mut g) = m.lock() else { return u64::MAX };
            *g = Turn::Partner;
            drop(g);
            cv.notify_one();
            let Ok(mut g) = m.lock() else { return u64::MAX };
            while *g == Turn::Partner {
                g = match cv.wait(g) {
                    Ok(g) => g,
                    Err(_) => return u64::MAX,
                };
            }
        }
        let v = sw.end(s);
        if let Ok(mut g) = m.lock() {
            *g = Turn::Stop;
            cv.notify_one();
        }
        if let Some(p) = partner.take() {
            let _ = p.join();
        }
        v
    }
}

#[test]
#[ignore = "needs root (SCHED_FIFO)"]
fn condvar_ping_pong_costs_one_switch_of_the_caller_per_round_trip() {
    assert!(
        pin_fifo(),
        "needs CAP_SYS_NICE for SCHED_FIFO (the exact count needs a deterministic schedule): run as root"
    );
    let v = ping_pong(N)();
    assert_eq!(v, N, "the measuring thread blocks once per round trip");
}

#[test]
fn epoll_wait_on_a_ready_fd_costs_zero_switches() {
    // SAFETY: plain syscalls on fds this test owns; every pointer is to a
    // live local.
    unsafe {
        let efd = libc::eventfd(1, libc::EFD_NONBLOCK);
        assert!(efd >= 0);
        let ep = libc::epoll_create1(0);
        assert!(ep >= 0);
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 7,
        };
        assert_eq!(libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, efd, &mut ev), 0);
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 4];
        let mut ready = 0;
        let v = measure(&ContextSwitches::all(), || {
            // Infinite timeout: it would block if the fd were not ready.
            ready += libc::epoll_wait(ep, out.as_mut_ptr(), 4, -1);
        });
        assert_eq!(
            ready, N as i32,
            "the eventfd stays readable (level-triggered)"
        );
        assert_eq!(v, 0, "epoll_wait on a ready fd never blocks");
        libc::close(ep);
        libc::close(efd);
    }
}

#[test]
fn per_thread_measurement_ended_on_another_thread_panics() {
    let m = ThreadCpuTime;
    let s = m.start();
    let r = std::thread::spawn(move || ThreadCpuTime.end(s)).join();
    assert!(
        r.is_err(),
        "ending a thread measurement on another thread must panic"
    );
    let m = ContextSwitches::voluntary();
    let s = m.start();
    let r = std::thread::spawn(move || ContextSwitches::voluntary().end(s)).join();
    assert!(r.is_err());
    // The process scope may be ended anywhere.
    let m = ContextSwitches::voluntary().process();
    let s = m.start();
    let r = std::thread::spawn(move || ContextSwitches::voluntary().process().end(s)).join();
    assert!(r.is_ok());
}

#[test]
fn zero_counts_reach_criterion_as_a_tiny_positive_value() {
    let m = ContextSwitches::voluntary();
    assert!(m.to_f64(&0) > 0.0);
    assert!(m.to_f64(&0) < 1e-5);
    assert_eq!(m.to_f64(&3), 3.0);
    let mut v = [m.to_f64(&0) / 1000.0];
    let unit = m.formatter().scale_values(v[0], &mut v);
    assert_eq!(unit, "switches/iter");
    assert_eq!(
        m.formatter().format_value(m.to_f64(&0) / 1000.0).trim(),
        "0.0000 switches/iter"
    );
    assert_eq!(
        m.formatter().format_value(1.0).trim(),
        "1.0000 switches/iter"
    );
    assert_eq!(
        ThreadCpuTime.formatter().format_value(1500.0).trim(),
        "1.5000 µs cpu"
    );
}

include!("common/rt.rs");

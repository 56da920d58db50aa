//! Loop wakeups per operation from wakemeter's own probes.

use std::sync::mpsc;
use std::time::Duration;

use wakemeter::Sampler;
use wakemeter_criterion::loop_cost;

#[test]
fn a_blocking_loop_wakes_once_per_operation_and_never_for_nothing()
-> Result<(), Box<dyn std::error::Error>> {
    let sampler = Sampler::new()?;
    let (req_tx, req_rx) = mpsc::channel::<u64>();
    let (rep_tx, rep_rx) = mpsc::channel::<u64>();
    let mut probe = sampler.loop_probe("io-loop")?;
    let worker = std::thread::spawn(move || {
        loop {
            // A long timeout: the loop never times out during the test.
            probe.before_wait(Some(Duration::from_secs(30)));
            let got = req_rx.recv_timeout(Duration::from_secs(30));
            probe.after_wait(usize::from(got.is_ok()));
            match got {
                Ok(x) => {
                    if rep_tx.send(x).is_err() {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    });
    let cost = loop_cost(&sampler, "io-loop", 100, |ops| {
        for i in 0..ops {
            let _ = req_tx.send(i);
            let _ = rep_rx.recv();
        }
    })?;
    drop(req_tx);
    let _ = worker.join();
    assert_eq!(cost.wakeups_per_op, 1.0);
    assert_eq!(cost.idle_wakeups_per_op, 0.0);
    Ok(())
}

#[test]
fn a_zero_timeout_poller_wakes_for_nothing() -> Result<(), Box<dyn std::error::Error>> {
    let sampler = Sampler::new()?;
    let (req_tx, req_rx) = mpsc::channel::<u64>();
    let (rep_tx, rep_rx) = mpsc::channel::<u64>();
    let mut probe = sampler.loop_probe("spin-loop")?;
    let worker = std::thread::spawn(move || {
        loop {
            probe.before_wait(Some(Duration::ZERO));
            let got = req_rx.try_recv();
            probe.after_wait(usize::from(got.is_ok()));
            match got {
                Ok(x) => {
                    if rep_tx.send(x).is_err() {
                        return;
                    }
                }
                Err(mpsc::TryRecvError::Empty) => std::hint::spin_loop(),
                Err(mpsc::TryRecvError::Disconnected) => return,
            }
        }
    });
    let cost = loop_cost(&sampler, "spin-loop", 100, |ops| {
        for i in 0..ops {
            std::thread::sleep(Duration::from_micros(200));
            let _ = req_tx.send(i);
            let _ = rep_rx.recv();
        }
    })?;
    drop(req_tx);
    let _ = worker.join();
    assert!(cost.wakeups_per_op > 1.0);
    assert!(cost.idle_wakeups_per_op > 0.0);
    // One useful wakeup per op. The probe's counters are read while the
    // worker spins, so each end of the measurement may see one wakeup whose
    // idle mark is not yet written (probe counters are exact one by one,
    // not as a pair): at most one wakeup per end off.
    let useful = (cost.wakeups_per_op - cost.idle_wakeups_per_op) * 100.0;
    assert!(
        (useful - 100.0).abs() <= 2.0 + 1e-9,
        "{useful} useful wakeups for 100 ops"
    );
    Ok(())
}

/// The probe-aware helper on a real tokio runtime: one worker, instrumented
/// with `wakemeter::runtime::instrument`, serves requests one at a time.
/// Each request unparks the worker at most once, so the loop wakes at most
/// once per operation and, on an otherwise idle runtime, nearly once; the
/// reference is tokio's own count of park/unpark transitions over the same
/// operations (two per wakeup, plus the wakeups the unpark hook does not
/// see).
#[test]
fn a_tokio_worker_wakes_about_once_per_request() -> Result<(), Box<dyn std::error::Error>> {
    let sampler = Sampler::new()?;
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(1).enable_all();
    wakemeter::runtime::instrument(&mut builder, &sampler, "tokio-worker");
    let runtime = builder.build()?;
    let (req_tx, mut req_rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
    let (rep_tx, rep_rx) = mpsc::channel::<u64>();
    runtime.spawn(async move {
        while let Some(x) = req_rx.recv().await {
            if rep_tx.send(x).is_err() {
                return;
            }
        }
    });
    // The worker's probe exists from its first park on.
    req_tx.send(0)?;
    rep_rx.recv()?;
    std::thread::sleep(Duration::from_millis(50));
    let unparks = |rt: &tokio::runtime::Runtime| -> u64 {
        wakemeter::runtime::runtime_stats(rt.handle())
            .worker_park_unparks
            .iter()
            .sum()
    };
    let ops = 200;
    let before = unparks(&runtime);
    let cost = loop_cost(&sampler, "tokio-worker", ops, |ops| {
        for i in 0..ops {
            let _ = req_tx.send(i);
            let _ = rep_rx.recv();
            // Give the worker time to park again, as an idle server would.
            std::thread::sleep(Duration::from_micros(200));
        }
    })?;
    let tokio_wakeups = (unparks(&runtime) - before) as f64 / 2.0 / ops as f64;
    drop(req_tx);
    drop(runtime);
    println!(
        "tokio worker: {:.3} wakeups/op (probe), {:.3} (tokio's park/unpark count / 2)",
        cost.wakeups_per_op, tokio_wakeups
    );
    assert!(cost.wakeups_per_op <= 1.0, "{cost:?}");
    assert!(cost.wakeups_per_op >= 0.8, "{cost:?}");
    assert!(
        (cost.wakeups_per_op - tokio_wakeups).abs() <= 0.1,
        "probe {} vs tokio {tokio_wakeups}",
        cost.wakeups_per_op
    );
    Ok(())
}

// Loop and sleep probes, and the findings they lead to (Kotlin: ProbeAndFindingTest).
import Foundation
import XCTest
@testable import Wakemeter

private struct PollFailed: Error {}

final class ProbeTests: XCTestCase {
    func testTimeoutsInTheLibrarysForm() {
        XCTAssertEqual(timeoutNanoseconds(nil), -1)
        XCTAssertEqual(timeoutNanoseconds(-1), -1)
        XCTAssertEqual(timeoutNanoseconds(.nan), -1)
        XCTAssertEqual(timeoutNanoseconds(.infinity), -1)
        XCTAssertEqual(timeoutNanoseconds(0), 0)
        XCTAssertEqual(timeoutNanoseconds(0.001), 1_000_000)
        XCTAssertEqual(timeoutNanoseconds(1e12), 1_000_000_000_000_000_000) // capped, no overflow
    }

    func testLoopProbeRecordsWaitsEventsTimeoutsAndTheThread() throws {
        let s = try Sampler.make()
        let loop = try s.loopProbe(name: "queue")
        // A real blocking wait: a semaphore with a timeout, as a work queue's loop does.
        let queue = DispatchSemaphore(value: 0)
        let poll = { (timeout: TimeInterval) in
            try loop.wait(timeout: timeout) { queue.wait(timeout: .now() + timeout) == .success ? 1 : 0 }
        }
        queue.signal()
        XCTAssertEqual(try poll(0.01), 1) // an event, early
        XCTAssertEqual(try poll(0.001), 0) // times out
        XCTAssertEqual(try loop.wait(timeout: 0) { 0 }, 0) // non-blocking poll
        XCTAssertThrowsError(try loop.wait(timeout: nil) { throw PollFailed() }) { XCTAssertTrue($0 is PollFailed) }
        let st = try loop.stats()
        XCTAssertEqual(st.name, "queue")
        XCTAssertEqual(st.totalWakeups, 4)
        XCTAssertEqual(st.totalIdleWakeups, 3)
        XCTAssertEqual(st.totalEvents, 1)
        XCTAssertEqual(st.totalEarlyWakeups, 1)
        XCTAssertEqual(st.totalTimedOutWakeups, 2)
        XCTAssertEqual(st.totalZeroTimeoutWaits, 1)
        XCTAssertGreaterThanOrEqual(st.totalWaitNs, 1_000_000)
        XCTAssertEqual(st.totalUnmatchedCalls, 0)
        // The app's own probe: not a runtime's worker.
        XCTAssertEqual(st.kind, .application)
        #if os(Linux)
        XCTAssertEqual(st.tid, currentTid())
        #endif
        XCTAssertEqual(try s.sampleNow().loops.map(\.id), [loop.id()])
        XCTAssertEqual(try s.sampleNow().loops.map(\.kind), [.application])
        XCTAssertEqual(loop.name(), "queue")
    }

    func testGeneratedProbeMethodsWorkToo() throws {
        let s = try Sampler.make()
        let p = try s.loopProbe(name: "raw")
        try p.beforeWait(timeoutNs: -1)
        try p.afterWait(events: 2)
        try p.afterWait(events: 0) // out of order: counted, ignored
        XCTAssertEqual(try p.stats().totalWakeups, 1)
        XCTAssertEqual(try p.stats().totalUnmatchedCalls, 1)
        let nap = try s.sleepProbe(name: "raw-sleep")
        try nap.sleep(requestedNs: 200_000)
        try nap.begin(requestedNs: 100_000)
        Thread.sleep(forTimeInterval: 0.001)
        try nap.end()
        try nap.end() // without begin: counted, ignored
        let st = try nap.stats()
        XCTAssertEqual(st.totalCalls, 2)
        XCTAssertEqual(st.totalRequestedNs, 300_000)
        XCTAssertGreaterThanOrEqual(st.totalActualNs, 1_200_000)
        XCTAssertEqual(st.totalUnmatchedCalls, 1)
        XCTAssertEqual(nap.name(), "raw-sleep")
        XCTAssertEqual(try s.sampleNow().sleeps.map(\.id), [nap.id()])
    }

    func testSleepProbeMeasuresSleepsAndTheirOversleep() throws {
        let s = try Sampler.make()
        let nap = try s.sleepProbe(name: "nap")
        for _ in 0..<3 { try nap.sleep(requestedNs: 500_000) }
        let st = try nap.stats()
        XCTAssertEqual(st.totalCalls, 3)
        XCTAssertEqual(st.totalRequestedNs, 1_500_000)
        XCTAssertGreaterThanOrEqual(st.totalActualNs, st.totalRequestedNs)
        XCTAssertGreaterThan(st.totalOversleepNs, 0)
    }

    func testReleasedProbesAreForgottenAfterOneMoreSnapshot() throws {
        let s = try Sampler.make()
        do {
            let loop = try s.loopProbe(name: "short-lived")
            _ = try loop.wait(timeout: 0) { 0 }
            XCTAssertEqual(try s.sampleNow().loops.map(\.name), ["short-lived"])
        }
        _ = try s.sampleNow()
        XCTAssertEqual(try s.sampleNow().loops, [])
    }

    func testProbesOfAShutDownSamplerThrowSamplerGone() throws {
        let s = try Sampler.make()
        let loop = try s.loopProbe(name: "l")
        let nap = try s.sleepProbe(name: "s")
        s.shutdown()
        assertThrows(isSamplerGone, try loop.beforeWait(timeoutNs: -1))
        assertThrows(isSamplerGone, try loop.stats())
        assertThrows(isSamplerGone, try loop.wait(timeout: 0) { 0 })
        assertThrows(isSamplerGone, try nap.begin(requestedNs: 1_000_000))
        assertThrows(isSamplerGone, try nap.sleep(requestedNs: 1))
        assertThrows(isClosed, try s.loopProbe(name: "again"))
        XCTAssertEqual(loop.name(), "l") // what does not throw still answers
    }

    func testProbesOutlivingTheirReleasedSamplerThrowSamplerGone() throws {
        var s: Sampler? = try Sampler.make()
        let loop = try XCTUnwrap(s).loopProbe(name: "orphan")
        s = nil
        assertThrows(isSamplerGone, try loop.afterWait(events: 1))
    }

    func testProbeNamesPast64BytesAreRefused() throws {
        let s = try Sampler.make()
        let message = assertThrows(isProbeNameTooLong, try s.loopProbe(name: String(repeating: "x", count: 65)))
        XCTAssertTrue(message.contains("65 bytes"), message)
        assertThrows(isProbeNameTooLong, try s.sleepProbe(name: String(repeating: "é", count: 33))) // 66 bytes
        let loop = try s.loopProbe(name: String(repeating: "y", count: 64))
        _ = try loop.wait(timeout: nil) { 1 }
        _ = try s.sampleNow()
        XCTAssertGreaterThan(try s.stats().historyBytes, 0)
    }

    func testThresholdsAreValidatedWithTypedErrors() throws {
        var bad = defaultThresholds()
        bad.busyPollIdleRatio = 1.5
        let message = assertThrows(isInvalidConfig, try Sampler.make(thresholds: bad))
        XCTAssertTrue(message.contains("busy_poll_idle_ratio"), message)
        let s = try Sampler.make()
        var zeroWindow = defaultThresholds()
        zeroWindow.window = 0
        assertThrows(isInvalidConfig, try s.findingsWith(thresholds: zeroWindow))
        XCTAssertEqual(s.thresholds(), defaultThresholds())
    }

    func testAnIdleLoopHasNoFindingsASpinningOneIsABusyPoller() throws {
        let s = try Sampler(config: config { $0.interval = 0.05; $0.thresholds = quick })
        let idle = try s.loopProbe(name: "idle")
        let spin = try s.loopProbe(name: "spin")
        try s.start()
        // Idle: blocks 100 ms per wait, like a loop with nothing to do.
        try runLoop(for: 0.7) { _ = try idle.wait(timeout: 0.1) { Thread.sleep(forTimeInterval: 0.1); return 0 } }
        let calm = try s.findings()
        XCTAssertFalse(calm.contains { if case .loop = $0.subject { true } else { false } }, "\(calm)")
        // Spinning: non-blocking polls that find nothing, as fast as possible,
        // until the sampler judges it (a window in which the spinning thread
        // got the CPU; generous bound for a loaded machine).
        let stopSpinning = startSpinning(spin)
        let judged = try eventually(30) { try s.findings().contains { $0.kind == .busyPoller } }
        try s.stop() // while it still spins, so the last window is a spinning one
        stopSpinning()
        XCTAssertTrue(judged, "a spinning loop is a busy poller: \((try? s.findings()) ?? [])")
        let found = try s.findings()
        let busy = found.filter { $0.kind == .busyPoller }
        XCTAssertEqual(busy.count, 1, "\(found)")
        let finding = try XCTUnwrap(busy.first)
        guard case .loop(let name, _) = finding.subject else { return XCTFail("\(finding.subject)") }
        XCTAssertEqual(name, "spin")
        XCTAssertTrue([.warning, .critical].contains(finding.severity), "\(finding.severity)")
        XCTAssertFalse(finding.summary.isEmpty)
        XCTAssertFalse(finding.advice.isEmpty)
        XCTAssertTrue(finding.evidence.contains { $0.name.contains("wakeups") }, "\(finding.evidence)")
        XCTAssertFalse(found.contains { if case .loop("idle", _) = $0.subject { true } else { false } })
        XCTAssertTrue(try s.report().findings.contains { $0.kind == .busyPoller })
        XCTAssertTrue(try s.reportJson().contains("\"busy_poller\""))
    }

    func testADispatchSourceTimerLoopIsMeasured() throws {
        // The README's pattern for a DispatchSource-driven loop: each handler
        // call ends a wait (afterWait) and starts the next (beforeWait with
        // the time to the next deadline), so the queue's idle time is the wait.
        let s = try Sampler.make()
        let probe = try s.loopProbe(name: "dispatch-timer")
        let queue = DispatchQueue(label: "timer-loop")
        let timer = DispatchSource.makeTimerSource(queue: queue)
        let fired = Locked(0)
        let period = 0.005
        timer.schedule(deadline: .now() + period, repeating: period)
        timer.setEventHandler {
            try? probe.afterWait(events: 0) // a timer tick: a wakeup without events
            fired.with { $0 += 1 }
            try? probe.beforeWait(timeoutNs: timeoutNanoseconds(period))
        }
        queue.sync { try? probe.beforeWait(timeoutNs: timeoutNanoseconds(period)) }
        timer.activate()
        XCTAssertTrue(eventually { fired.current >= 20 })
        timer.cancel()
        queue.sync {} // the handler is not running any more
        let st = try probe.stats()
        XCTAssertEqual(st.totalWakeups, UInt64(fired.current))
        XCTAssertEqual(st.totalIdleWakeups, st.totalWakeups)
        XCTAssertEqual(st.totalUnmatchedCalls, 0)
        XCTAssertGreaterThan(st.totalWaitNs, 0)
    }
}

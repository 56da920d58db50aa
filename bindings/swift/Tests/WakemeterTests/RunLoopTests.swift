// RunLoopWakeupObserver on a real RunLoop (swift-corelibs-foundation's on Linux).
#if canImport(CoreFoundation)
import CoreFoundation
import Foundation
import XCTest
@testable import Wakemeter

final class RunLoopTests: XCTestCase {
    /// Runs `body` on a new thread with its own run loop and waits for it.
    private func onRunLoopThread(_ body: @escaping @Sendable () throws -> Void) throws {
        let failure = Locked<Error?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread {
            do { try body() } catch { failure.with { $0 = error } }
            done.signal()
        }.start()
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success, "the run loop thread ended")
        if let error = failure.current { throw error }
    }

    func testTimerWakeupsOfARunLoopAreTimedOutWaits() throws {
        let s = try Sampler.make()
        let probe = try s.loopProbe(name: "runloop")
        let ticks = Locked(0)
        try onRunLoopThread {
            let observer = try RunLoopWakeupObserver(probe: probe)
            // An explicit first fire date: swift-corelibs-foundation's
            // Timer(timeInterval:repeats:block:) fires at once, Darwin's after the interval.
            let timer = Timer(fire: Date().addingTimeInterval(0.01), interval: 0.01, repeats: true) { _ in
                ticks.with { $0 += 1 }
            }
            RunLoop.current.add(timer, forMode: .common)
            let end = Date().addingTimeInterval(10)
            while ticks.current < 10, Date() < end {
                RunLoop.current.run(until: Date().addingTimeInterval(0.05))
            }
            timer.invalidate()
            observer.invalidate()
        }
        XCTAssertGreaterThanOrEqual(ticks.current, 10)
        let st = try probe.stats()
        XCTAssertGreaterThanOrEqual(st.totalWakeups, 5, "\(st)")
        XCTAssertGreaterThan(st.totalTimedOutWakeups, 0, "\(st)")
        XCTAssertEqual(st.totalUnmatchedCalls, 0)
        XCTAssertEqual(try s.sampleNow().loops.map(\.name), ["runloop"])
    }

    func testAWakeUpFromAnotherThreadIsAnEarlyWakeup() throws {
        let s = try Sampler.make()
        let probe = try s.loopProbe(name: "woken")
        let cfLoop = Locked<CFRunLoop?>(nil)
        let waking = Thread {
            // Wakes the run loop (once it is there) until it has seen 3 wakeups.
            let end = Date().addingTimeInterval(10)
            while Date() < end, ((try? probe.stats().totalWakeups) ?? 0) < 3 {
                if let loop = cfLoop.current { CFRunLoopWakeUp(loop) }
                Thread.sleep(forTimeInterval: 0.02)
            }
        }
        waking.start()
        try onRunLoopThread {
            let observer = try RunLoopWakeupObserver(probe: probe)
            // A far timer: the run loop sleeps up to 60 s unless woken.
            let timer = Timer(fire: Date().addingTimeInterval(60), interval: 0, repeats: false) { _ in }
            RunLoop.current.add(timer, forMode: .default)
            cfLoop.with { $0 = CFRunLoopGetCurrent() }
            let end = Date().addingTimeInterval(10)
            while ((try? probe.stats().totalWakeups) ?? 0) < 3, Date() < end {
                _ = RunLoop.current.run(mode: .default, before: Date().addingTimeInterval(0.5))
            }
            timer.invalidate()
            observer.invalidate()
        }
        let st = try probe.stats()
        XCTAssertGreaterThanOrEqual(st.totalWakeups, 3, "\(st)")
        XCTAssertEqual(st.totalEarlyWakeups, st.totalWakeups, "woken long before the timer: \(st)")
        XCTAssertEqual(st.totalTimedOutWakeups, 0)
    }

    func testObservingStopsWhenInvalidated() throws {
        let s = try Sampler.make()
        let probe = try s.loopProbe(name: "stopped")
        try onRunLoopThread {
            let observer = try RunLoopWakeupObserver(probe: probe)
            observer.invalidate()
            let timer = Timer(fire: Date().addingTimeInterval(0.01), interval: 0.01, repeats: true) { _ in }
            RunLoop.current.add(timer, forMode: .common)
            RunLoop.current.run(until: Date().addingTimeInterval(0.1))
            timer.invalidate()
        }
        XCTAssertEqual(try probe.stats().totalWakeups, 0)
    }

    func testTimeoutIsTheTimeToTheNextTimer() {
        XCTAssertEqual(RunLoopWakeupObserver.timeoutNs(nextTimer: 0, now: 10), -1)
        XCTAssertEqual(RunLoopWakeupObserver.timeoutNs(nextTimer: 10.5, now: 10), 500_000_000)
        XCTAssertEqual(RunLoopWakeupObserver.timeoutNs(nextTimer: 9, now: 10), 0) // overdue
        XCTAssertEqual(RunLoopWakeupObserver.timeoutNs(nextTimer: .infinity, now: 10), -1)
    }

    #if os(Linux)
    func testAnotherThreadsRunLoopIsRefusedOnLinux() throws {
        let s = try Sampler.make()
        let probe = try s.loopProbe(name: "elsewhere")
        let other = Locked<RunLoop?>(nil)
        try onRunLoopThread { other.with { $0 = RunLoop.current } }
        let loop = try XCTUnwrap(other.current)
        XCTAssertThrowsError(try RunLoopWakeupObserver(probe: probe, runLoop: loop)) { error in
            guard case .Unsupported = error as? WakemeterError else { return XCTFail("\(error)") }
        }
    }
    #endif
}
#endif

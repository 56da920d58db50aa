// XCTest tests of the Swift bindings; they mirror the Kotlin JVM tests
// (bindings/kotlin/src/test). Build the Rust library first and link it:
//   cargo build -p wakemeter-ffi --release
//   swift test -Xlinker -L../../target/release
import Foundation
import XCTest
@testable import Wakemeter

/// Thresholds that judge a loop after a fraction of a second instead of 10 s.
private let quick: Thresholds = {
    var t = defaultThresholds()
    t.window = 0.4
    t.minWindow = 0.1
    return t
}()

/// The default configuration with some fields changed.
private func config(_ change: (inout SamplerConfig) -> Void) -> SamplerConfig {
    var c = defaultSamplerConfig()
    change(&c)
    return c
}

/// A listener that records what it receives and can fail on purpose.
private final class Recorder: SamplerListener, @unchecked Sendable {
    private let lock = NSLock()
    private var _intervals: [Interval] = []
    private var _findings: [Finding] = []
    private var _onMainThread = false
    let failing: Bool

    init(failing: Bool = false) {
        self.failing = failing
    }

    private func locked<T>(_ body: () -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body()
    }

    var intervals: [Interval] { locked { _intervals } }
    var findings: [Finding] { locked { _findings } }
    var calledOnMainThread: Bool { locked { _onMainThread } }

    func onInterval(interval: Interval) throws {
        locked {
            _intervals.append(interval)
            _onMainThread = _onMainThread || Thread.isMainThread
        }
        if failing {
            throw NSError(domain: "test", code: 1, userInfo: [NSLocalizedDescriptionKey: "boom from Swift"])
        }
    }

    func onFinding(finding: Finding) throws {
        locked { _findings.append(finding) }
    }
}

/// Polls `condition` until it holds or `timeout` passes (generous: a
/// loaded machine is slow, never wrong; only a hang reaches it).
private func eventually(_ timeout: TimeInterval = 120, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while !condition() {
        if Date() > deadline { return false }
        Thread.sleep(forTimeInterval: 0.005)
    }
    return true
}

/// The first value of `stream` that matches, or nil after `seconds`.
private func first<T: Sendable>(
    _ stream: AsyncStream<T>,
    within seconds: TimeInterval,
    where match: @escaping @Sendable (T) -> Bool
) async -> T? {
    let consumer = Task { () -> T? in
        for await value in stream where match(value) {
            return value
        }
        return nil
    }
    let watchdog = Task {
        try? await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
        consumer.cancel()
    }
    defer { watchdog.cancel() }
    return await consumer.value
}

/// Calls `iteration` repeatedly for `seconds`.
private func run(for seconds: TimeInterval, _ iteration: () throws -> Void) rethrows {
    let end = Date().addingTimeInterval(seconds)
    while Date() < end {
        try iteration()
    }
}

final class WakemeterTests: XCTestCase {
    func testDefaultsAreTheCoreDefaults() throws {
        XCTAssertEqual(defaultSamplerConfig().thresholds, defaultThresholds())
        XCTAssertEqual(defaultSamplerConfig().interval, 1)
        XCTAssertEqual(defaultSamplerConfig().target, .selfProcess)
        XCTAssertFalse(wakemeterVersion().isEmpty)
        XCTAssertEqual(timeoutNanoseconds(nil), -1)
        XCTAssertEqual(timeoutNanoseconds(0), 0)
        XCTAssertEqual(timeoutNanoseconds(0.001), 1_000_000)
    }

    func testSampleNowHistoryIntervalsStatsAndReports() throws {
        let s = try Sampler.make(interval: 0.25, history: 3)
        XCTAssertEqual(s.config().interval, 0.25, accuracy: 1e-9)
        XCTAssertGreaterThan(s.system().cpuCount, 0)
        XCTAssertNil(try s.latest())
        for _ in 0..<5 {
            let snap = try s.sampleNow()
            XCTAssertFalse(snap.threads.isEmpty)
            Thread.sleep(forTimeInterval: 0.005)
        }
        XCTAssertEqual(try s.latest()?.seq, 4)
        XCTAssertEqual(try s.snapshots().map(\.seq), [2, 3, 4])
        let last = try XCTUnwrap(try s.latestInterval())
        XCTAssertEqual(last.fromSeq, 3)
        XCTAssertEqual(last.toSeq, 4)
        XCTAssertEqual(try s.intervalOver(window: 60)?.fromSeq, 2)
        let stats = try s.stats()
        XCTAssertEqual(stats.totalSamples, 5)
        XCTAssertEqual(stats.historyLen, 3)
        XCTAssertFalse(stats.running)
        XCTAssertEqual(try s.report().stats.totalSamples, 5)
        let report = try s.report()
        XCTAssertEqual(report.schemaVersion, 2)
        XCTAssertEqual(report.target.pid, UInt32(ProcessInfo.processInfo.processIdentifier))
        XCTAssertEqual(report.config, s.config())
        let json = try s.reportJson()
        for key in ["\"schema_version\"", "\"system\"", "\"stats\"", "\"interval\"", "\"findings\""] {
            XCTAssertTrue(json.contains(key), key)
        }
    }

    func testStartStopAndListenersOnWakemeterThread() throws {
        let s = try Sampler.make(interval: 0.02)
        let recorder = Recorder()
        let id = try s.addListener(listener: recorder)
        try s.start()
        XCTAssertTrue(s.isRunning())
        XCTAssertThrowsError(try s.start()) { error in
            guard case .AlreadyRunning = error as? WakemeterError else { return XCTFail("\(error)") }
        }
        XCTAssertTrue(eventually { recorder.intervals.count >= 3 })
        try s.stop()
        XCTAssertFalse(s.isRunning())
        XCTAssertFalse(recorder.calledOnMainThread)
        let seqs = recorder.intervals.map(\.toSeq)
        XCTAssertEqual(seqs, seqs.sorted())
        XCTAssertEqual(Set(seqs).count, seqs.count)
        XCTAssertTrue(s.removeListener(id: id))
        XCTAssertFalse(s.removeListener(id: id))
    }

    func testThrowingListenerIsCountedAndSamplingGoesOn() throws {
        let s = try Sampler.make(interval: 0.02)
        let bad = Recorder(failing: true)
        let good = Recorder()
        _ = try s.addListener(listener: bad)
        _ = try s.addListener(listener: good)
        try s.start()
        XCTAssertTrue(eventually { good.intervals.count >= 4 })
        try s.stop()
        let stats = s.listenerStats()
        XCTAssertGreaterThanOrEqual(stats.listenerErrors, 3)
        XCTAssertNotNil(stats.lastListenerError)
        XCTAssertNil(try s.stats().lastError)
    }

    func testIntervalStream() async throws {
        let s = try Sampler.make(interval: 0.02)
        try s.start()
        let a = await first(s.intervalStream(), within: 5) { _ in true }
        let b = await first(s.intervalStream(), within: 5) { $0.toSeq > (a?.toSeq ?? 0) }
        try s.stop()
        XCTAssertNotNil(a)
        XCTAssertNotNil(b)
        XCTAssertTrue(eventually { s.listenerStats().listeners == 0 })
    }

    func testManyThreadsAtOnce() throws {
        let s = try Sampler.make(interval: 0.005, history: 50)
        try s.start()
        let failures = NSLock()
        var failed = 0 // guarded by `failures`
        DispatchQueue.concurrentPerform(iterations: 8) { i in
            for k in 0..<40 {
                do {
                    switch (i + k) % 4 {
                    case 0: _ = try s.sampleNow()
                    case 1: _ = try s.latestInterval()
                    case 2: _ = try s.reportJson()
                    default:
                        let id = try s.addListener(listener: Recorder())
                        _ = s.removeListener(id: id)
                    }
                } catch {
                    failures.lock()
                    failed += 1
                    failures.unlock()
                }
            }
        }
        try s.stop()
        XCTAssertEqual(failed, 0)
    }

    func testBadConfigurationThrowsTypedErrors() throws {
        for config in [
            config { $0.interval = 0 },
            config { $0.history = 0 },
            config { $0.history = 10_000_000 },
            config { $0.switchSplitEvery = 0 },
            config { $0.threadName = "a-name-longer-than-15" },
            config { $0.thresholds.busyPollIdleRatio = 1.5 },
        ] {
            XCTAssertThrowsError(try Sampler(config: config)) { error in
                guard case .InvalidConfig = error as? WakemeterError else { return XCTFail("\(error)") }
            }
        }
        XCTAssertThrowsError(try Sampler.make(interval: -1))
        XCTAssertThrowsError(try Sampler(config: config { $0.target = .pid(UInt32(Int32.max)) })) { error in
            guard case .NoSuchProcess = error as? WakemeterError else { return XCTFail("\(error)") }
        }
    }

    func testShutDownSamplerAndItsProbesRefuseCalls() throws {
        let s = try Sampler.make(interval: 0.01)
        let loop = try s.loopProbe(name: "l")
        let nap = try s.sleepProbe(name: "s")
        try s.start()
        s.shutdown()
        XCTAssertTrue(s.isShutDown())
        XCTAssertFalse(s.isRunning())
        XCTAssertThrowsError(try s.sampleNow()) { error in
            guard case .Closed = error as? WakemeterError else { return XCTFail("\(error)") }
        }
        XCTAssertThrowsError(try s.start())
        XCTAssertThrowsError(try s.loopProbe(name: "again"))
        XCTAssertThrowsError(try loop.beforeWait(timeoutNs: -1)) { error in
            guard case .SamplerGone = error as? WakemeterError else { return XCTFail("\(error)") }
        }
        XCTAssertThrowsError(try nap.begin(requestedNs: 1))
    }

    func testProbesRecordWaitsAndSleeps() throws {
        let s = try Sampler.make()
        let loop = try s.loopProbe(name: "queue")
        XCTAssertEqual(try loop.wait(timeout: 0.01) { 1 }, 1)
        XCTAssertEqual(try loop.wait(timeout: 0.001) { Thread.sleep(forTimeInterval: 0.002); return 0 }, 0)
        XCTAssertEqual(try loop.wait(timeout: 0) { 0 }, 0)
        let stats = try loop.stats()
        XCTAssertEqual(stats.name, "queue")
        XCTAssertEqual(stats.totalWakeups, 3)
        XCTAssertEqual(stats.totalIdleWakeups, 2)
        XCTAssertEqual(stats.totalEarlyWakeups, 1)
        XCTAssertEqual(stats.totalTimedOutWakeups, 2)
        XCTAssertEqual(stats.totalZeroTimeoutWaits, 1)
        let nap = try s.sleepProbe(name: "nap")
        try nap.sleep(requestedNs: 500_000)
        XCTAssertEqual(try nap.stats().totalCalls, 1)
        let snap = try s.sampleNow()
        XCTAssertEqual(snap.loops.map(\.id), [loop.id()])
        XCTAssertEqual(snap.sleeps.map(\.name), ["nap"])
    }

    func testIdleLoopHasNoFindingsSpinningLoopDoes() throws {
        let s = try Sampler(config: config { $0.interval = 0.05; $0.thresholds = quick })
        let idle = try s.loopProbe(name: "idle")
        let spin = try s.loopProbe(name: "spin")
        try s.start()
        try run(for: 0.7) { _ = try idle.wait(timeout: 0.1) { Thread.sleep(forTimeInterval: 0.1); return 0 } }
        XCTAssertFalse(try s.findings().contains { if case .loop = $0.subject { return true } else { return false } })
        try run(for: 0.7) { _ = try spin.wait(timeout: 0) { 0 } }
        try s.stop()
        let busy = try s.findings().filter { $0.kind == .busyPoller }
        XCTAssertEqual(busy.count, 1)
        guard case .loop(let name, _) = busy.first?.subject else { return XCTFail("\(busy)") }
        XCTAssertEqual(name, "spin")
        XCTAssertFalse(busy[0].summary.isEmpty)
        XCTAssertFalse(busy[0].advice.isEmpty)
    }

    func testFindingStreamAnnouncesABusyPoller() async throws {
        let s = try Sampler(config: config { $0.interval = 0.05; $0.thresholds = quick })
        let spin = try s.loopProbe(name: "spin")
        try s.start()
        let spinner = Thread {
            try? run(for: 1.5) { _ = try spin.wait(timeout: 0) { 0 } }
        }
        spinner.start()
        let found = await first(s.findingStream(), within: 10) { $0.kind == .busyPoller }
        try s.stop()
        XCTAssertEqual(found?.kind, .busyPoller)
        XCTAssertGreaterThanOrEqual(s.listenerStats().findingsDelivered, 1)
    }

    #if canImport(Darwin)
    func testRunLoopObserverReportsTimerWakeups() throws {
        let s = try Sampler.make()
        let probe = try s.loopProbe(name: "main-runloop")
        let observer = RunLoopWakeupObserver(probe: probe)
        let timer = Timer.scheduledTimer(withTimeInterval: 0.01, repeats: true) { _ in }
        RunLoop.current.run(until: Date().addingTimeInterval(0.3))
        timer.invalidate()
        observer.invalidate()
        let stats = try probe.stats()
        XCTAssertGreaterThanOrEqual(stats.totalWakeups, 5)
        XCTAssertGreaterThan(stats.totalTimedOutWakeups, 0)
        XCTAssertEqual(RunLoopWakeupObserver.timeoutNs(nextTimer: 0, now: 10), -1)
        XCTAssertEqual(RunLoopWakeupObserver.timeoutNs(nextTimer: 10.5, now: 10), 500_000_000)
    }
    #endif
}

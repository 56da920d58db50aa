// The sampler's life cycle, listeners, threads and errors (Kotlin: SamplerTest).
import Foundation
import XCTest
@testable import Wakemeter

final class SamplerTests: XCTestCase {
    func testDefaultConfigIsTheLibrarysOneSetOfDefaults() throws {
        let c = defaultSamplerConfig()
        XCTAssertEqual(c.interval, 1)
        XCTAssertEqual(c.history, 300)
        XCTAssertEqual(c.target, .selfProcess)
        XCTAssertEqual(c.switchSplitEvery, 10)
        XCTAssertEqual(c.threadName, "wakemeter")
        XCTAssertEqual(c.reportThreads, 64)
        XCTAssertEqual(c.thresholds, defaultThresholds())
        XCTAssertEqual(try Sampler.make().config(), c)
        XCTAssertFalse(wakemeterVersion().isEmpty)
    }

    func testMakeConfiguresTheSampler() throws {
        let s = try Sampler.make(interval: 0.25, history: 42, thresholds: quick)
        XCTAssertEqual(s.config().interval, 0.25, accuracy: 1e-9)
        XCTAssertEqual(s.config().history, 42)
        XCTAssertEqual(s.thresholds(), quick)
        XCTAssertGreaterThanOrEqual(s.system().cpuCount, 1)
        XCTAssertGreaterThan(s.system().totalMemoryBytes, 0)
        #if os(Linux)
        XCTAssertEqual(s.system().os, "linux")
        #endif
    }

    func testSampleNowSeesTheCallingThread() throws {
        let s = try Sampler.make()
        let snap = try s.sampleNow()
        XCTAssertEqual(snap.seq, 0)
        XCTAssertEqual(UInt64(snap.threads.count), UInt64(snap.process.threadCount))
        XCTAssertGreaterThan(snap.process.rssBytes, 0)
        XCTAssertNil(snap.kernel)
        XCTAssertTrue(snap.warnings.isEmpty, "\(snap.warnings)")
        #if os(Linux)
        let me = try XCTUnwrap(snap.threads.first { $0.tid == currentTid() }, "calling thread in the snapshot")
        XCTAssertEqual(me.cpuTimeSource, .threadClock)
        XCTAssertGreaterThan(me.totalCpuTimeNs, 0)
        #endif
    }

    func testHistoryIntervalsStatsAndReports() throws {
        let s = try Sampler.make(history: 3)
        XCTAssertNil(try s.latest())
        XCTAssertNil(try s.latestInterval())
        XCTAssertNil(try s.intervalOver(window: 1))
        for _ in 0..<5 {
            _ = try s.sampleNow()
            Thread.sleep(forTimeInterval: 0.005)
        }
        XCTAssertEqual(try s.latest()?.seq, 4)
        XCTAssertEqual(try s.snapshots().map(\.seq), [2, 3, 4])
        let last = try XCTUnwrap(try s.latestInterval())
        XCTAssertEqual(last.fromSeq, 3)
        XCTAssertEqual(last.toSeq, 4)
        XCTAssertGreaterThanOrEqual(last.durationNs, 5_000_000)
        XCTAssertFalse(last.threads.isEmpty)
        XCTAssertEqual(try s.intervalOver(window: 60)?.fromSeq, 2)
        let stats = try s.stats()
        XCTAssertEqual(stats.totalSamples, 5)
        XCTAssertEqual(stats.historyLen, 3)
        XCTAssertFalse(stats.running)
        XCTAssertNil(stats.lastError)
        let report = try s.report()
        XCTAssertEqual(report.interval?.fromSeq, 2)
        XCTAssertEqual(report.stats.totalSamples, 5)
        XCTAssertTrue(report.findings.isEmpty)
        XCTAssertEqual(report.schemaVersion, 2)
        XCTAssertEqual(report.threadGroups.reduce(0) { $0 + $1.threads }, report.interval?.process.threadCount)
        XCTAssertEqual(report.threadsFolded, 0)
        XCTAssertEqual(report.libraryVersion, wakemeterVersion())
        XCTAssertEqual(report.target.pid, UInt32(ProcessInfo.processInfo.processIdentifier))
        XCTAssertNotNil(report.target.startTimeUnixNs)
        XCTAssertEqual(report.config, s.config())
    }

    func testBackgroundSamplingStartsRefusesASecondStartStopsAndResumes() throws {
        let s = try Sampler.make(interval: 0.02)
        XCTAssertFalse(s.isRunning())
        try s.start()
        XCTAssertTrue(s.isRunning())
        assertThrows(isAlreadyRunning, try s.start())
        XCTAssertTrue(try eventually { try s.stats().totalSamples >= 3 })
        XCTAssertTrue(try s.stats().running)
        try s.stop()
        try s.stop() // idempotent
        XCTAssertFalse(s.isRunning())
        let taken = try s.stats().totalSamples
        try s.start()
        XCTAssertTrue(try eventually { try s.stats().totalSamples > taken })
        try s.stop()
        XCTAssertFalse(s.isRunning())
    }

    func testListenerIsCalledFromTheWakemeterThreadInOrder() throws {
        let s = try Sampler.make(interval: 0.02)
        let recorder = Recorder()
        let id = try s.addListener(listener: recorder)
        try s.start()
        XCTAssertTrue(eventually { recorder.intervals.count >= 3 })
        try s.stop()
        #if os(Linux)
        XCTAssertEqual(recorder.threadNames, ["wakemeter-cb"])
        #endif
        let seqs = recorder.intervals.map(\.toSeq)
        XCTAssertEqual(seqs, Array(Set(seqs)).sorted(), "each interval once, in order")
        XCTAssertTrue(recorder.intervals.allSatisfy { $0.durationNs > 0 })
        XCTAssertTrue(s.removeListener(id: id))
        XCTAssertFalse(s.removeListener(id: id))
        let ls = s.listenerStats()
        XCTAssertEqual(ls.listeners, 0)
        XCTAssertGreaterThanOrEqual(ls.intervalsDelivered, 3)
        XCTAssertEqual(ls.listenerErrors, 0)
    }

    func testAThrowingListenerIsCountedAndSamplingGoesOn() throws {
        let s = try Sampler.make(interval: 0.02)
        // Alternately a typed ListenerError and any other Swift error.
        let bad = Recorder(fail: { n in
            n % 2 == 0
                ? ListenerError.Failed(reason: "typed failure") as Error
                : NSError(domain: "test", code: 1, userInfo: [NSLocalizedDescriptionKey: "boom from Swift"]) as Error
        })
        let good = Recorder()
        _ = try s.addListener(listener: bad)
        _ = try s.addListener(listener: good)
        try s.start()
        XCTAssertTrue(eventually { good.intervals.count >= 4 }, "the other listener kept receiving")
        try s.stop()
        let ls = s.listenerStats()
        // Every call of the failing listener threw, and each is counted.
        XCTAssertEqual(ls.listenerErrors, UInt64(bad.intervals.count))
        XCTAssertGreaterThanOrEqual(ls.listenerErrors, 3)
        let last = try XCTUnwrap(ls.lastListenerError)
        XCTAssertTrue(last.contains("typed failure") || last.contains("boom from Swift"), last)
        XCTAssertNil(try s.stats().lastError)
        XCTAssertGreaterThanOrEqual(try s.stats().totalSamples, 4)
    }

    func testManySwiftThreadsUseOneSamplerAtOnce() throws {
        let s = try Sampler.make(interval: 0.005, history: 50)
        try s.start()
        let failures = Locked<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { i in
            for k in 0..<40 {
                do {
                    switch (i + k) % 5 {
                    case 0:
                        if try s.sampleNow().threads.isEmpty { failures.with { $0.append("no threads") } }
                    case 1: _ = try s.latestInterval()
                    case 2: _ = try s.stats()
                    case 3: _ = try s.reportJson()
                    default:
                        let id = try s.addListener(listener: Recorder())
                        if !s.removeListener(id: id) { failures.with { $0.append("listener \(id) not removed") } }
                    }
                } catch {
                    failures.with { $0.append("\(error)") }
                }
            }
        }
        try s.stop()
        XCTAssertEqual(failures.current, [])
        let seqs = try s.snapshots().map(\.seq)
        XCTAssertEqual(seqs, Array(Set(seqs)).sorted())
        XCTAssertEqual(s.listenerStats().listeners, 0)
    }

    func testBadConfigurationThrowsTypedErrors() throws {
        func message(_ change: (inout SamplerConfig) -> Void) -> String {
            assertThrows(isInvalidConfig, try Sampler(config: config(change)))
        }
        XCTAssertTrue(message { $0.interval = 0 }.contains("interval must be greater than zero"))
        XCTAssertTrue(message { $0.history = 0 }.contains("history"))
        XCTAssertTrue(message { $0.history = 10_000_000 }.contains("history must be at most"))
        XCTAssertTrue(message { $0.switchSplitEvery = 0 }.contains("switch_split_every"))
        XCTAssertTrue(message { $0.threadName = "a-name-longer-than-15" }.contains("thread_name"))
        XCTAssertTrue(message { $0.threadName = "" }.contains("thread_name"))
        // Sampler.make maps what is not a positive finite interval to zero.
        for interval in [-1, .nan, .infinity, 0] as [TimeInterval] {
            assertThrows(isInvalidConfig, try Sampler.make(interval: interval))
        }
        // Negative or NaN numbers in thresholds: a typed error, not uniffi's fatalError.
        for change in [{ $0.window = -1 }, { $0.cpuMinWindow = .nan }, { $0.wakeupsWindow = .infinity }, { $0.busyPollIdleRatio = -0.5 }] as [(inout Thresholds) -> Void] {
            var t = defaultThresholds()
            change(&t)
            let text = assertThrows(isInvalidConfig, try Sampler.make(thresholds: t))
            XCTAssertTrue(text.contains("thresholds."), text)
        }
        assertThrows(isNoSuchProcess, try Sampler(config: config { $0.target = .pid(UInt32(Int32.max)) }))
    }

    func testAShutDownSamplerRefusesEveryCallWithClosed() throws {
        let s = try Sampler.make(interval: 0.01)
        _ = try s.addListener(listener: Recorder())
        try s.start()
        s.shutdown()
        s.shutdown() // idempotent
        XCTAssertTrue(s.isShutDown())
        XCTAssertFalse(s.isRunning())
        XCTAssertEqual(s.listenerStats().listeners, 0)
        assertThrows(isClosed, try s.start())
        assertThrows(isClosed, try s.stop())
        assertThrows(isClosed, try s.sampleNow())
        assertThrows(isClosed, try s.latest())
        assertThrows(isClosed, try s.snapshots())
        assertThrows(isClosed, try s.latestInterval())
        assertThrows(isClosed, try s.intervalOver(window: 0.001))
        assertThrows(isClosed, try s.stats())
        assertThrows(isClosed, try s.report())
        assertThrows(isClosed, try s.reportJson())
        assertThrows(isClosed, try s.findings())
        assertThrows(isClosed, try s.loopProbe(name: "again"))
        assertThrows(isClosed, try s.sleepProbe(name: "again"))
        let message = assertThrows(isClosed, try s.addListener(listener: Recorder()))
        XCTAssertTrue(message.contains("the sampler is shut down"), message)
        // What does not throw still answers.
        XCTAssertEqual(s.config().interval, 0.01, accuracy: 1e-9)
        XCTAssertFalse(s.removeListener(id: 1))
    }

    func testStoppingFromInsideAListenerDoesNotDeadlock() throws {
        let s = try Sampler.make(interval: 0.01)
        let stopped = Locked(0)
        final class Stopper: SamplerListener {
            let sampler: Sampler
            let stopped: Locked<Int>
            init(_ sampler: Sampler, _ stopped: Locked<Int>) {
                self.sampler = sampler
                self.stopped = stopped
            }
            func onInterval(interval: Interval) throws {
                try sampler.stop()
                stopped.with { $0 += 1 }
            }
            func onFinding(finding: Finding) throws {}
        }
        let id = try s.addListener(listener: Stopper(s, stopped))
        try s.start()
        XCTAssertTrue(eventually { stopped.current >= 1 })
        XCTAssertTrue(eventually { !s.isRunning() })
        _ = s.removeListener(id: id) // the listener holds the sampler: break the cycle
    }

    func testReleasingARunningSamplerEndsItsThreads() throws {
        #if os(Linux)
        // A thread name no other test uses, to find this sampler's threads.
        var s: Sampler? = try Sampler(config: config { $0.interval = 0.01; $0.threadName = "wm-release" })
        _ = try s?.addListener(listener: Recorder())
        try s?.start()
        XCTAssertTrue(eventually { processThreadNames().contains("wm-release") })
        s = nil // deinit frees the Rust object, which stops and joins its threads
        XCTAssertTrue(eventually { !processThreadNames().contains("wm-release") }, "\(processThreadNames())")
        #else
        throw XCTSkip("reads thread names from /proc")
        #endif
    }
}

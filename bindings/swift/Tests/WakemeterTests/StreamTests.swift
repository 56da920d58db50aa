// The AsyncStreams of intervals and findings (Kotlin: the Flow tests).
import Foundation
import XCTest
@testable import Wakemeter

final class StreamTests: XCTestCase {
    func testIntervalStreamDeliversBackgroundIntervalsInOrder() async throws {
        let s = try Sampler.make(interval: 0.02)
        try s.start()
        let got = await collect(s.intervalStream(), count: 3, within: 10)
        try s.stop()
        XCTAssertEqual(got.count, 3)
        XCTAssertTrue(zip(got, got.dropFirst()).allSatisfy { $0.toSeq < $1.toSeq }, "\(got.map(\.toSeq))")
        let removed = await waitUntil { s.listenerStats().listeners == 0 }
        XCTAssertTrue(removed, "ending the iteration removes the stream's listener")
    }

    func testCancellingAStreamEndsItsConsumerItsListenerAndTheListenerThread() async throws {
        #if os(Linux)
        let dispatchersBefore = processThreadNames().filter { $0 == "wakemeter-cb" }.count
        #endif
        let s = try Sampler.make(interval: 0.01)
        try s.start()
        let received = Locked(0)
        let stream = s.intervalStream()
        let consumer = Task { () -> Int in
            for await _ in stream { received.with { $0 += 1 } }
            return received.current // reached only when the stream ends
        }
        let flowing = await waitUntil { received.current >= 2 }
        XCTAssertTrue(flowing)
        XCTAssertEqual(s.listenerStats().listeners, 1)
        consumer.cancel()
        let total = await consumer.value // returns: cancellation ended the iteration
        XCTAssertGreaterThanOrEqual(total, 2)
        let removed = await waitUntil { s.listenerStats().listeners == 0 }
        XCTAssertTrue(removed, "cancelling removes the stream's listener")
        // Nothing is delivered any more, while sampling goes on.
        let delivered = s.listenerStats().intervalsDelivered
        let samples = try s.stats().totalSamples
        let sampling = try await waitUntil { try s.stats().totalSamples >= samples + 5 }
        XCTAssertTrue(sampling)
        XCTAssertEqual(s.listenerStats().intervalsDelivered, delivered)
        try s.stop()
        #if os(Linux)
        // The thread that called the listener is gone once sampling stops.
        let ended = await waitUntil { processThreadNames().filter { $0 == "wakemeter-cb" }.count == dispatchersBefore }
        XCTAssertTrue(ended, "\(processThreadNames())")
        #endif
    }

    func testFindingStreamAnnouncesABusyPoller() async throws {
        let s = try Sampler(config: config { $0.interval = 0.05; $0.thresholds = quick })
        let spin = try s.loopProbe(name: "spin")
        try s.start()
        let stopSpinning = startSpinning(spin)
        // Generous bound: on a loaded machine the spinning thread may need
        // several windows to get the CPU long enough to be judged.
        let found = await first(s.findingStream(), within: 30) { $0.kind == .busyPoller }
        let recent = try s.intervalOver(window: 5) // the last 5 s, for a rate that does not hang on one short window
        try s.stop()
        stopSpinning()
        let finding = try XCTUnwrap(found, "a busy poller within 30 s")
        guard case .loop(let name, _) = finding.subject else { return XCTFail("\(finding.subject)") }
        XCTAssertEqual(name, "spin")
        XCTAssertGreaterThanOrEqual(s.listenerStats().findingsDelivered, 1)
        XCTAssertTrue(recent?.loops.contains { $0.name == "spin" && $0.wakeupsPerSec > 1000 } ?? false, "\(String(describing: recent?.loops))")
        XCTAssertNil(try s.stats().lastError)
        XCTAssertFalse(s.isRunning())
    }

    func testAStreamOfAShutDownSamplerEndsAtOnce() async throws {
        let s = try Sampler.make()
        s.shutdown()
        var count = 0
        for await _ in s.intervalStream() { count += 1 }
        for await _ in s.findingStream() { count += 1 }
        XCTAssertEqual(count, 0)
    }

    func testTwoStreamsEachGetEveryInterval() async throws {
        let s = try Sampler.make(interval: 0.02)
        try s.start()
        async let a = collect(s.intervalStream(), count: 3, within: 10)
        async let b = collect(s.intervalStream(), count: 3, within: 10)
        let (first, second) = await (a, b)
        try s.stop()
        XCTAssertEqual(first.count, 3)
        XCTAssertEqual(second.count, 3)
        let removed = await waitUntil { s.listenerStats().listeners == 0 }
        XCTAssertTrue(removed)
    }
}

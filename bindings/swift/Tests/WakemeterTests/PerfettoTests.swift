// Perfetto traces through the Swift wrapper (Kotlin: PerfettoTest).
import Foundation
import XCTest
@testable import Wakemeter

final class PerfettoTests: XCTestCase {
    /// `NAME.perfetto-trace` in a directory of this test process's own.
    private func traceFile(_ name: String) throws -> URL {
        let dir = FileManager.default.temporaryDirectory
            .appendingPathComponent("wakemeter-perfetto-\(ProcessInfo.processInfo.processIdentifier)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir.appendingPathComponent("\(name).perfetto-trace")
    }

    func testTracingWritesOneIntervalPerSampleToACompleteFile() throws {
        let url = try traceFile("app")
        // No background sampling (not started): the test's samples are the only ones.
        let s = try Sampler.make(interval: 0.05)
        _ = try s.sampleNow()
        let trace = try s.perfettoTrace(to: url)
        for n in 1...3 {
            _ = try s.sampleNow()
            // The trace's writer thread, woken by each sample, takes what was
            // stored since it last ran as one interval: on a busy machine two
            // quick samples can become one. Wait until it has taken this
            // sample (a hang guard of a minute).
            let deadline = Date().addingTimeInterval(60)
            while trace.status().intervals < UInt64(n) && Date() < deadline {
                Thread.sleep(forTimeInterval: 0.001)
            }
        }
        let status = trace.finish()
        XCTAssertEqual(status.intervals, 3)
        XCTAssertNil(status.ended)
        XCTAssertEqual(status.path, url.path)
        let bytes = try Data(contentsOf: url)
        XCTAssertEqual(UInt64(bytes.count), status.bytesWritten)
        // Every record of a trace file is a Trace.packet (field 1, length-delimited).
        XCTAssertEqual(bytes.first, 0x0a)
    }

    func testTracingABlockWritesTheSamplesItTakesAndFinishesTheFile() throws {
        let url = try traceFile("block")
        let s = try Sampler.make(interval: 0.05)
        _ = try s.sampleNow()
        var taken = 0
        let status = try s.tracing(to: url) {
            for _ in 1...2 {
                _ = try s.sampleNow()
                taken += 1
            }
        }
        XCTAssertEqual(taken, 2)
        // Finishing writes what the writer thread had not taken yet: the
        // block's two samples, as one interval or two.
        XCTAssertTrue((1...2).contains(status.intervals), "\(status.intervals) intervals")
        XCTAssertNil(status.ended)
        XCTAssertEqual(status.path, url.path)
        let bytes = try Data(contentsOf: url)
        XCTAssertEqual(UInt64(bytes.count), status.bytesWritten)
        XCTAssertEqual(bytes.first, 0x0a)
    }

    func testAnUnwritablePathIsATypedError() throws {
        let s = try Sampler.make()
        XCTAssertThrowsError(try s.perfettoTrace(to: URL(fileURLWithPath: "/nonexistent-dir/app.perfetto-trace"))) { e in
            guard case WakemeterError.Unwritable(message: let message) = e else {
                return XCTFail("\(e)")
            }
            XCTAssertTrue(message.contains("nonexistent-dir"), message)
        }
    }
}

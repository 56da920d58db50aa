// The report seen from Swift is the Rust report: same schema version, same
// field names (compared with the example the Rust tests keep in
// crates/sampler/tests/data).
import Foundation
import XCTest
@testable import Wakemeter

/// Every key path of a JSON document ("a.b", arrays as "[]").
private func keyPaths(_ value: Any, _ prefix: String = "", into paths: inout Set<String>) {
    if let object = value as? [String: Any] {
        for (key, child) in object {
            paths.insert(prefix + "." + key)
            keyPaths(child, prefix + "." + key, into: &paths)
        }
    } else if let array = value as? [Any] {
        for child in array {
            keyPaths(child, prefix + "[]", into: &paths)
        }
    }
}

/// `schemaVersion` → `schema_version`.
private func snakeCase(_ name: String) -> String {
    name.reduce(into: "") { out, c in
        if c.isUppercase {
            out += "_" + c.lowercased()
        } else {
            out.append(c)
        }
    }
}

final class ReportTests: XCTestCase {
    /// A report with the records the Rust example has: a spinning loop, a
    /// sleep site, findings (as crates/sampler/tests/report_schema.rs makes it).
    private func liveReport() throws -> (Report, [String: Any]) {
        var thresholds = defaultThresholds()
        thresholds.window = 0.2
        thresholds.minWindow = 0.02
        thresholds.busyPollWakeupsPerSec = 100
        let s = try Sampler.make(thresholds: thresholds)
        let spin = try s.loopProbe(name: "spin")
        let nap = try s.sleepProbe(name: "nap")
        for _ in 0..<5 {
            for _ in 0..<2000 { _ = try spin.wait(timeout: 0) { 0 } }
            try nap.sleep(requestedNs: 200_000)
            Thread.sleep(forTimeInterval: 0.01)
            _ = try s.sampleNow()
        }
        let report = try s.report()
        let json = try JSONSerialization.jsonObject(with: Data(try s.reportJson().utf8))
        return (report, try XCTUnwrap(json as? [String: Any]))
    }

    private func rustExample(version: UInt32) throws -> [String: Any] {
        let root = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent() // WakemeterTests
            .deletingLastPathComponent() // Tests
            .deletingLastPathComponent() // swift
            .deletingLastPathComponent() // bindings
            .deletingLastPathComponent()
        let url = root.appendingPathComponent("crates/sampler/tests/data/report-v\(version).json")
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: url))
        return try XCTUnwrap(json as? [String: Any], url.path)
    }

    func testReportJsonHasTheRustReportsSchemaVersionAndFieldNames() throws {
        let (report, json) = try liveReport()
        let example = try rustExample(version: report.schemaVersion)
        XCTAssertEqual(json["schema_version"] as? Int, Int(report.schemaVersion))
        XCTAssertEqual(example["schema_version"] as? Int, Int(report.schemaVersion))
        XCTAssertEqual(Set(json.keys), Set(example.keys))
        // Records present in both have the same fields.
        for record in ["target", "config", "system", "stats", "interval"] {
            let ours = try XCTUnwrap(json[record] as? [String: Any], record)
            let rust = try XCTUnwrap(example[record] as? [String: Any], record)
            XCTAssertEqual(Set(ours.keys), Set(rust.keys), record)
        }
        // And every field anywhere in ours is a field of the Rust example.
        var ourPaths = Set<String>()
        var rustPaths = Set<String>()
        keyPaths(json, into: &ourPaths)
        keyPaths(example, into: &rustPaths)
        XCTAssertEqual(ourPaths.subtracting(rustPaths).sorted(), [])
        XCTAssertFalse(report.findings.isEmpty, "the spinning loop is found")
        XCTAssertFalse(try XCTUnwrap(report.interval).loops.isEmpty)
    }

    func testTheSwiftReportRecordHasTheJsonFieldsAndValues() throws {
        let (report, json) = try liveReport()
        // The generated record's properties are the JSON fields, camelCased.
        let properties = Set(Mirror(reflecting: report).children.compactMap(\.label).map(snakeCase))
        XCTAssertEqual(properties, Set(json.keys))
        let stats = try XCTUnwrap(json["stats"] as? [String: Any])
        XCTAssertEqual((stats["total_samples"] as? NSNumber)?.uint64Value, report.stats.totalSamples)
        let target = try XCTUnwrap(json["target"] as? [String: Any])
        XCTAssertEqual((target["pid"] as? NSNumber)?.uint32Value, report.target.pid)
        XCTAssertEqual(target["name"] as? String, report.target.name)
        let findings = try XCTUnwrap(json["findings"] as? [[String: Any]])
        XCTAssertEqual(findings.count, report.findings.count)
        XCTAssertEqual(findings.compactMap { $0["summary"] as? String }, report.findings.map(\.summary))
        let interval = try XCTUnwrap((json["config"] as? [String: Any])?["interval"] as? [String: Any])
        let seconds = ((interval["secs"] as? NSNumber)?.doubleValue ?? -1) + ((interval["nanos"] as? NSNumber)?.doubleValue ?? -1) / 1e9
        XCTAssertEqual(seconds, report.config.interval, accuracy: 1e-9)
    }
}

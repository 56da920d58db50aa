// swift-tools-version:6.0
// wakemeter for Swift, added by URL:
//   .package(url: "https://github.com/<owner>/wakemeter", from: "0.1.0")
// SwiftPM reads the manifest at the repository root; the sources live in
// bindings/swift: the uniffi-generated bindings (Sources/Wakemeter/Generated,
// never edited by hand), a small idiomatic layer, and the C module of the
// Rust library (WakemeterFFI).
//
// Tools version 6.0: Swift 6 language mode, complete strict-concurrency
// checking. scripts/swift-test.sh also makes warnings errors.
//
// WakemeterFFI is the generated header plus a module map that links
// `wakemeter_ffi`; the linker must find the library: on Linux build it
// (`cargo build -p wakemeter-ffi --release`) and pass its directory
// (`swift test -Xlinker -Ltarget/release`). A release of the package for
// iOS/macOS apps sets `releaseFramework` (scripts/xcframework.sh prints both
// values), so apps get the prebuilt static library as an XCFramework.
import PackageDescription

/// The XCFramework of a release (URL of the zip, `swift package
/// compute-checksum` of it), or nil to link a locally built library.
let releaseFramework: (url: String, checksum: String)? = nil

let ffi: Target = releaseFramework.map {
    .binaryTarget(name: "WakemeterFFI", url: $0.url, checksum: $0.checksum)
} ?? .systemLibrary(name: "WakemeterFFI", path: "bindings/swift/Sources/WakemeterFFI")

let package = Package(
    name: "Wakemeter",
    platforms: [.macOS(.v12), .iOS(.v15)],
    products: [
        .library(name: "Wakemeter", targets: ["Wakemeter"]),
    ],
    targets: [
        ffi,
        .target(name: "Wakemeter", dependencies: ["WakemeterFFI"], path: "bindings/swift/Sources/Wakemeter"),
        .testTarget(name: "WakemeterTests", dependencies: ["Wakemeter"], path: "bindings/swift/Tests/WakemeterTests"),
    ]
)

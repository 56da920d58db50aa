// swift-tools-version:5.9
// wakemeter for Swift: the uniffi-generated bindings (Sources/Wakemeter/Generated),
// a small idiomatic layer, and the C module of the Rust library.
//
// The Rust library is linked as `wakemeter_ffi`: build it first
// (`cargo build -p wakemeter-ffi --release`) and pass its directory to the
// linker, e.g. `swift test -Xlinker -L../../target/release`. Apps ship an
// XCFramework of the static library instead (see README.md).
import PackageDescription

let package = Package(
    name: "Wakemeter",
    platforms: [.macOS(.v12), .iOS(.v15)],
    products: [
        .library(name: "Wakemeter", targets: ["Wakemeter"]),
    ],
    targets: [
        // The generated C header and a module map that links wakemeter_ffi.
        .systemLibrary(name: "WakemeterFFI", path: "Sources/WakemeterFFI"),
        .target(name: "Wakemeter", dependencies: ["WakemeterFFI"], path: "Sources/Wakemeter"),
        .testTarget(name: "WakemeterTests", dependencies: ["Wakemeter"], path: "Tests/WakemeterTests"),
    ]
)

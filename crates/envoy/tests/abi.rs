//! The module's declarations against the facts: the hooks the built
//! `libwakemeter_envoy.so` exports, and (given an Envoy binary) the
//! callbacks that Envoy exports.
#![cfg(target_os = "linux")]

use std::collections::HashSet;
use std::path::PathBuf;

use object::{Object, ObjectSymbol};
use wakemeter_envoy::abi::{CALLBACK_NAMES, HOOK_NAMES, SCHEDULER_DELETE};

/// Defined dynamic symbols of the ELF file at `path`.
fn dynamic_exports(path: &PathBuf) -> HashSet<String> {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let file =
        object::File::parse(&*data).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()));
    file.dynamic_symbols()
        .filter(|s| !s.is_undefined())
        .filter_map(|s| s.name().ok().map(str::to_owned))
        .collect()
}

/// The cdylib cargo built beside this test: `target/<profile>/deps/`,
/// where `cargo test` leaves it, or `target/<profile>/`, where `cargo
/// build` copies it.
fn built_module() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("target/<profile>/deps/<test>");
    let in_deps = deps.join("libwakemeter_envoy.so");
    if in_deps.exists() {
        return in_deps;
    }
    deps.parent()
        .expect("target/<profile>/deps")
        .join("libwakemeter_envoy.so")
}

#[test]
fn the_module_exports_every_hook_envoy_demands() {
    let lib = built_module();
    assert!(lib.exists(), "{} not built", lib.display());
    let exports = dynamic_exports(&lib);
    for hook in HOOK_NAMES {
        assert!(
            exports.contains(hook),
            "{} does not export {hook}",
            lib.display()
        );
    }
    // And no callback is defined by the module itself: they are Envoy's.
    assert!(
        !exports
            .iter()
            .any(|s| s.starts_with("envoy_dynamic_module_callback_")),
        "the module must not define Envoy's callbacks"
    );
}

#[test]
fn envoy_exports_every_callback_the_module_calls() {
    let Some(bin) = std::env::var_os("WAKEMETER_ENVOY_BIN").map(PathBuf::from) else {
        // scripts/envoy-test.sh sets it after installing Envoy; without
        // it there is nothing to check against (counted there, not here).
        eprintln!("SKIPPED: WAKEMETER_ENVOY_BIN not set (scripts/envoy-test.sh sets it)");
        return;
    };
    let exports = dynamic_exports(&bin);
    for name in CALLBACK_NAMES.iter().chain([&SCHEDULER_DELETE]) {
        assert!(
            exports.contains(*name),
            "{} does not export {name}",
            bin.display()
        );
    }
}

#[test]
fn outside_envoy_the_callbacks_do_not_resolve() {
    // This test process is not Envoy: resolving must fail with a name,
    // never crash, so a module loaded elsewhere refuses cleanly.
    let err = wakemeter_envoy::abi::Callbacks::get().expect_err("no Envoy here");
    assert!(err.contains("envoy_dynamic_module_callback_"), "{err}");
}

#[test]
fn envoy_looks_up_no_bootstrap_hook_the_module_lacks() {
    let Some(bin) = std::env::var_os("WAKEMETER_ENVOY_BIN").map(PathBuf::from) else {
        eprintln!("SKIPPED: WAKEMETER_ENVOY_BIN not set (scripts/envoy-test.sh sets it)");
        return;
    };
    // Envoy finds each hook with dlsym by a name held in its binary (the
    // literals sit back to back, without separators): every occurrence of
    // the bootstrap prefix must begin one of the module's hook names, and
    // each of those must occur.
    let data = std::fs::read(&bin).unwrap_or_else(|e| panic!("read {}: {e}", bin.display()));
    let prefix = b"envoy_dynamic_module_on_bootstrap_extension_";
    let mut named: HashSet<&str> = HashSet::new();
    for at in data
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == prefix[0])
        .map(|(i, _)| i)
    {
        let rest = &data[at..];
        if !rest.starts_with(prefix) {
            continue;
        }
        let hook = HOOK_NAMES.iter().find(|h| rest.starts_with(h.as_bytes()));
        assert!(
            hook.is_some(),
            "Envoy names a bootstrap hook the module lacks: {}",
            String::from_utf8_lossy(&rest[..rest.len().min(100)])
        );
        named.extend(hook.copied());
    }
    for hook in HOOK_NAMES
        .iter()
        .filter(|h| h.starts_with("envoy_dynamic_module_on_bootstrap_"))
    {
        assert!(named.contains(hook), "Envoy never names {hook}");
    }
}

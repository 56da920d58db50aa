//! `include/wakemeter.h` must match what cbindgen generates from the
//! source: this test fails when it is stale. Regenerate it with
//! `WAKEMETER_BLESS=1 cargo test -p wakemeter-capi --test header`.

use std::path::PathBuf;

#[test]
fn header_is_up_to_date() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("crates/capi/cbindgen.toml parses");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("the header is UTF-8");
    let path = crate_dir.join("../../include/wakemeter.h");
    if std::env::var_os("WAKEMETER_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("include/wakemeter.h is writable");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/wakemeter.h is stale (or missing): regenerate it with \
         `WAKEMETER_BLESS=1 cargo test -p wakemeter-capi --test header` and commit it"
    );
}

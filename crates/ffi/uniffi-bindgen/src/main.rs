//! `uniffi-bindgen` pinned to the workspace's uniffi version, so generated
//! bindings always match the scaffolding compiled into `wakemeter_ffi`.

fn main() {
    uniffi::uniffi_bindgen_main()
}

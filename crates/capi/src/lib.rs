//! The C API of wakemeter, for C and C++ hosts (libevent, Envoy).
//!
//! The header is `include/wakemeter.h`, generated from this file by
//! cbindgen (`WAKEMETER_BLESS=1 cargo test -p wakemeter-capi --test header`
//! rewrites it; the same test fails when it is stale). Link with
//! `-lwakemeter` (`pkg-config --cflags --libs wakemeter`).
//!
//! # Rules of the API
//!
//! - Every function returns a [`wm_status`] (except [`wm_version`],
//!   [`wm_last_error`] and [`wm_status_str`]). On failure,
//!   [`wm_last_error`] gives a message for this thread.
//! - Handles are opaque and typed: `wm_sampler*`, `wm_loop_probe*`,
//!   `wm_sleep_probe*`, `wm_findings*`. Each call checks the handle's kind
//!   tag: NULL gives `WM_ERR_NULL`, a handle of another kind
//!   `WM_ERR_WRONG_KIND`, a freed one `WM_ERR_FREED` (best effort: the
//!   slot may have been reused by a newer handle; a use after free is the
//!   caller's bug).
//! - Every pointer argument is checked for NULL. No panic crosses the
//!   boundary: a panic becomes `WM_ERR_PANIC`.
//! - Threads: a sampler may be used from any thread concurrently (except
//!   its free); a probe by one thread at a time (its wait pair is not
//!   locked, to stay cheap); a findings list is read-only.
#![allow(non_camel_case_types)]

use std::ffi::c_char;

// cbindgen writes the items of this file first, then those of each module
// in the order of these declarations: the order of the header's sections.
// (The comment between them keeps formatting from sorting them.)
mod error;
mod handle;
mod sampler;
// The sampler's findings, then its probes.
mod findings;
mod probe;

/// Version of the C ABI: changes when a signature or a struct layout changes.
pub const WM_ABI_VERSION: u32 = 1;

/// The library version, e.g. "0.1.0" (static string).
#[unsafe(no_mangle)]
pub extern "C" fn wm_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

#[cfg(test)]
mod tests;

#![doc = include_str!("../README.md")]
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

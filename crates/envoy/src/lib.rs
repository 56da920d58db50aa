//! wakemeter inside Envoy: a bootstrap dynamic module
//! (`envoy.bootstrap.dynamic_modules`, Envoy 1.40) built as
//! `libwakemeter_envoy.so`.
//!
//! Envoy loads it at start-up; it then samples Envoy's own threads with the
//! core [`wakemeter::Sampler`] on a thread of its own, knows which threads
//! are Envoy's dispatchers (the main thread, which loads the module, and
//! each worker, which calls `worker_thread_initialized`), serves
//! `GET /wakemeter` on Envoy's admin port (findings in words and the
//! per-thread table; `?format=json` is the core's `Report`) and keeps a
//! fixed set of Envoy stats (gauges per dispatcher, a counter per finding
//! kind) that Envoy's own `/stats/prometheus` carries.
//!
//! Envoy's ABI is declared in [`abi`] from its C header; the hooks Envoy
//! calls are in `hooks.rs`. A panic never crosses into Envoy (`guard.rs`): it
//! is caught, logged as one error line through Envoy's log, and disables the
//! module.
//! The bootstrap YAML and the module's JSON config are in the crate README
//! and `docs/envoy.md`.

#[cfg(target_os = "linux")]
pub mod abi;
pub mod config;
#[cfg(target_os = "linux")]
mod guard;
#[cfg(target_os = "linux")]
mod hooks;
#[cfg(target_os = "linux")]
pub mod module;
#[cfg(target_os = "linux")]
pub mod render;

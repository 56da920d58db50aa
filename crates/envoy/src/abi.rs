//! The few types and callbacks of Envoy's dynamic-module ABI this module
//! uses, declared from the facts of Envoy's C header
//! (`source/extensions/dynamic_modules/abi/abi.h`, Envoy 1.40).
//!
//! The callbacks (`envoy_dynamic_module_callback_*`) are functions of the
//! Envoy binary. They are resolved once, by name, with `dlsym` on the
//! running process rather than linked as undefined symbols: the crate's
//! tests then link and run without Envoy, and a callback this Envoy lacks
//! is a clear error naming it (the module disables itself) instead of a
//! failed `dlopen`. `tests/abi.rs` checks every name here against what the
//! Envoy binary exports, and the hooks against what it demands.

use std::ffi::{CStr, c_char, c_void};
use std::sync::OnceLock;

/// The ABI version this module was written against: Envoy 1.40's own
/// string (`v0.1.0` loads too, after a "deprecated" warning).
pub const ABI_VERSION: &CStr = c"v0.2.0";

/// Envoy's pointer to a bootstrap extension config (`…_config_envoy_ptr`).
pub type ConfigEnvoyPtr = *mut c_void;
/// The module's pointer to its config (`…_config_module_ptr`).
pub type ConfigModulePtr = *const c_void;
/// Envoy's pointer to a bootstrap extension (`…_extension_envoy_ptr`).
pub type ExtensionEnvoyPtr = *mut c_void;
/// The module's pointer to its extension (`…_extension_module_ptr`).
pub type ExtensionModulePtr = *const c_void;
/// A scheduler Envoy made for the module (`…_config_scheduler_module_ptr`).
pub type SchedulerPtr = *mut c_void;
/// `envoy_dynamic_module_type_event_cb`: the shutdown completion callback.
pub type EventCallback = Option<unsafe extern "C" fn(context: *mut c_void)>;

/// `envoy_dynamic_module_type_envoy_buffer`: bytes Envoy owns, valid for
/// the duration of the hook that receives them.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EnvoyBuffer {
    /// First byte (may be null when `length` is 0).
    pub ptr: *const c_char,
    /// Length in bytes.
    pub length: usize,
}

impl EnvoyBuffer {
    /// The bytes, or an empty slice for a null pointer.
    ///
    /// # Safety
    /// `ptr` must point to `length` readable bytes that outlive `'a`
    /// (Envoy guarantees this for the duration of the hook).
    pub unsafe fn as_bytes<'a>(&self) -> &'a [u8] {
        if self.ptr.is_null() || self.length == 0 {
            return &[];
        }
        // SAFETY: non-null and `length` readable bytes, per the caller's contract.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), self.length) }
    }
}

/// `envoy_dynamic_module_type_module_buffer`: bytes the module owns, read
/// by Envoy during the callback only.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ModuleBuffer {
    /// First byte.
    pub ptr: *const c_char,
    /// Length in bytes.
    pub length: usize,
}

impl ModuleBuffer {
    /// A view of `s` (valid while `s` lives).
    pub fn of(s: &str) -> ModuleBuffer {
        ModuleBuffer {
            ptr: s.as_ptr().cast::<c_char>(),
            length: s.len(),
        }
    }
}

/// `envoy_dynamic_module_type_log_level` (spdlog's order).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// Debug.
    Debug = 1,
    /// Info.
    Info = 2,
    /// Warn.
    Warn = 3,
    /// Error.
    Error = 4,
}

/// `envoy_dynamic_module_type_metrics_result_Success`.
pub const METRICS_SUCCESS: u32 = 0;

type LogFn = unsafe extern "C" fn(level: u32, message: ModuleBuffer);
type SignalInitCompleteFn = unsafe extern "C" fn(config: ConfigEnvoyPtr);
type RegisterAdminHandlerFn = unsafe extern "C" fn(
    config: ConfigEnvoyPtr,
    path_prefix: ModuleBuffer,
    help_text: ModuleBuffer,
    removable: bool,
    mutates_server_state: bool,
) -> bool;
type AdminSetResponseFn = unsafe extern "C" fn(config: ConfigEnvoyPtr, body: ModuleBuffer);
type DefineMetricFn = unsafe extern "C" fn(
    config: ConfigEnvoyPtr,
    name: ModuleBuffer,
    label_names: *mut ModuleBuffer,
    label_names_length: usize,
    id_out: *mut usize,
) -> u32;
type UpdateMetricFn = unsafe extern "C" fn(
    config: ConfigEnvoyPtr,
    id: usize,
    label_values: *mut ModuleBuffer,
    label_values_length: usize,
    value: u64,
) -> u32;
type ConcurrencyFn = unsafe extern "C" fn() -> u32;
type ValidationModeFn = unsafe extern "C" fn() -> bool;
type SchedulerNewFn = unsafe extern "C" fn(config: ConfigEnvoyPtr) -> SchedulerPtr;
type SchedulerCommitFn = unsafe extern "C" fn(scheduler: SchedulerPtr, event_id: u64);
type SchedulerDeleteFn = unsafe extern "C" fn(scheduler: SchedulerPtr);

/// Every callback this module calls, by its symbol name in the Envoy binary.
pub const CALLBACK_NAMES: [&str; 12] = [
    "envoy_dynamic_module_callback_log",
    "envoy_dynamic_module_callback_bootstrap_extension_config_signal_init_complete",
    "envoy_dynamic_module_callback_bootstrap_extension_register_admin_handler",
    "envoy_dynamic_module_callback_bootstrap_extension_admin_set_response",
    "envoy_dynamic_module_callback_bootstrap_extension_config_define_gauge",
    "envoy_dynamic_module_callback_bootstrap_extension_config_set_gauge",
    "envoy_dynamic_module_callback_bootstrap_extension_config_define_counter",
    "envoy_dynamic_module_callback_bootstrap_extension_config_increment_counter",
    "envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_new",
    "envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_commit",
    "envoy_dynamic_module_callback_get_concurrency",
    "envoy_dynamic_module_callback_is_validation_mode",
];

/// The scheduler's delete callback (listed apart: it is only called at shutdown).
pub const SCHEDULER_DELETE: &str =
    "envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_delete";

/// Every hook Envoy 1.40 demands of a bootstrap module (a missing one fails
/// the config with its name), plus `on_program_init`. This crate exports
/// each of them (`hooks.rs`); `tests/abi.rs` checks both facts.
pub const HOOK_NAMES: [&str; 18] = [
    "envoy_dynamic_module_on_program_init",
    "envoy_dynamic_module_on_bootstrap_extension_config_new",
    "envoy_dynamic_module_on_bootstrap_extension_config_destroy",
    "envoy_dynamic_module_on_bootstrap_extension_config_scheduled",
    "envoy_dynamic_module_on_bootstrap_extension_new",
    "envoy_dynamic_module_on_bootstrap_extension_destroy",
    "envoy_dynamic_module_on_bootstrap_extension_server_initialized",
    "envoy_dynamic_module_on_bootstrap_extension_worker_thread_initialized",
    "envoy_dynamic_module_on_bootstrap_extension_drain_started",
    "envoy_dynamic_module_on_bootstrap_extension_shutdown",
    "envoy_dynamic_module_on_bootstrap_extension_timer_fired",
    "envoy_dynamic_module_on_bootstrap_extension_file_changed",
    "envoy_dynamic_module_on_bootstrap_extension_admin_request",
    "envoy_dynamic_module_on_bootstrap_extension_http_callout_done",
    "envoy_dynamic_module_on_bootstrap_extension_cluster_add_or_update",
    "envoy_dynamic_module_on_bootstrap_extension_cluster_removal",
    "envoy_dynamic_module_on_bootstrap_extension_listener_add_or_update",
    "envoy_dynamic_module_on_bootstrap_extension_listener_removal",
];

/// The resolved callbacks.
#[derive(Debug, Clone, Copy)]
pub struct Callbacks {
    log: LogFn,
    signal_init_complete: SignalInitCompleteFn,
    register_admin_handler: RegisterAdminHandlerFn,
    admin_set_response: AdminSetResponseFn,
    define_gauge: DefineMetricFn,
    set_gauge: UpdateMetricFn,
    define_counter: DefineMetricFn,
    increment_counter: UpdateMetricFn,
    scheduler_new: SchedulerNewFn,
    scheduler_commit: SchedulerCommitFn,
    scheduler_delete: SchedulerDeleteFn,
    concurrency: ConcurrencyFn,
    validation_mode: ValidationModeFn,
}

/// Looks `name` up in the running process's global symbols.
fn lookup(name: &str) -> Result<*mut c_void, String> {
    let cname = std::ffi::CString::new(name).map_err(|_| format!("bad symbol name {name}"))?;
    // SAFETY: `cname` is a valid NUL-terminated string; RTLD_DEFAULT
    // searches the global scope (the Envoy executable's exports).
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, cname.as_ptr()) };
    if p.is_null() {
        Err(format!("this Envoy does not export {name}"))
    } else {
        Ok(p)
    }
}

/// Whether the running process exports `name` (for tests and diagnostics).
pub fn exported(name: &str) -> bool {
    lookup(name).is_ok()
}

macro_rules! resolve {
    ($name:expr, $ty:ty) => {{
        let p = lookup($name)?;
        // SAFETY: `p` is the address of the Envoy function named `$name`,
        // whose C signature (abi.h of Envoy 1.40) is the one `$ty` declares;
        // a data pointer and a function pointer have one size on Linux.
        unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
    }};
}

impl Callbacks {
    fn resolve() -> Result<Callbacks, String> {
        Ok(Callbacks {
            log: resolve!(CALLBACK_NAMES[0], LogFn),
            signal_init_complete: resolve!(CALLBACK_NAMES[1], SignalInitCompleteFn),
            register_admin_handler: resolve!(CALLBACK_NAMES[2], RegisterAdminHandlerFn),
            admin_set_response: resolve!(CALLBACK_NAMES[3], AdminSetResponseFn),
            define_gauge: resolve!(CALLBACK_NAMES[4], DefineMetricFn),
            set_gauge: resolve!(CALLBACK_NAMES[5], UpdateMetricFn),
            define_counter: resolve!(CALLBACK_NAMES[6], DefineMetricFn),
            increment_counter: resolve!(CALLBACK_NAMES[7], UpdateMetricFn),
            scheduler_new: resolve!(CALLBACK_NAMES[8], SchedulerNewFn),
            scheduler_commit: resolve!(CALLBACK_NAMES[9], SchedulerCommitFn),
            scheduler_delete: resolve!(SCHEDULER_DELETE, SchedulerDeleteFn),
            concurrency: resolve!(CALLBACK_NAMES[10], ConcurrencyFn),
            validation_mode: resolve!(CALLBACK_NAMES[11], ValidationModeFn),
        })
    }

    /// The callbacks of the running Envoy, resolved on first use.
    ///
    /// # Errors
    /// The name of the first callback this process does not export (when
    /// not inside Envoy, or inside an Envoy without it).
    pub fn get() -> Result<&'static Callbacks, &'static str> {
        static CALLBACKS: OnceLock<Result<Callbacks, String>> = OnceLock::new();
        CALLBACKS
            .get_or_init(Callbacks::resolve)
            .as_ref()
            .map_err(|e| e.as_str())
    }

    /// Writes `message` to Envoy's log under its `dynamic_modules` logger.
    pub fn log(&self, level: LogLevel, message: &str) {
        // SAFETY: Envoy copies the message during the call.
        unsafe { (self.log)(level as u32, ModuleBuffer::of(message)) }
    }

    /// Tells Envoy's init manager the config is ready.
    ///
    /// # Safety
    /// `config` must be the live config pointer Envoy handed to `config_new`.
    pub unsafe fn signal_init_complete(&self, config: ConfigEnvoyPtr) {
        // SAFETY: per the caller's contract.
        unsafe { (self.signal_init_complete)(config) }
    }

    /// Adds an admin endpoint whose requests reach the `admin_request` hook.
    ///
    /// # Safety
    /// As [`Callbacks::signal_init_complete`]; main thread only.
    pub unsafe fn register_admin_handler(
        &self,
        config: ConfigEnvoyPtr,
        path: &str,
        help: &str,
    ) -> bool {
        // SAFETY: per the caller's contract; Envoy copies both strings.
        unsafe {
            (self.register_admin_handler)(
                config,
                ModuleBuffer::of(path),
                ModuleBuffer::of(help),
                false,
                false,
            )
        }
    }

    /// Sets the body of the admin response being built (inside `admin_request` only).
    ///
    /// # Safety
    /// As [`Callbacks::signal_init_complete`], inside the `admin_request` hook.
    pub unsafe fn admin_set_response(&self, config: ConfigEnvoyPtr, body: &str) {
        // SAFETY: per the caller's contract; Envoy copies the body.
        unsafe { (self.admin_set_response)(config, ModuleBuffer::of(body)) }
    }

    /// Defines a gauge without labels; its id, or `None` when Envoy refused.
    ///
    /// # Safety
    /// As [`Callbacks::signal_init_complete`]; main thread only.
    pub unsafe fn define_gauge(&self, config: ConfigEnvoyPtr, name: &str) -> Option<usize> {
        let mut id = 0usize;
        // SAFETY: per the caller's contract; no labels (null, 0); `id` is a valid out pointer.
        let r = unsafe {
            (self.define_gauge)(
                config,
                ModuleBuffer::of(name),
                std::ptr::null_mut(),
                0,
                &mut id,
            )
        };
        (r == METRICS_SUCCESS).then_some(id)
    }

    /// Sets a gauge defined by [`Callbacks::define_gauge`].
    ///
    /// # Safety
    /// As [`Callbacks::signal_init_complete`]; `id` from this config.
    pub unsafe fn set_gauge(&self, config: ConfigEnvoyPtr, id: usize, value: u64) -> bool {
        // SAFETY: per the caller's contract; no labels.
        unsafe { (self.set_gauge)(config, id, std::ptr::null_mut(), 0, value) == METRICS_SUCCESS }
    }

    /// Defines a counter without labels; its id, or `None` when Envoy refused.
    ///
    /// # Safety
    /// As [`Callbacks::define_gauge`].
    pub unsafe fn define_counter(&self, config: ConfigEnvoyPtr, name: &str) -> Option<usize> {
        let mut id = 0usize;
        // SAFETY: per the caller's contract; no labels; `id` is a valid out pointer.
        let r = unsafe {
            (self.define_counter)(
                config,
                ModuleBuffer::of(name),
                std::ptr::null_mut(),
                0,
                &mut id,
            )
        };
        (r == METRICS_SUCCESS).then_some(id)
    }

    /// Adds `value` to a counter defined by [`Callbacks::define_counter`].
    ///
    /// # Safety
    /// As [`Callbacks::set_gauge`].
    pub unsafe fn increment_counter(&self, config: ConfigEnvoyPtr, id: usize, value: u64) -> bool {
        // SAFETY: per the caller's contract; no labels.
        unsafe {
            (self.increment_counter)(config, id, std::ptr::null_mut(), 0, value) == METRICS_SUCCESS
        }
    }

    /// A scheduler: events committed from any thread reach the
    /// `config_scheduled` hook on Envoy's main thread.
    ///
    /// # Safety
    /// As [`Callbacks::signal_init_complete`].
    pub unsafe fn scheduler_new(&self, config: ConfigEnvoyPtr) -> SchedulerPtr {
        // SAFETY: per the caller's contract.
        unsafe { (self.scheduler_new)(config) }
    }

    /// Posts `event_id` to the main thread (any thread may call it).
    ///
    /// # Safety
    /// `scheduler` from [`Callbacks::scheduler_new`], not yet deleted.
    pub unsafe fn scheduler_commit(&self, scheduler: SchedulerPtr, event_id: u64) {
        // SAFETY: per the caller's contract.
        unsafe { (self.scheduler_commit)(scheduler, event_id) }
    }

    /// Envoy's worker count (`--concurrency`).
    ///
    /// # Safety
    /// Main thread only (Envoy answers 0 elsewhere).
    pub unsafe fn concurrency(&self) -> u32 {
        // SAFETY: per the caller's contract.
        unsafe { (self.concurrency)() }
    }

    /// Whether Envoy only validates its config (`--mode validate`).
    pub fn validation_mode(&self) -> bool {
        // SAFETY: no arguments; Envoy answers from its options.
        unsafe { (self.validation_mode)() }
    }

    /// Frees a scheduler.
    ///
    /// # Safety
    /// `scheduler` from [`Callbacks::scheduler_new`], deleted once, with no
    /// commit racing it.
    pub unsafe fn scheduler_delete(&self, scheduler: SchedulerPtr) {
        // SAFETY: per the caller's contract.
        unsafe { (self.scheduler_delete)(scheduler) }
    }
}

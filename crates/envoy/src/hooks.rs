//! The event hooks Envoy calls (`envoy_dynamic_module_on_*`). Every body
//! runs inside [`guarded`]: a panic is caught, logged through Envoy as one
//! error line, and disables the module; Envoy keeps serving.

use std::ffi::{c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use crate::abi::{
    self, Callbacks, ConfigEnvoyPtr, ConfigModulePtr, EnvoyBuffer, EventCallback,
    ExtensionEnvoyPtr, ExtensionModulePtr, LogLevel,
};
use crate::config::{ModuleConfig, PanicSite};
use crate::guard::{guarded, install_panic_hook};
use crate::module::Module;
use crate::render::{self, Format, PageContext};

/// What `config_new` returns under `envoy --mode validate`: the config was
/// checked, and nothing is started (no sampler, no threads, no eBPF).
static VALIDATED_ONLY: u8 = 0;

fn validated_only() -> ConfigModulePtr {
    std::ptr::from_ref(&VALIDATED_ONLY).cast::<c_void>()
}

/// The module behind Envoy's config pointer.
///
/// # Safety
/// `ptr` must be null, [`validated_only`], or a pointer `config_new`
/// returned and `config_destroy` has not freed.
unsafe fn module<'a>(ptr: ConfigModulePtr) -> Option<&'a Module> {
    if ptr == validated_only() {
        return None;
    }
    // SAFETY: per the caller's contract, a live `Box<Module>` or null.
    unsafe { ptr.cast::<Module>().as_ref() }
}

/// Envoy's first call: returns the ABI version the module was built for.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const c_char {
    let _ = catch_unwind(install_panic_hook);
    abi::ABI_VERSION.as_ptr()
}

/// Parses the config, builds the sampler and registers the admin path.
/// A null return makes Envoy refuse the config; the reason is logged first.
///
/// # Safety
/// Called by Envoy with its live config pointer and two buffers valid for the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_bootstrap_extension_config_new(
    config_envoy: ConfigEnvoyPtr,
    _name: EnvoyBuffer,
    config: EnvoyBuffer,
) -> ConfigModulePtr {
    guarded("config_new", std::ptr::null(), || {
        let Ok(cb) = Callbacks::get() else {
            // Not inside an Envoy that has the callbacks: nothing to log to.
            return std::ptr::null();
        };
        // SAFETY: Envoy's buffer, valid for this call.
        let text = unsafe { config.as_bytes() };
        let parsed = match ModuleConfig::parse(text) {
            Ok(c) => c,
            Err(e) => {
                cb.log(LogLevel::Error, &e);
                return std::ptr::null();
            }
        };
        if cb.validation_mode() {
            // SAFETY: Envoy's live config pointer, on its main thread.
            unsafe { cb.signal_init_complete(config_envoy) };
            return validated_only();
        }
        // SAFETY: Envoy's live config pointer, on its main thread.
        match unsafe { Module::new(cb, config_envoy, parsed) } {
            Ok(m) => {
                // SAFETY: as above.
                unsafe { cb.signal_init_complete(config_envoy) };
                cb.log(
                    LogLevel::Info,
                    &format!(
                        "wakemeter: sampling Envoy's threads every {} ms; admin path {} {}",
                        m.config.interval.as_millis(),
                        m.config.admin_path,
                        if m.admin_registered() {
                            "registered"
                        } else {
                            "not yet registered"
                        }
                    ),
                );
                Box::into_raw(m).cast_const().cast::<c_void>()
            }
            Err(e) => {
                cb.log(LogLevel::Error, &e);
                std::ptr::null()
            }
        }
    })
}

/// Frees the config (stops the module's threads first).
///
/// # Safety
/// `config_module` is what `config_new` returned, freed once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_bootstrap_extension_config_destroy(
    config_module: ConfigModulePtr,
) {
    if config_module.is_null() || config_module == validated_only() {
        return;
    }
    // Not `guarded`: the memory is freed even when the module is disabled.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: a `Box<Module>` from `config_new`, freed only here.
        drop(unsafe { Box::from_raw(config_module.cast_mut().cast::<Module>()) });
    }));
}

/// The events the publisher thread posts after each sample: copy the
/// figures into Envoy's stats.
///
/// # Safety
/// Called by Envoy on its main thread with the pointers of this config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_bootstrap_extension_config_scheduled(
    _config_envoy: ConfigEnvoyPtr,
    config_module: ConfigModulePtr,
    _event_id: u64,
) {
    guarded("the stats publish hook", (), || {
        // SAFETY: Envoy passes the pointer `config_new` returned.
        if let Some(m) = unsafe { module(config_module) } {
            m.publish_to_envoy();
        }
    });
}

/// The extension of the config: the module keeps no per-extension state,
/// so it is the config itself.
///
/// # Safety
/// Called by Envoy with the pointers of this config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_bootstrap_extension_new(
    config_module: ConfigModulePtr,
    _extension_envoy: ExtensionEnvoyPtr,
) -> ExtensionModulePtr {
    config_module
}

/// Nothing to free (see `extension_new`).
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_destroy(
    _extension_module: ExtensionModulePtr,
) {
}

/// Registers the admin path if `config_new` could not yet.
///
/// # Safety
/// Called by Envoy on its main thread with the pointers of this config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_bootstrap_extension_server_initialized(
    _extension_envoy: ExtensionEnvoyPtr,
    extension_module: ExtensionModulePtr,
) {
    guarded("server_initialized", (), || {
        // SAFETY: the extension pointer is the config pointer (`extension_new`).
        if let Some(m) = unsafe { module(extension_module) }
            && !m.admin_registered()
        {
            m.register_admin();
            if !m.admin_registered() {
                m.cb().log(
                    LogLevel::Warn,
                    &format!(
                        "wakemeter: Envoy refused the admin path {}",
                        m.config.admin_path
                    ),
                );
            }
        }
    });
}

/// Called on each worker thread as it starts: records it as a dispatcher.
///
/// # Safety
/// Called by Envoy with the pointers of this config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_bootstrap_extension_worker_thread_initialized(
    _extension_envoy: ExtensionEnvoyPtr,
    extension_module: ExtensionModulePtr,
) {
    guarded("worker_thread_initialized", (), || {
        // SAFETY: the extension pointer is the config pointer (`extension_new`).
        if let Some(m) = unsafe { module(extension_module) } {
            m.add_worker();
        }
    });
}

/// Nothing to do when Envoy starts draining.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_drain_started(
    _extension_envoy: ExtensionEnvoyPtr,
    _extension_module: ExtensionModulePtr,
) {
}

/// Stops sampling, then tells Envoy the module is done.
///
/// # Safety
/// Called by Envoy on its main thread; `completion` with its context.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_bootstrap_extension_shutdown(
    _extension_envoy: ExtensionEnvoyPtr,
    extension_module: ExtensionModulePtr,
    completion: EventCallback,
    completion_context: *mut c_void,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the extension pointer is the config pointer (`extension_new`).
        if let Some(m) = unsafe { module(extension_module) } {
            m.stop();
        }
    }));
    if let Some(done) = completion {
        // SAFETY: Envoy's own callback with its own context, called once.
        unsafe { done(completion_context) };
    }
}

/// The module starts no timers (it posts through the scheduler).
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_timer_fired(
    _config_envoy: ConfigEnvoyPtr,
    _config_module: ConfigModulePtr,
    _timer: *mut c_void,
) {
}

/// The module watches no files.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_file_changed(
    _config_envoy: ConfigEnvoyPtr,
    _config_module: ConfigModulePtr,
    _path: EnvoyBuffer,
    _events: u32,
) {
}

/// `GET <admin_path>[?format=json]`: the report as text or JSON.
///
/// # Safety
/// Called by Envoy on its main thread with the pointers of this config and
/// buffers valid for the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_bootstrap_extension_admin_request(
    config_envoy: ConfigEnvoyPtr,
    config_module: ConfigModulePtr,
    _method: EnvoyBuffer,
    path: EnvoyBuffer,
    _body: EnvoyBuffer,
) -> u32 {
    let answered = guarded("the admin request hook", None, || {
        // SAFETY: Envoy passes the pointer `config_new` returned.
        let m = unsafe { module(config_module) }?;
        // SAFETY: Envoy's buffer, valid for this call.
        let path = String::from_utf8_lossy(unsafe { path.as_bytes() }).into_owned();
        Some(admin_page(m, config_envoy, &path))
    });
    match answered {
        Some(code) => code,
        None => {
            if let Ok(cb) = Callbacks::get() {
                // SAFETY: inside the admin hook, Envoy's live config pointer.
                unsafe {
                    cb.admin_set_response(
                        config_envoy,
                        "wakemeter is disabled after an internal error (see Envoy's log); Envoy keeps serving\n",
                    );
                };
            }
            503
        }
    }
}

fn admin_page(m: &Module, config_envoy: ConfigEnvoyPtr, path: &str) -> u32 {
    let start = Instant::now();
    if m.config.test_panic == Some(PanicSite::AdminRequest) {
        panic!("test_panic: injected in the admin request hook");
    }
    let cb = m.cb();
    let (code, body) = match render::format_of(path) {
        Err(e) => (400, format!("{e}\n")),
        Ok(Format::Json) => {
            let report = m.sampler().report();
            match serde_json::to_string(&report) {
                Ok(mut s) => {
                    s.push('\n');
                    (200, s)
                }
                Err(e) => (500, format!("wakemeter: cannot encode the report: {e}\n")),
            }
        }
        Ok(Format::Text) => {
            let report = m.sampler().report();
            let ctx = PageContext {
                interval_ms: u64::try_from(m.config.interval.as_millis()).unwrap_or(u64::MAX),
                ebpf: report
                    .interval
                    .as_ref()
                    .is_some_and(|i| i.threads.iter().any(|t| t.kernel.is_some())),
                ebpf_note: m.ebpf_note.clone(),
                dispatchers: m.dispatcher_figures(),
                publish_cost: m.publish_cost.read(),
                publisher_cpu_ns: m.publisher_cpu_ns(),
                admin_cost: m.admin_cost.read(),
            };
            (200, render::text(&report, &ctx))
        }
    };
    // SAFETY: inside the admin hook, Envoy's live config pointer.
    unsafe { cb.admin_set_response(config_envoy, &body) };
    m.admin_cost.record(start);
    code
}

/// The module makes no HTTP callouts.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_http_callout_done(
    _config_envoy: ConfigEnvoyPtr,
    _config_module: ConfigModulePtr,
    _callout_id: u64,
    _result: u32,
    _headers: *mut c_void,
    _headers_size: usize,
    _body_chunks: *mut c_void,
    _body_chunks_size: usize,
) {
}

/// Cluster changes do not concern the module.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_cluster_add_or_update(
    _config_envoy: ConfigEnvoyPtr,
    _config_module: ConfigModulePtr,
    _name: EnvoyBuffer,
) {
}

/// Cluster changes do not concern the module.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_cluster_removal(
    _config_envoy: ConfigEnvoyPtr,
    _config_module: ConfigModulePtr,
    _name: EnvoyBuffer,
) {
}

/// Listener changes do not concern the module.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_listener_add_or_update(
    _config_envoy: ConfigEnvoyPtr,
    _config_module: ConfigModulePtr,
    _name: EnvoyBuffer,
) {
}

/// Listener changes do not concern the module.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_listener_removal(
    _config_envoy: ConfigEnvoyPtr,
    _config_module: ConfigModulePtr,
    _name: EnvoyBuffer,
) {
}

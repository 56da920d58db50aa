//! Attaching the eBPF kernel source when this build and this host allow it.

use wakemeter::{KernelSource, Target};

/// The kernel source for `target`, or why there is none (printed to the user).
pub fn attach(target: Target, wanted: bool) -> Result<Box<dyn KernelSource>, String> {
    if !wanted {
        return Err("disabled by --no-ebpf".to_string());
    }
    attach_inner(target)
}

#[cfg(feature = "ebpf")]
fn attach_inner(target: Target) -> Result<Box<dyn KernelSource>, String> {
    match wakemeter_ebpf::EbpfSource::attach(target) {
        Ok(src) => {
            crate::print::note(&format!(
                "eBPF: attached ({:?}, syscalls via {:?}) in {:.0} ms",
                src.attach_kind(),
                src.syscall_hook(),
                src.attach_duration().as_secs_f64() * 1e3
            ));
            Ok(Box::new(src))
        }
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(not(feature = "ebpf"))]
fn attach_inner(_target: Target) -> Result<Box<dyn KernelSource>, String> {
    Err("this build has no eBPF support (feature `ebpf` off)".to_string())
}

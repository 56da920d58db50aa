//! A machine without kernel BTF: starting a profile, or the kernel source
//! of the sampler, fails with the typed error naming the missing file (not
//! a panic, not a load failure). The BTF file is overridden per builder,
//! so this runs on a machine that has BTF. Root, as the other eBPF tests,
//! so that the failure cannot come from the privilege check instead.

use std::time::Duration;

use wakemeter_ebpf::{EbpfError, EbpfSource, StackSession};
use wakemeter_profile::{ProfileError, ProfileOptions, Profiler, StackKind, Target};

/// A BTF path that does not exist, in a fresh temporary directory.
fn missing_btf() -> (tempdir::Dir, std::path::PathBuf) {
    let dir = tempdir::Dir::new();
    let path = dir.path().join("vmlinux");
    (dir, path)
}

mod tempdir {
    /// A directory removed on drop.
    pub struct Dir(std::path::PathBuf);

    impl Dir {
        pub fn new() -> Dir {
            let path = std::env::temp_dir().join(format!(
                "wakemeter-no-btf-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            std::fs::create_dir_all(&path).expect("temp dir");
            Dir(path)
        }

        pub fn path(&self) -> &std::path::Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn assert_no_btf(error: &EbpfError, path: &std::path::Path) {
    match error {
        EbpfError::NoKernelBtf { path: missing } => assert_eq!(missing, path),
        other => panic!("expected NoKernelBtf, got {other:?}"),
    }
    let message = error.to_string();
    assert!(
        message.contains("no kernel BTF")
            && message.contains(&path.display().to_string())
            && message.contains("CONFIG_DEBUG_INFO_BTF"),
        "{message}"
    );
}

#[test]
#[ignore = "needs root"]
fn profile_without_btf_is_a_typed_error() {
    let (_dir, path) = missing_btf();
    for kind in [StackKind::OnCpu, StackKind::OffCpu, StackKind::Wakeups] {
        let options = ProfileOptions::new(kind).with_kernel_btf_path(&path);
        match Profiler::new().capture(Target::SelfProcess, &options, Duration::from_millis(100)) {
            Err(ProfileError::Ebpf(e)) => assert_no_btf(&e, &path),
            Err(other) => panic!("{kind:?}: expected the eBPF error, got {other:?}"),
            Ok(_) => panic!("{kind:?}: captured without BTF"),
        }
    }
}

#[test]
#[ignore = "needs root"]
fn kernel_source_without_btf_is_a_typed_error() {
    let (_dir, path) = missing_btf();
    match EbpfSource::builder(Target::SelfProcess)
        .with_kernel_btf_path(&path)
        .attach()
    {
        Err(e) => assert_no_btf(&e, &path),
        Ok(_) => panic!("attached without BTF"),
    }
}

/// The seam is the path the loader really reads: a copy of the kernel's
/// BTF at another path loads and attaches as the default does.
#[test]
#[ignore = "needs root"]
fn a_copy_of_the_kernel_btf_elsewhere_attaches() {
    let (dir, _) = missing_btf();
    let copy = dir.path().join("vmlinux-copy");
    std::fs::copy("/sys/kernel/btf/vmlinux", &copy).expect("copy the kernel BTF");
    let mut session = StackSession::builder(Target::SelfProcess, StackKind::OffCpu)
        .with_kernel_btf_path(&copy)
        .attach()
        .expect("attach with the copied BTF");
    std::thread::sleep(Duration::from_millis(50));
    session.stop();
    let counts = session.read().expect("read");
    assert!(
        counts.entries.iter().any(|e| e.count > 0),
        "no off-CPU span of this process recorded"
    );
    EbpfSource::builder(Target::SelfProcess)
        .with_kernel_btf_path(&copy)
        .attach()
        .expect("kernel source with the copied BTF");
}

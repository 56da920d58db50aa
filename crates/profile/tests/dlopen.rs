//! A module loaded with `dlopen` after the capture started is unwound from
//! its `.eh_frame` like the ones mapped at attach: the capture picks it up
//! (`Capture::refresh_modules`), so stacks through its functions, built
//! without frame pointers, reach `main` (root: eBPF; x86_64: elsewhere the
//! table is not used).
#![cfg(target_arch = "x86_64")]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wakemeter_profile::{ProfileOptions, Profiler, StackKind, Target};

#[test]
#[ignore = "needs root"]
fn a_module_loaded_after_attach_is_unwound_from_its_eh_frame() {
    let nofp = ["-g", "-O1", "-fomit-frame-pointer"];
    let library = common::build(
        "dlopened",
        "libwakemeter-dlopened.so",
        &["-shared", "-fPIC", "-g", "-O1", "-fomit-frame-pointer"],
    );
    let program = common::build("dlopener", "dlopener-nofp", &nofp);
    let mut child = common::Running(
        Command::new(&program)
            .arg(&library)
            .arg(common::PROGRAM_SECONDS)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("test program starts"),
    );
    let mut stdout = BufReader::new(child.0.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("reads the ready line");
    assert_eq!(line.trim(), "ready");

    let profiler = Profiler::new();
    let mut capture = profiler
        .start(
            Target::Pid(child.pid()),
            &ProfileOptions::new(StackKind::OnCpu),
        )
        .expect("capture");
    // Only now is the library mapped: the table built at attach has no
    // rows for it.
    let mut stdin = child.0.stdin.take().expect("piped stdin");
    stdin
        .write_all(b"go\n")
        .expect("tells the program to dlopen");
    line.clear();
    stdout.read_line(&mut line).expect("reads the loaded line");
    assert_eq!(line.trim(), "loaded");
    // Until the mapping is picked up and the program has spun 3 more
    // CPU-seconds in the library (about 300 samples), however long a
    // loaded machine takes; the refresh runs at most once a second.
    let loaded = common::Work::of(child.pid());
    let mut refreshed = false;
    let started = Instant::now();
    while !refreshed || common::Work::of(child.pid()).since(loaded).cpu_ns < 3_000_000_000 {
        assert!(
            started.elapsed() < common::HANG_GUARD,
            "refreshed {refreshed}; {:?} since the dlopen",
            common::Work::of(child.pid()).since(loaded)
        );
        std::thread::sleep(Duration::from_millis(100));
        refreshed |= capture.refresh_modules();
    }
    let profile = capture.finish(&profiler).expect("profile");

    let in_library = profile.inclusive_share("lib_spin");
    assert!(in_library > 0.5, "lib_spin in {in_library} of the samples");
    // From the first refresh on (within a second of the dlopen) every
    // stack through lib_spin is whole: its two callers in the library,
    // then main. Without rows for the library its frames would take the
    // frame-pointer step through registers that hold data.
    let through = |f: &str| {
        profile.share_where(|s| s.contains_function("lib_spin") && s.contains_function(f))
    };
    for caller in ["lib_middle", "lib_outer", "main"] {
        let whole = through(caller) / in_library;
        assert!(
            whole >= 0.6,
            "{caller} in {whole} of the stacks through lib_spin: {:?}",
            profile
                .samples
                .iter()
                .take(5)
                .map(|s| s.frames.iter().map(|f| f.label()).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        );
    }
    println!(
        "lib_spin {in_library:.3}; lib_middle {:.3}, lib_outer {:.3}, main {:.3} of those; warnings {:?}",
        through("lib_middle") / in_library,
        through("lib_outer") / in_library,
        through("main") / in_library,
        profile.warnings
    );
}

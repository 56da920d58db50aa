//! A link flipped under the output's name while it is written, over and
//! over: the file it points to is never changed.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use wakemeter_outfile::{Options, OutFile, Publish};

const ATTEMPTS: u32 = 1_000;

fn flip(out: &Path, victim: &Path, stop: &AtomicBool, flips: &AtomicU64) {
    let tmp = out.with_extension("flip");
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let _ = std::fs::remove_file(&tmp);
        // Each way a planted name can point at the victim, and the
        // harmless shapes between them, swapped in with rename (atomic).
        let _ = match i % 5 {
            0 => symlink(victim, &tmp),
            1 => symlink("/dev/null", &tmp),
            2 => std::fs::hard_link(victim, &tmp),
            3 => std::fs::write(&tmp, "decoy"),
            _ => {
                let _ = std::fs::remove_file(out);
                Ok(())
            }
        };
        let _ = std::fs::rename(&tmp, out);
        // The temporary names too.
        let _ = symlink(
            victim,
            out.with_file_name(format!("out.partial-{}", std::process::id())),
        );
        i += 1;
        flips.store(i, Ordering::Relaxed);
    }
}

#[test]
fn a_link_flipped_a_thousand_times_never_changes_its_target() {
    let d = std::env::temp_dir().join(format!("wakemeter-toctou-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    // A shared directory: writable by all, with the sticky bit (as /tmp).
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = d.join("victim");
    std::fs::write(&victim, "precious").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let ino = std::fs::metadata(&victim).unwrap().ino();
    let out = d.join("out");
    let stop = Arc::new(AtomicBool::new(false));
    let flips = Arc::new(AtomicU64::new(0));
    let flipper = {
        let (out, victim, stop, flips) = (out.clone(), victim.clone(), stop.clone(), flips.clone());
        std::thread::spawn(move || flip(&out, &victim, &stop, &flips))
    };
    let (mut written, mut refused) = (0u32, 0u32);
    for attempt in 0..ATTEMPTS {
        let publish = if attempt % 2 == 0 {
            Publish::AtFinish
        } else {
            Publish::Now
        };
        let r = OutFile::create(&out, Options::new(publish)).and_then(|mut f| {
            std::io::Write::write_all(&mut f, b"written by the tool").map_err(|e| {
                wakemeter_outfile::Error::Io {
                    what: "write",
                    path: out.clone(),
                    source: e,
                }
            })?;
            f.finish()
        });
        match r {
            Ok(()) => written += 1,
            Err(_) => refused += 1,
        }
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "precious",
            "attempt {attempt}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    flipper.join().unwrap();
    let m = std::fs::metadata(&victim).unwrap();
    assert_eq!((m.ino(), m.len()), (ino, 8));
    assert_eq!(std::fs::read_to_string("/dev/null").unwrap(), "");
    eprintln!(
        "{ATTEMPTS} attempts against {} flips: {written} written, {refused} refused, victim intact",
        flips.load(Ordering::Relaxed)
    );
    // Both outcomes happened: the flips raced the writes.
    assert!(
        written > 0 && refused > 0,
        "{written} written, {refused} refused"
    );
    let _ = std::fs::remove_dir_all(&d);
}

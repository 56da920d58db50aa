#![allow(clippy::unwrap_used)]

use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};

use super::*;
use crate::sys::euid;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wakemeter-outfile-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

fn entries(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_regular_file_is_replaced_whole_at_finish_only() {
    let d = scratch("regular");
    let out = d.join("rec.ndjson");
    std::fs::write(&out, "old").unwrap();
    let mut o = OutFile::create(&out, Options::new(Publish::AtFinish)).unwrap();
    assert!(o.is_regular() && !o.is_published());
    o.write_all(b"new\n").unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "old");
    o.finish().unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "new\n");
    assert_eq!(entries(&d), ["rec.ndjson"]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn publish_now_shows_the_new_file_under_its_name_at_once() {
    let d = scratch("now");
    let out = d.join("trace.pftrace");
    std::fs::write(&out, "old trace").unwrap();
    let mut o = OutFile::create(&out, Options::new(Publish::Now)).unwrap();
    assert!(o.is_published());
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "");
    o.write_all(b"abc").unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "abc");
    drop(o);
    // Dropped unfinished: what was written stays (a killed writer's trace).
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "abc");
    assert_eq!(entries(&d), ["trace.pftrace"]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_link_at_the_name_is_refused_and_its_target_untouched() {
    let d = scratch("link");
    let victim = d.join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let out = d.join("out");
    symlink(&victim, &out).unwrap();
    for publish in [Publish::AtFinish, Publish::Now] {
        let e = OutFile::create(&out, Options::new(publish)).unwrap_err();
        assert!(matches!(e, Error::Link { .. }), "{e}");
    }
    // A link to a device is refused too: only a name that is one is written.
    std::fs::remove_file(&out).unwrap();
    symlink("/dev/null", &out).unwrap();
    let e = OutFile::create(&out, Options::new(Publish::AtFinish)).unwrap_err();
    assert!(matches!(e, Error::Link { .. }), "{e}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn links_planted_at_the_temporary_names_are_skipped_never_followed() {
    let d = scratch("planted");
    let victim = d.join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let out = d.join("rec.ndjson");
    let pid = std::process::id();
    symlink(&victim, d.join(format!("rec.ndjson.partial-{pid}"))).unwrap();
    symlink(&victim, d.join(format!("rec.ndjson.partial-{pid}-1"))).unwrap();
    OutFile::write_whole(&out, b"mine").unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "mine");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_directory_others_can_change_is_refused_unless_sticky() {
    let d = scratch("shared");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = OutFile::create(&d.join("x"), Options::new(Publish::AtFinish)).unwrap_err();
    assert!(matches!(e, Error::UnsafeDir { .. }), "{e}");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
    OutFile::write_whole(&d.join("x"), b"ok").unwrap();
    assert_eq!(std::fs::read_to_string(d.join("x")).unwrap(), "ok");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_linked_directory_is_refused() {
    let d = scratch("dirlink");
    std::fs::create_dir(d.join("real")).unwrap();
    symlink(d.join("real"), d.join("via")).unwrap();
    let e = OutFile::create(&d.join("via").join("x"), Options::new(Publish::AtFinish)).unwrap_err();
    assert!(matches!(e, Error::Link { .. }), "{e}");
    assert!(entries(&d.join("real")).is_empty());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_device_named_directly_is_written_to_and_not_replaced() {
    let mut o = OutFile::create(Path::new("/dev/null"), Options::new(Publish::AtFinish)).unwrap();
    assert!(!o.is_regular());
    o.write_all(b"discarded").unwrap();
    o.finish().unwrap();
    let m = std::fs::symlink_metadata("/dev/null").unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_char_device(
        &m.file_type()
    ));
}

#[test]
fn a_fifo_waits_for_its_reader_and_the_wait_can_be_stopped() {
    let d = scratch("fifo");
    let fifo = d.join("pipe");
    let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let stop = AtomicBool::new(true);
    let e = OutFile::create(&fifo, Options::new(Publish::AtFinish).with_stop(&stop)).unwrap_err();
    assert!(matches!(e, Error::Interrupted { .. }), "{e}");
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    let stop = AtomicBool::new(false);
    let mut o = OutFile::create(&fifo, Options::new(Publish::AtFinish).with_stop(&stop)).unwrap();
    o.write_all(b"through the pipe").unwrap();
    o.finish().unwrap();
    assert_eq!(reader.join().unwrap(), "through the pipe");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn directories_sockets_and_dot_names_are_refused() {
    let d = scratch("kinds");
    std::fs::create_dir(d.join("sub")).unwrap();
    for p in [d.join("sub"), d.join("sub/"), d.join("."), d.join("..")] {
        let e = OutFile::create(&p, Options::new(Publish::AtFinish)).unwrap_err();
        assert!(
            matches!(e, Error::NotWritable { .. }),
            "{}: {e}",
            p.display()
        );
    }
    let _sock = std::os::unix::net::UnixListener::bind(d.join("sock")).unwrap();
    let e = OutFile::create(&d.join("sock"), Options::new(Publish::AtFinish)).unwrap_err();
    assert!(matches!(e, Error::NotWritable { .. }), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn an_unfinished_or_abandoned_file_leaves_the_name_as_it_was() {
    let d = scratch("abandon");
    let out = d.join("r");
    std::fs::write(&out, "old").unwrap();
    let mut o = OutFile::create(&out, Options::new(Publish::AtFinish)).unwrap();
    o.write_all(b"x").unwrap();
    drop(o);
    let o = OutFile::create(&out, Options::new(Publish::AtFinish)).unwrap();
    o.abandon();
    assert_eq!(entries(&d), ["r"]);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "old");
    // Published and abandoned: the new file goes (the old one was replaced).
    let o = OutFile::create(&out, Options::new(Publish::Now)).unwrap();
    o.abandon();
    assert!(entries(&d).is_empty());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn create_own_makes_the_directory_and_refuses_one_others_can_write() {
    let d = scratch("own");
    let mine = d.join("a/b/wakemeter-ab");
    let dir = Dir::create_own(&mine).unwrap();
    let m = std::fs::metadata(&mine).unwrap();
    assert_eq!(m.uid(), euid());
    let mut f = dir
        .create(OsStr::new("control-1.load.txt"), Options::new(Publish::Now))
        .unwrap();
    f.write_all(b"load").unwrap();
    f.finish().unwrap();
    assert_eq!(
        std::fs::read_to_string(mine.join("control-1.load.txt")).unwrap(),
        "load"
    );
    // Existing, and open to others: not taken over.
    let theirs = d.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = Dir::create_own(&theirs).unwrap_err();
    assert!(matches!(e, Error::UnsafeDir { .. }), "{e}");
    // Existing and another user's (root only can make one here).
    if euid() == 0 {
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let e = Dir::create_own(&theirs).unwrap_err();
        assert!(matches!(e, Error::UnsafeDir { .. }), "{e}");
    }
    // Made under a umask that leaves group write: closed to others.
    // SAFETY: umask only swaps the process's mask.
    let old = unsafe { libc::umask(0o002) };
    let grouped = Dir::create_own(&d.join("grouped"));
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    grouped.unwrap();
    let mode = std::fs::metadata(d.join("grouped")).unwrap().mode() & 0o777;
    assert_eq!(mode & 0o022, 0, "{mode:o}");
    // `.` is taken when it is one's own.
    let here = std::env::current_dir().unwrap();
    std::env::set_current_dir(&mine).unwrap();
    let dot = Dir::create_own(Path::new("."));
    std::env::set_current_dir(here).unwrap();
    dot.unwrap();
    // A link at the directory's name is not followed.
    symlink(&mine, d.join("via")).unwrap();
    let e = Dir::create_own(&d.join("via")).unwrap_err();
    assert!(matches!(e, Error::Link { .. }), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn standard_output_is_a_direct_output() {
    let o = OutFile::create(Path::new("-"), Options::new(Publish::AtFinish)).unwrap();
    assert!(!o.is_regular());
    o.finish().unwrap();
}

#[test]
fn without_replace_an_existing_file_is_left_alone() {
    let d = scratch("noreplace");
    let out = d.join("p.svg");
    std::fs::write(&out, "first").unwrap();
    let mut o = OutFile::create(&out, Options::new(Publish::AtFinish).with_replace(false)).unwrap();
    o.write_all(b"second").unwrap();
    let e = o.finish().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST), "{e}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "first");
    let dir = Dir::open(&d).unwrap();
    dir.remove(OsStr::new("p.svg")).unwrap();
    let mut o = dir
        .create(
            OsStr::new("p.svg"),
            Options::new(Publish::AtFinish).with_replace(false),
        )
        .unwrap();
    o.write_all(b"second").unwrap();
    o.finish().unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "second");
    let _ = std::fs::remove_dir_all(&d);
}

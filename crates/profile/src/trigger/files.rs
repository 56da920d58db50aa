//! A capture's files: folded stacks, SVG and pprof, each created new in
//! the output directory and put in place whole, never over a file.

use std::io::{BufWriter, Write};

use wakemeter_outfile::{Dir, Options, OutFile, Publish};

use super::*;

/// A [`wakemeter_outfile::Error`] of `path` as the crate's error.
pub(super) fn file_error(path: &Path, e: wakemeter_outfile::Error) -> ProfileError {
    let source = match e {
        wakemeter_outfile::Error::Io { source, .. } => source,
        other => std::io::Error::other(other.to_string()),
    };
    ProfileError::File {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes folded stacks, SVG and (optionally) pprof of one capture into
/// `dir`, never over an existing file.
pub(super) fn write_files(
    dir: &Dir,
    id: u64,
    trigger: &Trigger,
    profile: &Profile,
    pprof: bool,
) -> Result<CaptureFiles, ProfileError> {
    let stem = format!(
        "wakemeter-{}-{}-{id}-{}-{}",
        profile.pid,
        profile.start_unix_ns / 1_000_000_000,
        trigger.slug(),
        kind_label(profile.kind)
    );
    let mut written: Vec<PathBuf> = Vec::new();
    let result = (|| {
        let mut one = |ext: &str, write: &dyn Fn(&mut dyn Write) -> Result<(), ProfileError>| {
            let name = format!("{stem}.{ext}");
            let path = dir.path().join(&name);
            let out = dir
                .create(
                    name.as_ref(),
                    Options::new(Publish::AtFinish).with_replace(false),
                )
                .map_err(|e| file_error(&path, e))?;
            let mut out = BufWriter::new(out);
            write(&mut out)?;
            let out: OutFile = out.into_inner().map_err(|e| ProfileError::File {
                path: path.clone(),
                source: e.into_error(),
            })?;
            let bytes = out
                .file()
                .metadata()
                .map_err(|source| ProfileError::File {
                    path: path.clone(),
                    source,
                })?
                .len();
            out.finish().map_err(|e| file_error(&path, e))?;
            written.push(path.clone());
            Ok::<_, ProfileError>((path, bytes))
        };
        let (folded, a) = one("folded", &|w| crate::write_folded(profile, w))?;
        let (svg, b) = one("svg", &|w| crate::write_svg(profile, w))?;
        let (pprof, c) = if pprof {
            let (p, c) = one("pb.gz", &|w| crate::write_pprof(profile, w))?;
            (Some(p), c)
        } else {
            (None, 0)
        };
        Ok(CaptureFiles {
            folded,
            svg,
            pprof,
            bytes: a.saturating_add(b).saturating_add(c),
        })
    })();
    if result.is_err() {
        // Best effort: a half-written capture is not kept.
        for p in &written {
            let _ = std::fs::remove_file(p);
        }
    }
    result
}

/// Removes the files of dropped captures; reports the first failure
/// (after trying every file).
pub(super) fn remove_files(
    dir: Option<&Dir>,
    dropped: &[Arc<TriggeredProfile>],
) -> Result<(), ProfileError> {
    let mut first = None;
    for path in dropped
        .iter()
        .filter_map(|c| c.files.as_ref())
        .flat_map(CaptureFiles::paths)
    {
        // Through the directory's descriptor when it is the one the files
        // were written in (unlink never follows a link).
        let name = path
            .file_name()
            .filter(|_| dir.is_some_and(|d| path.parent() == Some(d.path())));
        let removed = match (dir, name) {
            (Some(d), Some(n)) => d.remove(n).map_err(|e| match e {
                wakemeter_outfile::Error::Io { source, .. } => source,
                other => std::io::Error::other(other.to_string()),
            }),
            _ => std::fs::remove_file(path),
        };
        match removed {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                first.get_or_insert(ProfileError::File {
                    path: path.to_owned(),
                    source,
                });
            }
        }
    }
    first.map_or(Ok(()), Err)
}

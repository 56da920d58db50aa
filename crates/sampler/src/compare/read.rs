//! Reading a recording line by line, with errors that say where.

use std::fmt;
use std::io::{BufRead, Read};

use super::{OLDEST_READABLE_SCHEMA_VERSION, RECORDING_SCHEMA_VERSION, RecordLine};

/// Longest line read, in bytes (a load tool's output is the longest
/// record: at most [`super::MAX_LOAD_OUTPUT`] bytes before escaping).
pub const MAX_LINE_BYTES: usize = 8 << 20;

/// What reading a recording found, besides its lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadSummary {
    /// Lines read (empty lines included).
    pub lines: u64,
    /// Process sections (headers).
    pub sections: u64,
    /// Interval lines.
    pub intervals: u64,
    /// Whether it ended with an end record; `false`: cut short (a
    /// recording killed, or still being written).
    pub complete: bool,
    /// The number of a last line that was cut off mid-way (no newline,
    /// not JSON): left out, the lines before it were read.
    pub truncated_line: Option<u64>,
}

/// What is wrong with a recording, and on which line.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadError {
    /// The line (from 1); 0 when the error is not about one line (an I/O
    /// error, an empty file).
    pub line: u64,
    /// What is wrong, in words.
    pub message: String,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.message)
        } else {
            write!(f, "line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for ReadError {}

fn err(line: u64, message: impl Into<String>) -> ReadError {
    ReadError {
        line,
        message: message.into(),
    }
}

/// Reads a recording from `input`, giving each line to `sink` as it is
/// read (memory: one line at a time). Checks that it starts with a header
/// of a readable schema version, that every line is a record with finite,
/// non-negative figures, and that nothing follows the end record. A last
/// line cut off mid-way is left out and reported in the summary.
///
/// # Errors
/// The first malformed line, an I/O error, or the `sink`'s error (with the
/// line it was given).
pub fn read_recording<R: BufRead>(
    mut input: R,
    mut sink: impl FnMut(RecordLine) -> Result<(), String>,
) -> Result<ReadSummary, ReadError> {
    let mut summary = ReadSummary::default();
    let mut buf = Vec::new();
    let mut seen_header = false;
    loop {
        buf.clear();
        let n = (&mut input)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| err(0, format!("cannot read: {e}")))?;
        if n == 0 {
            break;
        }
        summary.lines += 1;
        let at = summary.lines;
        let ended = buf.last() == Some(&b'\n');
        if !ended && buf.len() > MAX_LINE_BYTES {
            return Err(err(at, format!("longer than {MAX_LINE_BYTES} bytes")));
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if summary.complete {
            return Err(err(at, "a line after the end record"));
        }
        let line = match serde_json::from_slice::<RecordLine>(&buf) {
            Ok(line) => line,
            Err(_) if !ended && seen_header => {
                summary.truncated_line = Some(at);
                break;
            }
            // Said precisely from the JSON, when it is JSON.
            Err(e) => return Err(explain(&buf, at, seen_header, &e)),
        };
        match &line {
            RecordLine::Header(h) => check_version(u64::from(h.schema_version), at)?,
            _ if !seen_header => {
                return Err(err(
                    at,
                    "not a wakemeter recording (the first line is not a header)",
                ));
            }
            _ => {}
        }
        seen_header = true;
        match &line {
            RecordLine::Header(_) => summary.sections += 1,
            RecordLine::Interval(i) => {
                i.validate()
                    .map_err(|e| err(at, format!("malformed interval: {e}")))?;
                summary.intervals += 1;
            }
            RecordLine::Load(l) => {
                l.validate()
                    .map_err(|e| err(at, format!("malformed load record: {e}")))?;
            }
            RecordLine::End(_) => summary.complete = true,
        }
        sink(line).map_err(|e| err(at, e))?;
    }
    if !seen_header {
        return Err(err(0, "empty; not a wakemeter recording"));
    }
    Ok(summary)
}

fn check_version(version: u64, at: u64) -> Result<(), ReadError> {
    let readable = u64::from(OLDEST_READABLE_SCHEMA_VERSION)..=u64::from(RECORDING_SCHEMA_VERSION);
    if readable.contains(&version) {
        return Ok(());
    }
    Err(err(
        at,
        format!(
            "recording schema version {version}; this wakemeter reads versions \
             {OLDEST_READABLE_SCHEMA_VERSION} to {RECORDING_SCHEMA_VERSION} \
             (record it again with this version)"
        ),
    ))
}

/// Why a line that is not a record is not one.
fn explain(buf: &[u8], at: u64, seen_header: bool, e: &serde_json::Error) -> ReadError {
    let value: serde_json::Value = match serde_json::from_slice(buf) {
        Ok(v) => v,
        Err(e) if !seen_header => {
            return err(at, format!("not a wakemeter recording (not JSON: {e})"));
        }
        Err(e) => return err(at, format!("not JSON: {e}")),
    };
    let kind = value.get("record").and_then(|r| r.as_str()).unwrap_or("");
    if !seen_header && kind != "header" {
        return err(
            at,
            "not a wakemeter recording (the first line is not a header)",
        );
    }
    if kind == "header"
        && let Err(v) = check_version(
            value
                .get("schema_version")
                .and_then(|s| s.as_u64())
                .unwrap_or(0),
            at,
        )
    {
        return v;
    }
    let what = if kind.is_empty() { "record" } else { kind };
    err(at, format!("malformed {what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> String {
        let h = crate::compare::RecordingHeader {
            schema_version: RECORDING_SCHEMA_VERSION,
            report_schema_version: 1,
            library_version: "t".to_string(),
            target: crate::model::TargetIdentity {
                pid: 1,
                name: "a".to_string(),
                start_time_unix_ns: None,
            },
            config: Default::default(),
            system: Default::default(),
            start_unix_time_ns: 0,
            role: None,
            label: None,
        };
        serde_json::to_string(&RecordLine::Header(h)).unwrap()
    }

    fn interval(cpu: &str) -> String {
        let i = crate::compare::IntervalSummary {
            pid: Some(1),
            from_seq: 0,
            to_seq: 1,
            duration_ns: 1_000_000_000,
            process: crate::interval::ProcessInterval {
                cpu_percent: 1.25,
                ..Default::default()
            },
            switches_per_sec: None,
            voluntary_switches_per_sec: None,
            wakes_per_sec: None,
            groups: Vec::new(),
            loops: Vec::new(),
            sleeps: Vec::new(),
            sampler_cpu_percent: 0.0,
        };
        let text = serde_json::to_string(&RecordLine::Interval(i)).unwrap();
        assert!(text.contains("\"cpu_percent\":1.25"), "{text}");
        text.replace("\"cpu_percent\":1.25", &format!("\"cpu_percent\":{cpu}"))
    }

    fn read(text: &str) -> Result<(ReadSummary, usize), ReadError> {
        let mut n = 0;
        let s = read_recording(text.as_bytes(), |_| {
            n += 1;
            Ok(())
        })?;
        Ok((s, n))
    }

    #[test]
    fn complete_partial_and_truncated_recordings() {
        let h = header();
        let header_line = h.as_str();
        let i = interval("1.5");
        let end = r#"{"record":"end","intervals":1,"reason":"deadline","end_unix_time_ns":0}"#;
        let (s, n) = read(&format!("{header_line}\n{i}\n{end}\n")).unwrap();
        assert!(s.complete && s.truncated_line.is_none());
        assert_eq!((s.sections, s.intervals, n), (1, 1, 3));
        let (s, _) = read(&format!("{header_line}\n{i}\n")).unwrap();
        assert!(!s.complete);
        let (s, n) = read(&format!("{header_line}\n{i}\n{}", &i[..40])).unwrap();
        assert_eq!((s.truncated_line, s.intervals, n), (Some(3), 1, 2));
        let e = read(&format!("{header_line}\n{i}\n{end}\n{i}\n")).unwrap_err();
        assert_eq!(e.line, 4);
    }

    #[test]
    fn bad_lines_are_named_by_number() {
        let h = header();
        let header_line = h.as_str();
        let e = read("").unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
        let e = read("hello\n").unwrap_err();
        assert_eq!(e.line, 1);
        let e = read(&format!("{}\n", interval("1"))).unwrap_err();
        assert!(e.to_string().contains("first line is not a header"), "{e}");
        let e = read(&format!("{header_line}\n{}\n", interval("1e999"))).unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        let e = read(&format!("{header_line}\n{}\n", interval("-3"))).unwrap_err();
        assert!(
            e.to_string().starts_with("line 2: malformed interval"),
            "{e}"
        );
        let e = read(&format!("{header_line}\n{{\"record\":\"what\"}}\n")).unwrap_err();
        assert_eq!(e.line, 2);
        let e = read(&header_line.replace("\"schema_version\":2,", "\"schema_version\":9,"))
            .unwrap_err();
        assert!(e.to_string().contains("schema version 9"), "{e}");
    }
}

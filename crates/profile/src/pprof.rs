//! pprof protobuf (`profile.proto` of google/pprof), gzip-compressed: opens
//! in `go tool pprof`, Pyroscope and Grafana.
//!
//! The messages are declared here with prost's derive (no protoc at build
//! time); only the fields wakemeter fills are declared, with their numbers
//! from the published schema.

use std::collections::HashMap;
use std::io::Write;

use prost::Message;

use crate::error::ProfileError;
use crate::folded::folded_parts;
use crate::model::{Profile, StackKind};

/// `perftools.profiles.Profile`.
#[derive(Clone, PartialEq, Message)]
pub struct PprofProfile {
    /// Types of the values of each sample.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// The binaries the locations fall in; the first is the main
    /// executable.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<PprofMapping>,
    /// Locations (frames) referenced by samples.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Functions referenced by locations.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string; index 0 is "".
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Start of the capture, ns since the Unix epoch.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// Length of the capture, ns.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What one sampling period measures.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// The sampling period, in `period_type` units.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-form comments (string table indexes).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
}

/// `ValueType`: a type and a unit, as string table indexes.
#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    /// E.g. `samples`, `cpu`, `off_cpu`.
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// E.g. `count`, `nanoseconds`.
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `Sample`: a stack (leaf first) and its values.
#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    /// Location ids, innermost first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per `sample_type`.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels (thread, cause, waker).
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// `Label`: a key with a string or a number.
#[derive(Clone, PartialEq, Message)]
pub struct Label {
    /// Key (string table index).
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// String value (string table index), or 0.
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// Numeric value.
    #[prost(int64, tag = "3")]
    pub num: i64,
}

/// `Mapping`: a binary mapped into the process (or the kernel).
#[derive(Clone, PartialEq, Message)]
pub struct PprofMapping {
    /// Unique, non-zero.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// First address of the mapping.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// One past its last address.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// File offset that `memory_start` maps.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// The file's path (string table index).
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// GNU build ID in hex (string table index), or 0.
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Whether the locations of this mapping carry function names.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// Whether they carry source file names.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// Whether they carry line numbers.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
}

/// `Location`: one frame.
#[derive(Clone, PartialEq, Message)]
pub struct Location {
    /// Unique, non-zero.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The mapping holding `address`, or 0 (synthetic frames).
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// Instruction address.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// The function (and line) at this address.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

/// `Line`: a function and a source line.
#[derive(Clone, PartialEq, Message)]
pub struct Line {
    /// Function id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// Source line, 0 when unknown.
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// `Function`.
#[derive(Clone, PartialEq, Message)]
pub struct Function {
    /// Unique, non-zero.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Name (string table index).
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// System name (string table index).
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// Source file (string table index).
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

/// Builds the string table, functions and locations.
#[derive(Default)]
struct Tables {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    functions: Vec<Function>,
    function_ids: HashMap<(String, String), u64>,
    locations: Vec<Location>,
    location_ids: HashMap<(String, u64, u64), u64>,
}

impl Tables {
    fn string(&mut self, s: &str) -> i64 {
        if self.strings.is_empty() {
            self.strings.push(String::new());
            self.string_ids.insert(String::new(), 0);
        }
        if let Some(id) = self.string_ids.get(s) {
            return *id;
        }
        let id = i64::try_from(self.strings.len()).unwrap_or(i64::MAX);
        self.strings.push(s.to_owned());
        self.string_ids.insert(s.to_owned(), id);
        id
    }

    fn function(&mut self, name: &str, file: &str) -> u64 {
        let key = (name.to_owned(), file.to_owned());
        if let Some(id) = self.function_ids.get(&key) {
            return *id;
        }
        let id = self.functions.len() as u64 + 1;
        let name_id = self.string(name);
        let file_id = self.string(file);
        self.functions.push(Function {
            id,
            name: name_id,
            system_name: name_id,
            filename: file_id,
        });
        self.function_ids.insert(key, id);
        id
    }

    /// A location for a frame named `name` at `address` in mapping
    /// `mapping_id` (0 and 0 for synthetic frames such as the thread name).
    fn location(
        &mut self,
        name: &str,
        address: u64,
        mapping_id: u64,
        file: &str,
        line: u32,
    ) -> u64 {
        let key = (name.to_owned(), address, mapping_id);
        if let Some(id) = self.location_ids.get(&key) {
            return *id;
        }
        let function_id = self.function(name, file);
        let id = self.locations.len() as u64 + 1;
        self.locations.push(Location {
            id,
            mapping_id,
            address,
            line: vec![Line {
                function_id,
                line: i64::from(line),
            }],
        });
        self.location_ids.insert(key, id);
        id
    }
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The profile as a pprof message. Frames are the folded frames (thread
/// name at the root, `[off-cpu: cause]` as the leaf of off-CPU stacks), so
/// flame graphs in pprof tools match the SVG; the thread, cause and waker
/// are labels too. Real frames carry their plain function names
/// ([`crate::Frame::name`]) and their mapping (file, offsets, GNU build ID;
/// `[kernel.kallsyms]` for kernel frames), so a server can symbolize the
/// addresses again from the build ID.
pub fn to_pprof(profile: &Profile) -> PprofProfile {
    let mut t = Tables::default();
    t.string("");
    let (types, period_type, period): (&[(&str, &str)], (&str, &str), i64) = match profile.kind {
        StackKind::OnCpu => {
            let period = if profile.frequency_hz > 0 {
                1_000_000_000 / to_i64(profile.frequency_hz)
            } else {
                0
            };
            (
                &[("samples", "count"), ("cpu", "nanoseconds")],
                ("cpu", "nanoseconds"),
                period,
            )
        }
        StackKind::OffCpu => (
            &[("switches", "count"), ("off_cpu", "nanoseconds")],
            ("off_cpu", "nanoseconds"),
            0,
        ),
        _ => (&[("wakeups", "count")], ("wakeups", "count"), 1),
    };
    let sample_type = types
        .iter()
        .map(|(ty, unit)| ValueType {
            r#type: t.string(ty),
            unit: t.string(unit),
        })
        .collect();
    let period_type = Some(ValueType {
        r#type: t.string(period_type.0),
        unit: t.string(period_type.1),
    });

    let index = MappingIndex::new(profile);
    let mapping = mappings(profile, &index, &mut t);
    let mut samples = Vec::with_capacity(profile.samples.len());
    for s in &profile.samples {
        let mut ids: Vec<u64> = folded_parts(s)
            .iter()
            .map(|(name, frame)| match frame {
                Some(f) => {
                    let (file, line) = f
                        .source
                        .as_ref()
                        .map_or(("", 0), |(file, line)| (file.as_str(), *line));
                    let mapping_id = index.of(f);
                    t.location(&f.name(), f.address, mapping_id, file, line)
                }
                // Synthetic frames (thread, waker, cause, gaps): address 0.
                None => t.location(name, 0, 0, "", 0),
            })
            .collect();
        ids.reverse();
        let value = match profile.kind {
            StackKind::OnCpu => vec![to_i64(s.count), to_i64(s.count).saturating_mul(period)],
            StackKind::OffCpu => vec![to_i64(s.count), to_i64(s.total_ns)],
            _ => vec![to_i64(s.count)],
        };
        let mut label = vec![
            Label {
                key: t.string("thread"),
                str: t.string(&s.thread_name),
                num: 0,
            },
            Label {
                key: t.string("tid"),
                str: 0,
                num: i64::from(s.tid),
            },
        ];
        if let Some(cause) = s.cause {
            label.push(Label {
                key: t.string("cause"),
                str: t.string(cause.name()),
                num: 0,
            });
        }
        if let Some((tid, name)) = &s.waker {
            label.push(Label {
                key: t.string("waker"),
                str: t.string(&format!("{name} ({tid})")),
                num: 0,
            });
        }
        samples.push(Sample {
            location_id: ids,
            value,
            label,
        });
    }
    let comment = profile
        .warnings
        .iter()
        .map(|w| w.to_string())
        .collect::<Vec<_>>()
        .iter()
        .map(|w| t.string(w))
        .collect();
    PprofProfile {
        sample_type,
        sample: samples,
        mapping,
        location: t.locations,
        function: t.functions,
        string_table: t.strings,
        time_nanos: to_i64(profile.start_unix_ns),
        duration_nanos: i64::try_from(profile.duration.as_nanos()).unwrap_or(i64::MAX),
        period_type,
        period,
        comment,
    }
}

/// Which pprof mapping (id: 1-based index in [`Profile::mappings`]) holds
/// a frame.
struct MappingIndex {
    /// User mappings as (start, end, id), sorted by start.
    user: Vec<(u64, u64, u64)>,
    /// The kernel's id, 0 when none.
    kernel: u64,
}

impl MappingIndex {
    fn new(profile: &Profile) -> MappingIndex {
        let mut user = Vec::new();
        let mut kernel = 0;
        for (id, m) in (1u64..).zip(&profile.mappings) {
            if m.kernel {
                kernel = id;
            } else {
                user.push((m.start, m.end, id));
            }
        }
        user.sort_unstable();
        MappingIndex { user, kernel }
    }

    /// The id of the mapping holding `f`, 0 when none does.
    fn of(&self, f: &crate::Frame) -> u64 {
        if f.kernel {
            return self.kernel;
        }
        // A return address is looked up one byte earlier: the call before it.
        let addr = f.address.saturating_sub(1);
        let i = self.user.partition_point(|(start, _, _)| *start <= addr);
        match i.checked_sub(1).and_then(|i| self.user.get(i)) {
            Some((_, end, id)) if addr < *end => *id,
            _ => 0,
        }
    }
}

/// The profile's mappings as pprof mappings, ids 1, 2, ... in order (the
/// main executable first, as pprof expects). A mapping says it has
/// functions (and files, lines) only when every frame in it has them, so
/// that a server symbolizes the others.
fn mappings(profile: &Profile, index: &MappingIndex, t: &mut Tables) -> Vec<PprofMapping> {
    let mut names = vec![true; profile.mappings.len()];
    let mut files = vec![true; profile.mappings.len()];
    for f in profile.samples.iter().flat_map(|s| &s.frames) {
        let Some(i) = usize::try_from(index.of(f))
            .ok()
            .and_then(|id| id.checked_sub(1))
        else {
            continue;
        };
        if let (Some(n), Some(s)) = (names.get_mut(i), files.get_mut(i)) {
            *n &= f.function.is_some();
            *s &= f.source.is_some();
        }
    }
    (1u64..)
        .zip(&profile.mappings)
        .zip(names.into_iter().zip(files))
        .map(|((id, m), (names, files))| PprofMapping {
            id,
            memory_start: m.start,
            memory_limit: m.end,
            file_offset: m.file_offset,
            filename: t.string(&m.path),
            build_id: m.build_id.as_deref().map_or(0, |b| t.string(b)),
            has_functions: names,
            has_filenames: files,
            has_line_numbers: files,
        })
        .collect()
}

/// Writes the profile as gzip-compressed pprof protobuf.
///
/// # Errors
/// [`ProfileError::Write`] on an I/O error.
pub fn write_pprof(profile: &Profile, out: impl Write) -> Result<(), ProfileError> {
    let wrap = |source| ProfileError::Write {
        what: "pprof profile",
        source,
    };
    let bytes = to_pprof(profile).encode_to_vec();
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gz.write_all(&bytes).map_err(wrap)?;
    gz.finish().map_err(wrap)?.flush().map_err(wrap)
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::model::KERNEL_START;
    use crate::model::tests::off_cpu_profile;

    #[test]
    fn pprof_round_trips_with_leaf_first_locations() {
        let mut gz = Vec::new();
        write_pprof(&off_cpu_profile(), &mut gz).expect("pprof");
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut raw)
            .expect("gzip");
        let p = PprofProfile::decode(&raw[..]).expect("decode");
        let s = |i: i64| p.string_table[usize::try_from(i).expect("index")].clone();
        assert_eq!(s(0), "");
        let types: Vec<_> = p
            .sample_type
            .iter()
            .map(|t| (s(t.r#type), s(t.unit)))
            .collect();
        assert_eq!(
            types,
            [
                ("switches".to_owned(), "count".to_owned()),
                ("off_cpu".to_owned(), "nanoseconds".to_owned())
            ]
        );
        assert_eq!(p.sample.len(), 2);
        assert_eq!(p.sample[0].value, [3, 3_000_000]);
        let name_of = |loc: u64| {
            let l = &p.location[usize::try_from(loc - 1).expect("id")];
            let f = &p.function[usize::try_from(l.line[0].function_id - 1).expect("id")];
            s(f.name)
        };
        let names: Vec<_> = p.sample[0]
            .location_id
            .iter()
            .map(|id| name_of(*id))
            .collect();
        assert_eq!(
            names,
            [
                "[off-cpu: other]",
                "pipe_write",
                "/usr/bin/app+0x55",
                "log_request",
                "main",
                "worker:1"
            ]
        );
        let labels: Vec<_> = p.sample[1]
            .label
            .iter()
            .map(|l| (s(l.key), s(l.str), l.num))
            .collect();
        assert!(labels.contains(&("cause".into(), "lock".into(), 0)));
        assert!(labels.contains(&("tid".into(), String::new(), 7)));
        assert_eq!(p.comment.len(), 1);

        // Mappings: the executable first, with its build ID; kernel frames
        // are marked by the kernel's mapping, not by their names.
        let maps: Vec<_> = p
            .mapping
            .iter()
            .map(|m| (m.id, s(m.filename), s(m.build_id), m.memory_start))
            .collect();
        assert_eq!(
            maps,
            [
                (
                    1,
                    "/usr/bin/app".to_owned(),
                    "abcdef0123".to_owned(),
                    0x5000
                ),
                (
                    2,
                    "[kernel.kallsyms]".to_owned(),
                    String::new(),
                    KERNEL_START
                )
            ]
        );
        // The app's one frame has no function name: the server must
        // symbolize it; every kernel frame has one.
        assert!(!p.mapping[0].has_functions);
        assert!(p.mapping[1].has_functions);
        let mapping_of = |name: &str| {
            let f = p.function.iter().find(|f| s(f.name) == name).expect(name);
            let l = p
                .location
                .iter()
                .find(|l| l.line[0].function_id == f.id)
                .expect("location");
            (l.mapping_id, l.address)
        };
        assert_eq!(mapping_of("pipe_write"), (2, 0x1000));
        assert_eq!(mapping_of("/usr/bin/app+0x55"), (1, 0x5555));
        assert_eq!(mapping_of("worker:1"), (0, 0));
        assert!(!p.string_table.iter().any(|n| n.ends_with("_[k]")));
    }
}

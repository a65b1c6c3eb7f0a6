//! Tamper evidence for the archive: a hash-chained manifest per day.
//!
//! ```text
//! <archive>/YYYY/MM/DD/MANIFEST      0640, same owner and group as the day directory
//!   1 1234.json <sha256 of the file> <chain>
//!   2 1240.json <sha256>             <chain>
//! ```
//! One line per archive write, appended right after it under an exclusive `flock` on the manifest,
//! so concurrent epilogs never interleave. With `day` = `YYYY/MM/DD`:
//!
//! ```text
//! chain_0 = hex(sha256("jobscope-manifest-v1 " || day))
//! chain_n = hex(sha256(chain_{n-1} || " " || "<seq> <file name> <sha256>"))
//! ```
//!
//! [`verify_day`] (called for every day by `Store::verify` in archive.rs, which walks the tree)
//! recomputes every digest and the chain and reports, per day: files whose bytes changed
//! (**edited**), files listed but gone (**removed**), `*.json` files present but never listed
//! (**inserted**), and lines whose sequence number or chain value is wrong (**broken**: an edited,
//! deleted or inserted manifest line). A file written twice (a retried write of the same run) is checked
//! against its latest line.
//!
//! What this does and does not prove: it catches edits by anyone who does not also rewrite the
//! manifest from the edited line on, and any rewrite of the middle of a chain. Someone with root can
//! recompute a whole day's chain, and can truncate its tail together with the files it lists; to
//! catch that, keep each day's chain head ([`DayReport::head`]) somewhere else (syslog, the admin
//! mail, another host) and compare.

use jobscope_common::fsutil::{is_safe_name, open_regular, Access};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

pub const MANIFEST: &str = "MANIFEST";
const CHAIN_DOMAIN: &str = "jobscope-manifest-v1";
/// A manifest larger than this is not read (about 400 000 lines).
const MAX_MANIFEST_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("manifest {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("manifest: {0:?} cannot be listed (not a plain file name)")]
    BadName(String),
    #[error("manifest {path}: refusing to use it: {why}")]
    Unsafe { path: PathBuf, why: String },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ManifestError + '_ {
    move |source| ManifestError::Io {
        path: path.to_path_buf(),
        source,
    }
}

use jobscope_common::digest::{hex, sha256_hex};

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `YYYY/MM/DD` of a day directory: its last three path components.
fn day_of(day_dir: &Path) -> String {
    let parts: Vec<String> = day_dir
        .components()
        .rev()
        .take(3)
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.into_iter().rev().collect::<Vec<_>>().join("/")
}

/// The chain value before the first line of `day`.
pub fn genesis(day: &str) -> String {
    sha256_hex(format!("{CHAIN_DOMAIN} {day}").as_bytes())
}

/// The chain value of a line `record` (`<seq> <name> <sha256>`) following `prev`.
pub fn chain(prev: &str, record: &str) -> String {
    let mut h = Sha256::new();
    h.update(prev.as_bytes());
    h.update(b" ");
    h.update(record.as_bytes());
    hex(&h.finalize())
}

/// One line of a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub seq: u64,
    pub name: String,
    pub sha256: String,
    pub chain: String,
}

impl Entry {
    fn record(&self) -> String {
        format!("{} {} {}", self.seq, self.name, self.sha256)
    }

    fn parse(line: &str) -> Option<Entry> {
        let mut it = line.split(' ');
        let (seq, name, sha, ch) = (it.next()?, it.next()?, it.next()?, it.next()?);
        if it.next().is_some()
            || !is_safe_name(name)
            || !is_hex64(sha)
            || !is_hex64(ch)
            || seq.starts_with('0')
        {
            return None;
        }
        Some(Entry {
            seq: seq.parse().ok()?,
            name: name.to_string(),
            sha256: sha.to_string(),
            chain: ch.to_string(),
        })
    }
}

fn flock(f: &File, op: libc::c_int, path: &Path) -> Result<(), ManifestError> {
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(io_err(path)(e));
        }
    }
}

/// The last line that parses, if any (its seq and chain continue the manifest).
fn last_entry(text: &str) -> Option<Entry> {
    text.lines().rev().find_map(Entry::parse)
}

/// Appends `file_name` with the digest of `bytes` (what was just written to `day_dir/file_name`) to
/// `day_dir/MANIFEST`, creating it (0640, owned like `day_dir`) if needed. Safe against concurrent
/// appends from other processes (exclusive `flock`) and fsync'd before it returns.
pub fn append(day_dir: &Path, file_name: &str, bytes: &[u8]) -> Result<Entry, ManifestError> {
    if !is_safe_name(file_name) || file_name == MANIFEST {
        return Err(ManifestError::BadName(file_name.escape_debug().to_string()));
    }
    let path = day_dir.join(MANIFEST);
    let mut f = open_regular(&path, Access::AppendOrCreate(0o640)).map_err(io_err(&path))?;
    flock(&f, libc::LOCK_EX, &path)?;
    let md = f.metadata().map_err(io_err(&path))?;
    if md.len() > MAX_MANIFEST_BYTES {
        return Err(ManifestError::Unsafe {
            path,
            why: format!("{} bytes, more than {MAX_MANIFEST_BYTES}", md.len()),
        });
    }
    if md.len() == 0 {
        // New: give it the day directory's owner and group (root:<admin_group> in the archive).
        let dmd = std::fs::symlink_metadata(day_dir).map_err(io_err(day_dir))?;
        if dmd.uid() != md.uid() || dmd.gid() != md.gid() {
            std::os::unix::fs::fchown(&f, Some(dmd.uid()), Some(dmd.gid()))
                .map_err(io_err(&path))?;
        }
        f.set_permissions(std::fs::Permissions::from_mode(0o640))
            .map_err(io_err(&path))?;
    }
    let mut text = Vec::with_capacity(md.len() as usize);
    (&f).take(MAX_MANIFEST_BYTES)
        .read_to_end(&mut text)
        .map_err(io_err(&path))?;
    let text = String::from_utf8_lossy(&text);
    let (seq, prev) = match last_entry(&text) {
        // A last line at the largest sequence number is no line this code wrote (one per record,
        // from 1): appending after it would wrap, so the day is refused and `archive verify` names it.
        Some(e) => (
            e.seq.checked_add(1).ok_or_else(|| ManifestError::Unsafe {
                path: path.clone(),
                why: format!("its last line has sequence number {}", e.seq),
            })?,
            e.chain,
        ),
        None => (1, genesis(&day_of(day_dir))),
    };
    let mut e = Entry {
        seq,
        name: file_name.to_string(),
        sha256: sha256_hex(bytes),
        chain: String::new(),
    };
    e.chain = chain(&prev, &e.record());
    // A torn last line (a crash mid-write) stays a line of its own, which verify reports.
    let torn = !text.is_empty() && !text.ends_with('\n');
    let line = format!(
        "{}{} {}\n",
        if torn { "\n" } else { "" },
        e.record(),
        e.chain
    );
    f.write_all(line.as_bytes()).map_err(io_err(&path))?;
    f.sync_data().map_err(io_err(&path))?;
    if md.len() == 0 {
        jobscope_common::fsutil::sync_dir(day_dir);
    }
    Ok(e)
}

/// The lines of `day_dir/MANIFEST` that parse, in file order, and the manifest's size in bytes (a
/// reader that remembers the size can skip a day that did not grow). Read under a shared `flock`,
/// so a line being appended is never half-read. No manifest: no lines, size 0. The chain is not
/// checked here (that is [`verify_day`]'s job); a reader that trusts a file checks its SHA-256
/// against the latest line naming it.
pub fn read_entries(day_dir: &Path) -> Result<(Vec<Entry>, u64), ManifestError> {
    let path = day_dir.join(MANIFEST);
    let f = match open_regular(&path, Access::Read) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => return Err(io_err(&path)(e)),
    };
    flock(&f, libc::LOCK_SH, &path)?;
    let mut b = Vec::new();
    (&f).take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut b)
        .map_err(io_err(&path))?;
    if b.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(ManifestError::Unsafe {
            path,
            why: format!("larger than {MAX_MANIFEST_BYTES} bytes"),
        });
    }
    let text = String::from_utf8_lossy(&b);
    Ok((
        text.lines().filter_map(Entry::parse).collect(),
        b.len() as u64,
    ))
}

/// A manifest line that does not fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    /// 1-based line number in MANIFEST.
    pub line: usize,
    pub why: String,
}

/// The verdict on one day.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DayReport {
    /// `YYYY/MM/DD`.
    pub day: String,
    /// Lines that parsed.
    pub entries: usize,
    /// `*.json` files present.
    pub files: usize,
    /// The day has `*.json` files but no MANIFEST.
    pub manifest_missing: bool,
    /// Listed, present, but their SHA-256 differs from the (latest) listed one.
    pub edited: Vec<String>,
    /// Listed but missing.
    pub removed: Vec<String>,
    /// Present `*.json` (or not a regular file) but never listed.
    pub inserted: Vec<String>,
    pub broken: Vec<Broken>,
    /// The chain value of the last line: record it elsewhere to detect a rewritten day.
    pub head: Option<String>,
    /// Trouble reading the day (I/O errors), not evidence of tampering in itself.
    pub problems: Vec<String>,
}

impl DayReport {
    pub fn ok(&self) -> bool {
        !self.manifest_missing
            && self.edited.is_empty()
            && self.removed.is_empty()
            && self.inserted.is_empty()
            && self.broken.is_empty()
            && self.problems.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    pub days: Vec<DayReport>,
    /// Owners' copies (`users/<uid>/*.json`) checked against their records.
    pub user_copies: usize,
    /// `users/<uid>/<file>: <finding>`, one per copy that is not its record's bytes or not root's
    /// (the checks are in archive.rs, `Store::verify`).
    pub user_findings: Vec<String>,
    /// `<path>: <error>`, one per directory of the tree (the root, a year, month or day, `users/`)
    /// that could not be read: its days were not checked, so the archive is not "all OK".
    pub unreadable: Vec<String>,
}

impl VerifyReport {
    pub fn ok(&self) -> bool {
        self.days.iter().all(DayReport::ok)
            && self.user_findings.is_empty()
            && self.unreadable.is_empty()
    }

    /// Days with findings.
    pub fn failures(&self) -> impl Iterator<Item = &DayReport> {
        self.days.iter().filter(|d| !d.ok())
    }

    /// A human-readable account, one finding a line; "OK" lines only for clean days when `verbose`.
    pub fn render(&self, verbose: bool) -> String {
        let mut out = String::new();
        for d in &self.days {
            if d.ok() {
                if verbose {
                    out += &format!(
                        "{}: OK, {} file(s), head {}\n",
                        d.day,
                        d.files,
                        d.head.as_deref().unwrap_or("-")
                    );
                }
                continue;
            }
            if d.manifest_missing {
                out += &format!(
                    "{}: no MANIFEST ({} file(s) unaccounted for)\n",
                    d.day, d.files
                );
            }
            for n in &d.edited {
                out += &format!(
                    "{}: EDITED   {n} (digest differs from the manifest)\n",
                    d.day
                );
            }
            for n in &d.removed {
                out += &format!("{}: REMOVED  {n} (listed, missing)\n", d.day);
            }
            for n in &d.inserted {
                out += &format!("{}: INSERTED {n} (present, never listed)\n", d.day);
            }
            for b in &d.broken {
                out += &format!("{}: BROKEN   MANIFEST line {}: {}\n", d.day, b.line, b.why);
            }
            for p in &d.problems {
                out += &format!("{}: cannot check: {p}\n", d.day);
            }
        }
        for f in &self.user_findings {
            out += &format!("{f}\n");
        }
        for u in &self.unreadable {
            out += &format!("cannot read {u} (not checked)\n");
        }
        let bad = self.failures().count();
        // Nothing is "all OK" when part of the tree could not be read.
        let all_ok = if self.unreadable.is_empty() {
            "all OK"
        } else {
            "OK as far as read"
        };
        out += &format!(
            "{} day(s) checked, {}; {} owner's copies checked, {}\n",
            self.days.len(),
            if bad == 0 {
                all_ok.to_string()
            } else {
                format!("{bad} with findings")
            },
            self.user_copies,
            if self.user_findings.is_empty() {
                all_ok.to_string()
            } else {
                format!("{} with findings", self.user_findings.len())
            }
        );
        if !self.unreadable.is_empty() {
            out += &format!(
                "{} director(ies) could not be read: the archive was NOT fully checked\n",
                self.unreadable.len()
            );
        }
        out
    }
}

/// SHA-256 of a regular file's bytes (symlinks refused).
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut f = open_regular(path, Access::Read)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(hex(&h.finalize()))
}

/// Checks one day directory; `day` is its `YYYY/MM/DD` (part of the chain). `files` are the day's
/// `*.json` entries as the archive's walker listed them: (name, is a regular file).
pub fn verify_day(day_dir: &Path, day: &str, files: &[(String, bool)]) -> DayReport {
    let mut r = DayReport {
        day: day.to_string(),
        ..Default::default()
    };
    let present: BTreeMap<String, bool> = files.iter().cloned().collect();
    r.files = present.len();

    let path = day_dir.join(MANIFEST);
    let text = match open_regular(&path, Access::Read) {
        Ok(f) => {
            // A shared lock: never read a line an epilog is half-way through appending.
            if let Err(e) = flock(&f, libc::LOCK_SH, &path) {
                r.problems.push(e.to_string());
                return r;
            }
            let mut b = Vec::new();
            if let Err(e) = (&f).take(MAX_MANIFEST_BYTES + 1).read_to_end(&mut b) {
                r.problems.push(format!("{}: {e}", path.display()));
                return r;
            }
            if b.len() as u64 > MAX_MANIFEST_BYTES {
                r.problems.push(format!(
                    "{}: larger than {MAX_MANIFEST_BYTES} bytes",
                    path.display()
                ));
                return r;
            }
            String::from_utf8_lossy(&b).into_owned()
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !present.is_empty() {
                r.manifest_missing = true;
                r.inserted = present.keys().cloned().collect();
            }
            return r;
        }
        Err(e) => {
            r.problems.push(format!("{}: {e}", path.display()));
            return r;
        }
    };

    // The chain, line by line. After a bad line, go on from the value it records, so one edit is
    // reported once, at the line where it is, not on every line after it.
    let mut prev = genesis(day);
    let mut expect_seq = 1u64;
    let mut latest: BTreeMap<String, String> = BTreeMap::new();
    for (i, line) in text.split_terminator('\n').enumerate() {
        let line_no = i + 1;
        let Some(e) = Entry::parse(line) else {
            r.broken.push(Broken {
                line: line_no,
                why: format!(
                    "not a manifest line: {:?}",
                    line.chars().take(120).collect::<String>()
                ),
            });
            continue;
        };
        r.entries += 1;
        if e.seq != expect_seq {
            r.broken.push(Broken {
                line: line_no,
                why: format!("sequence number {}, expected {expect_seq}", e.seq),
            });
        }
        if chain(&prev, &e.record()) != e.chain {
            r.broken.push(Broken {
                line: line_no,
                why: format!(
                    "chain value does not follow from the line before ({})",
                    e.name
                ),
            });
        }
        prev = e.chain.clone();
        expect_seq = e.seq + 1;
        latest.insert(e.name.clone(), e.sha256.clone());
        r.head = Some(e.chain);
    }

    for (name, want) in &latest {
        match present.get(name) {
            None => r.removed.push(name.clone()),
            Some(false) => r.edited.push(format!("{name} (not a regular file)")),
            Some(true) => match sha256_file(&day_dir.join(name)) {
                Ok(got) if &got == want => {}
                Ok(_) => r.edited.push(name.clone()),
                Err(e) => r.problems.push(format!("{name}: {e}")),
            },
        }
    }
    for (name, regular) in &present {
        if !latest.contains_key(name) {
            r.inserted.push(if *regular {
                name.clone()
            } else {
                format!("{name} (not a regular file)")
            });
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The archive's walk over all days (manifest.rs itself checks one day at a time).
    fn verify(root: &Path) -> VerifyReport {
        crate::Store::new(root, "root").verify()
    }

    /// An archive with two days, written the way the epilog does: file, then manifest line.
    fn archive() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let a = tempfile::tempdir().unwrap();
        let d1 = a.path().join("2026/11/21");
        let d2 = a.path().join("2026/11/22");
        for (dir, jobs) in [(&d1, 1..=3), (&d2, 4..=5)] {
            std::fs::create_dir_all(dir).unwrap();
            for j in jobs {
                write(
                    dir,
                    &format!("{j}.json"),
                    format!("{{\"job_id\":{j}}}").as_bytes(),
                );
            }
        }
        (a, d1, d2)
    }

    fn write(dir: &Path, name: &str, bytes: &[u8]) {
        std::fs::write(dir.join(name), bytes).unwrap();
        append(dir, name, bytes).unwrap();
    }

    /// A last line at sequence number u64::MAX (a damaged or forged MANIFEST) is not continued:
    /// the next append is refused with the path, and the file is left as it was rather than given
    /// a line whose number wrapped and that nothing can parse.
    #[test]
    fn a_line_at_the_largest_sequence_number_is_not_continued() {
        let (_a, d1, _) = archive();
        let m = d1.join(MANIFEST);
        let last = read_entries(&d1).unwrap().0.pop().unwrap();
        let forged = Entry {
            seq: u64::MAX,
            ..last
        };
        let mut text = std::fs::read_to_string(&m).unwrap();
        text.push_str(&format!("{} {}\n", forged.record(), forged.chain));
        std::fs::write(&m, &text).unwrap();
        std::fs::write(d1.join("9.json"), "{}").unwrap();
        let err = append(&d1, "9.json", b"{}").unwrap_err().to_string();
        assert!(
            err.contains("MANIFEST") && err.contains(&u64::MAX.to_string()),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&m).unwrap(), text);
    }

    #[test]
    fn a_clean_archive_verifies() {
        let (a, d1, _) = archive();
        let r = verify(a.path());
        assert!(r.ok(), "{}", r.render(true));
        assert_eq!(r.days.len(), 2);
        assert_eq!(r.days[0].day, "2026/11/21");
        assert_eq!(r.days[0].entries, 3);
        assert!(r.days[0].head.is_some());
        let text = std::fs::read_to_string(d1.join(MANIFEST)).unwrap();
        let first = text.lines().next().unwrap();
        // field(MANIFEST line 1): seq, name, sha256 of the bytes written, chain from the day's genesis
        let sha = sha256_hex(b"{\"job_id\":1}");
        let rec = format!("1 1.json {sha}");
        assert_eq!(
            first,
            format!("{rec} {}", chain(&genesis("2026/11/21"), &rec))
        );
        let md = std::fs::metadata(d1.join(MANIFEST)).unwrap();
        assert_eq!(md.mode() & 0o777, 0o640);
        assert!(r
            .render(false)
            .ends_with("2 day(s) checked, all OK; 0 owner's copies checked, all OK\n"));
    }

    #[test]
    fn a_changed_byte_is_caught() {
        let (a, d1, _) = archive();
        let p = d1.join("2.json");
        let mut b = std::fs::read(&p).unwrap();
        b[3] ^= 1;
        std::fs::write(&p, b).unwrap();
        let r = verify(a.path());
        assert!(!r.ok());
        assert_eq!(r.days[0].edited, vec!["2.json".to_string()]);
        assert!(r.days[0].broken.is_empty() && r.days[0].removed.is_empty());
        assert!(r.days[1].ok());
        assert!(r.render(false).contains("2026/11/21: EDITED   2.json"));
    }

    #[test]
    fn a_deleted_file_is_caught() {
        let (a, _, d2) = archive();
        std::fs::remove_file(d2.join("5.json")).unwrap();
        let r = verify(a.path());
        assert_eq!(r.days[1].removed, vec!["5.json".to_string()]);
        assert!(r.days[0].ok());
    }

    #[test]
    fn an_inserted_file_is_caught() {
        let (a, d1, _) = archive();
        std::fs::write(d1.join("99.json"), "{}").unwrap();
        std::os::unix::fs::symlink(d1.join("1.json"), d1.join("98.json")).unwrap();
        // write_atomic's hidden temp files are not archive records.
        std::fs::write(d1.join(".7.json.tmp.123"), "{}").unwrap();
        let r = verify(a.path());
        assert_eq!(
            r.days[0].inserted,
            vec![
                "98.json (not a regular file)".to_string(),
                "99.json".to_string()
            ]
        );
        // A day with files and no manifest at all.
        let d3 = a.path().join("2026/11/23");
        std::fs::create_dir_all(&d3).unwrap();
        std::fs::write(d3.join("7.json"), "{}").unwrap();
        let r = verify(a.path());
        assert!(r.days[2].manifest_missing);
        assert_eq!(r.days[2].inserted, vec!["7.json".to_string()]);
    }

    #[test]
    fn a_doctored_manifest_breaks_the_chain() {
        let (a, d1, _) = archive();
        // Edit a file AND its digest in the manifest: the chain gives it away.
        let p = d1.join("2.json");
        std::fs::write(&p, "{\"job_id\":2,\"forged\":true}").unwrap();
        let m = d1.join(MANIFEST);
        let text = std::fs::read_to_string(&m).unwrap();
        let old = sha256_hex(b"{\"job_id\":2}");
        let new = sha256_hex(b"{\"job_id\":2,\"forged\":true}");
        std::fs::write(&m, text.replace(&old, &new)).unwrap();
        let r = verify(a.path());
        assert!(r.days[0].edited.is_empty());
        assert_eq!(r.days[0].broken.len(), 1, "{:?}", r.days[0].broken);
        assert_eq!(r.days[0].broken[0].line, 2);

        // Delete a line (and its file): the sequence and the chain give it away.
        let (a, d1, _) = archive();
        let m = d1.join(MANIFEST);
        let text = std::fs::read_to_string(&m).unwrap();
        let kept: Vec<&str> = text
            .lines()
            .enumerate()
            .filter(|(i, _)| *i != 1)
            .map(|(_, l)| l)
            .collect();
        std::fs::write(&m, kept.join("\n") + "\n").unwrap();
        std::fs::remove_file(d1.join("2.json")).unwrap();
        let r = verify(a.path());
        let whys: Vec<&str> = r.days[0].broken.iter().map(|b| b.why.as_str()).collect();
        assert_eq!(whys.len(), 2, "{whys:?}");
        assert!(whys[0].starts_with("sequence number 3, expected 2"));
        assert!(whys[1].starts_with("chain value"));
        assert!(r.days[0].removed.is_empty() && r.days[0].inserted.is_empty());

        // Moving a day's files and manifest to another day: the genesis differs.
        let (a, d1, _) = archive();
        let other = a.path().join("2025/01/01");
        std::fs::create_dir_all(other.parent().unwrap()).unwrap();
        std::fs::rename(&d1, &other).unwrap();
        let r = verify(a.path());
        assert_eq!(r.days[0].day, "2025/01/01");
        assert_eq!(r.days[0].broken.len(), 1);
        assert_eq!(r.days[0].broken[0].line, 1);
    }

    #[test]
    fn rewrites_torn_lines_and_bad_names() {
        let (a, d1, _) = archive();
        // A job id reused the same day: the latest line counts.
        write(&d1, "1.json", b"{\"job_id\":1,\"run\":2}");
        assert!(verify(a.path()).ok());
        // A crash mid-append left half a line: reported, and the next append goes on after it.
        let m = d1.join(MANIFEST);
        let mut f = std::fs::OpenOptions::new().append(true).open(&m).unwrap();
        f.write_all(b"5 torn.json abc").unwrap();
        drop(f);
        write(&d1, "6.json", b"{}");
        let r = verify(a.path());
        assert_eq!(r.days[0].broken.len(), 1, "{:?}", r.days[0].broken);
        assert!(r.days[0].broken[0].why.starts_with("not a manifest line"));
        assert!(r.days[0].edited.is_empty() && r.days[0].inserted.is_empty());
        assert_eq!(r.days[0].entries, 5);
        for bad in ["", "a b", "../x", "MANIFEST", "x\ny"] {
            assert!(matches!(
                append(&d1, bad, b""),
                Err(ManifestError::BadName(_))
            ));
        }
    }

    #[test]
    fn concurrent_appends_do_not_interleave() {
        let a = tempfile::tempdir().unwrap();
        let day = a.path().join("2026/11/21");
        std::fs::create_dir_all(&day).unwrap();
        std::thread::scope(|s| {
            for t in 0..8 {
                let day = &day;
                s.spawn(move || {
                    for j in 0..25 {
                        let name = format!("{}.json", t * 1000 + j);
                        let body = format!("{{\"t\":{t},\"j\":{j}}}");
                        write(day, &name, body.as_bytes());
                    }
                });
            }
        });
        let r = verify(a.path());
        assert!(r.ok(), "{}", r.render(true));
        assert_eq!(r.days[0].entries, 200);
        assert_eq!(r.days[0].files, 200);
    }
}

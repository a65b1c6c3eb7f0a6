//! `/proc/<pid>/stat`, the one parser for every reader of it (the process tree of `jobscope run`,
//! the I/O accumulator's identities, [`super::read_process_info`]). Pure: [`parse_stat`] and
//! [`parse_stat_at`] take the file's bytes; [`read_stat`] is the I/O.
//!
//! `comm` (field 2) is whatever the process named itself (`prctl(PR_SET_NAME)`): up to 15 bytes of
//! anything but NUL, so spaces, parentheses, newlines and bytes that are not UTF-8. It is hostile
//! input: the fields are counted from the *last* `)`, and the file is parsed as bytes, so no name
//! can hide a process from the job's totals or shift its fields.
use super::kfile::{self, Error, ReadBuf};
use std::path::Path;

/// The fields of `/proc/<pid>/stat` jobscope uses (proc(5) numbers them from 1, the pid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcStat {
    /// Field 4; 0 if the kernel reports none.
    pub ppid: u32,
    /// Field 14: user CPU time, clock ticks.
    pub utime_ticks: u64,
    /// Field 15: system CPU time, clock ticks.
    pub stime_ticks: u64,
    /// Field 16: user time of the children this process has reaped (signed in the kernel's
    /// format, never negative in practice: a negative one reads as 0).
    pub cutime_ticks: u64,
    /// Field 17: system time of the reaped children (as `cutime_ticks`).
    pub cstime_ticks: u64,
    /// Field 20.
    pub threads: u64,
    /// Field 22: start time in clock ticks since boot (with the pid, it identifies a process
    /// across pid reuse).
    pub starttime_ticks: u64,
}

/// Parses a `stat` line: its fields and its `comm` (the bytes between the first `(` and the last
/// `)`). `None` when it is not a `stat` line (fewer than 22 fields, a field not a number).
pub fn parse_stat(bytes: &[u8]) -> Option<(ProcStat, &[u8])> {
    let open = bytes.iter().position(|&b| b == b'(')?;
    let close = bytes.iter().rposition(|&b| b == b')')?;
    let comm = bytes.get(open + 1..close)?;
    // What follows the name is the kernel's: ASCII numbers and the state letter.
    let rest = std::str::from_utf8(&bytes[close + 1..]).ok()?;
    // After comm: state(3) ppid(4) pgrp(5) session(6) tty_nr(7) tpgid(8) flags(9) minflt(10)
    // cminflt(11) majflt(12) cmajflt(13) utime(14) stime(15) cutime(16) cstime(17) priority(18)
    // nice(19) num_threads(20) itrealvalue(21) starttime(22).
    let mut f = [""; 20];
    let mut n = 0;
    for (slot, field) in f.iter_mut().zip(rest.split_ascii_whitespace()) {
        *slot = field;
        n += 1;
    }
    if n < f.len() {
        return None;
    }
    let field = |i: usize| f[i - 3];
    let unsigned = |i: usize| field(i).parse::<u64>().ok();
    let clamped = |i: usize| field(i).parse::<i64>().ok().map(|v| v.max(0) as u64);
    let stat = ProcStat {
        ppid: u32::try_from(field(4).parse::<i64>().ok()?).unwrap_or(0),
        utime_ticks: unsigned(14)?,
        stime_ticks: unsigned(15)?,
        cutime_ticks: clamped(16)?,
        cstime_ticks: clamped(17)?,
        threads: unsigned(20)?,
        starttime_ticks: unsigned(22)?,
    };
    Some((stat, comm))
}

/// [`parse_stat`] of the bytes read from `path`, the path on the error: an empty file is what an
/// exiting process gives (`Gone`), anything else that does not parse is `Malformed`.
pub fn parse_stat_at<'b>(bytes: &'b [u8], path: &Path) -> Result<(ProcStat, &'b [u8]), Error> {
    if bytes.is_empty() {
        return Err(Error::Gone {
            path: path.to_path_buf(),
        });
    }
    parse_stat(bytes).ok_or_else(|| Error::malformed(path, &String::from_utf8_lossy(bytes)))
}

/// Reads and parses the `stat` file at `path` (open, read, close) with `buf`.
pub fn read_stat<'b>(path: &Path, buf: &'b mut ReadBuf) -> Result<(ProcStat, &'b [u8]), Error> {
    let f = kfile::open_file(path)?;
    parse_stat_at(buf.read_all_bytes(&f, path)?, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real line (this host's `/proc/self/stat` for `cat`, 52 fields).
    const REAL: &[u8] =
        b"2589 (cat) R 2570 2589 2570 34816 2589 4194304 97 0 0 0 7 3 0 0 20 0 1 0 \
        123456 5738496 236 18446744073709551615 94238912880640 94238912896161 140724385553456 0 0 \
        0 0 0 0 0 0 0 17 3 0 0 0 0 0 94238912911600 94238912913152 94238944698368 140724385557795 \
        140724385557815 140724385557815 140724385558507 0\n";

    #[test]
    fn the_fields_of_a_real_line() {
        let (s, comm) = parse_stat(REAL).unwrap();
        assert_eq!(comm, b"cat");
        assert_eq!(
            s,
            ProcStat {
                ppid: 2570,
                utime_ticks: 7,
                stime_ticks: 3,
                cutime_ticks: 0,
                cstime_ticks: 0,
                threads: 1,
                starttime_ticks: 123456,
            }
        );
    }

    /// Names a user can give a process: each must leave the fields where they are.
    #[test]
    fn a_hostile_name_cannot_shift_the_fields() {
        for name in [
            &b"a) b (c"[..],
            b") S 1 2 3 4 5",
            b"x)\n9 (y",
            b"((",
            b"))",
            b"",
            b"\xff\xfe bad utf8",
        ] {
            let mut line = b"42 (".to_vec();
            line.extend_from_slice(name);
            line.extend_from_slice(
                b") S 7 42 42 0 -1 4194304 100 0 0 0 250 30 -12 3 20 0 5 0 999 1000 200\n",
            );
            let (s, comm) = parse_stat(&line).unwrap_or_else(|| panic!("{name:?}"));
            assert_eq!(comm, name);
            assert_eq!(
                (
                    s.ppid,
                    s.utime_ticks,
                    s.stime_ticks,
                    s.cutime_ticks,
                    s.cstime_ticks
                ),
                (7, 250, 30, 0, 3),
                "{name:?}"
            );
            assert_eq!((s.threads, s.starttime_ticks), (5, 999), "{name:?}");
        }
    }

    #[test]
    fn what_is_not_a_stat_line_is_refused_with_its_path() {
        for bad in [
            &b"42 (x) S 7 1 2"[..], // short: no starttime
            b"no parenthesis",
            b"42 )x( S 7 42 42 0 -1 4194304 100 0 0 0 250 30 12 3 20 0 5 0 999",
            b"42 (x) S 7 42 42 0 -1 4194304 100 0 0 0 lots 30 12 3 20 0 5 0 999",
        ] {
            assert_eq!(parse_stat(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        let path = Path::new("/proc/42/stat");
        let e = parse_stat_at(b"42 (x) S 7 1 2", path).unwrap_err();
        assert!(matches!(e, Error::Malformed { .. }), "{e:?}");
        assert_eq!(e.path(), path);
        let e = parse_stat_at(b"", path).unwrap_err();
        assert!(e.is_gone(), "an exiting process's empty file: {e:?}");
        assert_eq!(e.path(), path);
    }

    #[test]
    fn a_negative_parent_reads_as_none() {
        let (s, _) =
            parse_stat(b"1 (init) S -1 1 1 0 -1 4194560 0 0 0 0 1 2 0 0 20 0 1 0 5 0 0").unwrap();
        assert_eq!((s.ppid, s.starttime_ticks), (0, 5));
    }

    /// The I/O edge: a name that is not UTF-8 reads like any other (a text read refused it).
    #[test]
    fn read_stat_takes_the_file_as_bytes() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("stat");
        std::fs::write(
            &path,
            b"7 (\xc3\x28x) S 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 2 0 55 0 0\n",
        )
        .unwrap();
        let mut buf = ReadBuf::new();
        let (s, comm) = read_stat(&path, &mut buf).unwrap();
        assert_eq!(comm, b"\xc3\x28x");
        assert_eq!((s.ppid, s.threads, s.starttime_ticks), (1, 2, 55));
        let gone = d.path().join("8/stat");
        assert!(read_stat(&gone, &mut buf).unwrap_err().is_gone());
    }
}

//! Pure parsers for cgroup v1/v2 control files and `/proc/<pid>/cgroup`. No I/O here: every
//! function takes the file's text, so fixtures and proptest can drive them directly.
//!
//! Conventions:
//! - Single-value files parse to `Result<_, BadLine>`.
//! - Keyed files ("key value" per line) parse to [`Parsed`]: every field is an `Option<u64>`, a key
//!   the kernel did not print stays `None` (never 0), unknown keys are ignored (newer kernels add
//!   keys), and a known key whose value does not parse leaves that field `None` and is reported in
//!   [`Parsed::bad_line`], so the other fields of the same file are still usable.
//! - Nothing here panics on any input: sums use checked arithmetic (an overflow makes the field
//!   `None`), indexing is avoided.

/// A line that did not parse, kept verbatim (the reader adds the path, see
/// [`crate::procio::Error::Malformed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine(pub String);

impl BadLine {
    fn new(line: &str) -> Self {
        BadLine(line.to_owned())
    }
}

/// A keyed file parsed as far as possible: `value` holds every field that parsed, `bad_line`
/// the first line of a known key that did not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed<T> {
    pub value: T,
    pub bad_line: Option<BadLine>,
}

impl<T> Parsed<T> {
    /// Strict view: the value only if every known line parsed.
    pub fn into_result(self) -> Result<T, BadLine> {
        match self.bad_line {
            None => Ok(self.value),
            Some(b) => Err(b),
        }
    }
}

/// The first non-empty line, trimmed; cgroup single-value files end with `\n`.
fn single_line(text: &str) -> Result<&str, BadLine> {
    let t = text.trim();
    if t.is_empty() || t.contains('\n') {
        return Err(BadLine::new(text.lines().next().unwrap_or("")));
    }
    Ok(t)
}

/// A file holding one unsigned integer (`cpuacct.usage`, `memory.current`, `pids.current` ...).
pub fn parse_u64(text: &str) -> Result<u64, BadLine> {
    let t = single_line(text)?;
    t.parse::<u64>().map_err(|_| BadLine::new(t))
}

/// Any v1 limit at or above this is "unlimited". The kernel prints `PAGE_COUNTER_MAX * PAGE_SIZE`,
/// i.e. `LONG_MAX` rounded down to a page: 9223372036854771712 with 4 KiB pages,
/// 9223372036854710272 with 64 KiB pages (arm64, ppc64le). No real limit is anywhere near 4 EiB.
pub const V1_UNLIMITED_THRESHOLD: u64 = 1 << 62;

/// v1 `memory.limit_in_bytes`: `None` when unlimited (see [`V1_UNLIMITED_THRESHOLD`]).
pub fn parse_limit_v1(text: &str) -> Result<Option<u64>, BadLine> {
    let v = parse_u64(text)?;
    Ok((v < V1_UNLIMITED_THRESHOLD).then_some(v))
}

/// v2 `memory.max` / `memory.high` / `pids.max`: the word `max` means unlimited → `None`.
pub fn parse_max_or_u64(text: &str) -> Result<Option<u64>, BadLine> {
    let t = single_line(text)?;
    if t == "max" {
        return Ok(None);
    }
    t.parse::<u64>().map(Some).map_err(|_| BadLine::new(t))
}

/// v1 `cpuacct.usage_percpu`: space-separated ns per possible CPU, with a trailing space
/// (`"17730021 3310141141 \n"`).
pub fn parse_u64_list(text: &str) -> Result<Vec<u64>, BadLine> {
    let mut out = Vec::new();
    parse_u64_list_into(text, &mut out)?;
    Ok(out)
}

/// [`parse_u64_list`] into a caller's vector (cleared first), so a reader can reuse it.
pub fn parse_u64_list_into(text: &str, out: &mut Vec<u64>) -> Result<(), BadLine> {
    out.clear();
    let t = single_line(text)?;
    for w in t.split_ascii_whitespace() {
        match w.parse::<u64>() {
            Ok(n) => out.push(n),
            Err(_) => {
                out.clear();
                return Err(BadLine::new(t));
            }
        }
    }
    Ok(())
}

/// `cgroup.procs`, `tasks`, `cgroup.threads`: one id per line (possibly empty). Appends to `out`
/// so the caller can reuse one vector across a walk. On a bad line `out` keeps the ids before it.
pub fn parse_id_list(text: &str, out: &mut Vec<u32>) -> Result<(), BadLine> {
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        out.push(line.parse::<u32>().map_err(|_| BadLine::new(line))?);
    }
    Ok(())
}

/// Declares a struct of `Option<u64>` for a keyed file, with the kernel key of every field, so
/// that field names can carry units while the mapping to the kernel's names stays visible.
macro_rules! keyed_struct {
    ($(#[$m:meta])* $name:ident { $( $(#[$fm:meta])* $field:ident = $key:literal ),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct $name { $( $(#[$fm])* pub $field: Option<u64>, )* }
        impl $name {
            /// The kernel keys this struct keeps, in declaration order.
            pub const KEYS: &'static [&'static str] = &[$($key),*];
            fn slot(&mut self, key: &str) -> Option<&mut Option<u64>> {
                match key { $( $key => Some(&mut self.$field), )* _ => None }
            }
        }
    };
}

/// Parses "key value" lines into `T` via its `slot` (see the module conventions).
fn parse_keyed<T: Default>(
    text: &str,
    slot: for<'a, 'k> fn(&'a mut T, &'k str) -> Option<&'a mut Option<u64>>,
) -> Parsed<T> {
    let mut value = T::default();
    let mut bad_line = None;
    for line in text.lines() {
        let mut words = line.split_ascii_whitespace();
        let Some(key) = words.next() else { continue };
        let Some(field) = slot(&mut value, key) else {
            continue;
        };
        match (words.next().map(str::parse::<u64>), words.next()) {
            (Some(Ok(n)), None) => *field = Some(n),
            _ => {
                *field = None;
                bad_line.get_or_insert_with(|| BadLine::new(line));
            }
        }
    }
    Parsed { value, bad_line }
}

keyed_struct! {
    /// v1 `memory.stat`, hierarchical (`total_*`) fields only: at the job level the local fields
    /// are zero because all pages are charged to the step/task children (measured on this host).
    MemStatV1 {
        /// Anonymous memory incl. swap cache, bytes.
        total_rss_bytes = "total_rss",
        /// Page cache incl. tmpfs, bytes.
        total_cache_bytes = "total_cache",
        /// tmpfs/shm, bytes.
        total_shmem_bytes = "total_shmem",
        /// File pages mapped into processes, bytes.
        total_mapped_file_bytes = "total_mapped_file",
        /// Swap usage, bytes (only with swap accounting).
        total_swap_bytes = "total_swap",
        /// Inactive page cache, bytes (the Docker "usage - inactive_file" convention needs it).
        total_inactive_file_bytes = "total_inactive_file",
        /// Major page faults (count).
        total_pgmajfault = "total_pgmajfault",
    }
}

/// v1 `memory.stat`.
pub fn parse_memory_stat_v1(text: &str) -> Parsed<MemStatV1> {
    parse_keyed(text, MemStatV1::slot)
}

keyed_struct! {
    /// v1 `memory.oom_control`.
    OomControlV1 {
        /// 1 when the OOM killer is disabled for this cgroup.
        oom_kill_disable = "oom_kill_disable",
        /// 1 while the cgroup is under OOM (tasks stalled when the killer is disabled).
        under_oom = "under_oom",
        /// Processes killed by the OOM killer (kernel ≥ 4.13).
        oom_kill = "oom_kill",
    }
}

/// v1 `memory.oom_control`.
pub fn parse_oom_control_v1(text: &str) -> Parsed<OomControlV1> {
    parse_keyed(text, OomControlV1::slot)
}

keyed_struct! {
    /// v2 `cpu.stat`. `usage_usec`/`user_usec`/`system_usec` are always there; the throttling
    /// keys only when the cpu controller is enabled for the cgroup.
    CpuStatV2 {
        usage_usec = "usage_usec",
        user_usec = "user_usec",
        system_usec = "system_usec",
        nr_periods = "nr_periods",
        nr_throttled = "nr_throttled",
        throttled_usec = "throttled_usec",
    }
}

/// v2 `cpu.stat`.
pub fn parse_cpu_stat_v2(text: &str) -> Parsed<CpuStatV2> {
    parse_keyed(text, CpuStatV2::slot)
}

keyed_struct! {
    /// v2 `memory.stat` (bytes unless said otherwise; already hierarchical in v2).
    MemStatV2 {
        anon_bytes = "anon",
        file_bytes = "file",
        shmem_bytes = "shmem",
        file_mapped_bytes = "file_mapped",
        inactive_file_bytes = "inactive_file",
        /// Major page faults (count).
        pgmajfault = "pgmajfault",
    }
}

/// v2 `memory.stat`.
pub fn parse_memory_stat_v2(text: &str) -> Parsed<MemStatV2> {
    parse_keyed(text, MemStatV2::slot)
}

keyed_struct! {
    /// v2 `memory.events` (hierarchical event counts).
    MemEventsV2 {
        low = "low",
        high = "high",
        max = "max",
        oom = "oom",
        oom_kill = "oom_kill",
        /// Kernel ≥ 5.17.
        oom_group_kill = "oom_group_kill",
    }
}

/// v2 `memory.events`.
pub fn parse_memory_events_v2(text: &str) -> Parsed<MemEventsV2> {
    parse_keyed(text, MemEventsV2::slot)
}

/// v2 `io.stat` summed over all devices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStatV2 {
    pub rbytes: Option<u64>,
    pub wbytes: Option<u64>,
    pub rios: Option<u64>,
    pub wios: Option<u64>,
}

/// v2 `io.stat`: one line per device, `MAJ:MIN rbytes=N wbytes=N rios=N wios=N dbytes=N dios=N`
/// (plus `cost.*`/`wait.*` keys with some controllers, ignored). An empty file means no I/O yet:
/// all sums are `Some(0)`.
///
/// Kernels before 5.x could cut `io.stat` at one page (a kernel bug), leaving an unterminated last line: a final line without `\n` is dropped rather than
/// trusted, since a cut `rbytes=12` would look valid but be wrong. A malformed value of a summed
/// key makes that sum `None` (a partial sum would masquerade as a real total).
pub fn parse_io_stat_v2(text: &str) -> Parsed<IoStatV2> {
    let mut sums = [Some(0u64); 4];
    let mut bad_line = None;
    let complete = match text.rfind('\n') {
        Some(i) => &text[..i],
        None => "",
    };
    for line in complete.lines() {
        let mut words = line.split_ascii_whitespace();
        let Some(dev) = words.next() else { continue };
        let mut line_ok = dev.contains(':');
        for word in words {
            let Some((key, val)) = word.split_once('=') else {
                line_ok = false;
                continue;
            };
            let idx = match key {
                "rbytes" => 0,
                "wbytes" => 1,
                "rios" => 2,
                "wios" => 3,
                _ => continue,
            };
            let add = val.parse::<u64>().ok();
            if add.is_none() {
                line_ok = false;
            }
            sums[idx] = match (sums[idx], add) {
                (Some(s), Some(a)) => s.checked_add(a),
                _ => None,
            };
        }
        if !line_ok {
            bad_line.get_or_insert_with(|| BadLine::new(line));
        }
    }
    let [rbytes, wbytes, rios, wios] = sums;
    Parsed {
        value: IoStatV2 {
            rbytes,
            wbytes,
            rios,
            wios,
        },
        bad_line,
    }
}

/// A PSI file (`cpu.pressure`, `memory.pressure`, `io.pressure`): the cumulative stall totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pressure {
    /// `some ... total=N`: µs during which at least one task was stalled.
    pub some_total_usec: Option<u64>,
    /// `full ... total=N`: µs during which all non-idle tasks were stalled (for cpu: kernel ≥ 5.13).
    pub full_total_usec: Option<u64>,
}

/// Parses `some avg10=0.00 avg60=0.00 avg300=0.00 total=N` / `full ...` lines.
pub fn parse_pressure(text: &str) -> Parsed<Pressure> {
    let mut value = Pressure::default();
    let mut bad_line = None;
    for line in text.lines() {
        let mut words = line.split_ascii_whitespace();
        let field = match words.next() {
            Some("some") => &mut value.some_total_usec,
            Some("full") => &mut value.full_total_usec,
            _ => continue,
        };
        let total = words
            .find_map(|w| w.strip_prefix("total="))
            .map(str::parse::<u64>);
        match total {
            Some(Ok(n)) => *field = Some(n),
            _ => {
                *field = None;
                bad_line.get_or_insert_with(|| BadLine::new(line));
            }
        }
    }
    Parsed { value, bad_line }
}

/// One line of `/proc/<pid>/cgroup`: `hierarchy-ID:controller-list:cgroup-path` (cgroups(7)).
/// On v2 the line is `0::/path` (empty controller list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcCgroupLine<'a> {
    pub hierarchy_id: &'a str,
    /// Comma-separated (`cpu,cpuacct`, `name=systemd`); empty for the v2 hierarchy.
    pub controllers: &'a str,
    /// Absolute path inside the hierarchy, without a trailing ` (deleted)`.
    pub path: &'a str,
}

impl ProcCgroupLine<'_> {
    /// True if `name` is one of this line's controllers.
    pub fn has_controller(&self, name: &str) -> bool {
        !self.controllers.is_empty() && self.controllers.split(',').any(|c| c == name)
    }
    /// True for the unified (v2) hierarchy line.
    pub fn is_unified(&self) -> bool {
        self.hierarchy_id == "0" && self.controllers.is_empty()
    }
}

/// Parses `/proc/<pid>/cgroup`, skipping lines without two colons. The path may itself contain
/// colons, so only the first two separate fields. A cgroup removed while the process is still in
/// it shows as `/path (deleted)` on v2; the suffix is stripped.
pub fn parse_proc_cgroup(text: &str) -> Vec<ProcCgroupLine<'_>> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let hierarchy_id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            let path = path.strip_suffix(" (deleted)").unwrap_or(path);
            Some(ProcCgroupLine {
                hierarchy_id,
                controllers,
                path,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_keeps_good_fields_when_one_is_bad() {
        let p = parse_memory_stat_v1("total_rss 10\ntotal_cache x\nfoo bar baz\ntotal_swap 3\n");
        assert_eq!(p.value.total_rss_bytes, Some(10));
        assert_eq!(p.value.total_cache_bytes, None);
        assert_eq!(p.value.total_swap_bytes, Some(3));
        assert_eq!(
            p.value.total_shmem_bytes, None,
            "absent key is None, never 0"
        );
        assert_eq!(p.bad_line, Some(BadLine("total_cache x".into())));
    }

    #[test]
    fn single_values() {
        assert_eq!(parse_u64("42\n"), Ok(42));
        assert!(parse_u64("").is_err());
        assert!(parse_u64("-1\n").is_err());
        assert!(parse_u64("1\n2\n").is_err());
        assert_eq!(parse_limit_v1("9223372036854771712\n"), Ok(None));
        assert_eq!(parse_limit_v1("9223372036854710272\n"), Ok(None));
        assert_eq!(parse_limit_v1("1048576000\n"), Ok(Some(1048576000)));
        assert_eq!(parse_max_or_u64("max\n"), Ok(None));
        assert_eq!(parse_max_or_u64("4096\n"), Ok(Some(4096)));
        assert_eq!(
            parse_u64_list("17730021 3310141141 \n"),
            Ok(vec![17730021, 3310141141])
        );
    }

    #[test]
    fn io_stat_sums_and_truncation() {
        let t = "8:0 rbytes=10 wbytes=20 rios=1 wios=2 dbytes=0 dios=0\n\
                 8:16 rbytes=5 wbytes=5 rios=1 wios=1 dbytes=0 dios=0\n\
                 8:32 rbytes=7 wb";
        let p = parse_io_stat_v2(t);
        assert_eq!(
            p.value,
            IoStatV2 {
                rbytes: Some(15),
                wbytes: Some(25),
                rios: Some(2),
                wios: Some(3)
            }
        );
        assert_eq!(
            p.bad_line, None,
            "an unterminated last line is dropped, not an error"
        );
        assert_eq!(parse_io_stat_v2("").value.rbytes, Some(0));
        let p = parse_io_stat_v2("8:0 rbytes=x wbytes=1 rios=1 wios=1\n");
        assert_eq!(p.value.rbytes, None);
        assert_eq!(p.value.wbytes, Some(1));
        assert!(p.bad_line.is_some());
        let p = parse_io_stat_v2(&format!("8:0 rbytes={}\n8:1 rbytes=1\n", u64::MAX));
        assert_eq!(
            p.value.rbytes, None,
            "overflow gives None, not a wrapped value"
        );
    }

    #[test]
    fn pressure() {
        let p = parse_pressure(
            "some avg10=1.00 avg60=0.50 avg300=0.10 total=123\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=45\n",
        );
        assert_eq!(
            p.value,
            Pressure {
                some_total_usec: Some(123),
                full_total_usec: Some(45)
            }
        );
        let p = parse_pressure("some avg10=1.00\n");
        assert_eq!(p.value.some_total_usec, None);
        assert!(p.bad_line.is_some());
    }

    #[test]
    fn proc_cgroup_lines() {
        let l = parse_proc_cgroup("4:memory:/a/b\n2:cpu,cpuacct:/\n0::/x:y (deleted)\ngarbage\n");
        assert_eq!(l.len(), 3);
        assert!(l[0].has_controller("memory"));
        assert!(l[1].has_controller("cpuacct") && !l[1].has_controller("cpu,cpuacct"));
        assert!(l[2].is_unified());
        assert_eq!(l[2].path, "/x:y");
    }
}

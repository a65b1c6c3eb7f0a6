//! Spool writers. [`SeriesWriter`] is the sampler's (one per job per node); [`StepWriter`] is a step's.
//!
//! Memory and disk are bounded: the series keeps at most `max_buckets` buckets in memory and the file
//! under `max_bytes`; past either bound it is thinned (see [`super::thin`]) and rewritten atomically.
//! A write error (disk full, spool dir removed) is returned to the caller, which logs it and carries on
//! sampling in memory: the job itself is never affected.

use super::codec::{bucket_frame, end_frame, event_frame, file_start};
use super::thin::{thin, Mergeable};
use super::*;
use jobscope_common::fsutil::{create_new, io_err, open_append, write_atomic, FsError};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_bytes: u64,
    pub max_buckets: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: DEFAULT_MAX_SPOOL_BYTES - STEP_FILES_BUDGET_BYTES - GPU_FILE_BUDGET_BYTES,
            max_buckets: 4096,
        }
    }
}

/// A record a bounded series holds: it can be thinned ([`Mergeable`]) and framed for the file.
pub trait SeriesRecord: Mergeable {
    fn frame(&self) -> Vec<u8>;
}

impl SeriesRecord for Bucket {
    fn frame(&self) -> Vec<u8> {
        bucket_frame(self)
    }
}

/// The bounded, append-only, self-thinning series file: the cgroup series (`job.jsc`,
/// `SeriesWriter<Bucket>`) and the GPU series (`gpu.jsc`, see `crate::gpu::spool`) share it.
pub struct SeriesWriter<B: SeriesRecord = Bucket> {
    dir: PathBuf,
    name: String,
    path: PathBuf,
    file: Option<File>,
    header: Header,
    /// A frame rewritten right after the header (the GPU series' device list), if any.
    prologue: Option<Vec<u8>>,
    buckets: Vec<B>,
    events: Vec<Event>,
    bytes: u64,
    limits: Limits,
    /// How many times the series was thinned.
    pub thinnings: u32,
}

impl<B: SeriesRecord> SeriesWriter<B> {
    /// Creates `dir/name` with the header. The file must not exist yet (`O_EXCL`, no symlink following).
    pub fn create(dir: &Path, name: &str, header: Header, limits: Limits) -> Result<Self, FsError> {
        let path = dir.join(name);
        let mut f = create_new(&path, 0o600)?;
        let start = file_start(&header);
        f.write_all(&start).map_err(io_err(&path))?;
        f.sync_data().map_err(io_err(&path))?;
        Ok(SeriesWriter {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            path,
            file: Some(f),
            bytes: start.len() as u64,
            header,
            prologue: None,
            buckets: Vec::new(),
            events: Vec::new(),
            limits,
            thinnings: 0,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    pub fn buckets(&self) -> &[B] {
        &self.buckets
    }

    /// Sets (or replaces) the frame kept right after the header; appended now, kept on rewrites.
    pub fn set_prologue(&mut self, frame: Vec<u8>) -> Result<(), FsError> {
        self.prologue = Some(frame.clone());
        self.append(&frame)
    }

    /// Appends one bucket (normally one raw sample). Thins and rewrites when a bound is reached.
    pub fn push(&mut self, b: B) -> Result<(), FsError> {
        let fr = b.frame();
        self.buckets.push(b);
        if self.bytes + fr.len() as u64 > self.limits.max_bytes
            || self.buckets.len() > self.limits.max_buckets
        {
            return self.compact();
        }
        self.append(&fr)
    }

    pub fn event(&mut self, e: Event) -> Result<(), FsError> {
        let fr = event_frame(&e);
        // Events are rare; keep at most a few hundred so they cannot crowd out the series.
        if self.events.len() >= 256 {
            return Ok(());
        }
        self.events.push(e);
        self.append(&fr)
    }

    pub fn end(&mut self, e: &End) -> Result<(), FsError> {
        self.append(&end_frame(e))?;
        if let Some(f) = self.file.as_ref() {
            f.sync_data().map_err(io_err(&self.path))?;
        }
        Ok(())
    }

    /// `fdatasync`, called by the sampler every few samples so a node crash loses little.
    pub fn flush(&mut self) -> Result<(), FsError> {
        match self.file.as_ref() {
            Some(f) => f.sync_data().map_err(io_err(&self.path)),
            None => Ok(()),
        }
    }

    fn append(&mut self, frame: &[u8]) -> Result<(), FsError> {
        if self.file.is_none() {
            // An earlier write failed: the file may be short. Rewrite it whole from memory.
            return self.rewrite();
        }
        let f = self.file.as_mut().expect("checked");
        if let Err(e) = f.write_all(frame) {
            self.file = None;
            return Err(FsError::Io {
                path: self.path.clone(),
                source: e,
            });
        }
        self.bytes += frame.len() as u64;
        Ok(())
    }

    fn compact(&mut self) -> Result<(), FsError> {
        self.buckets = thin(&self.buckets, (self.buckets.len() / 2).max(1));
        self.thinnings += 1;
        // If the byte budget is still exceeded after halving (huge events), keep halving.
        loop {
            let size = self.encoded().len() as u64;
            if size <= self.limits.max_bytes * 3 / 4 || self.buckets.len() <= 2 {
                break;
            }
            self.buckets = thin(&self.buckets, (self.buckets.len() / 2).max(1));
            self.thinnings += 1;
        }
        self.rewrite()
    }

    fn encoded(&self) -> Vec<u8> {
        let mut bytes = file_start(&self.header);
        if let Some(p) = &self.prologue {
            bytes.extend_from_slice(p);
        }
        for b in &self.buckets {
            bytes.extend(b.frame());
        }
        for e in &self.events {
            bytes.extend(event_frame(e));
        }
        bytes
    }

    fn rewrite(&mut self) -> Result<(), FsError> {
        let bytes = self.encoded();
        self.file = None;
        write_atomic(&self.dir, &self.name, &bytes, 0o600, None)?;
        self.bytes = bytes.len() as u64;
        self.file = Some(open_append(&self.path)?);
        Ok(())
    }
}

/// A step's small file: header, then a `step_start` and a `step_exit` event.
pub struct StepWriter {
    path: PathBuf,
    file: File,
}

impl StepWriter {
    pub fn create(dir: &Path, header: &Header) -> Result<Self, FsError> {
        let name = step_file_name(&header.series).ok_or_else(|| FsError::Unsafe {
            path: dir.to_path_buf(),
            why: format!("bad step name {:?}", header.series),
        })?;
        let path = dir.join(name);
        let mut file = create_new(&path, 0o600)?;
        file.write_all(&file_start(header)).map_err(io_err(&path))?;
        Ok(StepWriter { path, file })
    }

    pub fn event(&mut self, e: &Event) -> Result<(), FsError> {
        self.file
            .write_all(&event_frame(e))
            .map_err(io_err(&self.path))?;
        self.file.sync_data().map_err(io_err(&self.path))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use jobscope_common::spool::{read_node_dir, read_spool_file};
    use jobscope_model::gpu::GPU_FILE_NAME;
    use jobscope_model::sample::Reading;

    /// A plausible wall-clock start for test series (2023-11-14): decoding refuses a header
    /// whose start is not a plausible time (see `jobscope_model::spool::validate`).
    pub(crate) const T0: u64 = 1_700_000_000_000;

    /// A job series header for tests.
    pub(crate) fn header() -> Header {
        Header {
            plugin_version: "t".into(),
            ..Header::new(7, "n", "job", T0)
        }
    }

    fn sample(i: u64) -> Bucket {
        let mem = if i == 777 { 50 << 30 } else { (1 << 30) + i };
        let mut gauges = [None; N_GAUGES];
        gauges[GaugeId::MemCurrentBytes as usize] = Some(Gauge::one(mem));
        Bucket {
            t_first_ms: T0 + i * 30_000,
            t_last_ms: T0 + i * 30_000,
            n: 1,
            last: Reading::from_fields(&vec![Some(i * 1_000_000_007); Reading::FIELD_NAMES.len()]),
            gauges,
        }
    }

    #[test]
    fn thirty_day_job_stays_under_cap_and_keeps_peak() {
        let d = tempfile::tempdir().unwrap();
        let limits = Limits::default();
        let mut w = SeriesWriter::create(d.path(), "job.jsc", header(), limits).unwrap();
        let n = 30 * 24 * 120; // 30 days at 30 s
        for i in 0..n {
            w.push(sample(i)).unwrap();
            assert!(w.bytes() <= limits.max_bytes, "at {i}: {}", w.bytes());
        }
        w.end(&End {
            t_ms: T0 + n * 30_000,
            reason: "done".into(),
            samples_taken: n,
            samples_missed: 0,
        })
        .unwrap();
        let size = std::fs::metadata(d.path().join("job.jsc")).unwrap().len();
        assert!(size <= limits.max_bytes);
        let f = read_spool_file(&d.path().join("job.jsc")).unwrap();
        assert!(!f.torn);
        assert_eq!(f.buckets.iter().map(|b| b.n as u64).sum::<u64>(), n);
        let peak = f
            .buckets
            .iter()
            .filter_map(|b| b.gauge(GaugeId::MemCurrentBytes))
            .map(|g| g.max)
            .max();
        assert_eq!(peak, Some(50 << 30));
        assert_eq!(
            f.buckets.last().unwrap().last.cpu_usage_ns,
            Some((n - 1) * 1_000_000_007)
        );
        assert!(f.end.is_some());
    }

    #[test]
    fn refuses_existing_file_or_symlink() {
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.path().join("job.jsc")).unwrap();
        assert!(
            SeriesWriter::<Bucket>::create(d.path(), "job.jsc", header(), Limits::default())
                .is_err()
        );
    }

    #[test]
    fn write_failure_is_an_error_not_a_panic_and_recovers() {
        let d = tempfile::tempdir().unwrap();
        let mut w = SeriesWriter::create(d.path(), "job.jsc", header(), Limits::default()).unwrap();
        w.push(sample(1)).unwrap();
        // Simulate a lost file descriptor (as after a failed write): the next append rewrites from memory.
        w.file = None;
        w.push(sample(2)).unwrap();
        let f = read_spool_file(&d.path().join("job.jsc")).unwrap();
        assert_eq!(f.buckets.len(), 2);
    }

    /// The reader (`jobscope_common::spool`) on what these writers wrote, and on what they did not.
    #[test]
    fn reads_the_series_steps_and_reports_bad_files() {
        let header = |series: &str| Header {
            series: series.into(),
            ..header()
        };
        let d = tempfile::tempdir().unwrap();
        let mut w =
            SeriesWriter::<Bucket>::create(d.path(), "job.jsc", header("job"), Limits::default())
                .unwrap();
        w.flush().unwrap();
        StepWriter::create(d.path(), &header("batch")).unwrap();
        std::fs::write(d.path().join("step_0.jsc"), b"not a spool file").unwrap();
        std::fs::write(d.path().join("notes.txt"), b"ignored").unwrap();
        std::fs::write(d.path().join(GPU_FILE_NAME), b"garbage").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.path().join("step_1.jsc")).unwrap();
        let s = read_node_dir(d.path());
        assert_eq!(
            s.series.as_ref().map(|f| f.header.series.as_str()),
            Some("job")
        );
        assert_eq!(s.steps.len(), 1);
        assert_eq!(s.steps[0].header.series, "batch");
        assert!(s.gpu.is_none());
        // step_0 (garbage), step_1 (symlink) and gpu.jsc (garbage) are reported.
        assert_eq!(s.problems.len(), 3, "{:?}", s.problems);
    }
}

//! `gpu.jsc`: the job's GPU series on one node, next to `job.jsc` in the job's spool directory.
//!
//! Same framing as every spool file ([`crate::spool`]: magic, version, a standard
//! [`Header`] frame with `series = "gpu"`, then CRC'd frames appended one `write(2)` each, a torn
//! tail dropped by the reader), with two frame kinds of its own:
//! ```text
//! 5 gpu info   (JSON GpuInfo: the devices, by identity, in slot order; rewritten on compaction)
//! 4 gpu bucket (binary, below)
//! 2 event, 3 end (as in every spool file)
//! ```
//! A bucket payload:
//! ```text
//! varint t_first_ms, varint (t_last_ms - t_first_ms), varint n, varint n_devices,
//! per device: varint byte_len, then
//!   varint slot, varint samples, varint mask,
//!   for mask bits 0..=6 (gauges: util_gpu_pct, util_mem_pct, mem_used_bytes, power_mw,
//!     job_processes, job_mem_bytes, other_processes): varint min, varint (max - min), varint sum, varint count
//!   bit 7 energy_mj (energy over the bucket), bit 8 energy_counter_mj (last), bit 9 mem_total_bytes
//!   (last), bit 10 throttle_reasons (OR over the bucket): one varint each
//! ```
//! The per-device length lets a reader skip fields a newer writer added. Gauges keep min/max/sum/
//! count, so thinning (see [`thin`]) never loses a peak or changes a mean. About 30 bytes per GPU
//! per sample; the file is capped at [`DEFAULT_MAX_GPU_FILE_BYTES`].

use super::assign::SelectionSource;
use super::GpuIdentity;
use crate::fsutil::FsError;
use crate::spool::codec::{frame, get_varint, put_varint};
use crate::spool::codec::{read_prologue, Frames};
use crate::spool::writer::SeriesWriter;
use crate::spool::{End, Event, Gauge, Header, SpoolError, KIND_END, KIND_EVENT};
use serde::{Deserialize, Serialize};
use std::path::Path;

pub const GPU_FILE_NAME: &str = "gpu.jsc";
/// The `series` of `gpu.jsc`'s header.
pub const GPU_SERIES: &str = "gpu";
pub const KIND_GPU_BUCKET: u8 = 4;
pub const KIND_GPU_INFO: u8 = 5;
/// Cap of `gpu.jsc` (on top of the cgroup spool's own budget).
pub const DEFAULT_MAX_GPU_FILE_BYTES: u64 = 128 * 1024;
/// Buckets kept in memory before thinning.
pub const DEFAULT_MAX_GPU_BUCKETS: usize = 1024;
/// Events kept (a flapping GPU must not fill the file).
pub const MAX_GPU_EVENTS: usize = 128;

/// The devices of the series, by identity. Slot `i` of every bucket is `devices[i]`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GpuInfo {
    pub t_ms: u64,
    /// Backends that sampled (`nvml`, `amdgpu`).
    #[serde(default)]
    pub backends: Vec<String>,
    pub selection_source: Option<SelectionSource>,
    #[serde(default)]
    pub devices: Vec<GpuIdentity>,
    /// Job GPUs that no backend could find (`/dev/nvidia3 (gres index 1)`).
    #[serde(default)]
    pub unresolved: Vec<String>,
    /// Why some or all GPUs are not measured (no driver, selection notes).
    #[serde(default)]
    pub notes: Vec<String>,
}

/// One device's share of a bucket.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceBucket {
    pub slot: u32,
    /// Samples of the bucket in which this device answered.
    pub samples: u32,
    pub util_gpu_pct: Option<Gauge>,
    pub util_mem_pct: Option<Gauge>,
    pub mem_used_bytes: Option<Gauge>,
    pub power_mw: Option<Gauge>,
    pub job_processes: Option<Gauge>,
    pub job_mem_bytes: Option<Gauge>,
    pub other_processes: Option<Gauge>,
    /// Energy used over the bucket (sum of counter increases), millijoules.
    pub energy_mj: Option<u64>,
    /// The raw energy counter at the bucket's last sample.
    pub energy_counter_mj: Option<u64>,
    pub mem_total_bytes: Option<u64>,
    /// Throttle reasons seen in the bucket (bitwise OR).
    pub throttle_reasons: Option<u64>,
}

const N_DEV_GAUGES: usize = 7;

impl DeviceBucket {
    fn gauges(&self) -> [Option<Gauge>; N_DEV_GAUGES] {
        [
            self.util_gpu_pct,
            self.util_mem_pct,
            self.mem_used_bytes,
            self.power_mw,
            self.job_processes,
            self.job_mem_bytes,
            self.other_processes,
        ]
    }
    fn set_gauges(&mut self, g: [Option<Gauge>; N_DEV_GAUGES]) {
        [
            self.util_gpu_pct,
            self.util_mem_pct,
            self.mem_used_bytes,
            self.power_mw,
            self.job_processes,
            self.job_mem_bytes,
            self.other_processes,
        ] = g;
    }
    /// Merges `b` (later in time, same slot) into `self`.
    pub fn absorb(&mut self, b: &DeviceBucket) {
        self.samples = self.samples.saturating_add(b.samples);
        let (mine, theirs) = (self.gauges(), b.gauges());
        let mut merged = [None; N_DEV_GAUGES];
        for i in 0..N_DEV_GAUGES {
            merged[i] = Gauge::merge(mine[i], theirs[i]);
        }
        self.set_gauges(merged);
        self.energy_mj = match (self.energy_mj, b.energy_mj) {
            (Some(x), Some(y)) => Some(x.saturating_add(y)),
            (x, y) => x.or(y),
        };
        self.energy_counter_mj = b.energy_counter_mj.or(self.energy_counter_mj);
        self.mem_total_bytes = b.mem_total_bytes.or(self.mem_total_bytes);
        self.throttle_reasons = match (self.throttle_reasons, b.throttle_reasons) {
            (Some(x), Some(y)) => Some(x | y),
            (x, y) => x.or(y),
        };
    }
}

/// One point of the GPU series: one sample (`n == 1`) or several merged by thinning.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuBucket {
    pub t_first_ms: u64,
    pub t_last_ms: u64,
    pub n: u32,
    /// Devices that answered at least once in the bucket, by slot.
    pub devices: Vec<DeviceBucket>,
}

impl GpuBucket {
    pub fn device(&self, slot: u32) -> Option<&DeviceBucket> {
        self.devices.iter().find(|d| d.slot == slot)
    }
    /// Merges `b` (which follows `self` in time) into `self`.
    pub fn absorb(&mut self, b: &GpuBucket) {
        self.t_last_ms = self.t_last_ms.max(b.t_last_ms);
        self.n = self.n.saturating_add(b.n);
        for d in &b.devices {
            match self.devices.iter_mut().find(|x| x.slot == d.slot) {
                Some(x) => x.absorb(d),
                None => self.devices.push(d.clone()),
            }
        }
    }
}

impl crate::spool::thin::Mergeable for GpuBucket {
    fn samples(&self) -> u32 {
        self.n
    }
    fn absorb_next(&mut self, next: &Self) {
        self.absorb(next)
    }
}

/// Regroups `buckets` into at most `target` buckets: the cgroup series' thinning
/// ([`crate::spool::thin::thin`]), by sample count, gauges merged (peaks and means kept).
pub fn thin(buckets: &[GpuBucket], target: usize) -> Vec<GpuBucket> {
    crate::spool::thin::thin(buckets, target)
}

fn put_gauge(out: &mut Vec<u8>, g: &Gauge) {
    put_varint(out, g.min);
    put_varint(out, g.max.saturating_sub(g.min));
    put_varint(out, g.sum);
    put_varint(out, g.count as u64);
}

fn get_gauge(p: &[u8], pos: &mut usize) -> Option<Gauge> {
    let min = get_varint(p, pos)?;
    let max = min.checked_add(get_varint(p, pos)?)?;
    let sum = get_varint(p, pos)?;
    let count = u32::try_from(get_varint(p, pos)?).ok()?;
    Some(Gauge {
        min,
        max,
        sum,
        count,
    })
}

pub fn encode_gpu_bucket(b: &GpuBucket) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + 40 * b.devices.len());
    put_varint(&mut out, b.t_first_ms);
    put_varint(&mut out, b.t_last_ms.saturating_sub(b.t_first_ms));
    put_varint(&mut out, b.n as u64);
    put_varint(&mut out, b.devices.len() as u64);
    for d in &b.devices {
        let mut body = Vec::with_capacity(48);
        put_varint(&mut body, d.slot as u64);
        put_varint(&mut body, d.samples as u64);
        let gauges = d.gauges();
        let scalars = [
            d.energy_mj,
            d.energy_counter_mj,
            d.mem_total_bytes,
            d.throttle_reasons,
        ];
        let mut mask: u64 = 0;
        for (i, g) in gauges.iter().enumerate() {
            if g.is_some() {
                mask |= 1 << i;
            }
        }
        for (i, s) in scalars.iter().enumerate() {
            if s.is_some() {
                mask |= 1 << (N_DEV_GAUGES + i);
            }
        }
        put_varint(&mut body, mask);
        for g in gauges.iter().flatten() {
            put_gauge(&mut body, g);
        }
        for s in scalars.iter().flatten() {
            put_varint(&mut body, *s);
        }
        put_varint(&mut out, body.len() as u64);
        out.extend_from_slice(&body);
    }
    out
}

pub fn decode_gpu_bucket(p: &[u8]) -> Option<GpuBucket> {
    let mut pos = 0;
    let t_first_ms = get_varint(p, &mut pos)?;
    let t_last_ms = t_first_ms.checked_add(get_varint(p, &mut pos)?)?;
    let n = u32::try_from(get_varint(p, &mut pos)?).ok()?;
    let n_dev = get_varint(p, &mut pos)?;
    if n_dev > 4096 {
        return None;
    }
    let mut devices = Vec::with_capacity(n_dev as usize);
    for _ in 0..n_dev {
        let len = usize::try_from(get_varint(p, &mut pos)?).ok()?;
        let end = pos.checked_add(len)?;
        let body = p.get(pos..end)?;
        pos = end;
        let mut q = 0;
        let mut d = DeviceBucket {
            slot: u32::try_from(get_varint(body, &mut q)?).ok()?,
            samples: u32::try_from(get_varint(body, &mut q)?).ok()?,
            ..Default::default()
        };
        let mask = get_varint(body, &mut q)?;
        let mut gauges = [None; N_DEV_GAUGES];
        for (i, g) in gauges.iter_mut().enumerate() {
            if mask & (1 << i) != 0 {
                *g = Some(get_gauge(body, &mut q)?);
            }
        }
        d.set_gauges(gauges);
        let mut scalars = [None; 4];
        for (i, s) in scalars.iter_mut().enumerate() {
            if mask & (1 << (N_DEV_GAUGES + i)) != 0 {
                *s = Some(get_varint(body, &mut q)?);
            }
        }
        [
            d.energy_mj,
            d.energy_counter_mj,
            d.mem_total_bytes,
            d.throttle_reasons,
        ] = scalars;
        // Fields of a newer writer (higher mask bits) are skipped with the rest of `body`.
        devices.push(d);
    }
    Some(GpuBucket {
        t_first_ms,
        t_last_ms,
        n,
        devices,
    })
}

pub fn gpu_bucket_frame(b: &GpuBucket) -> Vec<u8> {
    frame(KIND_GPU_BUCKET, &encode_gpu_bucket(b))
}

pub fn gpu_info_frame(i: &GpuInfo) -> Vec<u8> {
    frame(
        KIND_GPU_INFO,
        &serde_json::to_vec(i).expect("gpu info serialises"),
    )
}

/// `gpu.jsc`, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSeries {
    pub header: Header,
    /// The last info frame (`None`: the monitor died before it knew its devices).
    pub info: Option<GpuInfo>,
    pub buckets: Vec<GpuBucket>,
    pub events: Vec<Event>,
    pub end: Option<End>,
    /// A torn or corrupt frame was found and everything from it on was dropped.
    pub torn: bool,
    pub valid_bytes: u64,
}

impl GpuSeries {
    pub fn devices(&self) -> &[GpuIdentity] {
        self.info.as_ref().map_or(&[], |i| &i.devices)
    }
}

/// Decodes `gpu.jsc`. As for every spool file, only an unreadable prologue is an error; a torn tail
/// ends decoding with `torn` set.
pub fn decode_gpu_file(buf: &[u8], path: &Path) -> Result<GpuSeries, SpoolError> {
    let (header, pos) = read_prologue(buf, path)?;
    let mut s = GpuSeries {
        header,
        info: None,
        buckets: vec![],
        events: vec![],
        end: None,
        torn: false,
        valid_bytes: pos as u64,
    };
    let mut frames = Frames::new(buf, pos);
    let mut valid = pos;
    while let Some((kind, payload)) = frames.next() {
        let ok = match kind {
            KIND_GPU_BUCKET => decode_gpu_bucket(payload)
                .map(|b| s.buckets.push(b))
                .is_some(),
            KIND_GPU_INFO => serde_json::from_slice(payload)
                .map(|i| s.info = Some(i))
                .is_ok(),
            KIND_EVENT => serde_json::from_slice(payload)
                .map(|e| s.events.push(e))
                .is_ok(),
            KIND_END => serde_json::from_slice(payload)
                .map(|e| s.end = Some(e))
                .is_ok(),
            _ => true,
        };
        if !ok {
            s.torn = true;
            break;
        }
        valid = frames.pos();
    }
    s.torn |= frames.torn();
    s.valid_bytes = valid as u64;
    Ok(s)
}

/// Reads and decodes `gpu.jsc` (refusing symlinks and oversized files).
pub fn read_gpu_file(path: &Path) -> Result<GpuSeries, SpoolError> {
    let bytes =
        crate::fsutil::read_limited(path, DEFAULT_MAX_GPU_FILE_BYTES * 4).map_err(|e| match e {
            FsError::Io { path, source } => SpoolError::Io { path, source },
            FsError::Unsafe { path, why } => SpoolError::Unsafe { path, what: why },
        })?;
    decode_gpu_file(&bytes, path)
}

/// Bounds of the GPU writer.
#[derive(Debug, Clone, Copy)]
pub struct GpuLimits {
    pub max_bytes: u64,
    pub max_buckets: usize,
}

impl Default for GpuLimits {
    fn default() -> Self {
        GpuLimits {
            max_bytes: DEFAULT_MAX_GPU_FILE_BYTES,
            max_buckets: DEFAULT_MAX_GPU_BUCKETS,
        }
    }
}

impl crate::spool::writer::SeriesRecord for GpuBucket {
    fn frame(&self) -> Vec<u8> {
        gpu_bucket_frame(self)
    }
}

/// Appends to `gpu.jsc`: the spool's bounded series writer
/// ([`crate::spool::writer::SeriesWriter`]) holding GPU buckets, with the device list as the
/// frame kept after the header.
pub struct GpuWriter {
    inner: SeriesWriter<GpuBucket>,
}

impl GpuWriter {
    /// Creates `dir/name` (must not exist: `O_EXCL`, no symlink following) with the header.
    pub fn create(
        dir: &Path,
        name: &str,
        mut header: Header,
        limits: GpuLimits,
    ) -> Result<Self, FsError> {
        header.series = GPU_SERIES.to_string();
        let limits = crate::spool::writer::Limits {
            max_bytes: limits.max_bytes,
            max_buckets: limits.max_buckets,
        };
        Ok(GpuWriter {
            inner: SeriesWriter::create(dir, name, header, limits)?,
        })
    }

    pub fn path(&self) -> &Path {
        self.inner.path()
    }
    pub fn bytes(&self) -> u64 {
        self.inner.bytes()
    }
    pub fn buckets(&self) -> &[GpuBucket] {
        self.inner.buckets()
    }
    pub fn thinnings(&self) -> u32 {
        self.inner.thinnings
    }

    pub fn set_info(&mut self, info: GpuInfo) -> Result<(), FsError> {
        self.inner.set_prologue(gpu_info_frame(&info))
    }

    pub fn push(&mut self, b: GpuBucket) -> Result<(), FsError> {
        self.inner.push(b)
    }

    pub fn event(&mut self, e: Event) -> Result<(), FsError> {
        self.inner.event(e)
    }

    pub fn end(&mut self, e: &End) -> Result<(), FsError> {
        self.inner.end(e)
    }

    pub fn flush(&mut self) -> Result<(), FsError> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spool::codec::file_start;
    use crate::spool::FORMAT_VERSION;
    use proptest::prelude::*;

    pub(crate) fn header() -> Header {
        Header {
            format_version: FORMAT_VERSION,
            job_id: 42,
            node: "gpu01".into(),
            series: "job".into(),
            uid: 1001,
            gid: 1001,
            cgroup_version: None,
            cgroup_path: None,
            boot_id: None,
            boot_time_s: None,
            start_unix_ms: 1_000,
            cadence_s: 30,
            plugin_version: "t".into(),
            alloc_cores: None,
            alloc_mem_bytes: None,
            handover: None,
        }
    }

    fn dev(slot: u32, util: u32, mem: u64) -> DeviceBucket {
        DeviceBucket {
            slot,
            samples: 1,
            util_gpu_pct: Some(Gauge::one(util as u64)),
            util_mem_pct: None,
            mem_used_bytes: Some(Gauge::one(mem)),
            power_mw: Some(Gauge::one(250_000)),
            job_processes: Some(Gauge::one(1)),
            job_mem_bytes: Some(Gauge::one(mem / 2)),
            other_processes: Some(Gauge::one(0)),
            energy_mj: Some(7_500),
            energy_counter_mj: Some(1_000_000 + util as u64),
            mem_total_bytes: Some(80 << 30),
            throttle_reasons: Some(1 << util.min(20)),
        }
    }

    fn bucket(t: u64, utils: &[u32]) -> GpuBucket {
        GpuBucket {
            t_first_ms: t,
            t_last_ms: t,
            n: 1,
            devices: utils
                .iter()
                .enumerate()
                .map(|(i, u)| dev(i as u32, *u, (*u as u64) << 28))
                .collect(),
        }
    }

    fn info() -> GpuInfo {
        GpuInfo {
            t_ms: 1_100,
            backends: vec!["nvml".into()],
            selection_source: Some(SelectionSource::GresConf),
            devices: vec![GpuIdentity {
                kind: Some(super::super::GpuKind::Nvidia),
                uuid: Some("GPU-x".into()),
                ..Default::default()
            }],
            unresolved: vec![],
            notes: vec![],
        }
    }

    #[test]
    fn round_trip_and_header_series() {
        let d = tempfile::tempdir().unwrap();
        let mut w =
            GpuWriter::create(d.path(), GPU_FILE_NAME, header(), GpuLimits::default()).unwrap();
        w.set_info(info()).unwrap();
        let b = bucket(2_000, &[87, 3]);
        w.push(b.clone()).unwrap();
        let e = Event {
            t_ms: 2_500,
            kind: "gpu_lost".into(),
            step: None,
            job: None,
            step_reading: None,
            exit_status: None,
            message: Some("GPU 1 (GPU-x): fell off the bus".into()),
        };
        w.event(e.clone()).unwrap();
        let end = End {
            t_ms: 3_000,
            reason: "stopped".into(),
            samples_taken: 1,
            samples_missed: 0,
        };
        w.end(&end).unwrap();
        let s = read_gpu_file(&d.path().join(GPU_FILE_NAME)).unwrap();
        assert_eq!(s.header.series, "gpu");
        assert_eq!(s.info, Some(info()));
        assert_eq!(s.buckets, vec![b]);
        assert_eq!(s.events, vec![e]);
        assert_eq!(s.end, Some(end));
        assert!(!s.torn);
        // The generic decoder reads it too (its own kinds are skipped), so tools never choke on it.
        let bytes = std::fs::read(d.path().join(GPU_FILE_NAME)).unwrap();
        let generic = crate::spool::decode_file(&bytes, Path::new("gpu.jsc")).unwrap();
        assert_eq!(generic.header.series, "gpu");
        assert!(generic.buckets.is_empty() && !generic.torn);
    }

    #[test]
    fn torn_record_is_dropped_not_fatal() {
        let mut f = file_start(&header());
        f.extend(gpu_info_frame(&info()));
        f.extend(gpu_bucket_frame(&bucket(2_000, &[1, 2])));
        let good = f.len();
        f.extend(gpu_bucket_frame(&bucket(3_000, &[3, 4])));
        for cut in good + 1..f.len() {
            let s = decode_gpu_file(&f[..cut], Path::new("x")).unwrap();
            assert_eq!(s.buckets.len(), 1, "cut at {cut}");
            assert!(s.torn);
            assert_eq!(s.valid_bytes, good as u64);
            assert!(s.info.is_some());
        }
        let s = decode_gpu_file(&f, Path::new("x")).unwrap();
        assert_eq!((s.buckets.len(), s.torn), (2, false));
        assert!(matches!(
            decode_gpu_file(b"JSCP\x01\x00", Path::new("/s/gpu.jsc")),
            Err(SpoolError::BadHeader { .. })
        ));
    }

    #[test]
    fn newer_fields_are_skipped() {
        let b = bucket(5, &[10]);
        let mut p = encode_gpu_bucket(&b);
        // Rebuild the device entry with an extra trailing varint and an unknown mask bit.
        let mut body = Vec::new();
        put_varint(&mut body, 0);
        put_varint(&mut body, 1);
        put_varint(&mut body, 1 << 20);
        put_varint(&mut body, 99);
        let mut q = Vec::new();
        put_varint(&mut q, 5);
        put_varint(&mut q, 0);
        put_varint(&mut q, 1);
        put_varint(&mut q, 2);
        q.extend(p[4..].iter());
        put_varint(&mut q, body.len() as u64);
        q.extend(&body);
        p = q;
        let d = decode_gpu_bucket(&p).unwrap();
        assert_eq!(d.devices.len(), 2);
        assert_eq!(d.devices[0], b.devices[0]);
        assert_eq!(d.devices[1].samples, 1);
    }

    #[test]
    fn a_long_job_stays_under_the_cap_and_keeps_its_peak() {
        let d = tempfile::tempdir().unwrap();
        let limits = GpuLimits::default();
        let mut w = GpuWriter::create(d.path(), GPU_FILE_NAME, header(), limits).unwrap();
        w.set_info(info()).unwrap();
        let n = 7 * 24 * 120u64; // a week at 30 s, 4 GPUs
        for i in 0..n {
            let u = if i == 12_345 { 100 } else { (i % 7) as u32 };
            w.push(bucket(i * 30_000, &[u, 0, 50, 1])).unwrap();
            assert!(w.bytes() <= limits.max_bytes, "at {i}");
        }
        let s = read_gpu_file(&d.path().join(GPU_FILE_NAME)).unwrap();
        assert!(s.info.is_some(), "info survives compaction");
        assert_eq!(s.buckets.iter().map(|b| b.n as u64).sum::<u64>(), n);
        let peak = s
            .buckets
            .iter()
            .filter_map(|b| b.device(0)?.util_gpu_pct)
            .map(|g| g.max)
            .max();
        assert_eq!(peak, Some(100));
        let energy: u64 = s
            .buckets
            .iter()
            .filter_map(|b| b.device(2)?.energy_mj)
            .sum();
        assert_eq!(energy, n * 7_500, "energy is summed, not lost");
    }

    fn arb_gauge() -> impl Strategy<Value = Option<Gauge>> {
        proptest::option::of(
            (0u64..1 << 40, 0u64..1 << 30, 0u64..1 << 50, 1u32..100).prop_map(
                |(min, d, sum, count)| Gauge {
                    min,
                    max: min + d,
                    sum,
                    count,
                },
            ),
        )
    }

    fn arb_dev() -> impl Strategy<Value = DeviceBucket> {
        (
            0u32..16,
            1u32..10,
            proptest::collection::vec(arb_gauge(), N_DEV_GAUGES),
            proptest::collection::vec(proptest::option::of(any::<u64>()), 4),
        )
            .prop_map(|(slot, samples, g, s)| {
                let mut d = DeviceBucket {
                    slot,
                    samples,
                    ..Default::default()
                };
                d.set_gauges([g[0], g[1], g[2], g[3], g[4], g[5], g[6]]);
                [
                    d.energy_mj,
                    d.energy_counter_mj,
                    d.mem_total_bytes,
                    d.throttle_reasons,
                ] = [s[0], s[1], s[2], s[3]];
                d
            })
    }

    proptest! {
        #[test]
        fn bucket_round_trip(t in 0u64..u64::MAX / 2, dt in 0u64..1_000_000, n in 1u32..1000,
                             devices in proptest::collection::vec(arb_dev(), 0..9)) {
            let b = GpuBucket { t_first_ms: t, t_last_ms: t + dt, n, devices };
            prop_assert_eq!(decode_gpu_bucket(&encode_gpu_bucket(&b)), Some(b));
        }

        #[test]
        fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let mut f = file_start(&header());
            f.extend(bytes.iter());
            let _ = decode_gpu_file(&f, Path::new("x"));
            let _ = decode_gpu_bucket(&bytes);
        }

        #[test]
        fn thinning_keeps_peak_low_mean_and_energy(
            utils in proptest::collection::vec(0u32..=100, 1..2000), target in 1usize..200) {
            let series: Vec<GpuBucket> = utils.iter().enumerate()
                .map(|(i, u)| bucket(i as u64 * 30_000, &[*u])).collect();
            let out = thin(&series, target);
            prop_assert!(out.len() <= target);
            let g = |bs: &[GpuBucket]| -> Vec<Gauge> {
                bs.iter().filter_map(|b| b.device(0)?.util_gpu_pct).collect()
            };
            prop_assert_eq!(g(&out).iter().map(|x| x.max).max(), utils.iter().map(|u| *u as u64).max());
            prop_assert_eq!(g(&out).iter().map(|x| x.min).min(), utils.iter().map(|u| *u as u64).min());
            prop_assert_eq!(g(&out).iter().map(|x| x.sum).sum::<u64>(), utils.iter().map(|u| *u as u64).sum::<u64>());
            prop_assert_eq!(out.iter().map(|b| b.n as usize).sum::<usize>(), utils.len());
            let e: u64 = out.iter().filter_map(|b| b.device(0)?.energy_mj).sum();
            prop_assert_eq!(e, utils.len() as u64 * 7_500);
            let last = out.last().unwrap().device(0).unwrap().energy_counter_mj;
            prop_assert_eq!(last, Some(1_000_000 + *utils.last().unwrap() as u64));
            let again = thin(&out, (target / 2).max(1));
            prop_assert_eq!(g(&again).iter().map(|x| x.max).max(), utils.iter().map(|u| *u as u64).max());
        }
    }
}

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
//!   then (format additions, after the fields above, in bit order):
//!   bits 11, 12 (gauges: job_util_gpu_pct, job_util_mem_pct): as the gauges above
//!   bit 13 util_flags (OR over the bucket), bit 14 util_covered_ms (sum): one varint each
//!   bits 15..=20 (gauges: sm_active_permille, sm_occupancy_permille, tensor_active_permille,
//!     dram_active_permille, sm_clock_mhz, mem_clock_mhz): as the gauges above
//!   bits 21..=25 throttle_power_ms, throttle_thermal_ms, ecc_corrected, ecc_uncorrected,
//!     xid_errors (each a sum over the bucket): one varint each
//! ```
//! Bits 15 to 25 are NVIDIA's health and SM figures (docs/gpu.md, "SM activity"): the GPM
//! (Hopper and later) interval means in per mille, so a mean of 0.4 % is not rounded to 0; the
//! clocks as point reads beside them (SM figures count cycles and so skew under power capping);
//! the throttle time, ECC errors and XID errors are increases over the bucket. A file without
//! them reads as `None`: not measured.
//! Since the utilization fold ([`super::fold`]), `util_gpu_pct`/`util_mem_pct` hold one value per
//! driver sample of the interval (200 ms apart on an H100) where the driver's sample buffer is
//! supported, one per point read where not (`util_flags` says which); older files hold point reads
//! and no flags.
//! The per-device length lets a reader skip fields a newer writer added. Gauges keep min/max/sum/
//! count, so thinning (see [`thin`]) never loses a peak or changes a mean. About 30 bytes per GPU
//! per sample (some 45 more with a Hopper GPU's SM and health figures: six gauges, five counts); the file is capped at [`DEFAULT_MAX_GPU_FILE_BYTES`].

use super::{GpuDevice, SelectionSource};
use crate::spool::codec::{frame, get_varint, put_varint};
use crate::spool::codec::{read_prologue, Frames};
use crate::spool::{validate, End, Event, Gauge, Header, SpoolError, KIND_END, KIND_EVENT};
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
    pub devices: Vec<GpuDevice>,
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
    /// The job's own share of the GPU (SM) utilization, from per-process samples
    /// ([`super::fold`]): one value per driver sample, like `util_gpu_pct`.
    pub job_util_gpu_pct: Option<Gauge>,
    /// The job's own share of the memory-controller utilization.
    pub job_util_mem_pct: Option<Gauge>,
    /// Where the utilization came from and whether others were active ([`super::fold`]'s
    /// `UTIL_*` bits, OR over the bucket); `None` in files written before the fold.
    pub util_flags: Option<u64>,
    /// Time covered by the driver's samples in the bucket, milliseconds (sum).
    pub util_covered_ms: Option<u64>,
    /// SM activity over each sample's interval (NVML GPM `SM_UTIL`: the share of time each SM
    /// had a warp assigned, averaged over the SMs), per mille. `None`: no GPM (before Hopper,
    /// MIG, older files).
    pub sm_active_permille: Option<Gauge>,
    /// SM occupancy (GPM `SM_OCCUPANCY`: resident warps against the maximum), per mille.
    pub sm_occupancy_permille: Option<Gauge>,
    /// Any tensor pipe active (GPM `ANY_TENSOR_UTIL`), per mille.
    pub tensor_active_permille: Option<Gauge>,
    /// DRAM bandwidth used against the peak (GPM `DRAM_BW_UTIL`), per mille.
    pub dram_active_permille: Option<Gauge>,
    /// SM clock at each sample (point read), MHz.
    pub sm_clock_mhz: Option<Gauge>,
    /// Memory clock at each sample (point read), MHz.
    pub mem_clock_mhz: Option<Gauge>,
    /// Time the power cap held the clocks down in the bucket (NVML violation counter increase),
    /// milliseconds.
    pub throttle_power_ms: Option<u64>,
    /// Time a thermal limit held the clocks down in the bucket, milliseconds.
    pub throttle_thermal_ms: Option<u64>,
    /// Corrected ECC errors in the bucket (volatile counter increase).
    pub ecc_corrected: Option<u64>,
    /// Uncorrected ECC errors in the bucket.
    pub ecc_uncorrected: Option<u64>,
    /// XID errors NVML reported in the bucket (all of them; the first few are also events with
    /// their codes, `gpu_xid`).
    pub xid_errors: Option<u64>,
}

pub const N_DEV_GAUGES: usize = 7;
/// Gauges added after the first format (mask bits 11 and 12).
const N_NEW_GAUGES: usize = 2;
/// Mask bit of the first scalar (`energy_mj`); four scalars follow it.
const SCALARS_BIT: usize = N_DEV_GAUGES;
const NEW_GAUGES_BIT: usize = SCALARS_BIT + 4;
const NEW_SCALARS_BIT: usize = NEW_GAUGES_BIT + N_NEW_GAUGES;
/// The health and SM gauges (bits 15..=20) and scalars (bits 21..=25).
const N_HEALTH_GAUGES: usize = 6;
const N_HEALTH_SCALARS: usize = 5;
const HEALTH_GAUGES_BIT: usize = NEW_SCALARS_BIT + 2;
const HEALTH_SCALARS_BIT: usize = HEALTH_GAUGES_BIT + N_HEALTH_GAUGES;

// The health gauges and scalars in their mask-bit order, written once (as `device_gauges!`).
macro_rules! health_gauges {
    ($b:expr) => {
        [
            $b.sm_active_permille,
            $b.sm_occupancy_permille,
            $b.tensor_active_permille,
            $b.dram_active_permille,
            $b.sm_clock_mhz,
            $b.mem_clock_mhz,
        ]
    };
}
macro_rules! health_scalars {
    ($b:expr) => {
        [
            $b.throttle_power_ms,
            $b.throttle_thermal_ms,
            $b.ecc_corrected,
            $b.ecc_uncorrected,
            $b.xid_errors,
        ]
    };
}

/// Sum of two optional counts; `None` only when neither has one.
fn add_opt(x: Option<u64>, y: Option<u64>) -> Option<u64> {
    match (x, y) {
        (Some(x), Some(y)) => Some(x.saturating_add(y)),
        (x, y) => x.or(y),
    }
}

// The device gauges of a `DeviceBucket` in their mask-bit order, as one array expression: a value
// in `gauges` and an assignee in `set_gauges`, so the list (the file format's bit order) is
// written once.
macro_rules! device_gauges {
    ($b:expr) => {
        [
            $b.util_gpu_pct,
            $b.util_mem_pct,
            $b.mem_used_bytes,
            $b.power_mw,
            $b.job_processes,
            $b.job_mem_bytes,
            $b.other_processes,
        ]
    };
}

impl DeviceBucket {
    fn gauges(&self) -> [Option<Gauge>; N_DEV_GAUGES] {
        device_gauges!(self)
    }
    pub fn set_gauges(&mut self, g: [Option<Gauge>; N_DEV_GAUGES]) {
        device_gauges!(self) = g;
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
        self.job_util_gpu_pct = Gauge::merge(self.job_util_gpu_pct, b.job_util_gpu_pct);
        self.job_util_mem_pct = Gauge::merge(self.job_util_mem_pct, b.job_util_mem_pct);
        self.util_flags = match (self.util_flags, b.util_flags) {
            (Some(x), Some(y)) => Some(x | y),
            (x, y) => x.or(y),
        };
        self.util_covered_ms = match (self.util_covered_ms, b.util_covered_ms) {
            (Some(x), Some(y)) => Some(x.saturating_add(y)),
            (x, y) => x.or(y),
        };
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
        let (mine, theirs) = (health_gauges!(self), health_gauges!(b));
        let mut merged = [None; N_HEALTH_GAUGES];
        for i in 0..N_HEALTH_GAUGES {
            merged[i] = Gauge::merge(mine[i], theirs[i]);
        }
        health_gauges!(self) = merged;
        let (mine, theirs) = (health_scalars!(self), health_scalars!(b));
        let mut summed = [None; N_HEALTH_SCALARS];
        for i in 0..N_HEALTH_SCALARS {
            summed[i] = add_opt(mine[i], theirs[i]);
        }
        health_scalars!(self) = summed;
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
                mask |= 1 << (SCALARS_BIT + i);
            }
        }
        let new_gauges = [d.job_util_gpu_pct, d.job_util_mem_pct];
        let new_scalars = [d.util_flags, d.util_covered_ms];
        for (i, g) in new_gauges.iter().enumerate() {
            if g.is_some() {
                mask |= 1 << (NEW_GAUGES_BIT + i);
            }
        }
        for (i, s) in new_scalars.iter().enumerate() {
            if s.is_some() {
                mask |= 1 << (NEW_SCALARS_BIT + i);
            }
        }
        for (i, g) in health_gauges!(d).iter().enumerate() {
            if g.is_some() {
                mask |= 1 << (HEALTH_GAUGES_BIT + i);
            }
        }
        for (i, s) in health_scalars!(d).iter().enumerate() {
            if s.is_some() {
                mask |= 1 << (HEALTH_SCALARS_BIT + i);
            }
        }
        put_varint(&mut body, mask);
        for g in gauges.iter().flatten() {
            put_gauge(&mut body, g);
        }
        for s in scalars.iter().flatten() {
            put_varint(&mut body, *s);
        }
        for g in new_gauges.iter().flatten() {
            put_gauge(&mut body, g);
        }
        for s in new_scalars.iter().flatten() {
            put_varint(&mut body, *s);
        }
        let (hg, hs) = (health_gauges!(d), health_scalars!(d));
        for g in hg.iter().flatten() {
            put_gauge(&mut body, g);
        }
        for s in hs.iter().flatten() {
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
            if mask & (1 << (SCALARS_BIT + i)) != 0 {
                *s = Some(get_varint(body, &mut q)?);
            }
        }
        [
            d.energy_mj,
            d.energy_counter_mj,
            d.mem_total_bytes,
            d.throttle_reasons,
        ] = scalars;
        let mut new_gauges = [None; N_NEW_GAUGES];
        for (i, g) in new_gauges.iter_mut().enumerate() {
            if mask & (1 << (NEW_GAUGES_BIT + i)) != 0 {
                *g = Some(get_gauge(body, &mut q)?);
            }
        }
        [d.job_util_gpu_pct, d.job_util_mem_pct] = new_gauges;
        let mut new_scalars = [None; 2];
        for (i, s) in new_scalars.iter_mut().enumerate() {
            if mask & (1 << (NEW_SCALARS_BIT + i)) != 0 {
                *s = Some(get_varint(body, &mut q)?);
            }
        }
        [d.util_flags, d.util_covered_ms] = new_scalars;
        let mut hg = [None; N_HEALTH_GAUGES];
        for (i, g) in hg.iter_mut().enumerate() {
            if mask & (1 << (HEALTH_GAUGES_BIT + i)) != 0 {
                *g = Some(get_gauge(body, &mut q)?);
            }
        }
        health_gauges!(d) = hg;
        let mut hs = [None; N_HEALTH_SCALARS];
        for (i, s) in hs.iter_mut().enumerate() {
            if mask & (1 << (HEALTH_SCALARS_BIT + i)) != 0 {
                *s = Some(get_varint(body, &mut q)?);
            }
        }
        health_scalars!(d) = hs;
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
    pub fn devices(&self) -> &[GpuDevice] {
        self.info.as_ref().map_or(&[], |i| &i.devices)
    }
}

/// A GPU bucket worth believing: samples in it, device slots and gauges within bounds (utilization
/// is a percentage), counters below [`validate::MAX_VALUE`].
pub fn gpu_bucket_ok(b: &GpuBucket) -> bool {
    let pct = |g: &Option<Gauge>| g.is_none_or(|g| g.max <= 100);
    b.n >= 1
        && b.devices.iter().all(|d| {
            d.samples >= 1
                && d.samples <= b.n
                && d.gauges().iter().flatten().all(validate::gauge_ok)
                && pct(&d.util_gpu_pct)
                && pct(&d.util_mem_pct)
                && [d.job_util_gpu_pct, d.job_util_mem_pct]
                    .iter()
                    .all(|g| g.as_ref().is_none_or(validate::gauge_ok) && pct(g))
                && [
                    d.energy_mj,
                    d.energy_counter_mj,
                    d.mem_total_bytes,
                    d.util_covered_ms,
                ]
                .into_iter()
                .chain(health_scalars!(d))
                .flatten()
                .all(validate::value_ok)
                && health_gauges!(d)
                    .iter()
                    .all(|g| g.as_ref().is_none_or(validate::gauge_ok))
                && [
                    d.sm_active_permille,
                    d.sm_occupancy_permille,
                    d.tensor_active_permille,
                    d.dram_active_permille,
                ]
                .iter()
                .all(|g| g.is_none_or(|g| g.max <= 1000))
        })
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
    let mut buckets_time = validate::Timeline::new(&s.header);
    let mut events_time = validate::Timeline::new(&s.header);
    while let Some((kind, payload)) = frames.next() {
        let ok = match kind {
            KIND_GPU_BUCKET => decode_gpu_bucket(payload).map(|b| {
                // Intact but implausible (see `crate::spool::validate`): dropped, loss stated.
                if gpu_bucket_ok(&b) && buckets_time.accept(b.t_first_ms, b.t_last_ms) {
                    s.buckets.push(b);
                } else {
                    s.torn = true;
                }
            }),
            KIND_GPU_INFO => serde_json::from_slice(payload)
                .ok()
                .map(|i| s.info = Some(i)),
            KIND_EVENT => serde_json::from_slice::<Event>(payload).ok().map(|e| {
                if validate::event_ok(&e) && events_time.accept(e.t_ms, e.t_ms) {
                    s.events.push(e);
                } else {
                    s.torn = true;
                }
            }),
            KIND_END => serde_json::from_slice::<End>(payload).ok().map(|e| {
                let mut t = buckets_time;
                if validate::end_ok(&e) && t.accept(e.t_ms, e.t_ms) {
                    s.end = Some(e);
                } else {
                    s.torn = true;
                }
            }),
            _ => Some(()),
        }
        .is_some();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn g(min: u64, max: u64, sum: u64, count: u32) -> Option<Gauge> {
        Some(Gauge {
            min,
            max,
            sum,
            count,
        })
    }

    fn health_bucket() -> DeviceBucket {
        DeviceBucket {
            slot: 1,
            samples: 2,
            util_gpu_pct: g(90, 100, 190, 2),
            throttle_reasons: Some(0x4),
            sm_active_permille: g(40, 80, 120, 2),
            sm_occupancy_permille: g(10, 30, 40, 2),
            tensor_active_permille: g(0, 0, 0, 2),
            dram_active_permille: g(100, 200, 300, 2),
            sm_clock_mhz: g(1200, 1980, 3180, 2),
            mem_clock_mhz: g(2619, 2619, 5238, 2),
            throttle_power_ms: Some(12_000),
            throttle_thermal_ms: Some(0),
            ecc_corrected: Some(3),
            ecc_uncorrected: Some(0),
            xid_errors: Some(2),
            ..Default::default()
        }
    }

    #[test]
    fn health_fields_round_trip() {
        let b = GpuBucket {
            t_first_ms: 1_000,
            t_last_ms: 31_000,
            n: 2,
            devices: vec![
                health_bucket(),
                DeviceBucket {
                    slot: 0,
                    samples: 1,
                    ..Default::default()
                },
            ],
        };
        let back = decode_gpu_bucket(&encode_gpu_bucket(&b)).unwrap();
        assert_eq!(back, b);
        assert!(gpu_bucket_ok(&back));
    }

    /// A bucket as written before the health fields (mask bits 0..=14 only), built byte by
    /// byte: it still reads, and every new field is `None` (not measured), not 0.
    #[test]
    fn a_bucket_of_the_older_format_reads_with_the_new_fields_none() {
        let mut body = Vec::new();
        put_varint(&mut body, 0); // slot
        put_varint(&mut body, 1); // samples
        put_varint(&mut body, 1 | 1 << 10 | 1 << 14); // util_gpu_pct, throttle_reasons, covered
        for v in [50, 0, 50, 1] {
            put_varint(&mut body, v); // util gauge: min, max - min, sum, count
        }
        put_varint(&mut body, 4); // throttle reasons
        put_varint(&mut body, 30_000); // util_covered_ms
        let mut p = Vec::new();
        for v in [5_000, 0, 1, 1, body.len() as u64] {
            put_varint(&mut p, v);
        }
        p.extend_from_slice(&body);
        let b = decode_gpu_bucket(&p).unwrap();
        let d = &b.devices[0];
        assert_eq!(d.util_gpu_pct.map(|g| g.max), Some(50));
        assert_eq!(d.throttle_reasons, Some(4));
        assert_eq!(d.util_covered_ms, Some(30_000));
        assert_eq!(
            (d.sm_active_permille, d.sm_clock_mhz),
            (None, None),
            "not measured, not zero"
        );
        assert_eq!(
            (d.throttle_power_ms, d.ecc_uncorrected, d.xid_errors),
            (None, None, None)
        );
    }

    /// Merging (thinning) keeps the SM gauges' peaks and means and sums the counts; a bucket
    /// without a figure leaves the other's.
    #[test]
    fn health_fields_merge_as_gauges_and_sums() {
        let mut a = health_bucket();
        let mut b = health_bucket();
        b.sm_active_permille = g(500, 500, 500, 1);
        b.xid_errors = None;
        b.throttle_power_ms = Some(500);
        a.absorb(&b);
        assert_eq!(a.sm_active_permille, g(40, 500, 620, 3));
        assert_eq!(a.throttle_power_ms, Some(12_500));
        assert_eq!(a.xid_errors, Some(2));
        assert_eq!(a.ecc_corrected, Some(6));
    }

    #[test]
    fn an_sm_figure_above_100_percent_is_refused() {
        let mut d = health_bucket();
        d.sm_active_permille = g(0, 1001, 1001, 2);
        let b = GpuBucket {
            t_first_ms: 0,
            t_last_ms: 1,
            n: 2,
            devices: vec![d],
        };
        assert!(!gpu_bucket_ok(&b));
    }
}

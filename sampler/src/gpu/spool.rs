//! `gpu.jsc` on disk: the bounded writer. The format, its types and its decoding are pure and live
//! in `jobscope_model::gpu::spool`; reading it (bounded, no symlinks) is
//! `jobscope_common::spool::read_gpu_file`.

pub(crate) use jobscope_model::gpu::spool::*;

use crate::spool::writer::SeriesWriter;
use crate::spool::{End, Event, Header};
use jobscope_common::fsutil::FsError;
use std::path::Path;

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
    use crate::gpu::{GpuDevice, GpuIdentity, SelectionSource};
    use crate::spool::codec::file_start;
    use crate::spool::codec::put_varint;
    use crate::spool::EventKind;
    use crate::spool::Gauge;
    use crate::spool::SpoolError;
    use jobscope_common::spool::read_gpu_file;
    use proptest::prelude::*;

    use crate::spool::writer::tests::T0;

    pub(crate) fn header() -> Header {
        Header {
            uid: 1001,
            gid: 1001,
            plugin_version: "t".into(),
            ..Header::new(42, "gpu01", "job", T0 + 1_000)
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
            job_util_gpu_pct: Some(Gauge {
                min: 0,
                max: util as u64,
                sum: util as u64 * 30,
                count: 150,
            }),
            job_util_mem_pct: None,
            util_flags: Some(jobscope_model::gpu::fold::UTIL_FROM_BUFFER),
            util_covered_ms: Some(29_800),
            sm_active_permille: Some(Gauge::one(util as u64 * 5)),
            sm_occupancy_permille: Some(Gauge::one(120)),
            tensor_active_permille: None,
            dram_active_permille: Some(Gauge::one(300)),
            sm_clock_mhz: Some(Gauge::one(1980)),
            mem_clock_mhz: Some(Gauge::one(2619)),
            throttle_power_ms: Some(1_500),
            throttle_thermal_ms: Some(0),
            ecc_corrected: Some(0),
            ecc_uncorrected: Some(0),
            xid_errors: Some(u64::from(util % 2)),
        }
    }

    fn bucket(t: u64, utils: &[u32]) -> GpuBucket {
        GpuBucket {
            t_first_ms: T0 + t,
            t_last_ms: T0 + t,
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
            t_ms: T0 + 1_100,
            backends: vec!["nvml".into()],
            selection_source: Some(SelectionSource::GresConf),
            devices: vec![GpuDevice {
                identity: GpuIdentity {
                    kind: Some(super::super::GpuKind::Nvidia),
                    uuid: Some("GPU-x".into()),
                    ..Default::default()
                },
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
            t_ms: T0 + 2_500,
            kind: EventKind::GpuLost,
            step: None,
            job: None,
            step_reading: None,
            exit_status: None,
            message: Some("GPU 1 (GPU-x): fell off the bus".into()),
        };
        w.event(e.clone()).unwrap();
        let end = End {
            t_ms: T0 + 3_000,
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
        // Small times keep the leading varints one byte each, which the rebuild below relies on.
        let b = GpuBucket {
            t_first_ms: 5,
            t_last_ms: 5,
            ..bucket(0, &[10])
        };
        let mut p = encode_gpu_bucket(&b);
        // Rebuild the device entry with an extra trailing varint and an unknown mask bit.
        let mut body = Vec::new();
        put_varint(&mut body, 0);
        put_varint(&mut body, 1);
        // Bits up to 25 are taken (model/src/gpu/spool.rs): 40 is a future writer's.
        put_varint(&mut body, 1 << 40);
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

    /// A file written before the utilization fold (no job share, no flags: mask bits 11-14
    /// unset) decodes as it did, the new fields `None`; the bytes below are such a device entry.
    #[test]
    fn pre_fold_bucket_decodes_with_the_new_fields_absent() {
        let mut p = Vec::new();
        for v in [5u64, 0, 1, 1] {
            put_varint(&mut p, v); // t_first, t_last - t_first, n, one device
        }
        let mut body = Vec::new();
        // slot 0, 1 sample, mask: util_gpu_pct (bit 0) and energy_counter_mj (bit 8).
        for v in [0u64, 1, 1 | 1 << 8, 42, 0, 42, 1, 7_000] {
            put_varint(&mut body, v);
        }
        put_varint(&mut p, body.len() as u64);
        p.extend(&body);
        let b = decode_gpu_bucket(&p).unwrap();
        let d = &b.devices[0];
        assert_eq!(d.util_gpu_pct, Some(Gauge::one(42)));
        assert_eq!(d.energy_counter_mj, Some(7_000));
        assert_eq!(
            (d.job_util_gpu_pct, d.util_flags, d.util_covered_ms),
            (None, None, None)
        );
        assert!(gpu_bucket_ok(&b));
    }

    #[test]
    fn a_job_share_over_100_pct_is_refused() {
        let mut b = bucket(0, &[10]);
        b.devices[0].job_util_gpu_pct = Some(Gauge::one(101));
        assert!(!gpu_bucket_ok(&b));
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
            proptest::collection::vec(arb_gauge(), N_DEV_GAUGES + 2),
            proptest::collection::vec(proptest::option::of(any::<u64>()), 6),
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
                [d.job_util_gpu_pct, d.job_util_mem_pct] = [g[7], g[8]];
                [d.util_flags, d.util_covered_ms] = [s[4], s[5]];
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

//! Byte-level encoding of spool frames. Pure: no I/O here.
//!
//! A bucket payload is compact binary, because buckets are the bulk of a spool:
//! ```text
//! varint t_first_ms, varint (t_last_ms - t_first_ms), varint n,
//! varint present_mask (bit i = Reading field i present), varint value for each present field,
//! u8 gauge_mask, then for each present gauge: varint min, varint (max - min), varint sum, varint count
//! ```
//! A full v1 sample is about 90 bytes; JSON of the same would be about 700.

use super::*;

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads an LEB128 varint; `None` on truncation or overflow.
pub fn get_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v: u64 = 0;
    let mut shift = 0u32;
    loop {
        let b = *buf.get(*pos)?;
        *pos += 1;
        if shift >= 64 || (shift == 63 && b > 1) {
            return None;
        }
        v |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
    }
}

pub fn encode_bucket(b: &Bucket) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    put_varint(&mut out, b.t_first_ms);
    put_varint(&mut out, b.t_last_ms.saturating_sub(b.t_first_ms));
    put_varint(&mut out, b.n as u64);
    let fields = b.last.fields();
    let mut mask: u64 = 0;
    for (i, f) in fields.iter().enumerate() {
        if f.is_some() {
            mask |= 1 << i;
        }
    }
    put_varint(&mut out, mask);
    for v in fields.iter().flatten() {
        put_varint(&mut out, *v);
    }
    let mut gmask: u8 = 0;
    for (i, g) in b.gauges.iter().enumerate() {
        if g.is_some() {
            gmask |= 1 << i;
        }
    }
    out.push(gmask);
    for g in b.gauges.iter().flatten() {
        put_varint(&mut out, g.min);
        put_varint(&mut out, g.max.saturating_sub(g.min));
        put_varint(&mut out, g.sum);
        put_varint(&mut out, g.count as u64);
    }
    out
}

pub fn decode_bucket(p: &[u8]) -> Option<Bucket> {
    let mut pos = 0;
    let t_first_ms = get_varint(p, &mut pos)?;
    let t_last_ms = t_first_ms.checked_add(get_varint(p, &mut pos)?)?;
    let n = u32::try_from(get_varint(p, &mut pos)?).ok()?;
    let mask = get_varint(p, &mut pos)?;
    let mut fields = Vec::with_capacity(64);
    for i in 0..64 {
        fields.push(if mask & (1 << i) != 0 {
            Some(get_varint(p, &mut pos)?)
        } else {
            None
        });
    }
    let last = Reading::from_fields(&fields);
    let gmask = *p.get(pos)?;
    pos += 1;
    let mut gauges = [None; N_GAUGES];
    for (i, slot) in gauges.iter_mut().enumerate() {
        if gmask & (1 << i) != 0 {
            let min = get_varint(p, &mut pos)?;
            let max = min.checked_add(get_varint(p, &mut pos)?)?;
            let sum = get_varint(p, &mut pos)?;
            let count = u32::try_from(get_varint(p, &mut pos)?).ok()?;
            *slot = Some(Gauge {
                min,
                max,
                sum,
                count,
            });
        }
    }
    // Gauges this build does not know (a newer writer) are ignored, not an error.
    Some(Bucket {
        t_first_ms,
        t_last_ms,
        n,
        last,
        gauges,
    })
}

/// Wraps a payload into a frame with its CRC.
pub fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 9);
    out.push(kind);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The file prologue: magic, version and the header frame.
pub fn file_start(h: &Header) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    let json = serde_json::to_vec(h).expect("header serialises");
    out.extend_from_slice(&frame(KIND_HEADER, &json));
    out
}

pub fn bucket_frame(b: &Bucket) -> Vec<u8> {
    frame(KIND_BUCKET, &encode_bucket(b))
}

pub fn event_frame(e: &Event) -> Vec<u8> {
    frame(
        KIND_EVENT,
        &serde_json::to_vec(e).expect("event serialises"),
    )
}

pub fn end_frame(e: &End) -> Vec<u8> {
    frame(KIND_END, &serde_json::to_vec(e).expect("end serialises"))
}

/// Largest frame payload accepted; anything bigger is corruption (a bucket is ~100 bytes).
const MAX_PAYLOAD: usize = 64 * 1024;

/// Next frame at `pos`: `Some((kind, payload, next_pos))`, or `None` if torn or corrupt.
fn next_frame(buf: &[u8], pos: usize) -> Option<(u8, &[u8], usize)> {
    let kind = *buf.get(pos)?;
    let len_bytes: [u8; 4] = buf.get(pos + 1..pos + 5)?.try_into().ok()?;
    let len = u32::from_le_bytes(len_bytes) as usize;
    if len > MAX_PAYLOAD {
        return None;
    }
    let end = pos.checked_add(5 + len)?;
    let payload = buf.get(pos + 5..end)?;
    let crc_bytes: [u8; 4] = buf.get(end..end + 4)?.try_into().ok()?;
    if crc32fast::hash(&buf[pos..end]) != u32::from_le_bytes(crc_bytes) {
        return None;
    }
    Some((kind, payload, end + 4))
}

/// Reads a spool file's prologue (magic, version, header frame): the header and the position of the
/// first frame after it. Lets other series (e.g. `gpu.jsc`, see `crate::gpu::spool`) share the
/// framing with their own frame kinds.
pub fn read_prologue(buf: &[u8], path: &Path) -> Result<(Header, usize), SpoolError> {
    let path_buf = || path.to_path_buf();
    if buf.len() < 6 || &buf[..4] != MAGIC {
        return Err(SpoolError::BadMagic { path: path_buf() });
    }
    let version = u16::from_le_bytes([buf[4], buf[5]]);
    if version != FORMAT_VERSION {
        return Err(SpoolError::Version {
            path: path_buf(),
            found: version,
        });
    }
    let (kind, payload, pos) =
        next_frame(buf, 6).ok_or(SpoolError::BadHeader { path: path_buf() })?;
    if kind != KIND_HEADER {
        return Err(SpoolError::BadHeader { path: path_buf() });
    }
    let mut header: Header =
        serde_json::from_slice(payload).map_err(|_| SpoolError::BadHeader { path: path_buf() })?;
    super::validate::sanitize_header(&mut header);
    if !super::validate::header_ok(&header) {
        return Err(SpoolError::BadHeader { path: path_buf() });
    }
    Ok((header, pos))
}

/// Iterator over intact frames from `pos` on: `(kind, payload)`. Stops at the end of the buffer or
/// at the first torn/corrupt frame, after which [`Frames::torn`] is true.
pub struct Frames<'a> {
    buf: &'a [u8],
    pos: usize,
    torn: bool,
}

impl<'a> Frames<'a> {
    pub fn new(buf: &'a [u8], pos: usize) -> Self {
        Frames {
            buf,
            pos,
            torn: false,
        }
    }
    /// A torn or corrupt frame ended the iteration.
    pub fn torn(&self) -> bool {
        self.torn
    }
    /// Bytes of the valid prefix read so far (the position of the next frame).
    pub fn pos(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = (u8, &'a [u8]);
    fn next(&mut self) -> Option<Self::Item> {
        if self.torn || self.pos >= self.buf.len() {
            return None;
        }
        match next_frame(self.buf, self.pos) {
            Some((kind, payload, next)) => {
                self.pos = next;
                Some((kind, payload))
            }
            None => {
                self.torn = true;
                None
            }
        }
    }
}

/// Decodes a whole spool file. A torn or corrupt frame ends the decoding (marked `torn`) and is not an
/// error: the valid prefix is what the job produced before the writer died. Only a file whose header
/// cannot be read is an error.
pub fn decode_file(buf: &[u8], path: &Path) -> Result<SpoolFile, SpoolError> {
    let (header, start) = read_prologue(buf, path)?;
    let mut out = SpoolFile {
        header,
        buckets: vec![],
        events: vec![],
        end: None,
        torn: false,
        valid_bytes: 0,
    };
    let mut frames = Frames::new(buf, start);
    let mut valid = start;
    let mut buckets_time = validate::Timeline::new(&out.header);
    let mut events_time = validate::Timeline::new(&out.header);
    while let Some((kind, payload)) = frames.next() {
        let ok = match kind {
            KIND_BUCKET => decode_bucket(payload).map(|b| {
                // Intact but implausible (see `validate`): dropped, and the loss is stated.
                if validate::bucket_ok(&b) && buckets_time.accept(b.t_first_ms, b.t_last_ms) {
                    out.buckets.push(b);
                } else {
                    out.torn = true;
                }
            }),
            KIND_EVENT => serde_json::from_slice::<Event>(payload).ok().map(|e| {
                if validate::event_ok(&e) && events_time.accept(e.t_ms, e.t_ms) {
                    out.events.push(e);
                } else {
                    out.torn = true;
                }
            }),
            KIND_END => serde_json::from_slice::<End>(payload).ok().map(|e| {
                let mut t = buckets_time;
                if validate::end_ok(&e) && t.accept(e.t_ms, e.t_ms) {
                    out.end = Some(e);
                } else {
                    out.torn = true;
                }
            }),
            // An unknown kind from a newer writer: skip it, the CRC says it is intact.
            _ => Some(()),
        }
        .is_some();
        if !ok {
            out.torn = true;
            break;
        }
        valid = frames.pos();
    }
    out.torn |= frames.torn();
    out.valid_bytes = valid as u64;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(crate) fn header() -> Header {
        Header {
            uid: 1001,
            gid: 1001,
            cgroup_version: Some(CgroupVersion::V1),
            cgroup_path: Some("/sys/fs/cgroup/memory/slurm_vm/uid_1001/job_42".into()),
            boot_id: Some("b".into()),
            boot_time_s: Some(1),
            plugin_version: "0.1.0".into(),
            alloc_cores: Some(2),
            alloc_mem_bytes: Some(1 << 30),
            ..Header::new(42, "vm", "job", T0 + 1_000)
        }
    }

    /// A plausible wall-clock base for test files: decoding refuses a header whose start is
    /// not a plausible time (see `super::super::validate`).
    const T0: u64 = 1_700_000_000_000;

    /// A bucket at `t` ms after [`T0`].
    fn bucket(t: u64, cpu: u64, mem: u64) -> Bucket {
        Bucket {
            t_first_ms: T0 + t,
            t_last_ms: T0 + t,
            n: 1,
            last: Reading {
                cpu_usage_ns: Some(cpu),
                mem_current_bytes: Some(mem),
                ..Default::default()
            },
            gauges: [Some(Gauge::one(mem)), None, None, Some(Gauge::one(3)), None],
        }
    }

    #[test]
    fn round_trip_all_frame_kinds() {
        let mut f = file_start(&header());
        let b = bucket(2_000, 5_000_000_000, 123 << 20);
        f.extend(bucket_frame(&b));
        let e = Event {
            t_ms: T0 + 3_000,
            kind: EventKind::StepExit,
            step: Some("batch".into()),
            job: Some(b.last.clone()),
            step_reading: None,
            exit_status: Some(0),
            message: None,
        };
        f.extend(event_frame(&e));
        let end = End {
            t_ms: T0 + 4_000,
            reason: "job_end".into(),
            samples_taken: 1,
            samples_missed: 0,
        };
        f.extend(end_frame(&end));
        let d = decode_file(&f, Path::new("x")).unwrap();
        assert_eq!(d.header, header());
        assert_eq!(d.buckets, vec![b]);
        assert_eq!(d.events, vec![e]);
        assert_eq!(d.end, Some(end));
        assert!(!d.torn);
        assert_eq!(d.valid_bytes, f.len() as u64);
    }

    /// An event frame as a writer of the string-kind era wrote it (fields in `Event`'s order).
    fn old_event_frame(kind: &str) -> Vec<u8> {
        let json = format!(
            r#"{{"t_ms":{},"kind":"{kind}","step":"0","job":null,"step_reading":null,"exit_status":null,"message":"m"}}"#,
            T0 + 3_000
        );
        frame(KIND_EVENT, json.as_bytes())
    }

    fn decode_one_event(ev: &[u8]) -> Event {
        let mut f = file_start(&header());
        f.extend_from_slice(ev);
        let d = decode_file(&f, Path::new("x")).unwrap();
        assert!(!d.torn);
        assert_eq!(d.events.len(), 1);
        d.events[0].clone()
    }

    #[test]
    fn an_unknown_event_kind_decodes_as_other_and_is_written_back_byte_for_byte() {
        let old = old_event_frame("kernel_oops");
        let e = decode_one_event(&old);
        assert_eq!(e.kind, EventKind::Other("kernel_oops".into()));
        assert_eq!(event_frame(&e), old);
    }

    #[test]
    fn every_kind_written_so_far_is_known_and_keeps_its_bytes() {
        // The names the plugin, the sampler and the GPU backends have written into spools in the wild.
        for name in [
            "step_start",
            "step_tasks_done",
            "step_exit",
            "batch_script",
            "sampler_error",
            "gpu_lost",
            "nvml_timeout",
            "nvml_gave_up",
            "nvml_error",
            "sysfs_error",
        ] {
            let old = old_event_frame(name);
            let e = decode_one_event(&old);
            assert!(!matches!(e.kind, EventKind::Other(_)), "{name}");
            assert_eq!(e.kind.as_str(), name);
            assert_eq!(event_frame(&e), old, "{name}");
        }
    }

    #[test]
    fn torn_last_record_is_dropped_not_fatal() {
        let mut f = file_start(&header());
        f.extend(bucket_frame(&bucket(2_000, 1, 2)));
        let good_len = f.len();
        f.extend(bucket_frame(&bucket(3_000, 3, 4)));
        for cut in good_len + 1..f.len() {
            let d = decode_file(&f[..cut], Path::new("x")).unwrap();
            assert_eq!(d.buckets.len(), 1, "cut at {cut}");
            assert!(d.torn);
            assert_eq!(d.valid_bytes, good_len as u64);
        }
    }

    #[test]
    fn flipped_byte_is_detected_by_crc() {
        let mut f = file_start(&header());
        let start = f.len();
        f.extend(bucket_frame(&bucket(2_000, 1, 2)));
        f[start + 7] ^= 0x40;
        let d = decode_file(&f, Path::new("x")).unwrap();
        assert!(d.buckets.is_empty());
        assert!(d.torn);
    }

    /// Frames that are intact (valid CRC) but absurd are dropped at decode and the loss is flagged:
    /// time running backwards, a counter near `u64::MAX`, a gauge without samples, an end record
    /// before the data it ends.
    #[test]
    fn intact_but_implausible_frames_are_dropped_and_flagged() {
        let h = header();
        let t0 = h.start_unix_ms;
        let decode = |frames: Vec<Vec<u8>>| {
            let mut buf = file_start(&h);
            for f in frames {
                buf.extend(f);
            }
            decode_file(&buf, Path::new("job.jsc")).unwrap()
        };
        let good = |i: u64| bucket_frame(&bucket(1_000 + i * 30_000, i * 1_000_000_000, 1 << 20));
        let f = decode(vec![good(0), good(1), good(2)]);
        assert_eq!((f.buckets.len(), f.torn), (3, false));

        let backwards = bucket_frame(&bucket(1_000 + 10_000, 5, 1 << 20));
        let f = decode(vec![good(0), good(1), backwards, good(2)]);
        assert_eq!(
            f.buckets.len(),
            3,
            "the record out of order is dropped, the rest kept"
        );
        assert!(f.torn, "and the loss is flagged");
        assert!(f
            .buckets
            .windows(2)
            .all(|w| w[0].t_last_ms <= w[1].t_first_ms));

        let mut huge = bucket(1_000 + 45_000, 1, 1);
        huge.last.mem_current_bytes = Some(u64::MAX - 1);
        let f = decode(vec![good(0), good(1), bucket_frame(&huge), good(2)]);
        assert_eq!((f.buckets.len(), f.torn), (3, true));

        let mut empty_gauge = bucket(1_000 + 45_000, 1, 1);
        empty_gauge.gauges[0] = Some(Gauge {
            min: 1,
            max: 2,
            sum: 3,
            count: 0,
        });
        let f = decode(vec![good(0), good(1), bucket_frame(&empty_gauge), good(2)]);
        assert_eq!((f.buckets.len(), f.torn), (3, true));

        let early_end = end_frame(&End {
            t_ms: t0 + 1_000,
            reason: "stopped".into(),
            samples_taken: 3,
            samples_missed: 0,
        });
        let f = decode(vec![good(0), good(1), good(2), early_end]);
        assert!(
            f.end.is_none() && f.torn,
            "an end before its data is not believed"
        );

        let far = bucket_frame(&bucket(1_000 + 401 * 86_400_000, 1, 1));
        let f = decode(vec![good(0), far]);
        assert_eq!((f.buckets.len(), f.torn), (1, true));
    }

    #[test]
    fn bad_magic_version_and_header_are_clear_errors() {
        let p = Path::new("/spool/1.vm/job.jsc");
        let e = decode_file(b"NOPE\x01\x00", p).unwrap_err();
        assert!(e.to_string().contains("/spool/1.vm/job.jsc"), "{e}");
        let mut f = file_start(&header());
        f[4] = 99;
        assert!(matches!(
            decode_file(&f, p),
            Err(SpoolError::Version { found: 99, .. })
        ));
        let f = file_start(&header());
        assert!(matches!(
            decode_file(&f[..f.len() - 1], p),
            Err(SpoolError::BadHeader { .. })
        ));
    }

    #[test]
    fn sample_is_compact() {
        let r = Reading::from_fields(&vec![Some(123_456_789_012u64); Reading::FIELD_NAMES.len()]);
        let b = Bucket {
            t_first_ms: 1_795_000_000_000,
            t_last_ms: 1_795_000_000_000,
            n: 1,
            last: r,
            gauges: [Some(Gauge::one(1 << 30)); N_GAUGES],
        };
        let len = bucket_frame(&b).len();
        assert!(len < 400, "{len}");
    }

    proptest! {
        #[test]
        fn varint_round_trip(v in any::<u64>()) {
            let mut out = vec![];
            put_varint(&mut out, v);
            let mut pos = 0;
            prop_assert_eq!(get_varint(&out, &mut pos), Some(v));
            prop_assert_eq!(pos, out.len());
        }

        #[test]
        fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let mut f = file_start(&header());
            f.extend(bytes);
            let _ = decode_file(&f, Path::new("x"));
            let _ = decode_bucket(&f);
        }

        /// The kernel view's spool records (issue 21): `kernel_view` events with any message and
        /// step readings carrying any kernel counters read back as written, and every torn or
        /// corrupted prefix of such a file decodes without a panic.
        #[test]
        fn kernel_view_events_round_trip_and_damage_never_panics(
            message in ".{0,300}",
            // plausible values (validate.rs drops an event with a counter past MAX_VALUE, or
            // outside the series' time span, as damage: the flipped byte below covers those)
            fields in proptest::collection::vec(
                proptest::option::of(0..=crate::spool::validate::MAX_VALUE),
                Reading::FIELD_NAMES.len(),
            ),
            dt in 0..crate::spool::validate::MAX_SPAN_MS / 2,
            cut in any::<proptest::sample::Index>(),
            flip in any::<proptest::sample::Index>(),
        ) {
            let e = Event {
                t_ms: header().start_unix_ms + dt,
                kind: EventKind::KernelView,
                step: Some("extern".into()),
                job: None,
                step_reading: Some(Reading::from_fields(&fields)),
                exit_status: None,
                message: Some(message),
            };
            let mut f = file_start(&header());
            f.extend(event_frame(&e));
            let back = decode_file(&f, Path::new("x")).expect("a whole file decodes");
            prop_assert_eq!(back.events, vec![e]);
            // a torn write: any prefix
            let _ = decode_file(&f[..cut.index(f.len())], Path::new("x"));
            // a flipped byte anywhere
            let mut g = f.clone();
            let i = flip.index(g.len());
            g[i] ^= 0x5a;
            let _ = decode_file(&g, Path::new("x"));
        }

        #[test]
        fn bucket_round_trip(fields in proptest::collection::vec(proptest::option::of(any::<u64>()), Reading::FIELD_NAMES.len()),
                             t in 0u64..u64::MAX / 2, dt in 0u64..1_000_000, n in 1u32..1000,
                             g in proptest::option::of((0u64..1<<40, 0u64..1<<40, 0u64..1<<50, 1u32..1000))) {
            let gauge = g.map(|(min, d, sum, count)| Gauge { min, max: min + d, sum, count });
            let b = Bucket { t_first_ms: t, t_last_ms: t + dt, n, last: Reading::from_fields(&fields), gauges: [gauge, None, gauge, None, gauge] };
            prop_assert_eq!(decode_bucket(&encode_bucket(&b)), Some(b));
        }
    }
}

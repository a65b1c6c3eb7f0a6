//! AMD GPUs through the amdgpu driver's sysfs files (root path is a parameter: fixture trees work).
//!
//! Layout (kernel `Documentation/gpu/amdgpu/`, `Documentation/hwmon/amdgpu.rst`):
//! ```text
//! <sys>/class/drm/card1 -> ../../devices/pci0000:00/…/0000:c1:00.0/drm/card1
//! <sys>/class/drm/card1/device -> the PCI function:
//!     vendor                 0x1002 for AMD (a BMC VGA or an nvidia-drm card is skipped)
//!     uevent                 PCI_SLOT_NAME=0000:c1:00.0
//!     gpu_busy_percent       %                      -> util_gpu_pct
//!     mem_info_vram_used     bytes                  -> mem_used_bytes
//!     mem_info_vram_total    bytes                  -> mem_total_bytes
//!     unique_id              hex (MI/Radeon Pro)    -> uuid "GPU-<unique_id>" (ROCR's form)
//!     product_name           (often empty)
//!     hwmon/hwmonN/power1_average  µW (older, MI) or power1_input µW (RDNA3)  -> power_mw
//!     hwmon/hwmonN/energy1_input   µJ, where present                          -> energy_mj
//! <sys>/class/drm/renderD129/device -> the same PCI function (the job's gres File= node)
//! ```
//! One typed read function per file; every error carries the path ([`crate::cgroup::Error`]);
//! a missing file is "not available" (`None`), not a failure. Per-process attribution is not
//! available from sysfs: `job_processes` is `None` (unknown) for AMD devices.

use super::assign::{resolve, InventoryDevice, Wanted};
use super::{
    BackendSample, DeviceSample, GpuBackend, GpuDevice, GpuEvent, GpuIdentity, GpuKind, OpenResult,
};
use crate::cgroup::Error;
use crate::spool::EventKind;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub const AMD_VENDOR: &str = "0x1002";

fn read_text(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|e| Error::from_io(path, e))
}

fn read_u64(path: &Path) -> Result<u64, Error> {
    let t = read_text(path)?;
    t.trim()
        .parse::<u64>()
        .map_err(|_| Error::malformed(path, t.trim()))
}

/// `device/gpu_busy_percent`: percent of time the GPU was busy (0–100).
pub fn read_gpu_busy_percent(device_dir: &Path) -> Result<u32, Error> {
    let p = device_dir.join("gpu_busy_percent");
    let v = read_u64(&p)?;
    u32::try_from(v)
        .ok()
        .filter(|v| *v <= 100)
        .ok_or_else(|| Error::malformed(&p, &v.to_string()))
}

/// `device/mem_info_vram_used`: VRAM in use, bytes.
pub fn read_mem_info_vram_used(device_dir: &Path) -> Result<u64, Error> {
    read_u64(&device_dir.join("mem_info_vram_used"))
}

/// `device/mem_info_vram_total`: VRAM size, bytes.
pub fn read_mem_info_vram_total(device_dir: &Path) -> Result<u64, Error> {
    read_u64(&device_dir.join("mem_info_vram_total"))
}

/// `hwmon/hwmonN/power1_average`: average socket power, microwatts.
pub fn read_power1_average(hwmon_dir: &Path) -> Result<u64, Error> {
    read_u64(&hwmon_dir.join("power1_average"))
}

/// `hwmon/hwmonN/power1_input`: instantaneous socket power, microwatts (RDNA3 and later).
pub fn read_power1_input(hwmon_dir: &Path) -> Result<u64, Error> {
    read_u64(&hwmon_dir.join("power1_input"))
}

/// `hwmon/hwmonN/energy1_input`: cumulative energy, microjoules, where the board exposes it.
pub fn read_energy1_input(hwmon_dir: &Path) -> Result<u64, Error> {
    read_u64(&hwmon_dir.join("energy1_input"))
}

/// `device/uevent`'s `PCI_SLOT_NAME`.
pub fn read_pci_slot_name(device_dir: &Path) -> Result<String, Error> {
    let p = device_dir.join("uevent");
    let t = read_text(&p)?;
    t.lines()
        .find_map(|l| l.strip_prefix("PCI_SLOT_NAME="))
        .map(|s| s.trim().to_string())
        .ok_or_else(|| Error::malformed(&p, t.lines().next().unwrap_or("")))
}

/// One amdgpu card found under the sysfs root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmdCard {
    /// N of `cardN`.
    pub card: u32,
    pub render_minor: Option<u32>,
    pub device_dir: PathBuf,
    /// The first `device/hwmon/hwmon*` directory.
    pub hwmon_dir: Option<PathBuf>,
    pub pci_bus_id: Option<String>,
    pub unique_id: Option<String>,
    pub name: Option<String>,
    pub mem_total_bytes: Option<u64>,
}

fn numbered(name: &str, prefix: &str) -> Option<u32> {
    let n = name.strip_prefix(prefix)?;
    n.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| n.parse().ok())
        .flatten()
}

fn optional_text(p: &Path) -> Option<String> {
    read_text(p)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The amdgpu cards under `<sysfs_root>/class/drm`, by card number.
pub fn discover(sysfs_root: &Path) -> Result<Vec<AmdCard>, Error> {
    let drm = sysfs_root.join("class/drm");
    let rd = std::fs::read_dir(&drm).map_err(|e| Error::from_io(&drm, e))?;
    let mut cards = Vec::new();
    let mut renders: Vec<(u32, String)> = Vec::new();
    for ent in rd.flatten() {
        let name = ent.file_name().to_string_lossy().into_owned();
        let device_dir = ent.path().join("device");
        if let Some(m) = numbered(&name, "renderD") {
            if let Ok(pci) = read_pci_slot_name(&device_dir) {
                renders.push((m, pci));
            }
            continue;
        }
        let Some(card) = numbered(&name, "card") else {
            continue; // connectors (card0-DP-1), version
        };
        if optional_text(&device_dir.join("vendor")).as_deref() != Some(AMD_VENDOR) {
            continue;
        }
        let hwmon_dir = std::fs::read_dir(device_dir.join("hwmon"))
            .ok()
            .and_then(|rd| {
                let mut v: Vec<PathBuf> = rd
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("hwmon"))
                    .map(|e| e.path())
                    .collect();
                v.sort();
                v.into_iter().next()
            });
        cards.push(AmdCard {
            card,
            render_minor: None,
            pci_bus_id: read_pci_slot_name(&device_dir).ok(),
            unique_id: optional_text(&device_dir.join("unique_id")),
            name: optional_text(&device_dir.join("product_name")),
            mem_total_bytes: read_mem_info_vram_total(&device_dir).ok(),
            device_dir,
            hwmon_dir,
        });
    }
    for c in cards.iter_mut() {
        c.render_minor = renders
            .iter()
            .filter(|(_, pci)| Some(pci) == c.pci_bus_id.as_ref())
            .map(|(m, _)| *m)
            .min();
    }
    cards.sort_by_key(|c| c.card);
    Ok(cards)
}

impl AmdCard {
    pub fn device(&self) -> GpuDevice {
        GpuDevice {
            identity: GpuIdentity {
                kind: Some(GpuKind::Amd),
                index: Some(self.card),
                gres_index: None,
                minor: self.render_minor,
                uuid: self.unique_id.as_ref().map(|u| format!("GPU-{u}")),
                pci_bus_id: self.pci_bus_id.clone(),
                name: self.name.clone(),
                parent_uuid: None,
            },
            mem_total_bytes: self.mem_total_bytes,
        }
    }

    fn inventory(&self) -> InventoryDevice {
        InventoryDevice {
            device: self.device(),
            drm_minors: std::iter::once(self.card)
                .chain(self.render_minor)
                .collect(),
            parent: None,
        }
    }
}

/// Samples amdgpu cards from sysfs.
pub struct AmdBackend {
    sysfs_root: PathBuf,
    cards: Vec<AmdCard>,
    /// Paths already reported, so a broken file is one event, not one per sample.
    reported: HashSet<PathBuf>,
}

impl AmdBackend {
    pub fn new(sysfs_root: impl Into<PathBuf>) -> Self {
        AmdBackend {
            sysfs_root: sysfs_root.into(),
            cards: vec![],
            reported: HashSet::new(),
        }
    }

    fn value<T>(
        &mut self,
        r: Result<T, Error>,
        slot: usize,
        events: &mut Vec<GpuEvent>,
    ) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) if e.is_absent() => None,
            Err(e) => {
                if self.reported.insert(e.path().to_path_buf()) {
                    events.push(GpuEvent {
                        kind: EventKind::SysfsError,
                        slot: Some(slot),
                        message: e.to_string(),
                    });
                }
                None
            }
        }
    }

    /// Reads one card (public for tests and tools).
    pub fn read_card(&mut self, slot: usize, events: &mut Vec<GpuEvent>) -> DeviceSample {
        let c = self.cards[slot].clone();
        let d = &c.device_dir;
        let util = self.value(read_gpu_busy_percent(d), slot, events);
        let used = self.value(read_mem_info_vram_used(d), slot, events);
        let total = self.value(read_mem_info_vram_total(d), slot, events);
        let (mut power_uw, mut energy_uj) = (None, None);
        if let Some(h) = &c.hwmon_dir {
            power_uw = self.value(read_power1_average(h), slot, events);
            if power_uw.is_none() {
                power_uw = self.value(read_power1_input(h), slot, events);
            }
            energy_uj = self.value(read_energy1_input(h), slot, events);
        }
        DeviceSample {
            util_gpu_pct: util,
            util_mem_pct: None,
            mem_used_bytes: used,
            mem_total_bytes: total.or(c.mem_total_bytes),
            power_mw: power_uw.map(|u| u / 1000),
            energy_mj: energy_uj.map(|u| u / 1000),
            throttle_reasons: None,
            job_processes: None,
            job_mem_bytes: None,
            other_processes: None,
            // amdgpu keeps no sample buffer: `gpu_busy_percent` is all there is.
            drain: None,
            // No GPM, clock-violation, ECC or XID reading on amdgpu here: not measured.
            ..Default::default()
        }
    }
}

impl GpuBackend for AmdBackend {
    fn name(&self) -> &'static str {
        "amdgpu"
    }

    fn open(&mut self, wanted: &[Wanted], _deadline: Instant) -> OpenResult {
        let all = match discover(&self.sysfs_root) {
            Ok(c) => c,
            Err(e) => {
                return OpenResult {
                    unavailable: Some(format!("no amdgpu sysfs: {e}")),
                    quiet: e.is_absent(),
                    ..Default::default()
                }
            }
        };
        if all.is_empty() {
            return OpenResult {
                unavailable: Some("no amdgpu card".into()),
                quiet: true,
                ..Default::default()
            };
        }
        let inv: Vec<InventoryDevice> = all.iter().map(AmdCard::inventory).collect();
        let r = resolve(wanted, &inv);
        let mut out = OpenResult::default();
        for (wi, ii) in r.matches {
            let mut id = inv[ii].device.clone();
            id.identity.gres_index = wanted[wi].gres_index;
            out.devices.push((wi, id));
            self.cards.push(all[ii].clone());
        }
        out
    }

    fn sample(&mut self, _job_pids: &[u32], _deadline: Instant) -> BackendSample {
        let mut events = Vec::new();
        let devices = (0..self.cards.len())
            .map(|slot| Some(self.read_card(slot, &mut events)))
            .collect();
        BackendSample { devices, events }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::assign::GpuRef;

    pub(crate) fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata")
            .join(name)
            .join("sys")
    }

    /// Copies a fixture tree (symlinks recreated as they are: they are relative).
    fn copy_tree(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap().flatten() {
            let (src, dst) = (e.path(), to.join(e.file_name()));
            let ft = e.file_type().unwrap();
            if ft.is_symlink() {
                std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
            } else if ft.is_dir() {
                copy_tree(&src, &dst);
            } else {
                std::fs::copy(&src, &dst).unwrap();
            }
        }
    }

    const MI250X: &str = "amdgpu-mi250x-2gcd-bmc";
    const RX7900: &str = "amdgpu-rx7900-power1-input-energy";
    /// The primary GCD's PCI function in the MI250X fixture.
    const GCD0: &str = "devices/pci0000:00/0000:00:01.1/0000:c1:00.0";
    const RX: &str = "devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0/0000:03:00.0";

    #[test]
    fn discovers_amd_cards_only_with_render_nodes() {
        let cards = discover(&fixture(MI250X)).unwrap();
        assert_eq!(cards.len(), 2, "the ASPEED BMC card0 is skipped");
        assert_eq!(cards[0].card, 1);
        assert_eq!(cards[0].render_minor, Some(129));
        assert_eq!(cards[0].pci_bus_id.as_deref(), Some("0000:c1:00.0")); // uevent PCI_SLOT_NAME
        assert_eq!(cards[0].name.as_deref(), Some("AMD Instinct MI250X")); // product_name
        assert_eq!(cards[0].mem_total_bytes, Some(68_702_699_520)); // mem_info_vram_total
        let id = cards[0].device().identity;
        assert_eq!(id.uuid.as_deref(), Some("GPU-f2a0c3b1e4d5a697")); // unique_id
        assert_eq!(id.minor, Some(129));
        assert_eq!(cards[1].card, 2);
        assert_eq!(cards[1].render_minor, Some(130));
        let rx = discover(&fixture(RX7900)).unwrap();
        assert_eq!(rx.len(), 1, "card0-DP-1 is a connector");
        assert_eq!(rx[0].unique_id, None);
    }

    #[test]
    fn backend_resolves_render_minor_and_samples() {
        let mut b = AmdBackend::new(fixture(MI250X));
        let wanted = vec![Wanted {
            reference: GpuRef::DrmMinor(130),
            gres_index: Some(1),
        }];
        let o = b.open(&wanted, Instant::now());
        assert_eq!(o.devices.len(), 1);
        assert_eq!(
            o.devices[0].1.identity.pci_bus_id.as_deref(),
            Some("0000:c6:00.0")
        );
        assert_eq!(o.devices[0].1.identity.gres_index, Some(1));
        let s = b.sample(&[], Instant::now());
        let d = s.devices[0].clone().unwrap();
        assert_eq!(d.util_gpu_pct, Some(0));
        assert_eq!(d.mem_used_bytes, Some(10_485_760));
        assert_eq!(d.power_mw, None, "secondary die reports no power");
        assert_eq!(d.job_processes, None, "unknown on AMD");
        assert!(s.events.is_empty());

        let mut b = AmdBackend::new(fixture(MI250X));
        b.open(
            &[Wanted {
                reference: GpuRef::DrmMinor(1),
                gres_index: None,
            }],
            Instant::now(),
        );
        let d = b.sample(&[], Instant::now()).devices[0].clone().unwrap();
        assert_eq!(d.util_gpu_pct, Some(87)); // gpu_busy_percent
        assert_eq!(d.mem_used_bytes, Some(34_359_738_368)); // mem_info_vram_used
        assert_eq!(d.power_mw, Some(312_000)); // power1_average 312000000 µW
        assert_eq!(d.energy_mj, None);
    }

    #[test]
    fn power1_input_fallback_and_energy_counter() {
        let mut b = AmdBackend::new(fixture(RX7900));
        let o = b.open(
            &[Wanted {
                reference: GpuRef::PciBusId("0000:03:00.0".into()),
                gres_index: None,
            }],
            Instant::now(),
        );
        assert_eq!(o.devices.len(), 1);
        let d = b.sample(&[], Instant::now()).devices[0].clone().unwrap();
        assert_eq!(d.power_mw, Some(150_000)); // power1_input 150000000 µW
        assert_eq!(d.energy_mj, Some(123_456_789)); // energy1_input 123456789000 µJ
        assert_eq!(d.util_gpu_pct, Some(45));
        assert_eq!(d.mem_total_bytes, Some(25_753_026_560));
    }

    #[test]
    fn no_drm_class_is_quietly_unavailable() {
        let d = tempfile::tempdir().unwrap();
        let mut b = AmdBackend::new(d.path());
        let o = b.open(&[], Instant::now());
        assert!(o.unavailable.is_some() && o.quiet);
    }

    /// One success and two failure tests (missing, malformed) per file, on a copy of a fixture.
    macro_rules! file_tests {
        ($name:ident, $fixture:expr, $dir:expr, $file:expr, $read:ident, $expected:expr) => {
            mod $name {
                use super::*;
                fn setup() -> (tempfile::TempDir, PathBuf) {
                    let t = tempfile::tempdir().unwrap();
                    copy_tree(&fixture($fixture), t.path());
                    let dir = t.path().join($dir);
                    (t, dir)
                }
                #[test]
                fn success() {
                    let (_t, dir) = setup();
                    assert_eq!($read(&dir).unwrap(), $expected);
                }
                #[test]
                fn missing_is_gone_with_path() {
                    let (_t, dir) = setup();
                    std::fs::remove_file(dir.join($file)).unwrap();
                    let e = $read(&dir).unwrap_err();
                    assert!(e.is_absent(), "{e}");
                    assert_eq!(e.path(), dir.join($file));
                }
                #[test]
                fn malformed_is_an_error_with_path() {
                    let (_t, dir) = setup();
                    std::fs::write(dir.join($file), "n/a\n").unwrap();
                    let e = $read(&dir).unwrap_err();
                    assert!(matches!(e, Error::Malformed { .. }), "{e}");
                    assert!(e.to_string().contains($file), "{e}");
                }
            }
        };
    }

    file_tests!(
        gpu_busy,
        MI250X,
        GCD0,
        "gpu_busy_percent",
        read_gpu_busy_percent,
        87
    );
    file_tests!(
        vram_used,
        MI250X,
        GCD0,
        "mem_info_vram_used",
        read_mem_info_vram_used,
        34_359_738_368
    );
    file_tests!(
        vram_total,
        MI250X,
        GCD0,
        "mem_info_vram_total",
        read_mem_info_vram_total,
        68_702_699_520
    );
    file_tests!(
        power_avg,
        MI250X,
        format!("{GCD0}/hwmon/hwmon3"),
        "power1_average",
        read_power1_average,
        312_000_000
    );
    file_tests!(
        power_input,
        RX7900,
        format!("{RX}/hwmon/hwmon1"),
        "power1_input",
        read_power1_input,
        150_000_000
    );
    file_tests!(
        energy,
        RX7900,
        format!("{RX}/hwmon/hwmon1"),
        "energy1_input",
        read_energy1_input,
        123_456_789_000
    );
    file_tests!(
        pci_slot,
        MI250X,
        GCD0,
        "uevent",
        read_pci_slot_name,
        "0000:c1:00.0"
    );

    #[test]
    fn busy_percent_over_100_is_malformed() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("gpu_busy_percent"), "250\n").unwrap();
        assert!(matches!(
            read_gpu_busy_percent(t.path()),
            Err(Error::Malformed { .. })
        ));
    }

    #[test]
    fn a_broken_file_is_one_event_and_the_other_values_survive() {
        let t = tempfile::tempdir().unwrap();
        copy_tree(&fixture(MI250X), t.path());
        let dev = t.path().join(GCD0);
        std::fs::write(dev.join("gpu_busy_percent"), "busy\n").unwrap();
        std::fs::remove_file(dev.join("mem_info_vram_used")).unwrap();
        let mut b = AmdBackend::new(t.path());
        b.open(
            &[Wanted {
                reference: GpuRef::DrmMinor(129),
                gres_index: None,
            }],
            Instant::now(),
        );
        let s = b.sample(&[], Instant::now());
        let d = s.devices[0].clone().unwrap();
        assert_eq!(d.util_gpu_pct, None);
        assert_eq!(d.mem_used_bytes, None, "missing: None, no event");
        assert_eq!(d.power_mw, Some(312_000));
        assert_eq!(s.events.len(), 1);
        assert_eq!(s.events[0].kind, EventKind::SysfsError);
        assert!(s.events[0].message.contains("gpu_busy_percent"));
        assert!(
            b.sample(&[], Instant::now()).events.is_empty(),
            "reported once"
        );
    }
}

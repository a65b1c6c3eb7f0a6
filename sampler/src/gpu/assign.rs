//! Which GPUs belong to the job, by identity.
//!
//! # Three numberings, none of them an identity
//! - SLURM's **gres index** (`SLURM_JOB_GPUS=1,3`, and `CUDA_VISIBLE_DEVICES` in the prolog
//!   environment) is the position of the device file in gres.conf for this node.
//! - A **CUDA ordinal** (`CUDA_VISIBLE_DEVICES=0,1` inside a step with `ConstrainDevices=yes`) is
//!   relative to the devices the task can see.
//! - The **NVML index** is NVML's own order (PCI bus order), and inside the job's devices cgroup it
//!   counts only the devices NVML could open.
//!
//! So gres index 1 may be `/dev/nvidia3`, which the sampler's NVML calls index 0. What is stable is
//! the device: its **minor number** (`/dev/nvidia<minor>`, NVML `minor_number()`; the DRM render
//! minor for AMD), its **UUID** (`GPU-…`, `MIG-…`) or its **PCI bus id**. [`select`] turns SLURM's
//! strings into such references ([`GpuRef`]) and [`resolve`] matches them to a backend's inventory.
//!
//! # Sources, in order of preference ([`select`])
//! 1. UUIDs in `CUDA_VISIBLE_DEVICES` / `GPU_DEVICE_ORDINAL` / `ROCR_VISIBLE_DEVICES` (MIG slices
//!    are named this way: `MIG-<uuid>`, or `MIG-GPU-<uuid>/<gi>/<ci>` before CUDA 11.4).
//! 2. `SLURM_JOB_GPUS` gres indices mapped through gres.conf `File=` lines (this node's
//!    `Name=gpu` lines, in order) to device files, and from the file name to the minor number.
//! 3. The v1 devices cgroup's `devices.list`, **only when it is a real allow-list**. Caveat
//!    verified against SLURM's `task_cgroup_devices.c`: SLURM writes `devices.allow` for allocated
//!    and `devices.deny` for other GPUs into a cgroup whose default is "allow all", and for such a
//!    cgroup the kernel shows just `a *:* rwm`: the denials are invisible. So on a stock SLURM
//!    v1 node `devices.list` tells nothing and is ignored; a default-deny list (some sites, or a
//!    container runtime) is used. cgroup v2 has no file (eBPF): skipped.
//! 4. [`GpuRef::AllAccessible`]: when the caller knows devices are constrained and the sampler runs
//!    inside the job's devices cgroup (the extern step), the devices NVML can open are exactly the
//!    job's (this is why `nvidia-smi` in such a job lists only the job's GPUs). Used as the last
//!    resort, e.g. with gres.conf `AutoDetect=nvml` and no `File=` lines.
//!
//! Ordinals in `CUDA_VISIBLE_DEVICES`/`GPU_DEVICE_ORDINAL` are never used as identities.

use crate::cgroup::Error;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// NVIDIA's character-device major (`/dev/nvidia<N>`, `nvidiactl` = 255, `nvidia-modeset` = 254).
pub const NVIDIA_MAJOR: u32 = 195;
/// Highest minor number of a GPU device node (254 and 255 are control nodes).
pub const NVIDIA_MAX_GPU_MINOR: u32 = 253;
/// DRM's character-device major (`/dev/dri/card<N>` minors 0–63, `renderD<N>` 128–191).
pub const DRM_MAJOR: u32 = 226;

/// A reference to one device, by something that identifies it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuRef {
    /// `/dev/nvidia<minor>`.
    NvidiaMinor(u32),
    /// `/dev/dri/card<minor>` or `/dev/dri/renderD<minor>` (AMD).
    DrmMinor(u32),
    /// `GPU-…` or `MIG-…` (also the pre-11.4 `MIG-GPU-<uuid>/<gi>/<ci>`).
    Uuid(String),
    /// `0000:3b:00.0` / `00000000:3B:00.0`.
    PciBusId(String),
    /// Every device the backend can open (see the module doc, source 4).
    AllAccessible,
}

impl std::fmt::Display for GpuRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuRef::NvidiaMinor(m) => write!(f, "/dev/nvidia{m}"),
            GpuRef::DrmMinor(m) if *m >= 128 => write!(f, "/dev/dri/renderD{m}"),
            GpuRef::DrmMinor(m) => write!(f, "/dev/dri/card{m}"),
            GpuRef::Uuid(u) => f.write_str(u),
            GpuRef::PciBusId(p) => write!(f, "PCI {p}"),
            GpuRef::AllAccessible => f.write_str("all devices accessible to the job"),
        }
    }
}

/// One device the job was given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wanted {
    pub reference: GpuRef,
    /// SLURM's gres index, when the reference came from (or could be mapped back to) one.
    pub gres_index: Option<u32>,
}

pub(crate) use jobscope_model::gpu::SelectionSource;

/// The job's GPUs on this node, as references to be resolved by a backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSelection {
    pub wanted: Vec<Wanted>,
    pub source: SelectionSource,
    /// Why something could not be used (shown in the report's data-quality notes).
    pub notes: Vec<String>,
}

impl GpuSelection {
    pub fn is_empty(&self) -> bool {
        self.wanted.is_empty()
    }
    /// A selection of explicit references (tests, tools).
    pub fn of(refs: impl IntoIterator<Item = GpuRef>) -> Self {
        GpuSelection {
            wanted: refs
                .into_iter()
                .map(|reference| Wanted {
                    reference,
                    gres_index: None,
                })
                .collect(),
            source: SelectionSource::Uuid,
            notes: vec![],
        }
    }
}

/// The GPU variables of the job, as handed over from `job_prolog` (`None` = unset).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobGpuEnv {
    pub slurm_job_gpus: Option<String>,
    pub cuda_visible_devices: Option<String>,
    pub gpu_device_ordinal: Option<String>,
    pub rocr_visible_devices: Option<String>,
}

/// One entry of `CUDA_VISIBLE_DEVICES`-like lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VisibleEntry {
    Ordinal(u32),
    /// `GPU-…`, `MIG-…`.
    Uuid(String),
    /// Anything else (`NoDevFiles`, garbage).
    Other(String),
}

/// `"0,1"`, `"0-3"`, `"1,3-4"` → indices. `None` if any part is malformed; `""` → empty.
pub fn parse_index_list(s: &str) -> Option<Vec<u32>> {
    let s = s.trim();
    let mut out = Vec::new();
    if s.is_empty() {
        return Some(out);
    }
    for part in s.split(',') {
        let part = part.trim();
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b) = (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?);
        if b < a || b - a > 4096 {
            return None;
        }
        out.extend(a..=b);
    }
    Some(out)
}

/// Splits a `CUDA_VISIBLE_DEVICES` value.
pub fn parse_visible_devices(s: &str) -> Vec<VisibleEntry> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            if let Ok(n) = p.parse::<u32>() {
                VisibleEntry::Ordinal(n)
            } else if is_uuid_like(p) {
                VisibleEntry::Uuid(p.to_string())
            } else {
                VisibleEntry::Other(p.to_string())
            }
        })
        .collect()
}

fn is_uuid_like(s: &str) -> bool {
    (s.starts_with("GPU-") || s.starts_with("MIG-"))
        && s.len() <= 96
        && s[4..]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '/'))
}

/// The device reference named by a device file path, from its name alone:
/// `/dev/nvidia3` → minor 3, `/dev/dri/renderD129` → DRM 129, `/dev/dri/card1` → DRM 1.
/// (`nvidiactl`, `nvidia-uvm`, `nvidia-caps/…` are not GPUs: `None`.)
pub fn device_ref_from_path(p: &Path) -> Option<GpuRef> {
    let name = p.file_name()?.to_str()?;
    if let Some(n) = name.strip_prefix("nvidia") {
        let m: u32 = n.parse().ok()?;
        return (m <= NVIDIA_MAX_GPU_MINOR).then_some(GpuRef::NvidiaMinor(m));
    }
    if let Some(n) = name.strip_prefix("renderD").or(name.strip_prefix("card")) {
        return n.parse().ok().map(GpuRef::DrmMinor);
    }
    None
}

/// Like [`device_ref_from_path`], falling back to the device node's real major:minor (`stat`),
/// for sites whose gres.conf names symlinks or renamed nodes.
pub fn device_ref_from_node(p: &Path) -> Option<GpuRef> {
    if let Some(r) = device_ref_from_path(p) {
        return Some(r);
    }
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let md = std::fs::metadata(p).ok()?;
    if !md.file_type().is_char_device() {
        return None;
    }
    let rdev = md.rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    match major {
        NVIDIA_MAJOR if minor <= NVIDIA_MAX_GPU_MINOR => Some(GpuRef::NvidiaMinor(minor)),
        DRM_MAJOR => Some(GpuRef::DrmMinor(minor)),
        _ => None,
    }
}

/// A cgroup v1 `devices.list`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceAccess {
    /// Default allow (`a *:* rwm`): the list tells nothing about denials (see module doc).
    AllowAll,
    /// A real allow-list: the GPU device nodes it names.
    Only(Vec<GpuRef>),
}

/// Parses `devices.list` (`c 195:1 rwm`, `a *:* rwm`, `b 8:* m`). GPU nodes are NVIDIA minors
/// 0–253 and DRM minors; wildcards and other devices are ignored. `None` if a line is malformed.
pub fn parse_devices_list(text: &str) -> Option<DeviceAccess> {
    let mut refs = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let mut it = line.split_whitespace();
        let (ty, majmin) = (it.next()?, it.next()?);
        let (maj, min) = majmin.split_once(':')?;
        if ty == "a" {
            return Some(DeviceAccess::AllowAll);
        }
        if ty != "c" {
            continue;
        }
        let (Ok(maj), Ok(min)) = (maj.parse::<u32>(), min.parse::<u32>()) else {
            continue; // `*` wildcards
        };
        match maj {
            NVIDIA_MAJOR if min <= NVIDIA_MAX_GPU_MINOR => refs.push(GpuRef::NvidiaMinor(min)),
            DRM_MAJOR => refs.push(GpuRef::DrmMinor(min)),
            _ => {}
        }
    }
    refs.dedup();
    Some(DeviceAccess::Only(refs))
}

/// The v1 devices cgroup directory of a job, from its memory directory
/// (`<root>/memory/<rel>` → `<root>/devices/<rel>`).
pub fn v1_devices_dir(cgroup_root: &Path, memory_dir: &Path) -> Option<PathBuf> {
    let rel = memory_dir.strip_prefix(cgroup_root.join("memory")).ok()?;
    Some(cgroup_root.join("devices").join(rel))
}

/// Reads `<dir>/devices.list`. `Ok(None)` when there is no such file (cgroup v2, no devices
/// controller, job gone).
pub fn read_devices_list(dir: &Path) -> Result<Option<DeviceAccess>, Error> {
    let path = dir.join("devices.list");
    match std::fs::read_to_string(&path) {
        Ok(t) => parse_devices_list(&t)
            .map(Some)
            .ok_or_else(|| Error::malformed(&path, t.lines().next().unwrap_or(""))),
        Err(e) => match Error::from_io(&path, e) {
            e if e.is_absent() => Ok(None),
            e => Err(e),
        },
    }
}

/// The device files of this node's `Name=gpu` lines in gres.conf, in gres-index order.
///
/// Lines are `key=value` words (keys case-insensitive); `NodeName=` (a hostlist) limits a line to
/// those nodes; `File=/dev/nvidia[0-3]` expands like a hostlist; `MultipleFiles=a,b` is one gres
/// (its GPU node counts). `AutoDetect=` lines have no files: when a node's GPUs come only from
/// autodetection the result is empty and [`select`] falls back to other sources.
pub fn gres_conf_gpu_files(text: &str, node: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for raw in text.lines() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut name = None;
        let mut nodes = None;
        let mut files: Vec<PathBuf> = Vec::new();
        let mut multiple: Option<Vec<PathBuf>> = None;
        for word in line.split_whitespace() {
            let Some((k, v)) = word.split_once('=') else {
                continue;
            };
            match k.to_ascii_lowercase().as_str() {
                "name" => name = Some(v.to_string()),
                "nodename" => nodes = Some(v.to_string()),
                "file" => {
                    files = jobscope_model::slurm::expand_hostlist(v)
                        .unwrap_or_default()
                        .into_iter()
                        .map(PathBuf::from)
                        .collect()
                }
                "multiplefiles" => {
                    multiple = Some(
                        jobscope_model::slurm::expand_hostlist(v)
                            .unwrap_or_default()
                            .into_iter()
                            .map(PathBuf::from)
                            .collect(),
                    )
                }
                _ => {}
            }
        }
        if name.as_deref() != Some("gpu") {
            continue;
        }
        if let Some(n) = nodes {
            let here = jobscope_model::slurm::expand_hostlist(&n)
                .is_some_and(|list| list.iter().any(|x| x == node));
            if !here {
                continue;
            }
        }
        match multiple {
            Some(group) => {
                if let Some(f) = group.iter().find(|f| device_ref_from_path(f).is_some()) {
                    out.push(f.clone());
                } else if let Some(f) = group.first() {
                    out.push(f.clone());
                }
            }
            None => out.extend(files),
        }
    }
    out
}

/// Reads gres.conf and returns [`gres_conf_gpu_files`] for `node`.
pub fn read_gres_conf(path: &Path, node: &str) -> Result<Vec<PathBuf>, Error> {
    let t = std::fs::read_to_string(path).map_err(|e| Error::from_io(path, e))?;
    Ok(gres_conf_gpu_files(&t, node))
}

/// What [`select`] may use besides the variables.
#[derive(Debug, Clone, Default)]
pub struct SelectInputs<'a> {
    /// Device files by gres index (from [`read_gres_conf`]).
    pub gres_files: Option<&'a [PathBuf]>,
    /// The job's v1 `devices.list` (from [`read_devices_list`]).
    pub devices: Option<&'a DeviceAccess>,
    /// Devices are constrained (`ConstrainDevices=yes`) and the sampler runs inside the job's
    /// devices cgroup, so "what the backend can open" is the job's set.
    pub constrained_sampler: bool,
    /// Resolve gres files through `stat` when their names say nothing (real nodes only).
    pub stat_device_nodes: bool,
}

impl SelectInputs<'_> {
    /// The GPU a gres.conf device file names.
    fn device_ref(&self, p: &Path) -> Option<GpuRef> {
        if self.stat_device_nodes {
            device_ref_from_node(p)
        } else {
            device_ref_from_path(p)
        }
    }

    /// The gres index of a GPU, for reports (the reverse of the gres.conf mapping).
    fn gres_index_of(&self, r: &GpuRef) -> Option<u32> {
        self.gres_files?
            .iter()
            .position(|f| self.device_ref(f).as_ref() == Some(r))
            .map(|i| i as u32)
    }
}

/// Chooses the job's GPUs (see the module doc for the order): each way is tried in turn, the
/// first that identifies them wins, and each may leave notes on why it did not. Pure unless
/// `stat_device_nodes` is set.
pub fn select(env: &JobGpuEnv, inputs: &SelectInputs<'_>) -> GpuSelection {
    let mut notes = Vec::new();
    let indices = job_gres_indices(env, &mut notes);
    let chosen = |wanted, source, notes| GpuSelection {
        wanted,
        source,
        notes,
    };
    let uuids = uuids_in_env(env);
    if !uuids.is_empty() {
        return chosen(
            by_uuid(uuids, indices.as_deref()),
            SelectionSource::Uuid,
            notes,
        );
    }
    match (&indices, inputs.gres_files) {
        (Some(idx), Some(files)) => {
            if let Some(w) = by_gres_conf(idx, files, inputs, &mut notes) {
                return chosen(w, SelectionSource::GresConf, notes);
            }
        }
        (Some(idx), None) if !idx.is_empty() => {
            notes.push("no gres.conf File= mapping for this node's GPUs".to_string());
        }
        _ => {}
    }
    if let Some(w) = by_devices_list(inputs, &mut notes) {
        return chosen(w, SelectionSource::DevicesCgroup, notes);
    }
    // The devices cgroup enforces the set: take what can be opened.
    let has_gpus = indices.as_ref().is_some_and(|i| !i.is_empty());
    if inputs.constrained_sampler && has_gpus {
        let all = vec![Wanted {
            reference: GpuRef::AllAccessible,
            gres_index: None,
        }];
        return chosen(all, SelectionSource::Accessible, notes);
    }
    if has_gpus {
        notes.push(
            "the job has GPUs but none could be identified: not sampled (ordinals are not identities)"
                .to_string(),
        );
    }
    chosen(vec![], SelectionSource::None, notes)
}

/// The job's gres indices (`SLURM_JOB_GPUS`); `None` when unset, empty, or not an index list
/// (noted).
fn job_gres_indices(env: &JobGpuEnv, notes: &mut Vec<String>) -> Option<Vec<u32>> {
    let s = env
        .slurm_job_gpus
        .as_deref()
        .filter(|s| !s.trim().is_empty())?;
    let v = parse_index_list(s);
    if v.is_none() {
        notes.push(format!("SLURM_JOB_GPUS={s:?} is not an index list"));
    }
    v
}

/// The UUIDs in the job's visibility variables (CUDA, then GPU_DEVICE_ORDINAL, then ROCr), each
/// once, in order; ordinals are skipped (they are not identities).
fn uuids_in_env(env: &JobGpuEnv) -> Vec<String> {
    let mut uuids: Vec<String> = Vec::new();
    for v in [
        &env.cuda_visible_devices,
        &env.gpu_device_ordinal,
        &env.rocr_visible_devices,
    ]
    .into_iter()
    .flatten()
    {
        for e in parse_visible_devices(v) {
            if let VisibleEntry::Uuid(u) = e {
                if !uuids.contains(&u) {
                    uuids.push(u);
                }
            }
        }
    }
    uuids
}

/// Way 1: the UUIDs. With as many gres indices as UUIDs, SLURM listed them side by side, in order.
fn by_uuid(uuids: Vec<String>, indices: Option<&[u32]>) -> Vec<Wanted> {
    let idx = indices.filter(|i| i.len() == uuids.len());
    uuids
        .into_iter()
        .enumerate()
        .map(|(i, u)| Wanted {
            reference: GpuRef::Uuid(u),
            gres_index: idx.map(|v| v[i]),
        })
        .collect()
}

/// Way 2: the gres indices through gres.conf's device files. `None` (with a note per index) when
/// an index has no file or its file is no GPU: a partial mapping identifies nothing. A GPU that
/// the job's devices.list does not allow is kept but noted.
fn by_gres_conf(
    idx: &[u32],
    files: &[PathBuf],
    inputs: &SelectInputs<'_>,
    notes: &mut Vec<String>,
) -> Option<Vec<Wanted>> {
    let mut wanted = Vec::new();
    let mut complete = !files.is_empty();
    for &i in idx {
        let file = files.get(i as usize);
        match file.and_then(|f| inputs.device_ref(f)) {
            Some(r) => wanted.push(Wanted {
                reference: r,
                gres_index: Some(i),
            }),
            None => {
                complete = false;
                notes.push(match file {
                    Some(f) => format!("gres index {i}: {} is not a GPU device node", f.display()),
                    None => format!(
                        "gres index {i}: gres.conf lists only {} GPU file(s) for this node",
                        files.len()
                    ),
                });
            }
        }
    }
    if !complete || wanted.is_empty() {
        return None;
    }
    if let Some(DeviceAccess::Only(allowed)) = inputs.devices {
        for w in wanted.iter().filter(|w| !allowed.contains(&w.reference)) {
            notes.push(format!(
                "{} (gres index {}) is not in the job's devices.list",
                w.reference,
                w.gres_index.unwrap_or(0)
            ));
        }
    }
    Some(wanted)
}

/// Way 3: a real allow-list in the job's devices cgroup (v1). `allow all` identifies nothing
/// (noted: SLURM's denials are not listed by the kernel).
fn by_devices_list(inputs: &SelectInputs<'_>, notes: &mut Vec<String>) -> Option<Vec<Wanted>> {
    match inputs.devices {
        Some(DeviceAccess::Only(allowed)) if !allowed.is_empty() => Some(
            allowed
                .iter()
                .map(|r| Wanted {
                    reference: r.clone(),
                    gres_index: inputs.gres_index_of(r),
                })
                .collect(),
        ),
        Some(DeviceAccess::AllowAll) => {
            notes.push(
                "devices.list shows `a *:* rwm` (SLURM's denials are not listed by the kernel)"
                    .to_string(),
            );
            None
        }
        _ => None,
    }
}

/// Reads gres.conf and the devices cgroup (both optional, root-parameterised) and calls
/// [`select`]. Read problems become notes, never errors: GPU attribution must not stop sampling.
pub fn select_for_job(
    env: &JobGpuEnv,
    gres_conf: Option<&Path>,
    node: &str,
    devices_cgroup_dir: Option<&Path>,
    constrained_sampler: bool,
) -> GpuSelection {
    let mut notes = Vec::new();
    let files = gres_conf.and_then(|p| match read_gres_conf(p, node) {
        Ok(f) => Some(f),
        Err(e) if e.is_absent() => None,
        Err(e) => {
            notes.push(e.to_string());
            None
        }
    });
    let devices = devices_cgroup_dir.and_then(|d| match read_devices_list(d) {
        Ok(a) => a,
        Err(e) => {
            notes.push(e.to_string());
            None
        }
    });
    let mut sel = select(
        env,
        &SelectInputs {
            gres_files: files.as_deref(),
            devices: devices.as_ref(),
            constrained_sampler,
            stat_device_nodes: true,
        },
    );
    notes.append(&mut sel.notes);
    sel.notes = notes;
    sel
}

/// One device a backend can see, described by what identifies it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InventoryDevice {
    pub device: crate::gpu::GpuDevice,
    /// DRM minors of an AMD card (card and render node).
    pub drm_minors: Vec<u32>,
    /// Index of the physical GPU in the same inventory, for a MIG instance.
    pub parent: Option<usize>,
}

/// The outcome of [`resolve`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolution {
    /// `(wanted index, inventory index)`, in wanted order, no inventory device twice.
    pub matches: Vec<(usize, usize)>,
    /// Wanted entries no device matched.
    pub unmatched: Vec<usize>,
}

fn norm_pci(s: &str) -> String {
    // NVML: "00000000:3B:00.0"; sysfs: "0000:3b:00.0". Compare domain-less, lower case.
    let s = s.trim().to_ascii_lowercase();
    match s.rsplit_once(':') {
        Some((head, tail)) => {
            let bus = head.rsplit(':').next().unwrap_or(head);
            format!("{bus}:{tail}")
        }
        None => s,
    }
}

/// Matches wanted references to inventory devices by identity.
///
/// - `NvidiaMinor(n)`: the NVIDIA GPU whose `minor_number()` is `n`.
/// - `DrmMinor(n)`: the AMD card with that card or render minor.
/// - `Uuid(u)`: the device (GPU or MIG) with that UUID; `MIG-GPU-<uuid>/<gi>/<ci>` matches the
///   only MIG instance of that GPU (ambiguous otherwise: unmatched).
/// - `PciBusId(p)`: domain-insensitive, case-insensitive.
/// - `AllAccessible`: every physical GPU not already matched.
pub fn resolve(wanted: &[Wanted], inv: &[InventoryDevice]) -> Resolution {
    use crate::gpu::GpuKind;
    let mut r = Resolution::default();
    let mut taken = vec![false; inv.len()];
    for (wi, w) in wanted.iter().enumerate() {
        let found: Vec<usize> = match &w.reference {
            GpuRef::NvidiaMinor(m) => inv
                .iter()
                .position(|d| {
                    d.device.identity.kind == Some(GpuKind::Nvidia)
                        && d.device.identity.minor == Some(*m)
                })
                .into_iter()
                .collect(),
            GpuRef::DrmMinor(m) => inv
                .iter()
                .position(|d| {
                    d.device.identity.kind == Some(GpuKind::Amd) && d.drm_minors.contains(m)
                })
                .into_iter()
                .collect(),
            GpuRef::Uuid(u) => {
                let direct = inv.iter().position(|d| {
                    d.device
                        .identity
                        .uuid
                        .as_deref()
                        .is_some_and(|x| x.eq_ignore_ascii_case(u))
                });
                match direct {
                    Some(i) => vec![i],
                    None => legacy_mig(u, inv).into_iter().collect(),
                }
            }
            GpuRef::PciBusId(p) => inv
                .iter()
                .position(|d| {
                    d.parent.is_none()
                        && d.device
                            .identity
                            .pci_bus_id
                            .as_deref()
                            .is_some_and(|x| norm_pci(x) == norm_pci(p))
                })
                .into_iter()
                .collect(),
            GpuRef::AllAccessible => inv
                .iter()
                .enumerate()
                .filter(|(_, d)| d.parent.is_none())
                .map(|(i, _)| i)
                .collect(),
        };
        let mut any = false;
        for i in found {
            if !taken[i] {
                taken[i] = true;
                r.matches.push((wi, i));
                any = true;
            }
        }
        if !any {
            r.unmatched.push(wi);
        }
    }
    r
}

/// `MIG-GPU-<uuid>/<gi>/<ci>`: the single MIG device of GPU `<uuid>`, if there is only one.
fn legacy_mig(u: &str, inv: &[InventoryDevice]) -> Option<usize> {
    let rest = u.strip_prefix("MIG-")?;
    let parent_uuid = rest.split('/').next()?;
    if !parent_uuid.starts_with("GPU-") {
        return None;
    }
    let parent = inv.iter().position(|d| {
        d.parent.is_none()
            && d.device
                .identity
                .uuid
                .as_deref()
                .is_some_and(|x| x.eq_ignore_ascii_case(parent_uuid))
    })?;
    let kids: Vec<usize> = inv
        .iter()
        .enumerate()
        .filter(|(_, d)| d.parent == Some(parent))
        .map(|(i, _)| i)
        .collect();
    (kids.len() == 1).then(|| kids[0])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{GpuDevice, GpuIdentity, GpuKind};

    fn nv(minor: u32, uuid: &str, pci: &str) -> InventoryDevice {
        InventoryDevice {
            device: GpuDevice {
                identity: GpuIdentity {
                    kind: Some(GpuKind::Nvidia),
                    minor: Some(minor),
                    uuid: Some(uuid.into()),
                    pci_bus_id: Some(pci.into()),
                    ..Default::default()
                },
                ..Default::default()
            },
            drm_minors: vec![],
            parent: None,
        }
    }

    #[test]
    fn index_lists() {
        assert_eq!(parse_index_list("0,1"), Some(vec![0, 1]));
        assert_eq!(parse_index_list("1,3-5"), Some(vec![1, 3, 4, 5]));
        assert_eq!(parse_index_list(" "), Some(vec![]));
        assert_eq!(parse_index_list("a"), None);
        assert_eq!(parse_index_list("3-1"), None);
    }

    #[test]
    fn visible_devices_entries() {
        assert_eq!(
            parse_visible_devices("0,GPU-1234abcd-0000-1111-2222-333344445555,MIG-0a1b,NoDevFiles"),
            vec![
                VisibleEntry::Ordinal(0),
                VisibleEntry::Uuid("GPU-1234abcd-0000-1111-2222-333344445555".into()),
                VisibleEntry::Uuid("MIG-0a1b".into()),
                VisibleEntry::Other("NoDevFiles".into()),
            ]
        );
    }

    #[test]
    fn device_paths() {
        assert_eq!(
            device_ref_from_path(Path::new("/dev/nvidia3")),
            Some(GpuRef::NvidiaMinor(3))
        );
        assert_eq!(device_ref_from_path(Path::new("/dev/nvidiactl")), None);
        assert_eq!(device_ref_from_path(Path::new("/dev/nvidia-uvm")), None);
        assert_eq!(
            device_ref_from_path(Path::new("/dev/dri/renderD129")),
            Some(GpuRef::DrmMinor(129))
        );
        assert_eq!(
            device_ref_from_path(Path::new("/dev/dri/card1")),
            Some(GpuRef::DrmMinor(1))
        );
    }

    #[test]
    fn devices_list_allow_list_and_default_allow() {
        // A default-deny list as a container runtime or a site writes it.
        let t = "c 1:3 rwm\nc 195:255 rwm\nc 195:1 rwm\nc 195:3 rw\nc 510:* rwm\nc 226:128 rw\n";
        assert_eq!(
            parse_devices_list(t),
            Some(DeviceAccess::Only(vec![
                GpuRef::NvidiaMinor(1),
                GpuRef::NvidiaMinor(3),
                GpuRef::DrmMinor(128),
            ]))
        );
        // What SLURM 22.05's v1 job cgroup shows: denials are not listed.
        assert_eq!(
            parse_devices_list("a *:* rwm\n"),
            Some(DeviceAccess::AllowAll)
        );
        assert_eq!(parse_devices_list("c 195\n"), None);
    }

    #[test]
    fn devices_list_read_from_a_tree() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let mem = root.join("memory/slurm/uid_1000/job_7");
        let dev = v1_devices_dir(root, &mem).unwrap();
        assert_eq!(dev, root.join("devices/slurm/uid_1000/job_7"));
        assert_eq!(read_devices_list(&dev).unwrap(), None, "v2 / no controller");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("devices.list"), "c 195:2 rwm\n").unwrap();
        assert_eq!(
            read_devices_list(&dev).unwrap(),
            Some(DeviceAccess::Only(vec![GpuRef::NvidiaMinor(2)]))
        );
        std::fs::write(dev.join("devices.list"), "garbage\n").unwrap();
        let e = read_devices_list(&dev).unwrap_err();
        assert!(e.to_string().contains("devices.list"), "{e}");
    }

    const GRES: &str = "\
# /etc/slurm/gres.conf
AutoDetect=off
NodeName=gpu[01-02] Name=gpu Type=a100 File=/dev/nvidia[2-3] Cores=0-15
NodeName=gpu[01-02] Name=gpu Type=a100 File=/dev/nvidia0,/dev/nvidia1 Cores=16-31
NodeName=gpu03 Name=gpu File=/dev/nvidia7
Name=mps Count=200
NodeName=amd01 Name=gpu File=/dev/dri/renderD[128-129]
";

    #[test]
    fn gres_conf_files_in_index_order() {
        let f = gres_conf_gpu_files(GRES, "gpu02");
        let names: Vec<String> = f.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            names,
            [
                "/dev/nvidia2",
                "/dev/nvidia3",
                "/dev/nvidia0",
                "/dev/nvidia1"
            ]
        );
        assert_eq!(
            gres_conf_gpu_files(GRES, "gpu03"),
            vec![PathBuf::from("/dev/nvidia7")]
        );
        assert_eq!(gres_conf_gpu_files(GRES, "amd01").len(), 2);
        assert!(gres_conf_gpu_files("AutoDetect=nvml\n", "x").is_empty());
        let multi = "Name=gpu MultipleFiles=/dev/nvidia-caps/nvidia-cap21,/dev/nvidia0\n";
        assert_eq!(
            gres_conf_gpu_files(multi, "x"),
            vec![PathBuf::from("/dev/nvidia0")]
        );
    }

    fn env(gpus: &str, cvd: &str) -> JobGpuEnv {
        JobGpuEnv {
            slurm_job_gpus: Some(gpus.into()),
            cuda_visible_devices: Some(cvd.into()),
            ..Default::default()
        }
    }

    /// The ordinal-mismatch case: gres index 1 is /dev/nvidia3 (gres.conf order), which NVML —
    /// seeing only the job's GPU inside the devices cgroup — calls index 0. Attribution follows the
    /// minor number.
    #[test]
    fn gres_index_maps_to_minor_not_ordinal() {
        let files = gres_conf_gpu_files(GRES, "gpu01");
        let sel = select(
            &env("1", "1"),
            &SelectInputs {
                gres_files: Some(&files),
                ..Default::default()
            },
        );
        assert_eq!(sel.source, SelectionSource::GresConf);
        assert_eq!(
            sel.wanted,
            vec![Wanted {
                reference: GpuRef::NvidiaMinor(3),
                gres_index: Some(1)
            }]
        );
        // NVML index 0 is minor 3; index 1 (if visible) is minor 1.
        let inv = vec![
            nv(3, "GPU-aaaa", "00000000:3B:00.0"),
            nv(1, "GPU-bbbb", "00000000:5E:00.0"),
        ];
        let r = resolve(&sel.wanted, &inv);
        assert_eq!(r.matches, vec![(0, 0)]);
        assert!(r.unmatched.is_empty());
    }

    #[test]
    fn uuids_win_and_mig_uuids_resolve() {
        let mut parent = nv(0, "GPU-pppp", "00000000:01:00.0");
        parent.device.identity.name = Some("A100".into());
        let mig = |u: &str| InventoryDevice {
            device: GpuDevice {
                identity: GpuIdentity {
                    kind: Some(GpuKind::Mig),
                    uuid: Some(u.into()),
                    parent_uuid: Some("GPU-pppp".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
            drm_minors: vec![],
            parent: Some(0),
        };
        let inv = vec![parent, mig("MIG-1111"), mig("MIG-2222")];
        let sel = select(&env("0", "MIG-2222"), &SelectInputs::default());
        assert_eq!(sel.source, SelectionSource::Uuid);
        assert_eq!(sel.wanted[0].gres_index, Some(0));
        assert_eq!(resolve(&sel.wanted, &inv).matches, vec![(0, 2)]);
        // Legacy form: ambiguous with two instances...
        let legacy = vec![Wanted {
            reference: GpuRef::Uuid("MIG-GPU-pppp/1/0".into()),
            gres_index: None,
        }];
        assert_eq!(resolve(&legacy, &inv).unmatched, vec![0]);
        // ...unique with one.
        assert_eq!(resolve(&legacy, &inv[..2]).matches, vec![(0, 1)]);
    }

    #[test]
    fn allow_list_used_when_no_gres_mapping_and_default_allow_ignored() {
        let allowed = DeviceAccess::Only(vec![GpuRef::NvidiaMinor(5)]);
        let sel = select(
            &env("2", "0"),
            &SelectInputs {
                devices: Some(&allowed),
                ..Default::default()
            },
        );
        assert_eq!(sel.source, SelectionSource::DevicesCgroup);
        assert_eq!(sel.wanted[0].reference, GpuRef::NvidiaMinor(5));

        let sel = select(
            &env("2", "0"),
            &SelectInputs {
                devices: Some(&DeviceAccess::AllowAll),
                ..Default::default()
            },
        );
        assert!(sel.is_empty());
        assert!(
            sel.notes.iter().any(|n| n.contains("a *:* rwm")),
            "{:?}",
            sel.notes
        );
        assert!(sel
            .notes
            .iter()
            .any(|n| n.contains("none could be identified")));

        let sel = select(
            &env("2", "0"),
            &SelectInputs {
                devices: Some(&DeviceAccess::AllowAll),
                constrained_sampler: true,
                ..Default::default()
            },
        );
        assert_eq!(sel.source, SelectionSource::Accessible);
    }

    #[test]
    fn no_gpus_no_selection_no_noise() {
        let sel = select(&JobGpuEnv::default(), &SelectInputs::default());
        assert!(sel.is_empty());
        assert!(sel.notes.is_empty());
    }

    #[test]
    fn resolve_by_pci_and_drm_and_all() {
        let mut amd = InventoryDevice {
            device: GpuDevice {
                identity: GpuIdentity {
                    kind: Some(GpuKind::Amd),
                    pci_bus_id: Some("0000:c1:00.0".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
            drm_minors: vec![1, 129],
            parent: None,
        };
        amd.device.identity.minor = Some(129);
        let inv = vec![nv(0, "GPU-a", "00000000:3B:00.0"), amd];
        let w = |r| Wanted {
            reference: r,
            gres_index: None,
        };
        let r = resolve(
            &[
                w(GpuRef::PciBusId("0000:3b:00.0".into())),
                w(GpuRef::DrmMinor(129)),
            ],
            &inv,
        );
        assert_eq!(r.matches, vec![(0, 0), (1, 1)]);
        let r = resolve(&[w(GpuRef::AllAccessible)], &inv);
        assert_eq!(r.matches, vec![(0, 0), (0, 1)]);
        let r = resolve(&[w(GpuRef::NvidiaMinor(9))], &inv);
        assert_eq!(r.unmatched, vec![0]);
    }

    #[test]
    fn select_for_job_reads_files() {
        let d = tempfile::tempdir().unwrap();
        let gres = d.path().join("gres.conf");
        std::fs::write(&gres, GRES).unwrap();
        let sel = select_for_job(&env("0,3", "0,1"), Some(&gres), "gpu01", None, false);
        assert_eq!(
            sel.wanted
                .iter()
                .map(|w| w.reference.clone())
                .collect::<Vec<_>>(),
            vec![GpuRef::NvidiaMinor(2), GpuRef::NvidiaMinor(1)]
        );
        let sel = select_for_job(
            &env("0", "0"),
            Some(&d.path().join("missing.conf")),
            "gpu01",
            None,
            false,
        );
        assert!(sel.is_empty());
    }

    // The phases of `select`, one by one.

    #[test]
    fn gres_indices_unset_empty_or_not_a_list() {
        let mut notes = Vec::new();
        assert_eq!(
            job_gres_indices(&env("0,2-3", ""), &mut notes),
            Some(vec![0, 2, 3])
        );
        assert_eq!(job_gres_indices(&env("  ", ""), &mut notes), None);
        assert_eq!(job_gres_indices(&JobGpuEnv::default(), &mut notes), None);
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(job_gres_indices(&env("gpu:a100", ""), &mut notes), None);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("not an index list"), "{notes:?}");
    }

    #[test]
    fn uuids_are_taken_once_from_every_variable_and_ordinals_skipped() {
        let e = JobGpuEnv {
            cuda_visible_devices: Some("GPU-a,1,GPU-b".into()),
            gpu_device_ordinal: Some("GPU-b,0".into()),
            rocr_visible_devices: Some("GPU-c".into()),
            ..Default::default()
        };
        assert_eq!(uuids_in_env(&e), ["GPU-a", "GPU-b", "GPU-c"]);
        assert!(uuids_in_env(&env("0", "0,1")).is_empty());
    }

    #[test]
    fn uuids_get_gres_indices_only_when_the_counts_match() {
        let u = || vec!["GPU-a".to_string(), "GPU-b".to_string()];
        let gres = |w: Vec<Wanted>| w.iter().map(|w| w.gres_index).collect::<Vec<_>>();
        assert_eq!(gres(by_uuid(u(), Some(&[4, 7]))), [Some(4), Some(7)]);
        assert_eq!(gres(by_uuid(u(), Some(&[4]))), [None, None]);
        assert_eq!(gres(by_uuid(u(), None)), [None, None]);
    }

    #[test]
    fn gres_conf_mapping_must_be_complete() {
        let files: Vec<PathBuf> = ["/dev/nvidia2", "/dev/null"]
            .iter()
            .map(PathBuf::from)
            .collect();
        let inputs = SelectInputs {
            gres_files: Some(&files),
            ..Default::default()
        };
        let mut notes = Vec::new();
        let w = by_gres_conf(&[0], &files, &inputs, &mut notes).unwrap();
        assert_eq!(
            w,
            [Wanted {
                reference: GpuRef::NvidiaMinor(2),
                gres_index: Some(0),
            }]
        );
        assert!(notes.is_empty(), "{notes:?}");
        // Index 1 is no GPU, index 5 has no file: nothing, and a note for each.
        assert_eq!(by_gres_conf(&[0, 1, 5], &files, &inputs, &mut notes), None);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("/dev/null is not a GPU device node"));
        assert!(notes[1].contains("lists only 2 GPU file(s)"));
        // A GPU outside the job's devices.list is kept, and noted.
        let only = DeviceAccess::Only(vec![GpuRef::NvidiaMinor(3)]);
        let inputs = SelectInputs {
            devices: Some(&only),
            ..inputs
        };
        let mut notes = Vec::new();
        assert!(by_gres_conf(&[0], &files, &inputs, &mut notes).is_some());
        assert_eq!(
            notes,
            ["/dev/nvidia2 (gres index 0) is not in the job's devices.list"]
        );
    }

    #[test]
    fn devices_list_identifies_only_with_a_real_allow_list() {
        let files = vec![PathBuf::from("/dev/nvidia5"), PathBuf::from("/dev/nvidia1")];
        let only = DeviceAccess::Only(vec![GpuRef::NvidiaMinor(1), GpuRef::NvidiaMinor(9)]);
        let inputs = SelectInputs {
            gres_files: Some(&files),
            devices: Some(&only),
            ..Default::default()
        };
        let mut notes = Vec::new();
        let w = by_devices_list(&inputs, &mut notes).unwrap();
        let gres: Vec<_> = w.iter().map(|w| w.gres_index).collect();
        assert_eq!(gres, [Some(1), None], "gres index from gres.conf's order");
        assert!(notes.is_empty());
        let all = DeviceAccess::AllowAll;
        let inputs = SelectInputs {
            devices: Some(&all),
            ..Default::default()
        };
        assert_eq!(by_devices_list(&inputs, &mut notes), None);
        assert_eq!(notes.len(), 1, "allow-all is noted: {notes:?}");
        let empty = DeviceAccess::Only(vec![]);
        let inputs = SelectInputs {
            devices: Some(&empty),
            ..Default::default()
        };
        assert_eq!(by_devices_list(&inputs, &mut notes), None);
        assert_eq!(notes.len(), 1);
    }
}

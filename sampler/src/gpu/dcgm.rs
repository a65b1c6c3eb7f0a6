//! SM activity from DCGM's profiling fields, for GPUs whose NVML has no GPM (before Hopper: V100,
//! A100, L40 …), where the site runs NVIDIA's host engine (`nv-hostengine`, DCGM 3 or 4).
//! docs/gpu.md, "SM activity".
//!
//! Only the NVML worker thread (`super::nvml`) calls this, so every call is bounded as NVML's
//! are: a host engine that stops answering costs samples, never the job.
//!
//! # What is called (DCGM 4's `dcgm_agent.h`; the same in DCGM 3)
//! - open: `dcgmInit`, `dcgmConnect_v2` (the configured address, `timeoutMs`, and
//!   `persistAfterDisconnect = 0`, so the host engine drops this job's watches when it goes),
//!   `dcgmGetAllSupportedDevices` and `dcgmEntitiesGetLatestValues` of `DCGM_FI_DEV_UUID` with
//!   `DCGM_FV_FLAG_LIVE_DATA` (DCGM's GPU ids are not NVML's indices: GPUs are matched by UUID),
//!   `dcgmGroupCreate` + `dcgmGroupAddEntity` (the job's GPUs only), `dcgmFieldGroupCreate` of
//!   `DCGM_FI_PROF_SM_ACTIVE`, `_SM_OCCUPANCY`, `_PIPE_TENSOR_ACTIVE`, `_DRAM_ACTIVE`, and
//!   `dcgmWatchFields` every sample interval (the host engine then averages each field over one
//!   interval: the figures cover the interval, like GPM's);
//! - per sample: one `dcgmEntitiesGetLatestValues` for all the job's GPUs and fields. A value
//!   whose timestamp did not move since the last read is stale (no new interval): `None`;
//! - end: `dcgmUnwatchFields`, `dcgmFieldGroupDestroy`, `dcgmGroupDestroy`, `dcgmDisconnect`,
//!   `dcgmShutdown`.

use libloading::{Library, Symbol};
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_longlong, c_uint, c_ushort};
use std::time::Duration;

/// What is loaded when no path is configured: DCGM 4's client library, else DCGM 3's.
pub const DEFAULT_DCGM_LIBS: [&str; 2] = ["libdcgm.so.4", "libdcgm.so.3"];

const ST_OK: c_int = 0;
const FE_GPU: c_uint = 1;
const FV_FLAG_LIVE_DATA: c_uint = 1;
const GROUP_EMPTY: c_int = 1;
const MAX_NUM_DEVICES: usize = 32;
const FI_DEV_UUID: c_ushort = 54;
/// The profiling fields read, in [`super::DeviceSample`]'s order: SM activity, SM occupancy,
/// tensor pipes, DRAM bandwidth.
const FI_PROF: [c_ushort; 4] = [1002, 1003, 1004, 1005];
/// DCGM's "no value" for doubles (`DCGM_FP64_BLANK`); anything at or above it is a marker.
const FP64_BLANK: f64 = 140_737_488_355_328.0;

/// `dcgmConnectV2Params_v2`.
#[repr(C)]
struct ConnectParams {
    version: c_uint,
    persist_after_disconnect: c_uint,
    timeout_ms: c_uint,
    address_is_unix_socket: c_uint,
}

/// `dcgmGroupEntityPair_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct EntityPair {
    entity_group_id: c_uint,
    entity_id: c_uint,
}

/// `dcgmFieldValue_v2`: the value is a union of an int64, a double, a 256-byte string and a
/// 4096-byte blob, 8-byte aligned.
#[repr(C)]
struct FieldValueV2 {
    version: c_uint,
    entity_group_id: c_uint,
    entity_id: c_uint,
    field_id: c_ushort,
    field_type: c_ushort,
    status: c_int,
    unused: c_uint,
    ts: i64,
    value: [u64; 512],
}

/// `MAKE_DCGM_VERSION(type, v)`: the structure's size with the version in the top byte.
const fn version<T>(v: u32) -> c_uint {
    (std::mem::size_of::<T>() as u32) | (v << 24)
}

impl FieldValueV2 {
    fn blank() -> FieldValueV2 {
        FieldValueV2 {
            version: version::<FieldValueV2>(2),
            entity_group_id: 0,
            entity_id: 0,
            field_id: 0,
            field_type: 0,
            status: 0,
            unused: 0,
            ts: 0,
            value: [0; 512],
        }
    }
    fn f64(&self) -> Option<f64> {
        let x = f64::from_bits(self.value[0]);
        (self.status == ST_OK && x.is_finite() && x < FP64_BLANK).then_some(x)
    }
    fn str(&self) -> Option<String> {
        if self.status != ST_OK {
            return None;
        }
        // SAFETY: the union's 256-byte string; a NUL is looked for within the whole 4 KiB.
        let bytes: &[u8] = unsafe {
            std::slice::from_raw_parts(self.value.as_ptr() as *const u8, self.value.len() * 8)
        };
        CStr::from_bytes_until_nul(bytes)
            .ok()
            .map(|c| c.to_string_lossy().into_owned())
    }
}

type FnInit = unsafe extern "C" fn() -> c_int;
type FnConnect = unsafe extern "C" fn(*const c_char, *mut ConnectParams, *mut usize) -> c_int;
type FnHandle = unsafe extern "C" fn(usize) -> c_int;
type FnDevices = unsafe extern "C" fn(usize, *mut c_uint, *mut c_int) -> c_int;
type FnGroupCreate = unsafe extern "C" fn(usize, c_int, *const c_char, *mut usize) -> c_int;
type FnGroupAdd = unsafe extern "C" fn(usize, usize, c_uint, c_uint) -> c_int;
type FnDestroy = unsafe extern "C" fn(usize, usize) -> c_int;
type FnFieldGroupCreate =
    unsafe extern "C" fn(usize, c_int, *const c_ushort, *const c_char, *mut usize) -> c_int;
type FnWatch = unsafe extern "C" fn(usize, usize, usize, c_longlong, f64, c_int) -> c_int;
type FnUnwatch = unsafe extern "C" fn(usize, usize, usize) -> c_int;
type FnLatest = unsafe extern "C" fn(
    usize,
    *const EntityPair,
    c_uint,
    *const c_ushort,
    c_uint,
    c_uint,
    *mut FieldValueV2,
) -> c_int;

/// The library's entry points, resolved once at open (a library lacking one is not used).
struct Fns {
    init: FnInit,
    shutdown: FnInit,
    connect: FnConnect,
    disconnect: FnHandle,
    devices: FnDevices,
    group_create: FnGroupCreate,
    group_add: FnGroupAdd,
    group_destroy: FnDestroy,
    field_group_create: FnFieldGroupCreate,
    field_group_destroy: FnDestroy,
    watch: FnWatch,
    unwatch: FnUnwatch,
    latest: FnLatest,
}

impl Fns {
    fn resolve(lib: &Library) -> Result<Fns, String> {
        /// One symbol as a plain function pointer (valid while `lib` stays loaded, which
        /// [`Dcgm`] guarantees by owning it).
        unsafe fn sym<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
            let s: Symbol<T> = lib
                .get(name.as_bytes())
                .map_err(|_| format!("the library lacks {name}"))?;
            Ok(*s)
        }
        // SAFETY: each type above is the C prototype of the symbol of that name in
        // dcgm_agent.h (DCGM 3 and 4).
        unsafe {
            Ok(Fns {
                init: sym(lib, "dcgmInit")?,
                shutdown: sym(lib, "dcgmShutdown")?,
                connect: sym(lib, "dcgmConnect_v2")?,
                disconnect: sym(lib, "dcgmDisconnect")?,
                devices: sym(lib, "dcgmGetAllSupportedDevices")?,
                group_create: sym(lib, "dcgmGroupCreate")?,
                group_add: sym(lib, "dcgmGroupAddEntity")?,
                group_destroy: sym(lib, "dcgmGroupDestroy")?,
                field_group_create: sym(lib, "dcgmFieldGroupCreate")?,
                field_group_destroy: sym(lib, "dcgmFieldGroupDestroy")?,
                watch: sym(lib, "dcgmWatchFields")?,
                unwatch: sym(lib, "dcgmUnwatchFields")?,
                latest: sym(lib, "dcgmEntitiesGetLatestValues")?,
            })
        }
    }
}

/// How to reach DCGM (`[gpu]` dcgm keys, docs/configuration.md).
#[derive(Debug, Clone, PartialEq)]
pub struct DcgmConfig {
    /// The client library; `None`: [`DEFAULT_DCGM_LIBS`] from the dynamic linker's path.
    pub lib_path: Option<std::path::PathBuf>,
    /// The host engine: `127.0.0.1` (its default port 5555), `host:port`, or a Unix socket path.
    pub address: String,
    /// The longest a connection attempt may take.
    pub connect_timeout: Duration,
}

impl Default for DcgmConfig {
    fn default() -> Self {
        DcgmConfig {
            lib_path: None,
            address: "127.0.0.1".into(),
            connect_timeout: Duration::from_secs(1),
        }
    }
}

/// Why DCGM gives nothing: `quiet` when that is a node's normal state (no DCGM installed).
#[derive(Debug, Clone, PartialEq)]
pub struct NotOpened {
    pub why: String,
    pub quiet: bool,
}

/// One GPU's figures of an interval, per mille: SM activity, SM occupancy, tensor pipes, DRAM
/// bandwidth (`None`: no value).
pub type Figures = [Option<u32>; 4];

/// A connection to the host engine watching the profiling fields of some of the job's GPUs.
pub struct Dcgm {
    fns: Fns,
    handle: usize,
    group: usize,
    field_group: usize,
    /// Per GPU watched: (the sampler's slot, DCGM's GPU id).
    gpus: Vec<(usize, u32)>,
    /// The newest timestamp answered per GPU and field (a value not newer is stale).
    last_ts: Vec<[i64; 4]>,
    /// Never unloaded: DCGM's client library is C++ with threads of its own, and unmapping code
    /// that a thread still runs would crash slurmstepd at the job's end. The function pointers
    /// point into it.
    _lib: std::mem::ManuallyDrop<Library>,
}

impl Dcgm {
    /// Loads the library, connects and watches the profiling fields of the GPUs `wanted`
    /// (the sampler's slot and the GPU's UUID) every `interval`. `Ok` with at least one GPU.
    pub fn open(
        cfg: &DcgmConfig,
        wanted: &[(usize, String)],
        interval: Duration,
    ) -> Result<Dcgm, NotOpened> {
        let loud = |why: String| NotOpened { why, quiet: false };
        let lib = match &cfg.lib_path {
            // SAFETY: loading runs the library's initialisers: the site's DCGM (or the test's fake).
            Some(p) => unsafe { Library::new(p) }.map_err(|e| NotOpened {
                why: format!("{}: {e}", p.display()),
                quiet: false,
            })?,
            None => DEFAULT_DCGM_LIBS
                .iter()
                // SAFETY: as above.
                .find_map(|name| unsafe { Library::new(name) }.ok())
                .ok_or_else(|| NotOpened {
                    why: "DCGM is not installed (no libdcgm.so.4 or .3)".into(),
                    quiet: true,
                })?,
        };
        // Kept loaded whatever happens next (see `Dcgm::_lib`).
        let lib = std::mem::ManuallyDrop::new(lib);
        let fns = Fns::resolve(&lib).map_err(loud)?;
        // SAFETY: dcgmInit takes nothing; each later call gets pointers to live locals.
        let rc = unsafe { (fns.init)() };
        if rc != ST_OK {
            return Err(loud(format!("dcgmInit failed ({rc})")));
        }
        let mut d = Dcgm {
            fns,
            handle: 0,
            group: 0,
            field_group: 0,
            gpus: Vec::new(),
            last_ts: Vec::new(),
            _lib: lib,
        };
        // From here `d`'s Drop undoes whatever was set up (zero handles are skipped).
        d.connect(cfg).map_err(loud)?;
        let ids = d.gpu_ids_by_uuid(wanted).map_err(loud)?;
        if ids.is_empty() {
            return Err(loud(
                "the host engine does not list the job's GPUs".to_string(),
            ));
        }
        d.watch(&ids, interval).map_err(loud)?;
        d.last_ts = vec![[0; 4]; ids.len()];
        d.gpus = ids;
        Ok(d)
    }

    fn connect(&mut self, cfg: &DcgmConfig) -> Result<(), String> {
        let addr = CString::new(cfg.address.as_str())
            .map_err(|_| format!("the address {:?} holds a NUL", cfg.address))?;
        let mut params = ConnectParams {
            version: version::<ConnectParams>(2),
            persist_after_disconnect: 0,
            timeout_ms: cfg.connect_timeout.as_millis().min(u32::MAX as u128) as c_uint,
            address_is_unix_socket: c_uint::from(cfg.address.starts_with('/')),
        };
        let mut h = 0usize;
        // SAFETY: a NUL-terminated address, a versioned parameter block and an out-handle.
        let rc = unsafe { (self.fns.connect)(addr.as_ptr(), &mut params, &mut h) };
        if rc != ST_OK {
            return Err(format!(
                "no host engine (nv-hostengine) answered at {} ({rc})",
                cfg.address
            ));
        }
        self.handle = h;
        Ok(())
    }

    /// DCGM's id of each wanted GPU, matched by UUID (GPUs DCGM does not list are left out).
    fn gpu_ids_by_uuid(&self, wanted: &[(usize, String)]) -> Result<Vec<(usize, u32)>, String> {
        let mut ids = [0 as c_uint; MAX_NUM_DEVICES];
        let mut n: c_int = 0;
        // SAFETY: room for DCGM_MAX_NUM_DEVICES ids, as the header requires.
        let rc = unsafe { (self.fns.devices)(self.handle, ids.as_mut_ptr(), &mut n) };
        if rc != ST_OK {
            return Err(format!("dcgmGetAllSupportedDevices failed ({rc})"));
        }
        let n = (n.max(0) as usize).min(MAX_NUM_DEVICES);
        let pairs: Vec<EntityPair> = ids[..n]
            .iter()
            .map(|&id| EntityPair {
                entity_group_id: FE_GPU,
                entity_id: id,
            })
            .collect();
        let values = self.latest(&pairs, &[FI_DEV_UUID], FV_FLAG_LIVE_DATA)?;
        let mut found = Vec::new();
        for (slot, uuid) in wanted {
            if let Some(k) = values.iter().position(|v| v.str().as_deref() == Some(uuid)) {
                found.push((*slot, pairs[k].entity_id));
            }
        }
        Ok(found)
    }

    fn watch(&mut self, ids: &[(usize, u32)], interval: Duration) -> Result<(), String> {
        let name = CString::new(format!("jobscope-{}", std::process::id())).expect("no NUL");
        let mut g = 0usize;
        // SAFETY: a live handle, a NUL-terminated name, an out-handle.
        let rc =
            unsafe { (self.fns.group_create)(self.handle, GROUP_EMPTY, name.as_ptr(), &mut g) };
        if rc != ST_OK {
            return Err(format!("dcgmGroupCreate failed ({rc})"));
        }
        self.group = g;
        for (_, id) in ids {
            // SAFETY: live handles.
            let rc = unsafe { (self.fns.group_add)(self.handle, g, FE_GPU, *id) };
            if rc != ST_OK {
                return Err(format!("dcgmGroupAddEntity of GPU {id} failed ({rc})"));
            }
        }
        let mut fg = 0usize;
        // SAFETY: the field list and its length, a NUL-terminated name, an out-handle.
        let rc = unsafe {
            (self.fns.field_group_create)(
                self.handle,
                FI_PROF.len() as c_int,
                FI_PROF.as_ptr(),
                name.as_ptr(),
                &mut fg,
            )
        };
        if rc != ST_OK {
            return Err(format!("dcgmFieldGroupCreate failed ({rc})"));
        }
        self.field_group = fg;
        let us = interval.as_micros().clamp(100_000, i64::MAX as u128) as c_longlong;
        // Keep two intervals: a sample a little late still finds the last one.
        let keep_s = 2.0 * interval.as_secs_f64().max(0.1);
        // SAFETY: live handles.
        let rc = unsafe { (self.fns.watch)(self.handle, g, fg, us, keep_s, 0) };
        if rc != ST_OK {
            // The field group stays for Drop to destroy; nothing is watched.
            return Err(format!(
                "the profiling fields cannot be watched ({rc}: another profiler, or a GPU DCGM does not profile)"
            ));
        }
        Ok(())
    }

    /// `dcgmEntitiesGetLatestValues` for every pair and field, in pair-major order.
    fn latest(
        &self,
        pairs: &[EntityPair],
        fields: &[c_ushort],
        flags: c_uint,
    ) -> Result<Vec<FieldValueV2>, String> {
        let n = pairs.len() * fields.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        // One contiguous array, as DCGM writes it.
        let mut values: Vec<FieldValueV2> = (0..n).map(|_| FieldValueV2::blank()).collect();
        // SAFETY: `values` holds pairs × fields versioned structures, as the call writes.
        let rc = unsafe {
            (self.fns.latest)(
                self.handle,
                pairs.as_ptr(),
                pairs.len() as c_uint,
                fields.as_ptr(),
                fields.len() as c_uint,
                flags,
                values.as_mut_ptr(),
            )
        };
        if rc != ST_OK {
            return Err(format!("dcgmEntitiesGetLatestValues failed ({rc})"));
        }
        Ok(values)
    }

    /// The figures of the interval just ended, per mille, per watched GPU: (slot, [SM activity,
    /// SM occupancy, tensor pipes, DRAM bandwidth]). A field with no new value is `None`.
    /// `Err`: the call failed (the connection may be gone).
    pub fn read(&mut self) -> Result<Vec<(usize, Figures)>, String> {
        let pairs: Vec<EntityPair> = self
            .gpus
            .iter()
            .map(|(_, id)| EntityPair {
                entity_group_id: FE_GPU,
                entity_id: *id,
            })
            .collect();
        let values = self.latest(&pairs, &FI_PROF, 0)?;
        let mut out = Vec::with_capacity(self.gpus.len());
        for (i, (slot, _)) in self.gpus.iter().enumerate() {
            let mut figures = [None; 4];
            for (f, figure) in figures.iter_mut().enumerate() {
                let v = &values[i * FI_PROF.len() + f];
                let fresh = v.ts > self.last_ts[i][f];
                if let (true, Some(x)) = (fresh, v.f64()) {
                    self.last_ts[i][f] = v.ts;
                    *figure = Some((x.clamp(0.0, 1.0) * 1000.0).round() as u32);
                }
            }
            out.push((*slot, figures));
        }
        Ok(out)
    }

    /// The slots of the GPUs watched.
    pub fn slots(&self) -> impl Iterator<Item = usize> + '_ {
        self.gpus.iter().map(|(s, _)| *s)
    }
}

impl Drop for Dcgm {
    fn drop(&mut self) {
        // SAFETY: each handle was set by DCGM on this connection (0: never set, skipped).
        unsafe {
            if self.handle != 0 {
                if self.group != 0 && self.field_group != 0 && !self.gpus.is_empty() {
                    (self.fns.unwatch)(self.handle, self.group, self.field_group);
                }
                if self.field_group != 0 {
                    (self.fns.field_group_destroy)(self.handle, self.field_group);
                }
                if self.group != 0 {
                    (self.fns.group_destroy)(self.handle, self.group);
                }
                (self.fns.disconnect)(self.handle);
            }
            (self.fns.shutdown)();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layouts of dcgm_structs.h (DCGM 4): what DCGM writes is where this reads it.
    #[test]
    fn structures_match_dcgms() {
        assert_eq!(std::mem::size_of::<FieldValueV2>(), 4128);
        assert_eq!(std::mem::offset_of!(FieldValueV2, ts), 24);
        assert_eq!(std::mem::offset_of!(FieldValueV2, value), 32);
        assert_eq!(std::mem::size_of::<ConnectParams>(), 16);
        assert_eq!(std::mem::size_of::<EntityPair>(), 8);
        assert_eq!(version::<FieldValueV2>(2), 4128 | (2 << 24));
    }

    #[test]
    fn blanks_and_errors_are_no_figure() {
        let mut v = FieldValueV2::blank();
        v.value[0] = 0.25f64.to_bits();
        assert_eq!(v.f64(), Some(0.25));
        v.value[0] = FP64_BLANK.to_bits();
        assert_eq!(v.f64(), None);
        v.value[0] = (FP64_BLANK + 2.0).to_bits(); // DCGM_FP64_NOT_SUPPORTED
        assert_eq!(v.f64(), None);
        v.value[0] = 0.5f64.to_bits();
        v.status = -14;
        assert_eq!(v.f64(), None);
    }
}

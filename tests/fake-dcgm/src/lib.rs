//! A scriptable fake `libdcgm.so` (the client library of NVIDIA's DCGM, as if `nv-hostengine`
//! ran) for jobscope's GPU tests.
//!
//! It implements the calls `jobscope-sampler`'s DCGM reader makes (`sampler/src/gpu/dcgm.rs`),
//! with the structures and constants of DCGM 4's `dcgm_structs.h`, `dcgm_fields.h` and
//! `dcgm_agent.h`, and answers from a JSON script.
//!
//! # Where the script comes from
//! `fake-dcgm.json` in the directory holding this library (tests copy the `.so` into a temp dir
//! next to their script, so each test has its own instance), else the file named by
//! `FAKE_DCGM_SCRIPT`, else no GPUs. It is read at `dcgmConnect_v2`.
//!
//! # Script format
//! ```json
//! { "connect": "OK",          // or an error name ("CONNECTION_NOT_VALID"), or
//!                             // {"sleep_ms": 100, "then": "OK"}
//!   "watch": "OK",            // dcgmWatchFields' answer ("NOT_SUPPORTED", "REQUIRES_ROOT", …)
//!   "gpus": [ { "uuid": "GPU-…",
//!               "sm_active": [0.06, 0.5], "sm_occupancy": 0.03, "tensor": 0.0, "dram": [0.1, "BLANK"] } ] }
//! ```
//! The GPUs' DCGM ids are their places in `gpus`. A profiling field is a ratio (0–1): a number
//! is a constant, an array a series that advances by one at each `dcgmEntitiesGetLatestValues`
//! that asks for it (and holds its last value once exhausted); `"BLANK"` answers DCGM's blank
//! value; a missing key answers the status `NO_DATA`. Values are answered only while the field is
//! watched (as the host engine samples only watched fields), else `NO_DATA`. Each answer's
//! timestamp advances by one second per read. `"fail_reads_after": N` makes every read of
//! watched data after the N-th answer `CONNECTION_NOT_VALID` (the host engine went away).
//!
//! Watches and connections are counted ([`fake_dcgm_watches_live`], [`fake_dcgm_connections_live`])
//! so tests can check the reader unwatches and disconnects; [`fake_dcgm_last_watch_us`] is the
//! update interval of the last watch.
//!
//! Every entry point catches panics and answers `GENERIC_ERROR`.
#![allow(non_snake_case, clippy::missing_safety_doc)]

use serde_json::Value;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_longlong, c_uint, c_ushort};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Mutex;

pub const ST_OK: c_int = 0;
pub const ST_BADPARAM: c_int = -1;
pub const ST_GENERIC_ERROR: c_int = -3;
pub const ST_NOT_SUPPORTED: c_int = -6;
pub const ST_NO_DATA: c_int = -14;
pub const ST_CONNECTION_NOT_VALID: c_int = -21;
pub const ST_REQUIRES_ROOT: c_int = -29;

pub const FP64_BLANK: f64 = 140737488355328.0;
pub const FE_GPU: c_uint = 1;
pub const FI_DEV_UUID: c_ushort = 54;
pub const FI_PROF_SM_ACTIVE: c_ushort = 1002;
pub const FI_PROF_SM_OCCUPANCY: c_ushort = 1003;
pub const FI_PROF_PIPE_TENSOR_ACTIVE: c_ushort = 1004;
pub const FI_PROF_DRAM_ACTIVE: c_ushort = 1005;
const FT_DOUBLE: c_ushort = b'd' as c_ushort;
const FT_STRING: c_ushort = b's' as c_ushort;

pub const SCRIPT_FILE_NAME: &str = "fake-dcgm.json";
pub const SCRIPT_ENV: &str = "FAKE_DCGM_SCRIPT";

/// `dcgmConnectV2Params_v2`.
#[repr(C)]
pub struct ConnectParams {
    pub version: c_uint,
    pub persist_after_disconnect: c_uint,
    pub timeout_ms: c_uint,
    pub address_is_unix_socket: c_uint,
}

/// `dcgmGroupEntityPair_t`.
#[repr(C)]
pub struct EntityPair {
    pub entity_group_id: c_uint,
    pub entity_id: c_uint,
}

/// `dcgmFieldValue_v2`: the value is a union of an int64, a double, a 256-byte string and a
/// 4096-byte blob (8-byte aligned).
#[repr(C)]
pub struct FieldValueV2 {
    pub version: c_uint,
    pub entity_group_id: c_uint,
    pub entity_id: c_uint,
    pub field_id: c_ushort,
    pub field_type: c_ushort,
    pub status: c_int,
    pub unused: c_uint,
    pub ts: i64,
    pub value: [u64; 512],
}

struct State {
    script: Value,
    /// Reads so far per (GPU, field): the series' index.
    reads: std::collections::HashMap<(u32, c_ushort), usize>,
    /// Watched field groups per group (group handle, field group handle).
    watched: Vec<(usize, usize)>,
    /// Field groups: their fields.
    field_groups: std::collections::HashMap<usize, Vec<c_ushort>>,
    ts_us: i64,
    /// Reads of watched (not live) data so far.
    prof_reads: u64,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);
static WATCHES_LIVE: AtomicI64 = AtomicI64::new(0);
static CONNECTIONS_LIVE: AtomicI64 = AtomicI64::new(0);
static LAST_WATCH_US: AtomicI64 = AtomicI64::new(0);
static NEXT_HANDLE: AtomicUsize = AtomicUsize::new(0x2000);

/// Field watches set and not removed (by `dcgmUnwatchFields` or the connection's end).
#[no_mangle]
pub extern "C" fn fake_dcgm_watches_live() -> i64 {
    WATCHES_LIVE.load(Ordering::SeqCst)
}

/// Connections made and not ended by `dcgmDisconnect`.
#[no_mangle]
pub extern "C" fn fake_dcgm_connections_live() -> i64 {
    CONNECTIONS_LIVE.load(Ordering::SeqCst)
}

/// The update interval (µs) of the last `dcgmWatchFields`.
#[no_mangle]
pub extern "C" fn fake_dcgm_last_watch_us() -> i64 {
    LAST_WATCH_US.load(Ordering::SeqCst)
}

fn status_code(name: &str) -> c_int {
    match name {
        "OK" => ST_OK,
        "BADPARAM" => ST_BADPARAM,
        "NOT_SUPPORTED" => ST_NOT_SUPPORTED,
        "NO_DATA" => ST_NO_DATA,
        "CONNECTION_NOT_VALID" => ST_CONNECTION_NOT_VALID,
        "REQUIRES_ROOT" => ST_REQUIRES_ROOT,
        _ => ST_GENERIC_ERROR,
    }
}

/// An answer: a status name, or `{"sleep_ms": N, "then": answer}`.
fn answer(v: Option<&Value>) -> c_int {
    match v {
        None => ST_OK,
        Some(Value::String(s)) => status_code(s),
        Some(Value::Object(o)) => {
            if let Some(ms) = o.get("sleep_ms").and_then(Value::as_u64) {
                std::thread::sleep(std::time::Duration::from_millis(ms));
            }
            answer(o.get("then"))
        }
        Some(_) => ST_GENERIC_ERROR,
    }
}

fn script_path() -> Option<PathBuf> {
    // The directory of this library: dladdr on one of its own symbols.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the address and fills `info`.
    let ok = unsafe { libc::dladdr(fake_dcgm_watches_live as *const libc::c_void, &mut info) };
    if ok != 0 && !info.dli_fname.is_null() {
        // SAFETY: dladdr's file name is a NUL-terminated string it owns.
        let lib = PathBuf::from(
            unsafe { CStr::from_ptr(info.dli_fname) }
                .to_string_lossy()
                .into_owned(),
        );
        if let Some(p) = lib.parent().map(|d| d.join(SCRIPT_FILE_NAME)) {
            if p.exists() {
                return Some(p);
            }
        }
    }
    std::env::var_os(SCRIPT_ENV).map(PathBuf::from)
}

fn load_script() -> Value {
    script_path()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_else(|| serde_json::json!({"gpus": []}))
}

fn guarded(f: impl FnOnce() -> c_int) -> c_int {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(ST_GENERIC_ERROR)
}

fn with_state(f: impl FnOnce(&mut State) -> c_int) -> c_int {
    let mut g = match STATE.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    match g.as_mut() {
        Some(s) => f(s),
        None => ST_CONNECTION_NOT_VALID,
    }
}

fn gpus(s: &State) -> Vec<Value> {
    s.script
        .get("gpus")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

#[no_mangle]
pub extern "C" fn dcgmInit() -> c_int {
    ST_OK
}

#[no_mangle]
pub extern "C" fn dcgmShutdown() -> c_int {
    ST_OK
}

#[no_mangle]
pub unsafe extern "C" fn dcgmConnect_v2(
    address: *const c_char,
    params: *mut ConnectParams,
    handle: *mut usize,
) -> c_int {
    guarded(|| {
        if address.is_null() || params.is_null() || handle.is_null() {
            return ST_BADPARAM;
        }
        let script = load_script();
        let rc = answer(script.get("connect"));
        if rc != ST_OK {
            return rc;
        }
        *STATE.lock().unwrap_or_else(|p| p.into_inner()) = Some(State {
            script,
            reads: Default::default(),
            watched: Vec::new(),
            field_groups: Default::default(),
            ts_us: 1_700_000_000_000_000,
            prof_reads: 0,
        });
        CONNECTIONS_LIVE.fetch_add(1, Ordering::SeqCst);
        *handle = NEXT_HANDLE.fetch_add(1, Ordering::SeqCst);
        ST_OK
    })
}

#[no_mangle]
pub extern "C" fn dcgmDisconnect(_handle: usize) -> c_int {
    guarded(|| {
        let mut g = STATE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = g.take() {
            // A connection's watches end with it (persistAfterDisconnect = 0).
            WATCHES_LIVE.fetch_sub(s.watched.len() as i64, Ordering::SeqCst);
            CONNECTIONS_LIVE.fetch_sub(1, Ordering::SeqCst);
            ST_OK
        } else {
            ST_CONNECTION_NOT_VALID
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmGetAllSupportedDevices(
    _handle: usize,
    ids: *mut c_uint,
    count: *mut c_int,
) -> c_int {
    guarded(|| {
        with_state(|s| {
            let n = gpus(s).len().min(32);
            for i in 0..n {
                *ids.add(i) = i as c_uint;
            }
            *count = n as c_int;
            ST_OK
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmGroupCreate(
    _handle: usize,
    _type: c_int,
    _name: *const c_char,
    group: *mut usize,
) -> c_int {
    guarded(|| {
        with_state(|_| {
            *group = NEXT_HANDLE.fetch_add(1, Ordering::SeqCst);
            ST_OK
        })
    })
}

#[no_mangle]
pub extern "C" fn dcgmGroupAddEntity(
    _handle: usize,
    _group: usize,
    entity_group: c_uint,
    entity: c_uint,
) -> c_int {
    guarded(|| {
        with_state(|s| {
            if entity_group != FE_GPU || entity as usize >= gpus(s).len() {
                ST_BADPARAM
            } else {
                ST_OK
            }
        })
    })
}

#[no_mangle]
pub extern "C" fn dcgmGroupDestroy(_handle: usize, _group: usize) -> c_int {
    guarded(|| with_state(|_| ST_OK))
}

#[no_mangle]
pub unsafe extern "C" fn dcgmFieldGroupCreate(
    _handle: usize,
    n: c_int,
    ids: *const c_ushort,
    _name: *const c_char,
    field_group: *mut usize,
) -> c_int {
    guarded(|| {
        with_state(|s| {
            if ids.is_null() || !(1..=128).contains(&n) {
                return ST_BADPARAM;
            }
            let fields = std::slice::from_raw_parts(ids, n as usize).to_vec();
            let h = NEXT_HANDLE.fetch_add(1, Ordering::SeqCst);
            s.field_groups.insert(h, fields);
            *field_group = h;
            ST_OK
        })
    })
}

#[no_mangle]
pub extern "C" fn dcgmFieldGroupDestroy(_handle: usize, field_group: usize) -> c_int {
    guarded(|| {
        with_state(|s| {
            if s.field_groups.remove(&field_group).is_some() {
                ST_OK
            } else {
                ST_BADPARAM
            }
        })
    })
}

#[no_mangle]
pub extern "C" fn dcgmWatchFields(
    _handle: usize,
    group: usize,
    field_group: usize,
    update_us: c_longlong,
    _max_keep_age_s: f64,
    _max_keep_samples: c_int,
) -> c_int {
    guarded(|| {
        with_state(|s| {
            let rc = answer(s.script.get("watch"));
            if rc != ST_OK {
                return rc;
            }
            if !s.field_groups.contains_key(&field_group) {
                return ST_BADPARAM;
            }
            s.watched.push((group, field_group));
            WATCHES_LIVE.fetch_add(1, Ordering::SeqCst);
            LAST_WATCH_US.store(update_us, Ordering::SeqCst);
            ST_OK
        })
    })
}

#[no_mangle]
pub extern "C" fn dcgmUnwatchFields(_handle: usize, group: usize, field_group: usize) -> c_int {
    guarded(|| {
        with_state(|s| {
            let before = s.watched.len();
            s.watched.retain(|w| *w != (group, field_group));
            let removed = before - s.watched.len();
            WATCHES_LIVE.fetch_sub(removed as i64, Ordering::SeqCst);
            if removed > 0 {
                ST_OK
            } else {
                ST_BADPARAM
            }
        })
    })
}

fn field_key(field: c_ushort) -> Option<&'static str> {
    Some(match field {
        FI_PROF_SM_ACTIVE => "sm_active",
        FI_PROF_SM_OCCUPANCY => "sm_occupancy",
        FI_PROF_PIPE_TENSOR_ACTIVE => "tensor",
        FI_PROF_DRAM_ACTIVE => "dram",
        _ => return None,
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmEntitiesGetLatestValues(
    _handle: usize,
    entities: *const EntityPair,
    n_entities: c_uint,
    fields: *const c_ushort,
    n_fields: c_uint,
    flags: c_uint,
    values: *mut FieldValueV2,
) -> c_int {
    guarded(|| {
        with_state(|s| {
            if entities.is_null() || fields.is_null() || values.is_null() {
                return ST_BADPARAM;
            }
            if flags & 1 == 0 {
                s.prof_reads += 1;
                let limit = s.script.get("fail_reads_after").and_then(Value::as_u64);
                if limit.is_some_and(|n| s.prof_reads > n) {
                    return ST_CONNECTION_NOT_VALID;
                }
            }
            let entities = std::slice::from_raw_parts(entities, n_entities as usize);
            let fields = std::slice::from_raw_parts(fields, n_fields as usize);
            let all = gpus(s);
            let watched: Vec<c_ushort> = s
                .watched
                .iter()
                .filter_map(|(_, fg)| s.field_groups.get(fg))
                .flatten()
                .copied()
                .collect();
            s.ts_us += 1_000_000;
            let ts = s.ts_us;
            let mut k = 0;
            for e in entities {
                for &f in fields {
                    let v = &mut *values.add(k);
                    k += 1;
                    v.entity_group_id = e.entity_group_id;
                    v.entity_id = e.entity_id;
                    v.field_id = f;
                    v.unused = 0;
                    v.ts = 0;
                    v.value = [0; 512];
                    let Some(gpu) = all
                        .get(e.entity_id as usize)
                        .filter(|_| e.entity_group_id == FE_GPU)
                    else {
                        v.status = ST_BADPARAM;
                        continue;
                    };
                    if f == FI_DEV_UUID {
                        let uuid = gpu.get("uuid").and_then(Value::as_str).unwrap_or("");
                        let bytes = uuid.as_bytes();
                        let n = bytes.len().min(255);
                        let dst = v.value.as_mut_ptr() as *mut u8;
                        std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, n);
                        *dst.add(n) = 0;
                        v.field_type = FT_STRING;
                        v.status = ST_OK;
                        v.ts = ts;
                        continue;
                    }
                    v.field_type = FT_DOUBLE;
                    let key = field_key(f);
                    let series = key.and_then(|k| gpu.get(k));
                    let (Some(series), true) = (series, watched.contains(&f)) else {
                        v.status = ST_NO_DATA;
                        continue;
                    };
                    let i = s.reads.entry((e.entity_id, f)).or_insert(0);
                    let item = match series {
                        Value::Array(a) => a.get(*i).or(a.last()).cloned().unwrap_or(Value::Null),
                        other => other.clone(),
                    };
                    *i += 1;
                    let x = match item {
                        Value::String(b) if b == "BLANK" => FP64_BLANK,
                        Value::Number(n) => n.as_f64().unwrap_or(FP64_BLANK),
                        _ => {
                            v.status = ST_NO_DATA;
                            continue;
                        }
                    };
                    v.value[0] = x.to_bits();
                    v.status = ST_OK;
                    v.ts = ts;
                }
            }
            ST_OK
        })
    })
}

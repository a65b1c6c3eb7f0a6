//! A scriptable fake `libnvidia-ml.so` for jobscope's GPU tests.
//!
//! It implements the subset of the NVML C API that jobscope calls through nvml-wrapper 0.13
//! (checked against nvml-wrapper's `src/device.rs` / `src/lib.rs`: which `nvml_sym` each method
//! uses), and answers from a JSON script, so tests can drive utilization over time, inject error
//! codes and make one call slow.
//!
//! # Where the script comes from
//! 1. `fake-nvml.json` in the directory holding this library (tests copy the `.so` into a temp dir
//!    next to their script: each copy is a separate dlopen instance with its own state, so tests
//!    running in parallel do not share a script);
//! 2. otherwise the file named by `FAKE_NVML_SCRIPT`;
//! 3. otherwise the built-in default: two idle devices.
//!
//! The script is (re)read by every `nvmlInit*`, and the per-call counters restart then.
//!
//! # Script format
//! ```json
//! { "driver_version": "550.54.15",
//!   "init": "OK",                  // or an error name, or {"sleep_ms": 100, "then": "OK"}
//!   "step_ms": null,               // null: series advance per call; N: series index = ms since init / N
//!   "devices": [
//!     { "uuid": "GPU-…", "name": "NVIDIA A100-SXM4-80GB", "minor": 3, "pci_bus_id": "00000000:3B:00.0",
//!       "memory_total": 85899345920,
//!       "utilization": [[0, 0], [87, 40], "NOT_SUPPORTED", {"sleep_ms": 3000, "then": [50, 10]}],
//!       "memory_used": [1073741824, 2147483648],   // a number is a constant, an array a series
//!       "power_mw": 250000, "energy_mj": [1000, 2000], "throttle": 0,
//!       "processes": [[[4242, 1073741824], [999, 5]]],   // series of lists of [pid, used bytes]
//!       "mig_mode": [1, 1],                              // or "NOT_SUPPORTED" (the default)
//!       "mig": [ { "uuid": "MIG-…", "name": "…", "memory_total": …, … } ] } ] }
//! ```
//! Driver-buffer keys of a device (see [`buffer`]; without them `nvmlDeviceGetSamples` and
//! `nvmlDeviceGetProcessUtilization` answer `NOT_SUPPORTED`, as on a GPU without the buffer):
//! ```json
//!   "busy": {"period_ms": 7000, "busy_share": 0.3, "phase_ms": 0},   // or {"step_ms": …, "values": […]}
//!   "process_busy": {"4242": {"period_ms": 2000, "busy_share": 0.5}}, // per pid; without "busy"
//!                                                                    // the device is their sum
//!   "mem_ratio": 0.5,            // memory-controller utilization = SM utilization × this
//!   "samples": "NOT_SUPPORTED"   // force the buffer off (also "process_utilization", and
//!                                // "point_reads" for the pattern's point reads)
//! ```
//! SM activity and health keys of a device (answers or series like the others; a missing key
//! answers `NOT_SUPPORTED`):
//! ```json
//!   "sm_clock_mhz": [1980, 1200], "mem_clock_mhz": 2619,        // nvmlDeviceGetClockInfo
//!   "violation_power_ns": [0, 12000000000],                     // nvmlDeviceGetViolationStatus,
//!   "violation_thermal_ns": 0,                                  //   cumulative
//!   "ecc_corrected": [5, 7], "ecc_uncorrected": [0, 1],         // nvmlDeviceGetTotalEccErrors
//!                                                               //   (volatile; cumulative)
//!   "gpm": [{"sm_util": 6.0, "sm_occupancy": 3.5, "any_tensor": 0.0, "dram_bw": 12.0}, …],
//!   "xid": [79, {"at_ms": 500, "code": 48}]
//! ```
//! `gpm`: without it the device answers `nvmlGpmQueryDeviceSupport` with "not supported" (a GPU
//! before Hopper); with it, each `nvmlGpmSampleGet` takes the series' next answer (an error name
//! fails that fill), and `nvmlGpmMetricsGet` answers the second sample's figures (percent; a
//! metric missing from the object answers `NOT_SUPPORTED` for that metric). GPM buffers are
//! counted: [`fake_nvml_gpm_buffers_live`] is allocations minus frees,
//! [`fake_nvml_gpm_buffers_allocated`] all allocations.
//! `xid`: the XID errors of the device, in order; a number is pending from the start, an object
//! from `at_ms` after init. `nvmlDeviceRegisterEvents` answers `NOT_SUPPORTED` without the key;
//! `nvmlEventSetWait_v2` hands out one pending event of the set's devices per call and answers
//! `TIMEOUT` at once when none is pending (it never sleeps, whatever the timeout).
//!
//! Without a `utilization` series, a device with a busy pattern answers point reads
//! (`nvmlDeviceGetUtilizationRates`) with the buffer's newest sample, like the driver.
//!
//! Per-call costs, top level: `"cost_ms": {"nvmlDeviceGetTotalEnergyConsumption": 3,
//! "nvmlDeviceGetSamples": [0.2, 0.3, 100]}`: a number is every call's cost, a list is cycled
//! through call by call (one pathological 100 ms call in three above). Every per-sample and
//! per-drain entry point pays its cost before answering.
//!
//! `nvmlInit*`/`nvmlShutdown` are counted like the driver's: the state lives until the last
//! shutdown, so two monitors (two jobs) can share one library instance.
//!
//! An *answer* is a value, an error name (`"NOT_SUPPORTED"`, `"GPU_IS_LOST"`, `"UNKNOWN"`,
//! `"NO_PERMISSION"`, `"TIMEOUT"`, `"DRIVER_NOT_LOADED"`, `"NOT_FOUND"`), or
//! `{"sleep_ms": N, "then": answer}`. A series holds its last answer once exhausted. A missing key
//! answers `NOT_SUPPORTED`. `utilization` and `processes` are always series (their answers are
//! arrays themselves); `mig_mode` never is.
//!
//! Every entry point catches panics (a panic must not cross the C boundary) and answers `UNKNOWN`.
#![allow(non_snake_case, clippy::missing_safety_doc)]

pub mod buffer;

use buffer::Pattern;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_uint, c_ulonglong, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const SUCCESS: u32 = 0;
pub const ERROR_UNINITIALIZED: u32 = 1;
pub const ERROR_INVALID_ARGUMENT: u32 = 2;
pub const ERROR_NOT_SUPPORTED: u32 = 3;
pub const ERROR_NO_PERMISSION: u32 = 4;
pub const ERROR_NOT_FOUND: u32 = 6;
pub const ERROR_INSUFFICIENT_SIZE: u32 = 7;
pub const ERROR_DRIVER_NOT_LOADED: u32 = 9;
pub const ERROR_TIMEOUT: u32 = 10;
pub const ERROR_GPU_IS_LOST: u32 = 15;
pub const ERROR_UNKNOWN: u32 = 999;

/// `nvmlDevice_t` handles: `BASE + device * STRIDE` for a GPU, `+ 1 + j` for its MIG device `j`.
const HANDLE_BASE: usize = 0x1000;
const HANDLE_STRIDE: usize = 0x100;

/// Name of the script file looked for next to the library.
pub const SCRIPT_FILE_NAME: &str = "fake-nvml.json";
/// Environment variable naming the script when there is none next to the library.
pub const SCRIPT_ENV: &str = "FAKE_NVML_SCRIPT";

#[repr(C)]
pub struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

#[repr(C)]
pub struct Memory {
    total: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

#[repr(C)]
pub struct MemoryV2 {
    version: c_uint,
    total: c_ulonglong,
    reserved: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

#[repr(C)]
pub struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

/// `nvmlProcessInfo_t` as of NVML 11.x (the `_v3` calls).
#[repr(C)]
pub struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: c_ulonglong,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

struct State {
    script: Value,
    t0: Instant,
    /// The driver's clock at `t0`, microseconds since the epoch (NVML's sample timestamps).
    base_us: u64,
    counters: HashMap<(usize, &'static str), u64>,
    /// Calls so far per entry point (for cycled costs).
    calls: HashMap<&'static str, u64>,
    /// `nvmlInit*` calls not yet matched by `nvmlShutdown`.
    refs: u32,
    /// Event sets: the device handles registered in each.
    sets: HashMap<usize, Vec<usize>>,
    /// GPM buffers: the figures of their last fill (`None`: never filled).
    gpm: HashMap<usize, Option<Value>>,
}

/// GPM buffers allocated minus freed, and allocated in all, over the library's life (not
/// reset by init).
static GPM_LIVE: AtomicI64 = AtomicI64::new(0);
static GPM_ALLOCATED: AtomicI64 = AtomicI64::new(0);
/// Handles of event sets and GPM buffers (opaque: never dereferenced).
static NEXT_HANDLE: AtomicUsize = AtomicUsize::new(0x10_0000);

/// GPM buffers allocated and not freed (a test's check that the sampler frees what it takes).
#[no_mangle]
pub extern "C" fn fake_nvml_gpm_buffers_live() -> i64 {
    GPM_LIVE.load(Ordering::SeqCst)
}

/// GPM buffers allocated in all (a sampler that allocates per sample shows here).
#[no_mangle]
pub extern "C" fn fake_nvml_gpm_buffers_allocated() -> i64 {
    GPM_ALLOCATED.load(Ordering::SeqCst)
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn error_code(name: &str) -> Option<u32> {
    Some(match name {
        "OK" | "SUCCESS" => SUCCESS,
        "UNINITIALIZED" => ERROR_UNINITIALIZED,
        "INVALID_ARGUMENT" => ERROR_INVALID_ARGUMENT,
        "NOT_SUPPORTED" => ERROR_NOT_SUPPORTED,
        "NO_PERMISSION" => ERROR_NO_PERMISSION,
        "NOT_FOUND" => ERROR_NOT_FOUND,
        "DRIVER_NOT_LOADED" => ERROR_DRIVER_NOT_LOADED,
        "TIMEOUT" => ERROR_TIMEOUT,
        "GPU_IS_LOST" => ERROR_GPU_IS_LOST,
        "UNKNOWN" => ERROR_UNKNOWN,
        _ => return None,
    })
}

fn default_script() -> Value {
    json!({
        "driver_version": "550.54.15",
        "devices": [
            {"uuid": "GPU-00000000-0000-0000-0000-000000000000", "name": "Fake GPU", "minor": 0,
             "pci_bus_id": "00000000:01:00.0", "memory_total": 17179869184u64,
             "utilization": [[0, 0]], "memory_used": 0, "power_mw": 50000, "energy_mj": 0,
             "throttle": 0, "processes": [[]]},
            {"uuid": "GPU-00000000-0000-0000-0000-000000000001", "name": "Fake GPU", "minor": 1,
             "pci_bus_id": "00000000:02:00.0", "memory_total": 17179869184u64,
             "utilization": [[0, 0]], "memory_used": 0, "power_mw": 50000, "energy_mj": 0,
             "throttle": 0, "processes": [[]]}
        ]
    })
}

/// Directory of this shared object (via `dladdr` on one of its own functions).
fn own_dir() -> Option<PathBuf> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the address; info is a valid out-pointer.
    let ok = unsafe { libc::dladdr(own_dir as *const c_void, &mut info) };
    if ok == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated path.
    let p = unsafe { CStr::from_ptr(info.dli_fname) };
    PathBuf::from(p.to_str().ok()?)
        .parent()
        .map(|d| d.to_path_buf())
}

fn load_script() -> Value {
    let candidates = own_dir()
        .map(|d| d.join(SCRIPT_FILE_NAME))
        .into_iter()
        .chain(std::env::var_os(SCRIPT_ENV).map(PathBuf::from));
    for p in candidates {
        if let Ok(text) = std::fs::read_to_string(&p) {
            match serde_json::from_str(&text) {
                Ok(v) => return v,
                Err(e) => eprintln!("fake-nvml: {}: {e}", p.display()),
            }
        }
    }
    default_script()
}

/// An answer after its sleep: a value or an NVML error code.
enum Answer {
    Value(Value),
    Error(u32),
}

/// Runs `f` catching panics, so nothing unwinds into C.
fn guard(f: impl FnOnce() -> u32) -> u32 {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(ERROR_UNKNOWN)
}

fn with_state<T>(f: impl FnOnce(&mut State) -> T) -> Option<T> {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    g.as_mut().map(f)
}

/// Pays the scripted cost of one call of `name` (outside the lock: other threads go on).
fn cost(name: &'static str) {
    let ms = with_state(|st| {
        let c = st.script.get("cost_ms")?.get(name)?;
        let n = st.calls.entry(name).or_insert(0);
        let i = *n;
        *n += 1;
        match c {
            Value::Array(l) if !l.is_empty() => l[(i % l.len() as u64) as usize].as_f64(),
            v => v.as_f64(),
        }
    })
    .flatten();
    if let Some(ms) = ms.filter(|m| *m > 0.0) {
        std::thread::sleep(Duration::from_secs_f64(ms / 1000.0));
    }
}

/// Milliseconds since init and the driver clock's base (µs).
fn clock() -> Option<(u64, u64)> {
    with_state(|st| (st.t0.elapsed().as_millis() as u64, st.base_us))
}

/// The device's busy pattern (`busy`), and its processes' (`process_busy`), parsed.
struct Busy {
    device: Option<Pattern>,
    procs: Vec<(u32, Pattern)>,
    mem_ratio: f64,
}

impl Busy {
    fn of(dev: &Value) -> Busy {
        let procs = dev
            .get("process_busy")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(pid, p)| Some((pid.parse().ok()?, Pattern::from_json(p)?)))
                    .collect()
            })
            .unwrap_or_default();
        Busy {
            device: dev.get("busy").and_then(Pattern::from_json),
            procs,
            mem_ratio: dev.get("mem_ratio").and_then(Value::as_f64).unwrap_or(0.5),
        }
    }
    fn scripted(&self) -> bool {
        self.device.is_some() || !self.procs.is_empty()
    }
    /// The device's sample at `t_ms`: its own pattern, else its processes' sum.
    fn sample_at(&self, t_ms: u64) -> u32 {
        match &self.device {
            Some(p) => p.sample_at(t_ms),
            None => self
                .procs
                .iter()
                .map(|(_, p)| p.sample_at(t_ms))
                .sum::<u32>()
                .min(100),
        }
    }
    fn mem(&self, sm: u32) -> u32 {
        ((sm as f64 * self.mem_ratio).round() as u32).min(100)
    }
}

/// The busy script of `h`, or the error its buffer answers (`samples`/`process_utilization` set
/// to an error name, or no busy pattern at all: NOT_SUPPORTED).
fn busy_of(h: usize, switch: &str) -> Result<Busy, u32> {
    with_state(|st| {
        let d = device_of(&st.script, h).ok_or(ERROR_INVALID_ARGUMENT)?;
        if let Some(Value::String(e)) = d.get(switch) {
            return Err(error_code(e).unwrap_or(ERROR_UNKNOWN));
        }
        let b = Busy::of(d);
        if b.scripted() {
            Ok(b)
        } else {
            Err(ERROR_NOT_SUPPORTED)
        }
    })
    .unwrap_or(Err(ERROR_UNINITIALIZED))
}

/// The device object of `handle` (a GPU or one of its MIG devices).
fn device_of(script: &Value, handle: usize) -> Option<&Value> {
    let off = handle.checked_sub(HANDLE_BASE)?;
    let (dev, sub) = (off / HANDLE_STRIDE, off % HANDLE_STRIDE);
    let d = script.get("devices")?.get(dev)?;
    if sub == 0 {
        Some(d)
    } else {
        d.get("mig")?.get(sub - 1)
    }
}

fn is_mig_handle(handle: usize) -> bool {
    handle
        .checked_sub(HANDLE_BASE)
        .is_some_and(|o| o % HANDLE_STRIDE != 0)
}

fn handles(script: &Value) -> Vec<usize> {
    let mut v = Vec::new();
    if let Some(devs) = script.get("devices").and_then(Value::as_array) {
        for (i, d) in devs.iter().enumerate() {
            v.push(HANDLE_BASE + i * HANDLE_STRIDE);
            let n = d
                .get("mig")
                .and_then(Value::as_array)
                .map_or(0, |m| m.len());
            v.extend((0..n).map(|j| HANDLE_BASE + i * HANDLE_STRIDE + 1 + j));
        }
    }
    v
}

/// Picks the scripted answer of `key` for `handle` and applies its sleep (outside the lock).
/// `advance`: this call moves the series on (false for the second half of a two-call query).
fn answer(handle: usize, key: &'static str, advance: bool) -> Answer {
    let picked = with_state(|st| {
        let Some(dev) = device_of(&st.script, handle) else {
            return Err(ERROR_INVALID_ARGUMENT);
        };
        let Some(v) = dev.get(key) else {
            return Err(ERROR_NOT_SUPPORTED);
        };
        let counter = st.counters.entry((handle, key)).or_insert(0);
        let idx = match st.script.get("step_ms").and_then(Value::as_u64) {
            Some(step) if step > 0 => st.t0.elapsed().as_millis() as u64 / step,
            _ => {
                let i = if advance {
                    *counter
                } else {
                    counter.saturating_sub(1)
                };
                if advance {
                    *counter += 1;
                }
                i
            }
        };
        let a = match v {
            // `mig_mode`'s answer is itself an array and never a series.
            Value::Array(series) if key != "mig_mode" => {
                if series.is_empty() {
                    return Err(ERROR_NOT_SUPPORTED);
                }
                series[(idx as usize).min(series.len() - 1)].clone()
            }
            other => other.clone(),
        };
        Ok(a)
    });
    let mut a = match picked {
        None => return Answer::Error(ERROR_UNINITIALIZED),
        Some(Err(code)) => return Answer::Error(code),
        Some(Ok(a)) => a,
    };
    loop {
        match a {
            Value::String(s) => {
                return Answer::Error(error_code(&s).unwrap_or(ERROR_UNKNOWN));
            }
            Value::Object(ref o) if o.contains_key("sleep_ms") => {
                let ms = o.get("sleep_ms").and_then(Value::as_u64).unwrap_or(0);
                if advance {
                    std::thread::sleep(Duration::from_millis(ms));
                }
                a = o.get("then").cloned().unwrap_or(Value::Null);
            }
            v => return Answer::Value(v),
        }
    }
}

/// A constant identity field (never a series).
fn field(handle: usize, key: &str) -> Result<Value, u32> {
    with_state(|st| {
        device_of(&st.script, handle)
            .ok_or(ERROR_INVALID_ARGUMENT)
            .and_then(|d| d.get(key).cloned().ok_or(ERROR_NOT_SUPPORTED))
    })
    .unwrap_or(Err(ERROR_UNINITIALIZED))
}

unsafe fn write_str(s: &str, buf: *mut c_char, len: c_uint) -> u32 {
    if buf.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    let c = match CString::new(s) {
        Ok(c) => c,
        Err(_) => return ERROR_UNKNOWN,
    };
    let bytes = c.as_bytes_with_nul();
    if bytes.len() > len as usize {
        return ERROR_INSUFFICIENT_SIZE;
    }
    std::ptr::copy_nonoverlapping(bytes.as_ptr() as *const c_char, buf, bytes.len());
    SUCCESS
}

fn do_init() -> u32 {
    let script = load_script();
    let init = script.get("init").cloned().unwrap_or(json!("OK"));
    let mut a = init;
    loop {
        match a {
            Value::Object(ref o) if o.contains_key("sleep_ms") => {
                let ms = o.get("sleep_ms").and_then(Value::as_u64).unwrap_or(0);
                std::thread::sleep(Duration::from_millis(ms));
                a = o.get("then").cloned().unwrap_or(json!("OK"));
            }
            Value::String(ref s) => {
                let code = error_code(s).unwrap_or(ERROR_UNKNOWN);
                if code != SUCCESS {
                    return code;
                }
                break;
            }
            _ => break,
        }
    }
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(st) = g.as_mut() {
        // Already initialised (another user of this instance): counted, state kept.
        st.refs += 1;
        return SUCCESS;
    }
    let base_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    *g = Some(State {
        script,
        t0: Instant::now(),
        base_us,
        counters: HashMap::new(),
        calls: HashMap::new(),
        refs: 1,
        sets: HashMap::new(),
        gpm: HashMap::new(),
    });
    SUCCESS
}

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> u32 {
    guard(do_init)
}

#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> u32 {
    guard(do_init)
}

/// Required: nvml-wrapper's `Drop for Nvml` calls it through `.expect()`.
#[no_mangle]
pub extern "C" fn nvmlShutdown() -> u32 {
    guard(|| {
        let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
        match g.as_mut() {
            Some(st) if st.refs > 1 => st.refs -= 1,
            Some(_) => *g = None,
            None => return ERROR_UNINITIALIZED,
        }
        SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn nvmlErrorString(code: u32) -> *const c_char {
    let s: &'static [u8] = match code {
        SUCCESS => b"Success\0",
        ERROR_NOT_SUPPORTED => b"Not Supported\0",
        ERROR_GPU_IS_LOST => b"GPU is lost\0",
        ERROR_DRIVER_NOT_LOADED => b"Driver Not Loaded\0",
        _ => b"Unknown Error\0",
    };
    s.as_ptr() as *const c_char
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(buf: *mut c_char, len: c_uint) -> u32 {
    guard(|| {
        let v = with_state(|st| {
            st.script
                .get("driver_version")
                .and_then(Value::as_str)
                .unwrap_or("550.54.15")
                .to_string()
        });
        match v {
            Some(v) => write_str(&v, buf, len),
            None => ERROR_UNINITIALIZED,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(n: *mut c_uint) -> u32 {
    guard(|| {
        let count = with_state(|st| {
            st.script
                .get("devices")
                .and_then(Value::as_array)
                .map_or(0, |d| d.len())
        });
        match count {
            Some(c) if !n.is_null() => {
                *n = c as c_uint;
                SUCCESS
            }
            Some(_) => ERROR_INVALID_ARGUMENT,
            None => ERROR_UNINITIALIZED,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(i: c_uint, h: *mut usize) -> u32 {
    guard(|| {
        let count = with_state(|st| {
            st.script
                .get("devices")
                .and_then(Value::as_array)
                .map_or(0, |d| d.len())
        });
        match count {
            None => ERROR_UNINITIALIZED,
            Some(c) if (i as usize) < c && !h.is_null() => {
                *h = HANDLE_BASE + i as usize * HANDLE_STRIDE;
                SUCCESS
            }
            Some(_) => ERROR_INVALID_ARGUMENT,
        }
    })
}

unsafe fn handle_by(key: &str, wanted: *const c_char, h: *mut usize) -> u32 {
    if wanted.is_null() || h.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    let Ok(wanted) = CStr::from_ptr(wanted).to_str() else {
        return ERROR_INVALID_ARGUMENT;
    };
    let found = with_state(|st| {
        handles(&st.script).into_iter().find(|&hd| {
            device_of(&st.script, hd)
                .and_then(|d| d.get(key))
                .and_then(Value::as_str)
                .is_some_and(|v| v.eq_ignore_ascii_case(wanted))
        })
    });
    match found {
        None => ERROR_UNINITIALIZED,
        Some(None) => ERROR_NOT_FOUND,
        Some(Some(hd)) => {
            *h = hd;
            SUCCESS
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, h: *mut usize) -> u32 {
    guard(|| handle_by("uuid", uuid, h))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    bus_id: *const c_char,
    h: *mut usize,
) -> u32 {
    guard(|| handle_by("pci_bus_id", bus_id, h))
}

unsafe fn uint_field(h: usize, key: &str, out: *mut c_uint) -> u32 {
    match field(h, key) {
        Ok(v) => match v.as_u64() {
            Some(n) if !out.is_null() => {
                *out = n as c_uint;
                SUCCESS
            }
            _ => ERROR_INVALID_ARGUMENT,
        },
        Err(e) => e,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(h: usize, minor: *mut c_uint) -> u32 {
    guard(|| uint_field(h, "minor", minor))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(h: usize, index: *mut c_uint) -> u32 {
    guard(|| {
        if is_mig_handle(h) || index.is_null() {
            return ERROR_INVALID_ARGUMENT;
        }
        match h.checked_sub(HANDLE_BASE) {
            Some(o) => {
                *index = (o / HANDLE_STRIDE) as c_uint;
                SUCCESS
            }
            None => ERROR_INVALID_ARGUMENT,
        }
    })
}

unsafe fn str_field(h: usize, key: &str, buf: *mut c_char, len: c_uint) -> u32 {
    match field(h, key) {
        Ok(Value::String(s)) => write_str(&s, buf, len),
        Ok(_) => ERROR_INVALID_ARGUMENT,
        Err(e) => e,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(h: usize, buf: *mut c_char, len: c_uint) -> u32 {
    guard(|| str_field(h, "uuid", buf, len))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(h: usize, buf: *mut c_char, len: c_uint) -> u32 {
    guard(|| str_field(h, "name", buf, len))
}

unsafe fn pci_info(h: usize, out: *mut PciInfo) -> u32 {
    if out.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    let id = match field(h, "pci_bus_id") {
        Ok(Value::String(s)) => s,
        Ok(_) => return ERROR_INVALID_ARGUMENT,
        Err(e) => return e,
    };
    // "DDDDDDDD:BB:DD.F"
    let parts: Vec<&str> = id.split([':', '.']).collect();
    let hex = |i: usize| {
        parts
            .get(i)
            .and_then(|p| u32::from_str_radix(p, 16).ok())
            .unwrap_or(0)
    };
    let p = &mut *out;
    p.domain = hex(0);
    p.bus = hex(1);
    p.device = hex(2);
    p.pci_device_id = 0x20b2_10de;
    p.pci_sub_system_id = 0x1463_10de;
    p.bus_id = [0; 32];
    p.bus_id_legacy = [0; 16];
    for (i, b) in id.bytes().take(31).enumerate() {
        p.bus_id[i] = b as c_char;
    }
    for (i, b) in id.bytes().skip(4).take(15).enumerate() {
        p.bus_id_legacy[i] = b as c_char;
    }
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(h: usize, out: *mut PciInfo) -> u32 {
    guard(|| pci_info(h, out))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v2(h: usize, out: *mut PciInfo) -> u32 {
    guard(|| pci_info(h, out))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(h: usize, u: *mut Utilization) -> u32 {
    cost("nvmlDeviceGetUtilizationRates");
    let has_series = field(h, "utilization").is_ok();
    if !has_series {
        if let (Ok(b), Some((now_ms, _))) = (busy_of(h, "point_reads"), clock()) {
            // Like the driver: the newest sample of the buffer.
            return guard(|| {
                if u.is_null() {
                    return ERROR_INVALID_ARGUMENT;
                }
                let k = now_ms / buffer::SAMPLE_SPACING_MS;
                let sm = if k == 0 {
                    0
                } else {
                    b.sample_at(k * buffer::SAMPLE_SPACING_MS)
                };
                (*u).gpu = sm;
                (*u).memory = b.mem(sm);
                SUCCESS
            });
        }
    }
    guard(|| match answer(h, "utilization", true) {
        Answer::Error(e) => e,
        Answer::Value(v) => {
            let g = v.get(0).and_then(Value::as_u64);
            let m = v.get(1).and_then(Value::as_u64);
            match (g, m) {
                (Some(g), Some(m)) if !u.is_null() => {
                    (*u).gpu = g as c_uint;
                    (*u).memory = m as c_uint;
                    SUCCESS
                }
                _ => ERROR_INVALID_ARGUMENT,
            }
        }
    })
}

/// (total, used) bytes of `h`, `used` from the `memory_used` series.
fn memory(h: usize) -> Result<(u64, u64), u32> {
    let total = field(h, "memory_total")?.as_u64().ok_or(ERROR_UNKNOWN)?;
    match answer(h, "memory_used", true) {
        Answer::Error(e) => Err(e),
        Answer::Value(v) => Ok((total, v.as_u64().ok_or(ERROR_UNKNOWN)?)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(h: usize, m: *mut Memory) -> u32 {
    guard(|| match memory(h) {
        Ok((total, used)) if !m.is_null() => {
            (*m).total = total;
            (*m).used = used;
            (*m).free = total.saturating_sub(used);
            SUCCESS
        }
        Ok(_) => ERROR_INVALID_ARGUMENT,
        Err(e) => e,
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(h: usize, m: *mut MemoryV2) -> u32 {
    cost("nvmlDeviceGetMemoryInfo_v2");
    guard(|| match memory(h) {
        Ok((total, used)) if !m.is_null() => {
            (*m).total = total;
            (*m).used = used;
            (*m).reserved = 0;
            (*m).free = total.saturating_sub(used);
            SUCCESS
        }
        Ok(_) => ERROR_INVALID_ARGUMENT,
        Err(e) => e,
    })
}

unsafe fn u64_answer(h: usize, key: &'static str) -> Result<u64, u32> {
    match answer(h, key, true) {
        Answer::Error(e) => Err(e),
        Answer::Value(v) => v.as_u64().ok_or(ERROR_UNKNOWN),
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(h: usize, p: *mut c_uint) -> u32 {
    cost("nvmlDeviceGetPowerUsage");
    guard(|| match u64_answer(h, "power_mw") {
        Ok(v) if !p.is_null() => {
            *p = v as c_uint;
            SUCCESS
        }
        Ok(_) => ERROR_INVALID_ARGUMENT,
        Err(e) => e,
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(h: usize, e: *mut c_ulonglong) -> u32 {
    cost("nvmlDeviceGetTotalEnergyConsumption");
    guard(|| match u64_answer(h, "energy_mj") {
        Ok(v) if !e.is_null() => {
            *e = v;
            SUCCESS
        }
        Ok(_) => ERROR_INVALID_ARGUMENT,
        Err(code) => code,
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    h: usize,
    r: *mut c_ulonglong,
) -> u32 {
    cost("nvmlDeviceGetCurrentClocksThrottleReasons");
    guard(|| match u64_answer(h, "throttle") {
        Ok(v) if !r.is_null() => {
            *r = v;
            SUCCESS
        }
        Ok(_) => ERROR_INVALID_ARGUMENT,
        Err(code) => code,
    })
}

/// The newer name of the same query (NVML 12.x); nvml-wrapper 0.13 calls the old one.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksEventReasons(
    h: usize,
    r: *mut c_ulonglong,
) -> u32 {
    nvmlDeviceGetCurrentClocksThrottleReasons(h, r)
}

/// NVML's two-call protocol: a call with no buffer (or one too small) answers the count with
/// `INSUFFICIENT_SIZE`; the series moves on with the first call of each pair.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    h: usize,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> u32 {
    cost("nvmlDeviceGetComputeRunningProcesses_v3");
    guard(|| {
        if count.is_null() {
            return ERROR_INVALID_ARGUMENT;
        }
        let query = infos.is_null();
        let list = match answer(h, "processes", query) {
            Answer::Error(e) => return e,
            Answer::Value(Value::Array(l)) => l,
            Answer::Value(_) => return ERROR_UNKNOWN,
        };
        let n = list.len();
        if query || (*count as usize) < n {
            *count = n as c_uint;
            return if n == 0 {
                SUCCESS
            } else {
                ERROR_INSUFFICIENT_SIZE
            };
        }
        let mig = is_mig_handle(h);
        for (i, p) in list.iter().enumerate() {
            let pid = p.get(0).and_then(Value::as_u64).unwrap_or(0);
            let mem = p.get(1).and_then(Value::as_u64).unwrap_or(u64::MAX);
            *infos.add(i) = ProcessInfo {
                pid: pid as c_uint,
                used_gpu_memory: mem,
                gpu_instance_id: if mig { 1 } else { u32::MAX },
                compute_instance_id: if mig { 0 } else { u32::MAX },
            };
        }
        *count = n as c_uint;
        SUCCESS
    })
}

/// `nvmlSample_t`.
#[repr(C)]
pub struct Sample {
    time_stamp: c_ulonglong,
    /// `nvmlValue_t` (a union of 8 bytes); utilization is `uiVal`, answered as UNSIGNED_INT.
    value: c_ulonglong,
}

/// `nvmlProcessUtilizationSample_t`.
#[repr(C)]
pub struct ProcessUtilizationSample {
    pid: c_uint,
    time_stamp: c_ulonglong,
    sm_util: c_uint,
    mem_util: c_uint,
    enc_util: c_uint,
    dec_util: c_uint,
}

pub const SAMPLING_GPU_UTILIZATION: u32 = 1;
pub const SAMPLING_MEMORY_UTILIZATION: u32 = 2;
pub const VALUE_TYPE_UNSIGNED_INT: u32 = 1;

/// The driver's sample buffer ([`buffer`]). No buffer → `samples == NULL` answers the count
/// (`SUCCESS`), none newer than `last_seen` → `NOT_FOUND`; a buffer too small gets the oldest
/// samples that fit (a later call gets the rest).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSamples(
    h: usize,
    kind: u32,
    last_seen: c_ulonglong,
    value_type: *mut u32,
    count: *mut c_uint,
    samples: *mut Sample,
) -> u32 {
    cost("nvmlDeviceGetSamples");
    guard(|| {
        if count.is_null() || value_type.is_null() {
            return ERROR_INVALID_ARGUMENT;
        }
        if kind != SAMPLING_GPU_UTILIZATION && kind != SAMPLING_MEMORY_UTILIZATION {
            return ERROR_NOT_SUPPORTED;
        }
        let b = match busy_of(h, "samples") {
            Ok(b) => b,
            Err(e) => return e,
        };
        let Some((now_ms, base_us)) = clock() else {
            return ERROR_UNINITIALIZED;
        };
        let list: Vec<(u64, u32)> = buffer::buffered_times(now_ms)
            .map(|t| (buffer::timestamp_us(base_us, t), b.sample_at(t)))
            .filter(|(ts, _)| *ts > last_seen)
            .map(|(ts, sm)| {
                (
                    ts,
                    if kind == SAMPLING_GPU_UTILIZATION {
                        sm
                    } else {
                        b.mem(sm)
                    },
                )
            })
            .collect();
        *value_type = VALUE_TYPE_UNSIGNED_INT;
        if list.is_empty() {
            return ERROR_NOT_FOUND;
        }
        if samples.is_null() {
            *count = list.len() as c_uint;
            return SUCCESS;
        }
        let n = list.len().min(*count as usize);
        for (i, (ts, v)) in list.iter().take(n).enumerate() {
            *samples.add(i) = Sample {
                time_stamp: *ts,
                value: *v as c_ulonglong,
            };
        }
        *count = n as c_uint;
        SUCCESS
    })
}

/// Per-process utilization samples ([`buffer::process_samples_since`]): the two-call protocol
/// (`utilization == NULL`: the count, `INSUFFICIENT_SIZE`), `NOT_FOUND` when no process had
/// utilization since `last_seen`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    h: usize,
    utilization: *mut ProcessUtilizationSample,
    count: *mut c_uint,
    last_seen: c_ulonglong,
) -> u32 {
    cost("nvmlDeviceGetProcessUtilization");
    guard(|| {
        if count.is_null() {
            return ERROR_INVALID_ARGUMENT;
        }
        let b = match busy_of(h, "process_utilization") {
            Ok(b) if !b.procs.is_empty() => b,
            Ok(_) => return ERROR_NOT_SUPPORTED,
            Err(e) => return e,
        };
        let Some((now_ms, base_us)) = clock() else {
            return ERROR_UNINITIALIZED;
        };
        let list = buffer::process_samples_since(&b.procs, base_us, now_ms, last_seen);
        if list.is_empty() {
            return ERROR_NOT_FOUND;
        }
        if utilization.is_null() {
            *count = list.len() as c_uint;
            return ERROR_INSUFFICIENT_SIZE;
        }
        let n = list.len().min(*count as usize);
        for (i, (pid, ts, sm)) in list.iter().take(n).enumerate() {
            *utilization.add(i) = ProcessUtilizationSample {
                pid: *pid,
                time_stamp: *ts,
                sm_util: *sm,
                mem_util: b.mem(*sm),
                enc_util: 0,
                dec_util: 0,
            };
        }
        *count = n as c_uint;
        SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    h: usize,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> u32 {
    guard(|| match answer(h, "mig_mode", true) {
        Answer::Error(e) => e,
        Answer::Value(v) => {
            if current.is_null() || pending.is_null() {
                return ERROR_INVALID_ARGUMENT;
            }
            *current = v.get(0).and_then(Value::as_u64).unwrap_or(0) as c_uint;
            *pending = v.get(1).and_then(Value::as_u64).unwrap_or(0) as c_uint;
            SUCCESS
        }
    })
}

fn mig_count(h: usize) -> Result<usize, u32> {
    if is_mig_handle(h) {
        return Err(ERROR_NOT_SUPPORTED);
    }
    with_state(|st| {
        device_of(&st.script, h)
            .ok_or(ERROR_INVALID_ARGUMENT)
            .map(|d| {
                d.get("mig")
                    .and_then(Value::as_array)
                    .map_or(0, |m| m.len())
            })
    })
    .unwrap_or(Err(ERROR_UNINITIALIZED))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(h: usize, n: *mut c_uint) -> u32 {
    guard(|| match mig_count(h) {
        Ok(c) if !n.is_null() => {
            *n = c as c_uint;
            SUCCESS
        }
        Ok(_) => ERROR_INVALID_ARGUMENT,
        Err(e) => e,
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    h: usize,
    index: c_uint,
    out: *mut usize,
) -> u32 {
    guard(|| match mig_count(h) {
        Ok(c) if (index as usize) < c && !out.is_null() => {
            *out = h + 1 + index as usize;
            SUCCESS
        }
        Ok(_) => ERROR_NOT_FOUND,
        Err(e) => e,
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(h: usize, is_mig: *mut c_uint) -> u32 {
    guard(|| {
        if is_mig.is_null() {
            return ERROR_INVALID_ARGUMENT;
        }
        *is_mig = is_mig_handle(h) as c_uint;
        SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    h: usize,
    parent: *mut usize,
) -> u32 {
    guard(|| {
        if !is_mig_handle(h) || parent.is_null() {
            return ERROR_INVALID_ARGUMENT;
        }
        let off = h - HANDLE_BASE;
        *parent = HANDLE_BASE + (off / HANDLE_STRIDE) * HANDLE_STRIDE;
        SUCCESS
    })
}

/// `nvmlDeviceGetClockInfo`: `NVML_CLOCK_SM` (1) and `NVML_CLOCK_MEM` (2) only.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(h: usize, kind: u32, mhz: *mut c_uint) -> u32 {
    cost("nvmlDeviceGetClockInfo");
    guard(|| {
        let key = match kind {
            1 => "sm_clock_mhz",
            2 => "mem_clock_mhz",
            _ => return ERROR_NOT_SUPPORTED,
        };
        match u64_answer(h, key) {
            Ok(v) if !mhz.is_null() => {
                *mhz = v as c_uint;
                SUCCESS
            }
            Ok(_) => ERROR_INVALID_ARGUMENT,
            Err(e) => e,
        }
    })
}

/// `nvmlViolationTime_t`.
#[repr(C)]
pub struct ViolationTime {
    reference_time: c_ulonglong,
    violation_time: c_ulonglong,
}

/// `nvmlDeviceGetViolationStatus`: `NVML_PERF_POLICY_POWER` (0) and `_THERMAL` (1).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetViolationStatus(
    h: usize,
    policy: u32,
    out: *mut ViolationTime,
) -> u32 {
    cost("nvmlDeviceGetViolationStatus");
    guard(|| {
        let key = match policy {
            0 => "violation_power_ns",
            1 => "violation_thermal_ns",
            _ => return ERROR_NOT_SUPPORTED,
        };
        match u64_answer(h, key) {
            Ok(v) if !out.is_null() => {
                let now_us = clock().map_or(0, |(ms, base)| base + ms * 1000);
                *out = ViolationTime {
                    reference_time: now_us,
                    violation_time: v,
                };
                SUCCESS
            }
            Ok(_) => ERROR_INVALID_ARGUMENT,
            Err(e) => e,
        }
    })
}

/// `nvmlDeviceGetTotalEccErrors`: volatile counters (`NVML_VOLATILE_ECC`, 0) only; corrected
/// (0) and uncorrected (1).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    h: usize,
    error_type: u32,
    counter_type: u32,
    count: *mut c_ulonglong,
) -> u32 {
    cost("nvmlDeviceGetTotalEccErrors");
    guard(|| {
        let key = match (error_type, counter_type) {
            (0, 0) => "ecc_corrected",
            (1, 0) => "ecc_uncorrected",
            _ => return ERROR_NOT_SUPPORTED,
        };
        match u64_answer(h, key) {
            Ok(v) if !count.is_null() => {
                *count = v;
                SUCCESS
            }
            Ok(_) => ERROR_INVALID_ARGUMENT,
            Err(e) => e,
        }
    })
}

/// `nvmlGpmSupport_t`.
#[repr(C)]
pub struct GpmSupport {
    version: c_uint,
    is_supported_device: c_uint,
}

/// `nvmlGpmMetric_t`.
#[repr(C)]
pub struct GpmMetric {
    metric_id: c_uint,
    nvml_return: u32,
    value: f64,
    short_name: *mut c_char,
    long_name: *mut c_char,
    unit: *mut c_char,
}

/// `nvmlGpmMetricsGet_t`, up to its first metric (the array follows; only `num_metrics` of it
/// are touched).
#[repr(C)]
pub struct GpmMetricsGet {
    version: c_uint,
    num_metrics: c_uint,
    sample1: usize,
    sample2: usize,
    metrics: [GpmMetric; 1],
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpmQueryDeviceSupport(h: usize, out: *mut GpmSupport) -> u32 {
    guard(|| {
        if out.is_null() || (*out).version != 1 {
            return ERROR_INVALID_ARGUMENT;
        }
        match with_state(|st| device_of(&st.script, h).map(|d| d.get("gpm").is_some())) {
            None => ERROR_UNINITIALIZED,
            Some(None) => ERROR_INVALID_ARGUMENT,
            Some(Some(has)) => {
                (*out).is_supported_device = has as c_uint;
                SUCCESS
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpmSampleAlloc(out: *mut usize) -> u32 {
    guard(|| {
        if out.is_null() {
            return ERROR_INVALID_ARGUMENT;
        }
        let h = NEXT_HANDLE.fetch_add(1, Ordering::SeqCst);
        match with_state(|st| st.gpm.insert(h, None)) {
            None => ERROR_UNINITIALIZED,
            Some(_) => {
                GPM_LIVE.fetch_add(1, Ordering::SeqCst);
                GPM_ALLOCATED.fetch_add(1, Ordering::SeqCst);
                *out = h;
                SUCCESS
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn nvmlGpmSampleFree(sample: usize) -> u32 {
    guard(|| match with_state(|st| st.gpm.remove(&sample)) {
        None => ERROR_UNINITIALIZED,
        Some(None) => ERROR_INVALID_ARGUMENT,
        Some(Some(_)) => {
            GPM_LIVE.fetch_sub(1, Ordering::SeqCst);
            SUCCESS
        }
    })
}

#[no_mangle]
pub extern "C" fn nvmlGpmSampleGet(h: usize, sample: usize) -> u32 {
    cost("nvmlGpmSampleGet");
    guard(|| {
        if with_state(|st| st.gpm.contains_key(&sample)) != Some(true) {
            return ERROR_INVALID_ARGUMENT;
        }
        let v = match answer(h, "gpm", true) {
            Answer::Error(e) => return e,
            Answer::Value(v) => v,
        };
        with_state(|st| st.gpm.insert(sample, Some(v)));
        SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpmMetricsGet(req: *mut GpmMetricsGet) -> u32 {
    cost("nvmlGpmMetricsGet");
    guard(|| {
        if req.is_null() || (*req).version != 1 {
            return ERROR_INVALID_ARGUMENT;
        }
        let (s1, s2) = ((*req).sample1, (*req).sample2);
        let figures = with_state(|st| match (st.gpm.get(&s1), st.gpm.get(&s2)) {
            (Some(Some(_)), Some(Some(v))) => Some(v.clone()),
            _ => None,
        });
        let Some(Some(v)) = figures else {
            return ERROR_INVALID_ARGUMENT;
        };
        let metrics = std::ptr::addr_of_mut!((*req).metrics) as *mut GpmMetric;
        for i in 0..(*req).num_metrics as usize {
            let m = &mut *metrics.add(i);
            let key = match m.metric_id {
                2 => "sm_util",
                3 => "sm_occupancy",
                5 => "any_tensor",
                10 => "dram_bw",
                _ => "",
            };
            match v.get(key).and_then(Value::as_f64) {
                Some(x) => {
                    m.value = x;
                    m.nvml_return = SUCCESS;
                }
                None => {
                    m.value = 0.0;
                    m.nvml_return = ERROR_NOT_SUPPORTED;
                }
            }
            m.short_name = std::ptr::null_mut();
            m.long_name = std::ptr::null_mut();
            m.unit = std::ptr::null_mut();
        }
        SUCCESS
    })
}

/// `nvmlEventData_t`.
#[repr(C)]
pub struct EventData {
    device: usize,
    event_type: c_ulonglong,
    event_data: c_ulonglong,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

pub const EVENT_TYPE_XID_CRITICAL_ERROR: u64 = 8;

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetCreate(out: *mut usize) -> u32 {
    guard(|| {
        if out.is_null() {
            return ERROR_INVALID_ARGUMENT;
        }
        let h = NEXT_HANDLE.fetch_add(1, Ordering::SeqCst);
        match with_state(|st| st.sets.insert(h, vec![])) {
            None => ERROR_UNINITIALIZED,
            Some(_) => {
                *out = h;
                SUCCESS
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn nvmlEventSetFree(set: usize) -> u32 {
    guard(|| match with_state(|st| st.sets.remove(&set)) {
        None => ERROR_UNINITIALIZED,
        Some(None) => ERROR_INVALID_ARGUMENT,
        Some(Some(_)) => SUCCESS,
    })
}

#[no_mangle]
pub extern "C" fn nvmlDeviceRegisterEvents(h: usize, types: c_ulonglong, set: usize) -> u32 {
    guard(|| {
        with_state(|st| {
            let Some(d) = device_of(&st.script, h) else {
                return ERROR_INVALID_ARGUMENT;
            };
            if d.get("xid").is_none() || types & EVENT_TYPE_XID_CRITICAL_ERROR == 0 {
                return ERROR_NOT_SUPPORTED;
            }
            match st.sets.get_mut(&set) {
                Some(devs) => {
                    devs.push(h);
                    SUCCESS
                }
                None => ERROR_INVALID_ARGUMENT,
            }
        })
        .unwrap_or(ERROR_UNINITIALIZED)
    })
}

/// The next pending XID of the set's devices, else `TIMEOUT` at once (see the module doc).
#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: usize,
    data: *mut EventData,
    _timeout_ms: c_uint,
) -> u32 {
    cost("nvmlEventSetWait_v2");
    guard(|| {
        if data.is_null() {
            return ERROR_INVALID_ARGUMENT;
        }
        let next = with_state(|st| {
            let now_ms = st.t0.elapsed().as_millis() as u64;
            let devs = st.sets.get(&set)?.clone();
            for h in devs {
                let list = device_of(&st.script, h)
                    .and_then(|d| d.get("xid"))
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let done = st.counters.entry((h, "xid delivered")).or_insert(0);
                let Some(x) = list.get(*done as usize) else {
                    continue;
                };
                let (at_ms, code) = match x {
                    Value::Number(n) => (0, n.as_u64().unwrap_or(999)),
                    o => (
                        o.get("at_ms").and_then(Value::as_u64).unwrap_or(0),
                        o.get("code").and_then(Value::as_u64).unwrap_or(999),
                    ),
                };
                if at_ms <= now_ms {
                    *done += 1;
                    return Some((h, code));
                }
            }
            None
        });
        match next {
            None => ERROR_UNINITIALIZED,
            Some(None) => ERROR_TIMEOUT,
            Some(Some((h, code))) => {
                *data = EventData {
                    device: h,
                    event_type: EVENT_TYPE_XID_CRITICAL_ERROR,
                    event_data: code,
                    gpu_instance_id: u32::MAX,
                    compute_instance_id: u32::MAX,
                };
                SUCCESS
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test: the fake's state is process-global.
    #[test]
    fn scripted_answers_errors_sleeps_and_the_two_call_process_query() {
        let dir = std::env::temp_dir().join(format!("fake-nvml-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("script.json");
        std::fs::write(
            &script,
            serde_json::to_vec(&json!({"devices": [
                {"uuid": "GPU-1", "name": "Fake", "minor": 4, "pci_bus_id": "00000000:3B:00.0",
                 "memory_total": 100, "memory_used": [10, 20],
                 "utilization": [[1, 2], "GPU_IS_LOST", {"sleep_ms": 50, "then": [3, 4]}],
                 "processes": [[[7, 70], [8, 80]]],
                 "mig_mode": [1, 0],
                 "mig": [{"uuid": "MIG-1", "name": "slice", "memory_total": 5}]}
            ]}))
            .unwrap(),
        )
        .unwrap();
        std::env::set_var(SCRIPT_ENV, &script);
        assert_eq!(nvmlInit_v2(), SUCCESS);
        unsafe {
            let mut n = 0;
            assert_eq!(nvmlDeviceGetCount_v2(&mut n), SUCCESS);
            assert_eq!(n, 1);
            let mut h = 0usize;
            assert_eq!(nvmlDeviceGetHandleByIndex_v2(0, &mut h), SUCCESS);
            let mut minor = 0;
            assert_eq!(nvmlDeviceGetMinorNumber(h, &mut minor), SUCCESS);
            assert_eq!(minor, 4);
            let mut by_uuid = 0usize;
            assert_eq!(
                nvmlDeviceGetHandleByUUID(c"GPU-1".as_ptr(), &mut by_uuid),
                SUCCESS
            );
            assert_eq!(by_uuid, h);
            assert_eq!(
                nvmlDeviceGetHandleByUUID(c"GPU-2".as_ptr(), &mut by_uuid),
                ERROR_NOT_FOUND
            );
            let mut u = Utilization { gpu: 0, memory: 0 };
            assert_eq!(nvmlDeviceGetUtilizationRates(h, &mut u), SUCCESS);
            assert_eq!((u.gpu, u.memory), (1, 2));
            assert_eq!(nvmlDeviceGetUtilizationRates(h, &mut u), ERROR_GPU_IS_LOST);
            let t = Instant::now();
            assert_eq!(nvmlDeviceGetUtilizationRates(h, &mut u), SUCCESS);
            assert!(t.elapsed() >= Duration::from_millis(50));
            assert_eq!((u.gpu, u.memory), (3, 4));
            let mut p = 0;
            assert_eq!(nvmlDeviceGetPowerUsage(h, &mut p), ERROR_NOT_SUPPORTED);
            let mut m = MemoryV2 {
                version: 0,
                total: 0,
                reserved: 0,
                free: 0,
                used: 0,
            };
            assert_eq!(nvmlDeviceGetMemoryInfo_v2(h, &mut m), SUCCESS);
            assert_eq!((m.total, m.used, m.free), (100, 10, 90));
            // Count query, then fill.
            let mut count = 0;
            assert_eq!(
                nvmlDeviceGetComputeRunningProcesses_v3(h, &mut count, std::ptr::null_mut()),
                ERROR_INSUFFICIENT_SIZE
            );
            assert_eq!(count, 2);
            let mut infos: Vec<ProcessInfo> = (0..4)
                .map(|_| ProcessInfo {
                    pid: 0,
                    used_gpu_memory: 0,
                    gpu_instance_id: 0,
                    compute_instance_id: 0,
                })
                .collect();
            count = 4;
            assert_eq!(
                nvmlDeviceGetComputeRunningProcesses_v3(h, &mut count, infos.as_mut_ptr()),
                SUCCESS
            );
            assert_eq!(count, 2);
            assert_eq!((infos[1].pid, infos[1].used_gpu_memory), (8, 80));
            // MIG.
            let (mut cur, mut pend) = (0, 0);
            assert_eq!(nvmlDeviceGetMigMode(h, &mut cur, &mut pend), SUCCESS);
            assert_eq!((cur, pend), (1, 0));
            let mut mh = 0usize;
            assert_eq!(nvmlDeviceGetMigDeviceHandleByIndex(h, 0, &mut mh), SUCCESS);
            let mut is_mig = 0;
            assert_eq!(nvmlDeviceIsMigDeviceHandle(mh, &mut is_mig), SUCCESS);
            assert_eq!(is_mig, 1);
            let mut parent = 0usize;
            assert_eq!(
                nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mh, &mut parent),
                SUCCESS
            );
            assert_eq!(parent, h);
            let mut buf = [0 as c_char; 96];
            assert_eq!(nvmlDeviceGetUUID(mh, buf.as_mut_ptr(), 96), SUCCESS);
            assert_eq!(CStr::from_ptr(buf.as_ptr()).to_str().unwrap(), "MIG-1");
            assert_eq!(
                nvmlDeviceGetUUID(mh, buf.as_mut_ptr(), 3),
                ERROR_INSUFFICIENT_SIZE
            );
            let mut pci: PciInfo = std::mem::zeroed();
            assert_eq!(nvmlDeviceGetPciInfo_v3(h, &mut pci), SUCCESS);
            assert_eq!((pci.domain, pci.bus), (0, 0x3b));
            assert!(!nvmlErrorString(ERROR_GPU_IS_LOST).is_null());
        }
        assert_eq!(nvmlShutdown(), SUCCESS);
        let mut n = 0;
        assert_eq!(
            unsafe { nvmlDeviceGetCount_v2(&mut n) },
            ERROR_UNINITIALIZED
        );
        std::env::remove_var(SCRIPT_ENV);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

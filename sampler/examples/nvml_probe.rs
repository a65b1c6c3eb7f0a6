//! What the real driver answers for each NVML figure the GPU monitor reads, through the
//! sampler's own NVML path (`NvmlBackend`: the worker thread, nvml-wrapper, the deadlines), on
//! every GPU the process can open. Run by `bench/gpu/real-check.sh` on a GPU machine:
//!
//! ```text
//! nvml_probe [SECONDS [LIB]]    # default 30 s, the dynamic linker's libnvidia-ml.so.1
//! ```
//!
//! DCGM is asked for the SM figures of GPUs without GPM as the plugin asks it (the host engine at
//! 127.0.0.1, `[gpu] dcgm`'s default; docs/gpu.md): the notes say whether it answered.
//!
//! It prints the open's data notes (what a device lacks: GPM before Hopper, XID events), one
//! line per sample and device, and per device and field whether the driver ever answered
//! (`supported`, with the last value) or never did (`NOT_SUPPORTED`: `None` in every sample).

use jobscope_sampler::gpu::nvml::{NvmlBackend, NvmlConfig};
use jobscope_sampler::gpu::{GpuBackend, GpuRef, GpuSelection};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let secs: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(30);
    let mut b = NvmlBackend::new(NvmlConfig {
        lib_path: args.get(2).map(Into::into),
        dcgm: Some(jobscope_sampler::gpu::dcgm::DcgmConfig::default()),
        ..Default::default()
    });
    let sel = GpuSelection::of([GpuRef::AllAccessible]);
    let o = b.open(&sel.wanted, Instant::now() + Duration::from_secs(30));
    if let Some(u) = &o.unavailable {
        println!("NVML unavailable: {u}");
        std::process::exit(2);
    }
    for (_, d) in &o.devices {
        println!("device: {}", d.identity.label());
    }
    for n in &o.notes {
        println!("note: {n}");
    }
    for e in &o.events {
        println!("event: {:?} {}", e.kind, e.message);
    }
    let names = [
        "util_gpu_pct",
        "sm_active_permille",
        "sm_occupancy_permille",
        "tensor_active_permille",
        "dram_active_permille",
        "sm_clock_mhz",
        "mem_clock_mhz",
        "violation_power_ns",
        "violation_thermal_ns",
        "ecc_corrected_total",
        "ecc_uncorrected_total",
        "energy_mj",
    ];
    let n = o.devices.len();
    let mut last: Vec<Vec<Option<u64>>> = vec![vec![None; names.len()]; n];
    let mut xids: Vec<Option<(u64, Vec<u32>)>> = vec![None; n];
    let t0 = Instant::now();
    let mut i = 0u64;
    while t0.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_secs(1));
        let s = b.sample(&[], Instant::now() + Duration::from_secs(5));
        for e in &s.events {
            println!("event: {:?} {}", e.kind, e.message);
        }
        for (k, d) in s.devices.iter().enumerate() {
            let Some(d) = d else {
                println!("sample {i} gpu {k}: no answer");
                continue;
            };
            let v = [
                d.util_gpu_pct.map(u64::from),
                d.sm_active_permille.map(u64::from),
                d.sm_occupancy_permille.map(u64::from),
                d.tensor_active_permille.map(u64::from),
                d.dram_active_permille.map(u64::from),
                d.sm_clock_mhz.map(u64::from),
                d.mem_clock_mhz.map(u64::from),
                d.violation_power_ns,
                d.violation_thermal_ns,
                d.ecc_corrected_total,
                d.ecc_uncorrected_total,
                d.energy_mj,
            ];
            let line: Vec<String> = names
                .iter()
                .zip(v)
                .map(|(n, v)| format!("{n}={}", v.map_or("-".into(), |x| x.to_string())))
                .collect();
            println!("sample {i} gpu {k}: {}", line.join(" "));
            for (j, x) in v.into_iter().enumerate() {
                if x.is_some() {
                    last[k][j] = x;
                }
            }
            if let Some(x) = &d.xids {
                let e = xids[k].get_or_insert((0, vec![]));
                e.0 += x.count;
                e.1.extend(x.first.iter().map(|p| p.1));
            }
        }
        i += 1;
    }
    for (k, (_, d)) in o.devices.iter().enumerate() {
        println!("== {}", d.identity.label());
        for (j, n) in names.iter().enumerate() {
            match last[k][j] {
                Some(v) => println!("  {n:<24} supported, last {v}"),
                None => println!("  {n:<24} NOT_SUPPORTED (None in every sample)"),
            }
        }
        match &xids[k] {
            Some((c, codes)) => println!("  {:<24} watched, {c} seen {codes:?}", "xid"),
            None => println!("  {:<24} NOT_SUPPORTED (events not registered)", "xid"),
        }
    }
}

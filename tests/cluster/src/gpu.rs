//! GPU helpers: the fake NVML (tests/fake-nvml) that `slurm-conf/cluster.sh install` puts in
//! [`FAKE_NVML_INSTALLED`], a per-test copy of it next to that test's own script, and the `[gpu]`
//! config table that points jobscope at it (set it with [`crate::ConfigSectionGuard`]).
//!
//! The test cluster's gres.conf gives every node two fake GPUs, `File=/dev/zero` (char 1:5) and
//! `File=/dev/full` (char 1:7). jobscope identifies a GPU by its device minor, but only NVIDIA
//! (major 195) and DRM (226) device nodes count as GPUs, so those two files are not GPUs to it.
//! [`nvidia_named_gres_conf`] writes jobscope its own gres.conf, the same lines in the same
//! order (so the same gres indices), with each file renamed to `/dev/nvidia<its minor>`: gres 0
//! is then the GPU with minor 5 and gres 1 the one with minor 7, which the fake's script
//! describes.

use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Where `cluster.sh install` puts the fake NVML (test cluster only).
pub const FAKE_NVML_INSTALLED: &str = "/usr/local/lib/jobscope-test/libfake_nvml.so";
/// And the fake DCGM (tests/fake-dcgm).
pub const FAKE_DCGM_INSTALLED: &str = "/usr/local/lib/jobscope-test/libfake_dcgm.so";
/// SLURM's gres.conf on the test cluster.
pub const SLURM_GRES_CONF: &str = "/etc/slurm/gres.conf";
/// The fake reads its script from this file next to the library.
pub const SCRIPT_NAME: &str = "fake-nvml.json";

pub const GIB: u64 = 1 << 30;

/// `major:minor` of a device number (glibc's `gnu_dev_major`/`gnu_dev_minor`).
pub fn dev_major_minor(rdev: u64) -> (u64, u64) {
    let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
    let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
    (major, minor & 0xffff_ffff)
}

/// The minor number of the character device `path`.
pub fn char_dev_minor(path: &Path) -> Result<u32> {
    let m = fs::metadata(path).with_context(|| format!("cannot stat {}", path.display()))?;
    ensure!(
        m.file_type().is_char_device(),
        "{} is not a character device",
        path.display()
    );
    Ok(dev_major_minor(m.rdev()).1 as u32)
}

/// jobscope's gres.conf for the fake GPUs (see the module doc): SLURM's `Name=gpu` lines with
/// `File=<device>` renamed to `File=/dev/nvidia<minor of device>`. Also returns the minors in
/// gres-index order.
pub fn nvidia_named_gres_conf(slurm_gres: &str) -> Result<(String, Vec<u32>)> {
    let mut out = String::from(
        "# jobscope cluster test: SLURM's gres.conf with each GPU file named by its minor\n",
    );
    let mut minors = Vec::new();
    for line in slurm_gres.lines() {
        let code = line.split('#').next().unwrap_or("");
        let is_gpu = code
            .split_whitespace()
            .any(|w| w.eq_ignore_ascii_case("name=gpu"));
        if !is_gpu {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let mut words = Vec::new();
        for w in code.split_whitespace() {
            match w.split_once('=') {
                Some((k, v)) if k.eq_ignore_ascii_case("file") => {
                    ensure!(
                        !v.contains([',', '[']),
                        "gres.conf line {line:?}: one File= per line expected"
                    );
                    let minor = char_dev_minor(Path::new(v))?;
                    minors.push(minor);
                    words.push(format!("File=/dev/nvidia{minor}"));
                }
                _ => words.push(w.to_string()),
            }
        }
        out.push_str(&words.join(" "));
        out.push('\n');
    }
    ensure!(!minors.is_empty(), "no Name=gpu File= lines in gres.conf");
    Ok((out, minors))
}

/// A fake-NVML script with these devices, in this (NVML index) order.
pub fn fake_script(devices: Vec<Value>) -> Value {
    json!({"driver_version": "550.54.15", "devices": devices})
}

/// The device entry of a fake-NVML script: an NVIDIA GPU with this minor and UUID.
/// `util` is the utilization series (`[[gpu %, mem %], …]`, error names, `{"sleep_ms"…}`);
/// power is 70 W, the energy counter rises 350 J per call, 1 GiB of its 16 GiB is used.
pub fn fake_device(minor: u32, uuid: &str, util: Value) -> Value {
    let energy: Vec<u64> = (0..2000u64).map(|i| 5_000_000 + i * 350_000).collect();
    json!({
        "uuid": uuid,
        "name": format!("Fake GPU minor {minor}"),
        "minor": minor,
        "pci_bus_id": format!("00000000:{:02X}:00.0", 0x10 + minor),
        "memory_total": 16 * GIB,
        "memory_used": GIB,
        "utilization": util,
        "power_mw": 70_000,
        "energy_mj": energy,
        "throttle": 0,
        "processes": [[]],
    })
}

/// A utilization series alternating between `a` and `b` % (long enough for any test job).
pub fn alternating(a: u32, b: u32) -> Value {
    Value::Array(
        (0..2000)
            .map(|i| json!([if i % 2 == 0 { a } else { b }, 5]))
            .collect(),
    )
}

/// A per-test copy of the fake NVML, its script, and jobscope's gres.conf for the fake GPUs.
/// The copy is loaded by the job's extern slurmstepd, which reads `fake-nvml.json` next to it at
/// every `nvmlInit` (so each job sees the script as it is when the job starts).
pub struct FakeNvml {
    pub dir: PathBuf,
    /// The library copy (`libnvidia-ml.so.1` in [`FakeNvml::dir`]).
    pub lib: PathBuf,
    pub gres_conf: PathBuf,
    /// Device minors in gres-index order (gres 0 first).
    pub minors: Vec<u32>,
}

impl FakeNvml {
    /// A fresh copy in `<WORK_BASE>/gpu-<tag>-XXXX/`; give it a script with
    /// [`FakeNvml::set_script`] before the first job (the fake's built-in default is two idle
    /// GPUs with minors 0 and 1, which match none of the test cluster's).
    pub fn new(tag: &str) -> Result<FakeNvml> {
        let src = Path::new(FAKE_NVML_INSTALLED);
        if !src.exists() {
            bail!(
                "{FAKE_NVML_INSTALLED} is missing: build and install it with \
                 `cargo build --release --workspace && flock {} bash slurm-conf/cluster.sh install`",
                crate::LOCK_FILE
            );
        }
        fs::create_dir_all(crate::WORK_BASE)?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("gpu-{tag}-"))
            .tempdir_in(crate::WORK_BASE)?
            .keep();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
        let lib = dir.join("libnvidia-ml.so.1");
        fs::copy(src, &lib).with_context(|| format!("cannot copy {FAKE_NVML_INSTALLED}"))?;
        let slurm_gres = fs::read_to_string(SLURM_GRES_CONF)
            .with_context(|| format!("cannot read {SLURM_GRES_CONF}"))?;
        let (gres, minors) = nvidia_named_gres_conf(&slurm_gres)?;
        let gres_conf = dir.join("gres.conf");
        fs::write(&gres_conf, gres)?;
        Ok(FakeNvml {
            dir,
            lib,
            gres_conf,
            minors,
        })
    }

    /// Replaces the script (jobs starting from now on see it).
    pub fn set_script(&self, script: &Value) -> Result<()> {
        crate::write_atomic(
            &self.dir.join(SCRIPT_NAME),
            &serde_json::to_string_pretty(script)?,
            0o644,
        )
    }

    /// A copy of the fake DCGM beside the fake NVML, answering `script` (tests/fake-dcgm's
    /// format); the `[gpu]` line that makes jobscope load it.
    pub fn with_dcgm(&self, script: &Value) -> Result<String> {
        let src = Path::new(FAKE_DCGM_INSTALLED);
        ensure!(
            src.exists(),
            "{FAKE_DCGM_INSTALLED} is missing: build and install it with \
             `cargo build --release --workspace && flock {} bash slurm-conf/cluster.sh install`",
            crate::LOCK_FILE
        );
        let lib = self.dir.join("libdcgm.so.4");
        fs::copy(src, &lib).with_context(|| format!("cannot copy {FAKE_DCGM_INSTALLED}"))?;
        crate::write_atomic(
            &self.dir.join("fake-dcgm.json"),
            &serde_json::to_string_pretty(script)?,
            0o644,
        )?;
        Ok(format!("dcgm_lib_path = \"{}\"", lib.display()))
    }

    /// The `[gpu]` table that makes jobscope use this fake and gres.conf; `extra` lines are
    /// appended (e.g. `sample_timeout_s = 2`).
    pub fn config_section(&self, extra: &str) -> String {
        format!(
            "# fake NVML of a GPU cluster test\nnvml_lib_path = \"{}\"\ngres_conf = \"{}\"\n{}\n",
            self.lib.display(),
            self.gres_conf.display(),
            extra.trim()
        )
    }
}

impl Drop for FakeNvml {
    /// The 5 MB library copy goes; the script and gres.conf stay for a look after a failure.
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.lib);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gres_conf_lines_renamed_by_minor() {
        let (g, minors) = nvidia_named_gres_conf(
            "# two\nAutoDetect=off\nName=gpu Type=fake File=/dev/zero\nName=gpu Type=fake File=/dev/full # x\n",
        )
        .unwrap();
        assert_eq!(minors, vec![5, 7]);
        assert!(g.contains("\nAutoDetect=off\nName=gpu Type=fake File=/dev/nvidia5\nName=gpu Type=fake File=/dev/nvidia7\n"), "{g}");
    }

    #[test]
    fn device_numbers() {
        assert_eq!(dev_major_minor(0x0105), (1, 5));
        assert_eq!(dev_major_minor((195 << 8) | 3), (195, 3));
    }
}

//! GPUs in the model: who a device is ([`GpuIdentity`], [`GpuDevice`]), the `gpu.jsc` format and its decoding
//! ([`spool`]), and the per-GPU summary and advice ([`summary`]). Pure: the sampling backends, the
//! monitor thread and the writer are in `jobscope_sampler::gpu`.

pub mod fold;
pub mod spool;
pub mod summary;

pub use spool::{decode_gpu_file, GpuSeries, GPU_FILE_NAME};
pub use summary::{gpu_advice, summarize_gpus, GpuAdvice, GpuFinding, GpuSummary};

use crate::spool::Event;
use serde::{Deserialize, Serialize};

/// What kind of device a GPU entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GpuKind {
    Nvidia,
    Amd,
    /// An NVIDIA MIG instance (a slice of a physical GPU).
    Mig,
}

/// Who a device is. Identity is the minor number, UUID or PCI bus id; `index` is only for display.
/// [`GpuDevice`] (the sampler's device list) and [`GpuSummary`] (the report) both hold it,
/// flattened: their JSON has these fields inline, in this order.
///
/// The `///` field docs are the job-summary schema's descriptions
/// (docs/schema/job-summary.schema.json); longer notes are `//` comments, out of the schema.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuIdentity {
    pub kind: Option<GpuKind>,
    // The backend's own index: NVML index (of the parent for MIG) or DRM card number (AMD).
    // As seen by the sampler: inside a constrained job NVML numbers only the job's GPUs.
    /// NVML index / DRM card as the sampler saw it (display only).
    pub index: Option<u32>,
    // From `SLURM_JOB_GPUS`, when known.
    /// SLURM's gres index.
    pub gres_index: Option<u32>,
    // `/dev/nvidia<minor>` for NVIDIA; the DRM render-node minor (`/dev/dri/renderD<minor>`) for
    // AMD.
    pub minor: Option<u32>,
    // NVIDIA `GPU-…`/`MIG-…`; AMD `GPU-<unique_id>` when the card exposes `unique_id`.
    pub uuid: Option<String>,
    // `0000:3b:00.0` style (NVML gives `00000000:3B:00.0`; kept as the backend reports it).
    pub pci_bus_id: Option<String>,
    pub name: Option<String>,
    /// MIG: the physical GPU.
    // Its UUID.
    pub parent_uuid: Option<String>,
}

/// A device as a backend found it (an entry of `gpu.jsc`'s device list): who it is, and its
/// memory as the backend reported it at the start.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GpuDevice {
    #[serde(flatten)]
    pub identity: GpuIdentity,
    pub mem_total_bytes: Option<u64>,
}

impl GpuIdentity {
    /// A short human label: `GPU 1 (NVIDIA A100, GPU-5c3e…)`.
    pub fn label(&self) -> String {
        let n = self
            .gres_index
            .or(self.index)
            .map_or_else(|| "?".to_string(), |i| i.to_string());
        let kind = match self.kind {
            Some(GpuKind::Mig) => "MIG",
            _ => "GPU",
        };
        let id = self
            .uuid
            .as_deref()
            .or(self.pci_bus_id.as_deref())
            .unwrap_or("unknown id");
        match &self.name {
            Some(name) => format!("{kind} {n} ({name}, {id})"),
            None => format!("{kind} {n} ({id})"),
        }
    }
}

/// Where a selection came from (recorded in `gpu.jsc` and the report).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SelectionSource {
    Uuid,
    GresConf,
    DevicesCgroup,
    Accessible,
    /// Nothing identifies the job's GPUs (or it has none).
    None,
}

/// Events about one device carry `step = "gpu<slot>"` (the slot in [`GpuInfo::devices`]).
pub const EVENT_SLOT_PREFIX: &str = "gpu";

/// The device slot an event is about, from its `step` field.
pub fn event_slot(e: &Event) -> Option<usize> {
    e.step
        .as_deref()?
        .strip_prefix(EVENT_SLOT_PREFIX)?
        .parse()
        .ok()
}

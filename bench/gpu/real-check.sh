#!/bin/bash
# What the real NVIDIA driver answers for each figure the GPU monitor reads (SM activity through
# NVML GPM, SM and memory clocks, power/thermal throttle time, volatile ECC errors, XID events),
# through the sampler's own NVML path: sampler/examples/nvml_probe.rs, one run of SECONDS
# (default 30) on every GPU the process can open. docs/gpu.md, "SM activity", says how to read it.
#
#   bash bench/gpu/real-check.sh [SECONDS]
#
# One call on a GPU machine. The probe binary is, in this order: $NVML_PROBE, the release
# example already built (target/release/examples/nvml_probe: build it where cargo's registry is,
# `cargo build --release -p jobscope-sampler --example nvml_probe`, and carry target/release/
# examples/nvml_probe along), else built here offline. While it samples, a load runs on GPU 0
# when one can be started without building anything: PyTorch with CUDA (a matmul loop), else
# none, and the figures are an idle GPU's (the probe says which fields the driver answers all
# the same: supported or NOT_SUPPORTED).
set -u
secs=${1:-30}
cd "$(dirname "$0")/../.."
echo "== host: $(uname -srm); $(date -u +%FT%TZ)"
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version,compute_cap,pstate,clocks.sm,power.limit \
        --format=csv 2>&1 | sed 's/^/   /'
else
    echo "   nvidia-smi: not found"
fi
probe=${NVML_PROBE:-}
if [ -z "$probe" ] && [ -x target/release/examples/nvml_probe ]; then
    probe=target/release/examples/nvml_probe
fi
if [ -z "$probe" ]; then
    if command -v cargo >/dev/null; then
        echo "== building the probe (cargo --offline)"
        cargo build --release --offline -q -p jobscope-sampler --example nvml_probe \
            && probe=target/release/examples/nvml_probe
    fi
fi
if [ -z "$probe" ] || [ ! -x "$probe" ]; then
    echo "no probe binary: set NVML_PROBE or carry target/release/examples/nvml_probe" >&2
    exit 2
fi
load_pid=
if command -v python3 >/dev/null \
    && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "== load: PyTorch matmul loop on cuda:0 for $((secs / 2)) s, then idle"
    python3 - "$((secs / 2))" <<'PY' &
import sys, time, torch
end = time.time() + float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.float16)
while time.time() < end:
    b = a @ a
torch.cuda.synchronize()
PY
    load_pid=$!
else
    echo "== load: none (no PyTorch with CUDA): the figures are an idle GPU's"
fi
echo "== probe: $probe $secs"
timeout $((secs + 60)) "$probe" "$secs"
rc=$?
if [ -n "$load_pid" ]; then
    wait "$load_pid"
fi
echo "== probe exit status $rc"
exit $rc

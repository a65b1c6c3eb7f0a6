//! The Rust types libbpf-cargo generated from the compiled object's BTF (what the programs
//! really lay out) against jobscope_model::kernel (what the readers decode): same size, same
//! field offsets. A field added, removed or reordered on one side only fails here.

use jobscope_kernel::skel::types::{js_counters, js_own, js_state, js_task};
use jobscope_model::kernel::{Counters, Own, State, Task};
use std::mem::{offset_of, size_of};

macro_rules! same_layout {
    ($bpf:ty, $model:ty, [$($f:ident),* $(,)?]) => {{
        assert_eq!(size_of::<$bpf>(), size_of::<$model>(), "size of {}", stringify!($model));
        $(
            assert_eq!(
                offset_of!($bpf, $f),
                offset_of!($model, $f),
                "offset of {}::{}", stringify!($model), stringify!($f)
            );
        )*
        // every field listed: the fields' sizes add up to the struct (no field forgotten here)
        let listed = [$(size_of_field(|v: &$model| &v.$f)),*].iter().sum::<usize>();
        assert_eq!(listed, size_of::<$model>(), "fields listed for {}", stringify!($model));
    }};
}

fn size_of_field<S, F>(_: impl Fn(&S) -> &F) -> usize {
    size_of::<F>()
}

#[test]
fn counters_layout() {
    same_layout!(
        js_counters,
        Counters,
        [
            syscalls,
            small_reads,
            small_writes,
            ctx_voluntary,
            ctx_involuntary,
            run_ns,
            runq_wait_ns,
            net_tx_bytes,
            net_rx_bytes,
            net_tx_calls,
            net_rx_calls,
            blk_read_bytes,
            blk_write_bytes,
            dirtied_bytes,
        ]
    );
    assert_eq!(
        size_of::<[u64; 6]>(),
        size_of_field(|v: &js_counters| &v.syscalls)
    );
}

#[test]
fn task_layout() {
    same_layout!(
        js_task,
        Task,
        [
            job_key,
            seen_nvcsw,
            seen_nivcsw,
            seen_run_ns,
            seen_run_delay_ns,
            own,
            seen
        ]
    );
    same_layout!(
        js_own,
        Own,
        [
            syscalls,
            small_reads,
            small_writes,
            net_tx_bytes,
            net_rx_bytes,
            net_tx_calls,
            net_rx_calls,
            blk_read_bytes,
            blk_write_bytes,
            dirtied_bytes
        ]
    );
}

#[test]
fn state_layout() {
    same_layout!(
        js_state,
        State,
        [abi_version, heartbeat_ns, flags, max_jobs, dropped_events]
    );
}

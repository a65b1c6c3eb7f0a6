//! The kernel view of a job: what the BPF programs of the collector (`jobscope-kernel`) count per
//! job and node, as they lay it out in their maps. `kernel/bpf/jobscope_abi.h` is the same
//! contract in C; `kernel/tests/abi.rs` checks that both layouts agree through the compiled
//! object's BTF. Pure types and constants: the reads are in `jobscope_sampler::kernel`.

/// `JS_ABI_VERSION`: the collector writes it into [`State::abi_version`]; a reader that finds
/// another version reads nothing (the report says so) rather than misreading.
pub const ABI_VERSION: u64 = 2;
/// `JS_PIN_DIR`: where the collector pins its maps (bpffs).
pub const PIN_DIR: &str = "/sys/fs/bpf/jobscope";
/// `JS_MAX_SYSCALLS`: entries of the syscall class table.
pub const MAX_SYSCALLS: u32 = 512;
/// `JS_KEY_RUN`: the job key of a `jobscope run` is this bit | the child's pid.
pub const KEY_RUN: u64 = 1 << 63;
/// `JS_SMALL_IO_BYTES`: a read or write asking for fewer bytes is small.
pub const SMALL_IO_BYTES: u64 = 4096;
/// `JS_STATE_SYSCALLS`: [`State::flags`] bit set while system calls are counted.
pub const STATE_SYSCALLS: u64 = 1;
/// `JS_STATE_SMALL_IO`: [`State::flags`] bit set while small reads and writes are counted.
pub const STATE_SMALL_IO: u64 = 2;

/// `enum js_sys_class`: the classes system calls are counted in, in the order of
/// [`Counters::syscalls`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u32)]
pub enum SysClass {
    File = 0,
    Net = 1,
    Mem = 2,
    Proc = 3,
    Sync = 4,
    Other = 5,
}

impl SysClass {
    pub const ALL: [SysClass; 6] = [
        SysClass::File,
        SysClass::Net,
        SysClass::Mem,
        SysClass::Proc,
        SysClass::Sync,
        SysClass::Other,
    ];
    /// The one spelling (report, JSON, audit).
    pub fn name(self) -> &'static str {
        match self {
            SysClass::File => "file",
            SysClass::Net => "network",
            SysClass::Mem => "memory",
            SysClass::Proc => "process",
            SysClass::Sync => "sync",
            SysClass::Other => "other",
        }
    }
}

/// `struct js_counters`: cumulative counters of one job on one node, one copy per CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Counters {
    pub syscalls: [u64; 6],
    pub small_reads: u64,
    pub small_writes: u64,
    pub ctx_voluntary: u64,
    pub ctx_involuntary: u64,
    pub run_ns: u64,
    pub runq_wait_ns: u64,
    pub net_tx_bytes: u64,
    pub net_rx_bytes: u64,
    pub net_tx_calls: u64,
    pub net_rx_calls: u64,
    pub blk_read_bytes: u64,
    pub blk_write_bytes: u64,
    pub dirtied_bytes: u64,
}

/// `struct js_own`: what a task's own hooks counted, [`Counters`] but the scheduler's four.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Own {
    pub syscalls: [u64; 6],
    pub small_reads: u64,
    pub small_writes: u64,
    pub net_tx_bytes: u64,
    pub net_rx_bytes: u64,
    pub net_tx_calls: u64,
    pub net_rx_calls: u64,
    pub blk_read_bytes: u64,
    pub blk_write_bytes: u64,
    pub dirtied_bytes: u64,
}

/// `struct js_task`: per task, the job it counts for, what the task's own hooks counted (`own`)
/// and the baselines already added to the job (`seen_*`, `seen`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Task {
    pub job_key: u64,
    pub seen_nvcsw: u64,
    pub seen_nivcsw: u64,
    pub seen_run_ns: u64,
    pub seen_run_delay_ns: u64,
    pub own: Own,
    pub seen: Own,
}

/// `struct js_state`: the collector's state, one entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct State {
    pub abi_version: u64,
    pub heartbeat_ns: u64,
    pub flags: u64,
    pub max_jobs: u64,
    pub dropped_events: u64,
}

impl Counters {
    /// Every field, in `struct js_counters` order: the one list the decoding, the encoding and
    /// the sum go through.
    fn words_mut(&mut self) -> [&mut u64; 19] {
        let [s0, s1, s2, s3, s4, s5] = &mut self.syscalls;
        [
            s0,
            s1,
            s2,
            s3,
            s4,
            s5,
            &mut self.small_reads,
            &mut self.small_writes,
            &mut self.ctx_voluntary,
            &mut self.ctx_involuntary,
            &mut self.run_ns,
            &mut self.runq_wait_ns,
            &mut self.net_tx_bytes,
            &mut self.net_rx_bytes,
            &mut self.net_tx_calls,
            &mut self.net_rx_calls,
            &mut self.blk_read_bytes,
            &mut self.blk_write_bytes,
            &mut self.dirtied_bytes,
        ]
    }

    /// The sum of the per-CPU copies a lookup of a per-CPU map returns (saturating, so a
    /// corrupt copy cannot wrap a total).
    pub fn sum<'a>(per_cpu: impl IntoIterator<Item = &'a Counters>) -> Counters {
        let mut t = Counters::default();
        for c in per_cpu {
            let mut c = *c;
            for (a, b) in t.words_mut().into_iter().zip(c.words_mut()) {
                *a = a.saturating_add(*b);
            }
        }
        t
    }
}

/// Decodes `n` consecutive values of `size_of::<T>()` bytes (the layout a per-CPU lookup fills:
/// each CPU's value rounded up to 8 bytes, which these 8-byte-aligned structs already are).
/// Pure and total: a short buffer gives fewer values.
pub fn decode_each<T: Copy + Default + Pod>(buf: &[u8]) -> Vec<T> {
    buf.chunks_exact(std::mem::size_of::<T>())
        .map(T::from_bytes)
        .collect()
}

/// Structs made only of `u64`s, decodable from native-endian bytes without `unsafe`.
pub trait Pod: Sized {
    fn from_bytes(b: &[u8]) -> Self;
    fn to_bytes(&self) -> Vec<u8>;
}

fn words(b: &[u8]) -> impl Iterator<Item = u64> + '_ {
    b.chunks_exact(8)
        .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")))
}

/// A field of a [`Pod`] struct: one word or an array of words.
trait Field {
    fn read(&mut self, next: &mut dyn FnMut() -> u64);
    fn write(&self, out: &mut Vec<u8>);
}

impl Field for u64 {
    fn read(&mut self, next: &mut dyn FnMut() -> u64) {
        *self = next();
    }
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_ne_bytes());
    }
}

impl<const N: usize> Field for [u64; N] {
    fn read(&mut self, next: &mut dyn FnMut() -> u64) {
        self.iter_mut().for_each(|w| w.read(next));
    }
    fn write(&self, out: &mut Vec<u8>) {
        self.iter().for_each(|w| w.write(out));
    }
}

macro_rules! pod {
    ($t:ty { $($f:ident),* }) => {
        impl Field for $t {
            fn read(&mut self, next: &mut dyn FnMut() -> u64) {
                $( Field::read(&mut self.$f, next); )*
            }
            fn write(&self, out: &mut Vec<u8>) {
                $( Field::write(&self.$f, out); )*
            }
        }
        impl Pod for $t {
            fn from_bytes(b: &[u8]) -> Self {
                let mut w = words(b);
                let mut v = <$t>::default();
                Field::read(&mut v, &mut || w.next().unwrap_or(0));
                v
            }
            fn to_bytes(&self) -> Vec<u8> {
                let mut out = Vec::with_capacity(std::mem::size_of::<$t>());
                Field::write(self, &mut out);
                out
            }
        }
    };
}

impl Pod for Counters {
    fn from_bytes(b: &[u8]) -> Self {
        let mut v = Counters::default();
        let mut w = words(b);
        for f in v.words_mut() {
            *f = w.next().unwrap_or(0);
        }
        v
    }
    fn to_bytes(&self) -> Vec<u8> {
        let mut c = *self;
        c.words_mut()
            .into_iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect()
    }
}
pod!(Own {
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
});
pod!(Task {
    job_key,
    seen_nvcsw,
    seen_nivcsw,
    seen_run_ns,
    seen_run_delay_ns,
    own,
    seen
});
pod!(State {
    abi_version,
    heartbeat_ns,
    flags,
    max_jobs,
    dropped_events
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_in_field_order() {
        let c = Counters {
            syscalls: [1, 2, 3, 4, 5, 6],
            small_reads: 7,
            dirtied_bytes: 99,
            ..Default::default()
        };
        let b = c.to_bytes();
        assert_eq!(b.len(), std::mem::size_of::<Counters>());
        assert_eq!(Counters::from_bytes(&b), c);
        // the last field is the last word, as in struct js_counters
        assert_eq!(&b[b.len() - 8..], &99u64.to_ne_bytes());
        let t = Task {
            job_key: 1,
            own: Own {
                syscalls: [2, 3, 4, 5, 6, 7],
                ..Default::default()
            },
            seen: Own {
                dirtied_bytes: 8,
                ..Default::default()
            },
            ..Default::default()
        };
        let b = t.to_bytes();
        assert_eq!(b.len(), std::mem::size_of::<Task>());
        assert_eq!(Task::from_bytes(&b), t);
        assert_eq!(&b[b.len() - 8..], &8u64.to_ne_bytes());
        let s = State {
            abi_version: 1,
            dropped_events: 5,
            ..Default::default()
        };
        assert_eq!(State::from_bytes(&s.to_bytes()), s);
    }

    #[test]
    fn per_cpu_copies_sum() {
        let mut a = Counters {
            run_ns: 10,
            ..Default::default()
        };
        a.syscalls[4] = 3;
        let mut bytes = a.to_bytes();
        bytes.extend(
            Counters {
                run_ns: 5,
                runq_wait_ns: u64::MAX,
                ..Default::default()
            }
            .to_bytes(),
        );
        bytes.extend(
            Counters {
                runq_wait_ns: 1,
                ..Default::default()
            }
            .to_bytes(),
        );
        bytes.extend([1, 2, 3]); // a short tail is no value
        let each: Vec<Counters> = decode_each(&bytes);
        assert_eq!(each.len(), 3);
        let t = Counters::sum(&each);
        assert_eq!(t.run_ns, 15);
        assert_eq!(t.syscalls[4], 3);
        assert_eq!(t.runq_wait_ns, u64::MAX, "saturates");
    }
}

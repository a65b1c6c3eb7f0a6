//! The kernel view of a job: what the BPF programs of the collector (`jobscope-kernel`) count per
//! job and node, as they lay it out in their maps. `kernel/bpf/jobscope_abi.h` is the same
//! contract in C; `kernel/tests/abi.rs` checks that both layouts agree through the compiled
//! object's BTF, reading each struct's layout from its one declaration here ([`Pod::FIELDS`]).
//! Pure types and constants: the map operations are in `jobscope_common::bpf_maps`.

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
/// `JS_STATE_PAGE_CACHE`: [`State::flags`] bit set while dirtied page cache is counted
/// (`jobscope-kernel run --page-cache`).
pub const STATE_PAGE_CACHE: u64 = 4;

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

/// The byte layout of one field of a map value, as the one declaration below lays it out:
/// what `kernel/tests/abi.rs` compares with the compiled BPF object's BTF of the C struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldLayout {
    pub name: &'static str,
    pub offset: usize,
    pub size: usize,
}

/// Map values made only of `u64`s (bare, in arrays, or in nested such values), decodable from
/// native-endian bytes without `unsafe`. Implemented by [`abi_struct!`] from the declaration.
pub trait Pod: Copy + Default + Words {
    /// Every field, in declaration (and so memory) order.
    const FIELDS: &'static [FieldLayout];

    /// Decodes a value; a short buffer leaves the missing words 0.
    fn from_bytes(b: &[u8]) -> Self {
        let mut w = b
            .chunks_exact(8)
            .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")));
        let mut v = Self::default();
        v.visit_mut(&mut |x| *x = w.next().unwrap_or(0));
        v
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(std::mem::size_of::<Self>());
        self.visit(&mut |x| out.extend_from_slice(&x.to_ne_bytes()));
        out
    }
}

/// Word-by-word access to a value made of `u64`s, in memory order: what the decoding, the
/// encoding and the per-CPU sum go through.
pub trait Words {
    fn visit(&self, f: &mut dyn FnMut(u64));
    fn visit_mut(&mut self, f: &mut dyn FnMut(&mut u64));
    /// Calls `f` with each word of `self` and the same word of `other`.
    fn zip_mut(&mut self, other: &Self, f: &mut dyn FnMut(&mut u64, u64));
}

impl Words for u64 {
    fn visit(&self, f: &mut dyn FnMut(u64)) {
        f(*self)
    }
    fn visit_mut(&mut self, f: &mut dyn FnMut(&mut u64)) {
        f(self)
    }
    fn zip_mut(&mut self, other: &Self, f: &mut dyn FnMut(&mut u64, u64)) {
        f(self, *other)
    }
}

impl<const N: usize> Words for [u64; N] {
    fn visit(&self, f: &mut dyn FnMut(u64)) {
        self.iter().for_each(|w| f(*w))
    }
    fn visit_mut(&mut self, f: &mut dyn FnMut(&mut u64)) {
        self.iter_mut().for_each(f)
    }
    fn zip_mut(&mut self, other: &Self, f: &mut dyn FnMut(&mut u64, u64)) {
        self.iter_mut().zip(other).for_each(|(a, b)| f(a, *b))
    }
}

/// Declares a map value once: the `#[repr(C)]` struct, its [`Pod::FIELDS`] (names, offsets and
/// sizes, from the compiler) and its [`Words`] in field order. A field is a `u64`, an array of
/// them, or a value declared here; anything else does not compile.
macro_rules! abi_struct {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident: $t:ty,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        #[repr(C)]
        pub struct $name {
            $($(#[$fm])* pub $f: $t,)*
        }

        impl Words for $name {
            fn visit(&self, f: &mut dyn FnMut(u64)) {
                $(Words::visit(&self.$f, f);)*
            }
            fn visit_mut(&mut self, f: &mut dyn FnMut(&mut u64)) {
                $(Words::visit_mut(&mut self.$f, f);)*
            }
            fn zip_mut(&mut self, other: &Self, f: &mut dyn FnMut(&mut u64, u64)) {
                $(Words::zip_mut(&mut self.$f, &other.$f, f);)*
            }
        }

        impl Pod for $name {
            const FIELDS: &'static [FieldLayout] = &[$(FieldLayout {
                name: stringify!($f),
                offset: std::mem::offset_of!($name, $f),
                size: std::mem::size_of::<$t>(),
            },)*];
        }
    };
}

abi_struct! {
    /// `struct js_counters`: cumulative counters of one job on one node, one copy per CPU.
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
}

abi_struct! {
    /// `struct js_own`: what a task's own hooks counted, [`Counters`] but the scheduler's four.
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
}

abi_struct! {
    /// `struct js_task`: per task, the job it counts for, what the task's own hooks counted
    /// (`own`) and the baselines already added to the job (`seen_*`, `seen`).
    pub struct Task {
        pub job_key: u64,
        pub seen_nvcsw: u64,
        pub seen_nivcsw: u64,
        pub seen_run_ns: u64,
        pub seen_run_delay_ns: u64,
        pub own: Own,
        pub seen: Own,
    }
}

abi_struct! {
    /// `struct js_state`: the collector's state, one entry.
    pub struct State {
        pub abi_version: u64,
        pub heartbeat_ns: u64,
        pub flags: u64,
        pub max_jobs: u64,
        pub dropped_events: u64,
    }
}

impl Counters {
    /// The sum of the per-CPU copies a lookup of a per-CPU map returns (saturating, so a
    /// corrupt copy cannot wrap a total).
    pub fn sum<'a>(per_cpu: impl IntoIterator<Item = &'a Counters>) -> Counters {
        let mut t = Counters::default();
        for c in per_cpu {
            t.zip_mut(c, &mut |a, b| *a = a.saturating_add(b));
        }
        t
    }
}

/// Decodes `n` consecutive values of `size_of::<T>()` bytes (the layout a per-CPU lookup fills:
/// each CPU's value rounded up to 8 bytes, which these 8-byte-aligned structs already are).
/// Pure and total: a short buffer gives fewer values.
pub fn decode_each<T: Pod>(buf: &[u8]) -> Vec<T> {
    buf.chunks_exact(std::mem::size_of::<T>())
        .map(T::from_bytes)
        .collect()
}

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

    /// The byte codec reads and writes words back to back: it is right only where the fields
    /// lie back to back, without padding, and cover the whole struct.
    fn back_to_back<T: Pod>() -> Vec<(&'static str, usize)> {
        let mut at = 0;
        let mut gaps = Vec::new();
        for f in T::FIELDS {
            if f.offset != at {
                gaps.push((f.name, f.offset));
            }
            at = f.offset + f.size;
        }
        assert_eq!(at, std::mem::size_of::<T>(), "fields cover the struct");
        gaps
    }

    #[test]
    fn fields_lie_back_to_back_in_declaration_order() {
        assert!(back_to_back::<Counters>().is_empty());
        assert!(back_to_back::<Own>().is_empty());
        assert!(back_to_back::<Task>().is_empty());
        assert!(back_to_back::<State>().is_empty());
        let names: Vec<&str> = Task::FIELDS.iter().map(|f| f.name).collect();
        assert_eq!(
            names,
            [
                "job_key",
                "seen_nvcsw",
                "seen_nivcsw",
                "seen_run_ns",
                "seen_run_delay_ns",
                "own",
                "seen"
            ]
        );
        let syscalls = Counters::FIELDS[0];
        assert_eq!(
            (syscalls.name, syscalls.offset, syscalls.size),
            ("syscalls", 0, 48)
        );
        assert_eq!(Task::FIELDS[6].offset, 40 + std::mem::size_of::<Own>());
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

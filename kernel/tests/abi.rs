//! The C structs of bpf/jobscope_abi.h as the compiled object lays them out (its BTF: what the
//! programs really use) against their one Rust declaration, `jobscope_model::kernel_abi` (what the
//! readers decode): the same fields in the same order at the same offsets with the same sizes,
//! and the same total size. The Rust side is read from what the declaration itself produces
//! (`Pod::FIELDS`), so a field added, removed, renamed, resized or reordered on one side only
//! fails here.

use jobscope_model::kernel_abi::{Counters, FieldLayout, Own, Pod, State, Task};
use libbpf_rs::btf::types::{Array, Int, Struct};
use libbpf_rs::btf::{Btf, BtfKind, BtfType, HasSize};

/// The object build.rs compiled (the one the skeleton embeds).
const OBJECT: &str = concat!(env!("OUT_DIR"), "/jobscope.bpf.o");

/// A field as the C side has it: (name, offset, size) in bytes.
type CField = (String, usize, usize);

/// The size in bytes of the BTF type `t` (integers, arrays of them, structs; typedefs such as
/// `__u64` resolved).
fn size_of_type(t: BtfType<'_>) -> usize {
    let t = t.skip_mods_and_typedefs();
    match t.kind() {
        BtfKind::Int => Int::try_from(t).expect("an int").size(),
        BtfKind::Struct => Struct::try_from(t).expect("a struct").size(),
        BtfKind::Array => {
            let a = Array::try_from(t).expect("an array");
            a.capacity() * size_of_type(a.contained_type())
        }
        k => panic!("a field of kind {k:?} in an ABI struct"),
    }
}

/// `struct name`'s fields and size, from the object's BTF.
fn c_layout(btf: &Btf<'_>, name: &str) -> (Vec<CField>, usize) {
    let s: Struct<'_> = btf
        .type_by_name(name)
        .unwrap_or_else(|| panic!("struct {name} in the object's BTF"));
    let fields = s
        .iter()
        .map(|m| {
            let offset_bits = match m.attr {
                libbpf_rs::btf::types::MemberAttr::Normal { offset } => offset,
                libbpf_rs::btf::types::MemberAttr::BitField { .. } => {
                    panic!("a bit field in struct {name}")
                }
            };
            assert_eq!(offset_bits % 8, 0);
            let ty = btf.type_by_id::<BtfType<'_>>(m.ty).expect("member type");
            (
                m.name
                    .expect("a named member")
                    .to_string_lossy()
                    .into_owned(),
                offset_bits as usize / 8,
                size_of_type(ty),
            )
        })
        .collect();
    (fields, s.size())
}

fn rust_layout<T: Pod>() -> (Vec<CField>, usize) {
    let fields = T::FIELDS
        .iter()
        .map(|&FieldLayout { name, offset, size }| (name.to_string(), offset, size))
        .collect();
    (fields, std::mem::size_of::<T>())
}

fn object_btf() -> Btf<'static> {
    Btf::from_path(OBJECT).unwrap_or_else(|e| panic!("{OBJECT}: {e}"))
}

#[test]
fn counters_layout() {
    let btf = object_btf();
    let c = c_layout(&btf, "js_counters");
    assert_eq!(rust_layout::<Counters>(), c);
    // the check reads real figures: the class array and the whole struct
    assert_eq!(c.0[0], ("syscalls".to_string(), 0, 6 * 8));
    assert_eq!(c.1, 19 * 8);
}

#[test]
fn task_layout() {
    let btf = object_btf();
    assert_eq!(rust_layout::<Task>(), c_layout(&btf, "js_task"));
    assert_eq!(rust_layout::<Own>(), c_layout(&btf, "js_own"));
}

#[test]
fn state_layout() {
    let btf = object_btf();
    assert_eq!(rust_layout::<State>(), c_layout(&btf, "js_state"));
}

/// The comparison can fail: a struct of another layout differs.
#[test]
fn a_different_struct_does_not_match() {
    let btf = object_btf();
    assert_ne!(rust_layout::<Own>(), c_layout(&btf, "js_counters"));
    assert_ne!(rust_layout::<State>(), c_layout(&btf, "js_task"));
}

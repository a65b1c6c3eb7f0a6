//! Compiles bpf/jobscope.bpf.c with clang (CO-RE, against the minimal bpf/vmlinux_min.h) and
//! generates its Rust skeleton into OUT_DIR; src/lib.rs includes it. The object is kept there as
//! jobscope.bpf.o: tests/abi.rs reads the structs' layout from its BTF.
use libbpf_cargo::SkeletonBuilder;
use std::env;
use std::path::PathBuf;

const SRC: &str = "bpf/jobscope.bpf.c";

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let out = out_dir.join("jobscope.skel.rs");
    let bpf_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo")).join("bpf");
    SkeletonBuilder::new()
        .source(SRC)
        .obj(out_dir.join("jobscope.bpf.o"))
        .clang_args([
            "-I".into(),
            bpf_dir.clone().into_os_string(),
            // warnings in our own C are errors: the object is part of the contract
            "-Wall".into(),
            // v3: atomic exchange and fetch-and-add (kernel 5.12+; task storage needs 5.11)
            "-mcpu=v3".into(),
            "-Werror".into(),
        ])
        .build_and_generate(&out)
        .expect("building the BPF object and its skeleton");
    for f in ["jobscope.bpf.c", "jobscope_abi.h", "vmlinux_min.h"] {
        println!("cargo:rerun-if-changed={}", bpf_dir.join(f).display());
    }
}

//! `jobscope`: query reports (`show`), run the epilog by hand (`epilog`), finish stale jobs (`reap`).
fn main() {
    std::process::exit(jobscope_epilog::cli::main());
}

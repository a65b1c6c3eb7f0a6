//! `jobscope`: reports (`show`, `top`), `run -- CMD`, the archive, the mail queue, the index, the audit.
fn main() {
    std::process::exit(jobscope_cli::main());
}

//! `Epilog=/usr/local/sbin/jobscope-epilog`: runs as root on every node of every job, with no PATH and
//! no HOME. It ALWAYS exits 0: a failing Epilog drains the node. Problems go to the jobscope log.
fn main() {
    std::process::exit(jobscope_epilog::main());
}

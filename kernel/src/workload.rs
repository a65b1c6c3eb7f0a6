//! Known work for the tests (kernel/tests/counts.rs) and the benchmark: each prints what the
//! kernel itself says about it, as `name=value` lines, so the tests can compare.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    kind: Kind,
}

#[derive(clap::Subcommand)]
enum Kind {
    /// N getppid() system calls; prints ns_per_call.
    Getppid { n: u64 },
    /// THREADS threads spinning SECS seconds on CPU; prints the tasks' own context switch
    /// counts (all threads, read while they are still alive).
    Spin {
        #[arg(long, default_value_t = 4)]
        threads: usize,
        #[arg(long, default_value_t = 2.0)]
        secs: f64,
        #[arg(long, default_value_t = 0)]
        cpu: usize,
    },
    /// One thread spinning SECS seconds on CPU; prints its /proc/self/schedstat at the end.
    Schedstat {
        #[arg(long, default_value_t = 2.0)]
        secs: f64,
        #[arg(long, default_value_t = 0)]
        cpu: usize,
    },
    /// Sends BYTES over loopback TCP from one thread to another.
    Tcp { bytes: u64 },
    /// N one-byte round trips through two pipes between two processes.
    Pingpong { n: u64 },
}

pub fn main(a: Args) -> ExitCode {
    match a.kind {
        Kind::Getppid { n } => {
            let t = Instant::now();
            for _ in 0..n {
                // SAFETY: getppid has no arguments and cannot fail; the raw system call avoids
                // any libc caching.
                unsafe { libc::syscall(libc::SYS_getppid) };
            }
            println!(
                "ns_per_call={:.2}",
                t.elapsed().as_nanos() as f64 / n as f64
            );
        }
        Kind::Spin { threads, secs, cpu } => spin(threads, secs, cpu),
        Kind::Schedstat { secs, cpu } => {
            pin_to(cpu);
            busy_until(Instant::now() + Duration::from_secs_f64(secs));
            let s = std::fs::read_to_string("/proc/self/schedstat").expect("schedstat");
            let mut f = s.split_whitespace();
            println!("run_ns={}", f.next().unwrap_or("0"));
            println!("wait_ns={}", f.next().unwrap_or("0"));
        }
        Kind::Tcp { bytes } => tcp(bytes),
        Kind::Pingpong { n } => pingpong(n),
    }
    ExitCode::SUCCESS
}

fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET and sched_setaffinity take it by pointer.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            panic!("sched_setaffinity: {}", std::io::Error::last_os_error());
        }
    }
}

fn busy_until(end: Instant) {
    let mut x = 0u64;
    while Instant::now() < end {
        for i in 0..1000 {
            x = std::hint::black_box(x.wrapping_add(i));
        }
    }
}

/// Spinners pinned to one CPU, then parked (blocked, still alive) while the main thread sums
/// every task's voluntary/nonvoluntary_ctxt_switches; then they are released and exit.
fn spin(threads: usize, secs: f64, cpu: usize) {
    use std::sync::{Arc, Barrier};
    pin_to(cpu); // inherited by the threads
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let parked = Arc::new(Barrier::new(threads + 1));
    let release = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (parked, release) = (parked.clone(), release.clone());
            std::thread::spawn(move || {
                busy_until(end);
                parked.wait();
                release.wait();
            })
        })
        .collect();
    parked.wait();
    // Every spinner is now past its spin (blocked at, or about to block at, `release`).
    // Let the last ones reach their futex wait, so their switch-out is in what we read.
    std::thread::sleep(Duration::from_millis(50));
    let (mut vol, mut invol) = (0u64, 0u64);
    for e in std::fs::read_dir("/proc/self/task")
        .expect("task dir")
        .flatten()
    {
        let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
        for line in status.lines() {
            let num = |l: &str| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
            };
            if line.starts_with("voluntary_ctxt_switches:") {
                vol += num(line).unwrap_or(0);
            } else if line.starts_with("nonvoluntary_ctxt_switches:") {
                invol += num(line).unwrap_or(0);
            }
        }
    }
    println!("voluntary={vol}");
    println!("nonvoluntary={invol}");
    std::io::stdout().flush().ok();
    release.wait();
    for h in handles {
        h.join().expect("spinner");
    }
}

fn tcp(bytes: u64) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().expect("addr");
    let sender = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        let buf = vec![0x5au8; 64 * 1024];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            s.write_all(&buf[..n]).expect("send");
            left -= n as u64;
        }
        // dropping s closes: the receiver sees EOF
    });
    let (mut r, _) = listener.accept().expect("accept");
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0u64;
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("recv: {e}"),
        }
    }
    sender.join().expect("sender");
    println!("received={got}");
}

fn pingpong(n: u64) {
    let pipe = || {
        let mut fds = [0i32; 2];
        // SAFETY: fds is a valid out-array of two ints.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
        fds
    };
    let (ping, pong) = (pipe(), pipe());
    let mut b = [0u8; 1];
    let rw = |rd: i32, wr: i32, b: &mut [u8; 1]| {
        // SAFETY: valid fds and a 1-byte buffer.
        unsafe {
            assert_eq!(libc::write(wr, b.as_ptr().cast(), 1), 1);
            assert_eq!(libc::read(rd, b.as_mut_ptr().cast(), 1), 1);
        }
    };
    // SAFETY: this workload process is single-threaded here; the child only uses read/write
    // and _exit.
    match unsafe { libc::fork() } {
        0 => {
            for _ in 0..n {
                // SAFETY: as above
                unsafe {
                    assert_eq!(libc::read(ping[0], b.as_mut_ptr().cast(), 1), 1);
                    assert_eq!(libc::write(pong[1], b.as_ptr().cast(), 1), 1);
                }
            }
            // SAFETY: leaves the child without running the parent's atexit handlers
            unsafe { libc::_exit(0) };
        }
        pid if pid > 0 => {
            for _ in 0..n {
                rw(pong[0], ping[1], &mut b);
            }
            let mut st = 0;
            // SAFETY: waiting for our own child
            unsafe { libc::waitpid(pid, &mut st, 0) };
            println!("round_trips={n}");
        }
        _ => panic!("fork: {}", std::io::Error::last_os_error()),
    }
}

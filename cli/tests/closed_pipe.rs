//! A closed pipe is not an error: `jobscope … | head` ends quietly with exit status 0, whether the
//! command prints through `println!` or through a writer of its own.
use std::io::Read;
use std::process::{Command, Stdio};

/// Runs `jobscope ARGS`, reads `keep` bytes of its output and closes the pipe; returns its exit
/// status and standard error.
fn read_then_close(args: &[&str], keep: usize) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_jobscope"))
        .args(args)
        .env("JOBSCOPE_CONFIG", "/nonexistent")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut buf = vec![0u8; keep];
    out.read_exact(&mut buf).unwrap();
    drop(out);
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (child.wait().unwrap(), err)
}

#[test]
fn a_reader_that_goes_away_ends_the_output_with_status_0() {
    // The schema is 78 kB, more than a pipe holds (64 KiB): the writer meets the closed pipe.
    let (status, err) = read_then_close(&["schema"], 10);
    assert_eq!(status.code(), Some(0), "stderr: {err}");
    assert_eq!(err, "");
}

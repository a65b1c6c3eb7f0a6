//! Standard output for people and scripts. A closed pipe is not an error: when the reader has gone
//! (`jobscope audit jobs | head`), the output ends there and the command exits 0 without a word. The
//! work the command was doing is done before it prints (an index update prints its result after it
//! committed it), so stopping at the first write that cannot be read loses nothing.
use std::io::{ErrorKind, Write};

/// What `print!`/`println!` do in this crate (see the macros in `lib.rs`).
pub fn write(args: std::fmt::Arguments, newline: bool) {
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(args).and_then(|()| {
        if newline {
            out.write_all(b"\n")
        } else {
            Ok(())
        }
    });
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            // A full disk under a redirect: say so once, as any other failure would be said.
            eprintln!("jobscope: writing to standard output: {e}");
            std::process::exit(1)
        }
    }
}

/// Whether an error that ended a command is, at its root, a write to a closed pipe.
pub fn is_closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == ErrorKind::BrokenPipe)
    })
}

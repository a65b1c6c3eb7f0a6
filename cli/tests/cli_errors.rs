//! Bad input to `jobscope` gets one line naming the problem and a non-zero exit: a configuration
//! file named with `--config` that is missing or has a key of the wrong type (never the defaults
//! instead), a malformed job id, a job not in the archive, an unreadable archive.

use std::process::Command;

fn jobscope(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_jobscope"))
        .args(args)
        .env_remove("JOBSCOPE_CONFIG")
        .output()
        .expect("run jobscope");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One line on stderr, nothing on stdout, no backtrace, a non-zero exit.
fn one_line_error(args: &[&str], needle: &str) {
    let (rc, out, err) = jobscope(args);
    assert_ne!(rc, 0, "{args:?}: exit 0");
    assert!(out.is_empty(), "{args:?}: printed a report anyway:\n{out}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{args:?}: {err}");
    assert!(lines[0].contains(needle), "{args:?}: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
}

#[test]
fn bad_input_is_one_line_and_a_nonzero_exit() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("nope.toml");
    one_line_error(
        &["--config", missing.to_str().unwrap(), "show", "1"],
        "nope.toml: No such file",
    );
    let bad = d.path().join("bad.toml");
    std::fs::write(&bad, "[sampler]\ncadence_s = \"thirty\"\n").unwrap();
    one_line_error(
        &["--config", bad.to_str().unwrap(), "show", "1"],
        // The line's key is named with its table.
        "bad.toml: line 2: sampler.cadence_s = \"thirty\"",
    );
    let unknown = d.path().join("unknown.toml");
    std::fs::write(&unknown, "[report]\nno_such_key = 1\n").unwrap();
    one_line_error(
        &["--config", unknown.to_str().unwrap(), "show", "1"],
        "no_such_key",
    );
    // A good config pointing at an empty archive: the job is not there.
    let good = d.path().join("good.toml");
    let archive = d.path().join("archive");
    std::fs::create_dir(&archive).unwrap();
    std::fs::write(
        &good,
        format!("[paths]\narchive_dir = \"{}\"\n", archive.display()),
    )
    .unwrap();
    let g = good.to_str().unwrap();
    one_line_error(&["--config", g, "show", "424242"], "424242");
    // An archive directory that is a file, not a directory.
    let file = d.path().join("file.toml");
    std::fs::write(d.path().join("not-a-dir"), b"x").unwrap();
    std::fs::write(
        &file,
        format!(
            "[paths]\narchive_dir = \"{}\"\n",
            d.path().join("not-a-dir").display()
        ),
    )
    .unwrap();
    one_line_error(&["--config", file.to_str().unwrap(), "show", "1"], "1");
    // clap's own message for a malformed id: exit 2, no report.
    let (rc, out, err) = jobscope(&["--config", g, "show", "12x"]);
    assert_eq!(rc, 2, "{err}");
    assert!(
        out.is_empty() && err.contains("invalid value '12x'"),
        "{err}"
    );
}

//! docs/schema/ publishes what `jobscope schema` prints, byte for byte: the real binary is run and
//! its output compared with the file. Every file in docs/schema/ must be held by this test, so a
//! schema added there without a command behind it fails too.
//! After an intended change of the summary's types: `JOBSCOPE_BLESS=1 cargo test -p jobscope-cli
//! --test schema_docs`, then review the diff.

use std::path::Path;
use std::process::Command;

/// Each published file and the `jobscope` arguments that print it.
const PUBLISHED: &[(&str, &[&str])] = &[("job-summary.schema.json", &["schema"])];

#[test]
fn docs_schema_is_what_jobscope_schema_prints() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/schema");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut held: Vec<String> = PUBLISHED.iter().map(|(f, _)| f.to_string()).collect();
    held.sort();
    assert_eq!(
        on_disk,
        held,
        "{}: every file there must be one `jobscope` prints (PUBLISHED in this test)",
        dir.display()
    );
    for (file, args) in PUBLISHED {
        let out = Command::new(env!("CARGO_BIN_EXE_jobscope"))
            .args(*args)
            .env_remove("JOBSCOPE_CONFIG")
            .output()
            .expect("run jobscope");
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "jobscope {args:?}: {out:?}"
        );
        let path = dir.join(file);
        if std::env::var_os("JOBSCOPE_BLESS").is_some() {
            std::fs::write(&path, &out.stdout).unwrap();
        }
        let published = std::fs::read(&path).unwrap();
        assert!(
            published == out.stdout,
            "{} differs from `jobscope {}` (bless: JOBSCOPE_BLESS=1 cargo test -p jobscope-cli --test schema_docs)",
            path.display(),
            args.join(" ")
        );
    }
}

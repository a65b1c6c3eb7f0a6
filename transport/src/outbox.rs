//! A node's outbox: the envelopes its transport has not confirmed yet, one file each in a
//! node-local root-only directory. The Epilog puts its envelope here before it sends, so a
//! transport that is down delays a report and never loses it; `jobscope reap` sends what is left.

use crate::Envelope;
use anyhow::{Context, Result};
use jobscope_common::fsutil::{ensure_dir, is_safe_name, read_limited, write_atomic};
use std::path::{Path, PathBuf};

/// The largest envelope read back (a node summary with a long timeline is a few MiB).
const MAX_ENVELOPE_BYTES: u64 = 64 * 1024 * 1024;

/// How many envelopes one pass looks at: a node whose database was away for days sends the rest
/// at the next pass.
pub const MAX_PER_PASS: usize = 4096;

#[derive(Debug, Clone)]
pub struct Outbox {
    dir: PathBuf,
}

/// An envelope in the outbox: its file, and the envelope or why it cannot be read.
#[derive(Debug)]
pub struct Pending {
    pub path: PathBuf,
    pub envelope: Result<Envelope, String>,
}

impl Outbox {
    pub fn new(dir: &Path) -> Outbox {
        Outbox {
            dir: dir.to_path_buf(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file name of an envelope: its key ([`Envelope::key`]), so putting the same envelope
    /// twice leaves one file.
    fn file_name(e: &Envelope) -> String {
        format!(
            "{}.{}.{}.json",
            e.summary.job_id, e.summary.node, e.summary.end_unix_ms
        )
    }

    /// Stores `e` durably (written, synced, renamed into place; root only).
    pub fn put(&self, e: &Envelope) -> Result<PathBuf> {
        ensure_dir(&self.dir, 0o700, 0, 0)
            .with_context(|| format!("outbox {}", self.dir.display()))?;
        let name = Outbox::file_name(e);
        anyhow::ensure!(is_safe_name(&name), "unsafe node name {:?}", e.summary.node);
        Ok(write_atomic(
            &self.dir,
            &name,
            &serde_json::to_vec(e)?,
            0o600,
            None,
        )?)
    }

    /// Up to `max` envelopes waiting, oldest file name first (job ids grow). A file that is not an
    /// envelope is listed with its error (and left alone: it is evidence).
    pub fn pending(&self, max: usize) -> Vec<Pending> {
        self.names()
            .into_iter()
            .take(max)
            .map(|n| {
                let path = self.dir.join(&n);
                let envelope = read_limited(&path, MAX_ENVELOPE_BYTES)
                    .map_err(|e| e.to_string())
                    .and_then(|b| {
                        serde_json::from_slice::<Envelope>(&b).map_err(|e| format!("{n}: {e}"))
                    });
                Pending { path, envelope }
            })
            .collect()
    }

    /// The envelopes' file names, sorted (the temporary files of a write in progress start
    /// with a dot).
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json") && !n.starts_with('.'))
            .collect();
        names.sort();
        names
    }

    /// How many envelopes wait.
    pub fn len(&self) -> usize {
        self.names().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes a confirmed envelope.
    pub fn remove(&self, path: &Path) -> Result<()> {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("{}", path.display()))
            }
            _ => Ok(()),
        }
    }
}

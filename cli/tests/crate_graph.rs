//! The crate graph follows the data flow (docs/architecture.md): each stage depends only on the
//! stages before it, and the Epilog links nothing of the audit. Read from `cargo metadata`, so a
//! new dependency that points back up fails here, not in review.
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The stages in the order data flows through them. A crate may depend on crates listed before it.
/// The plugin is SPANK glue: nothing depends on it.
const STAGES: &[&str] = &[
    "jobscope-model",
    // the per-node kernel collector (BPF): a source beside the cgroups, read by the sampler
    "jobscope-kernel",
    "jobscope-sampler",
    "jobscope-plugin",
    "jobscope-report",
    "jobscope-archive",
    "jobscope-deliver",
    "jobscope-audit",
    "jobscope-epilog",
    "jobscope-cli",
];
/// Test helpers any stage's tests may use.
const TEST_HELPERS: &[&str] = &["fake-nvml"];

fn metadata() -> Value {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--offline", "--locked"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

/// (crate, dependency, kind) for every dependency of a stage on another workspace crate.
fn workspace_edges(meta: &Value) -> Vec<(String, String, String)> {
    let members: BTreeSet<&str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["source"].is_null())
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let mut edges = Vec::new();
    for p in meta["packages"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        if !STAGES.contains(&name) {
            continue;
        }
        for d in p["dependencies"].as_array().unwrap() {
            let dep = d["name"].as_str().unwrap();
            if members.contains(dep) {
                let kind = d["kind"].as_str().unwrap_or("normal").to_string();
                edges.push((name.to_string(), dep.to_string(), kind));
            }
        }
    }
    edges
}

#[test]
fn every_stage_depends_only_on_stages_before_it() {
    let meta = metadata();
    let edges = workspace_edges(&meta);
    // The graph is not empty: the check below would pass on no edges at all.
    assert!(edges.len() >= 15, "too few workspace edges: {edges:?}");
    let rank: BTreeMap<&str, usize> = STAGES.iter().enumerate().map(|(i, s)| (*s, i)).collect();
    let mut wrong = Vec::new();
    for (from, to, kind) in &edges {
        if TEST_HELPERS.contains(&to.as_str()) && kind == "dev" {
            continue;
        }
        let ok = match (rank.get(from.as_str()), rank.get(to.as_str())) {
            (Some(f), Some(t)) => t < f && to != "jobscope-plugin",
            _ => false,
        };
        if !ok {
            wrong.push(format!("{from} -> {to} ({kind})"));
        }
    }
    assert!(
        wrong.is_empty(),
        "dependencies that point up or sideways: {wrong:?}"
    );
}

/// Every normal (linked) dependency of `root`, transitively, through the resolved graph.
fn linked_closure(meta: &Value, root: &str) -> BTreeSet<String> {
    let nodes: BTreeMap<&str, &Value> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n))
        .collect();
    let name_of: BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let root_id = name_of
        .iter()
        .find(|(_, n)| **n == root)
        .map(|(id, _)| *id)
        .unwrap();
    let mut seen = BTreeSet::new();
    let mut todo = vec![root_id];
    while let Some(id) = todo.pop() {
        for d in nodes[id]["deps"].as_array().unwrap() {
            let linked = d["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].is_null());
            let pkg = d["pkg"].as_str().unwrap();
            if linked && seen.insert(name_of[pkg].to_string()) {
                todo.push(pkg);
            }
        }
    }
    seen
}

#[test]
fn the_epilog_links_no_arrow_parquet_or_postgres_and_the_cli_does() {
    let meta = metadata();
    let heavy = |set: &BTreeSet<String>| -> Vec<String> {
        set.iter()
            .filter(|n| n.starts_with("arrow") || *n == "parquet" || n.starts_with("postgres"))
            .cloned()
            .collect()
    };
    let epilog = linked_closure(&meta, "jobscope-epilog");
    assert!(epilog.contains("jobscope-deliver"), "{epilog:?}");
    assert_eq!(heavy(&epilog), Vec::<String>::new());
    // The same walk finds them where they are linked: the check can fail.
    let cli = linked_closure(&meta, "jobscope-cli");
    assert!(heavy(&cli).contains(&"parquet".to_string()), "{cli:?}");
    assert!(heavy(&cli).contains(&"postgres".to_string()), "{cli:?}");
    // The plugin, inside slurmstepd, links neither the report nor anything after it.
    let plugin = linked_closure(&meta, "jobscope-plugin");
    for later in &STAGES[4..] {
        assert!(!plugin.contains(*later), "the plugin links {later}");
    }
    // ...nor the collector and libbpf: it reads the pinned maps with bpf(2) itself.
    assert!(
        !plugin.contains("jobscope-kernel"),
        "the plugin links the collector"
    );
    assert!(!plugin.contains("libbpf-sys"), "the plugin links libbpf");
}

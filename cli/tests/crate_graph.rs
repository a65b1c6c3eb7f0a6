//! The crate graph follows the data flow (docs/architecture.md): each stage depends only on the
//! stages before it, the Epilog links nothing of the audit (its PostgreSQL client is the transport's), the stages after the plugin link
//! nothing of sampling, the audit engine links nothing of delivery (its admin products do), and no
//! crate above the model re-exports it. Read from `cargo metadata`,
//! so a new dependency that points back up fails here, not in review.
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The stages in the order data flows through them. A crate may depend on crates listed before it.
/// The plugin is SPANK glue: nothing depends on it.
const STAGES: &[&str] = &[
    "jobscope-model",
    // The floor beneath the stages: shared helpers (files, child processes, users, the spool
    // reader) and the site configuration.
    "jobscope-common",
    "jobscope-config",
    // the per-node kernel collector (BPF): a source beside the cgroups, read by the sampler
    "jobscope-kernel",
    "jobscope-sampler",
    "jobscope-plugin",
    "jobscope-report",
    "jobscope-archive",
    "jobscope-deliver",
    // how node summaries reach the one host that makes the report (outbox, PostgreSQL); the
    // audit's PostgreSQL connection is its
    "jobscope-transport",
    "jobscope-audit",
    // the admin products made of the audit engine: the cluster report and the alerts (their mail
    // goes through the deliver crate, which the engine does not link)
    "jobscope-admin",
    "jobscope-epilog",
    "jobscope-cli",
];
/// Test helpers any stage's tests may use.
const TEST_HELPERS: &[&str] = &["fake-nvml", "fake-dcgm"];

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
        // A stage's tests may build the stage itself with a test feature (jobscope-kernel's
        // tests with `bench`): that edge points nowhere else.
        if from == to && kind == "dev" {
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

/// The Epilog sends node summaries through PostgreSQL (transport.mode = "postgres"), so it links
/// the client; it links nothing of the audit's columnar engine.
#[test]
fn the_epilog_links_no_arrow_or_parquet_and_the_cli_does() {
    let meta = metadata();
    let heavy = |set: &BTreeSet<String>| -> Vec<String> {
        set.iter()
            .filter(|n| {
                n.starts_with("arrow") || *n == "parquet" || n.starts_with("jobscope-audit")
            })
            .cloned()
            .collect()
    };
    let epilog = linked_closure(&meta, "jobscope-epilog");
    assert!(epilog.contains("jobscope-deliver"), "{epilog:?}");
    assert!(epilog.contains("jobscope-transport"), "{epilog:?}");
    assert!(epilog.contains("postgres"), "{epilog:?}");
    assert_eq!(heavy(&epilog), Vec::<String>::new());
    // The same walk finds them where they are linked: the check can fail.
    let cli = linked_closure(&meta, "jobscope-cli");
    assert!(heavy(&cli).contains(&"parquet".to_string()), "{cli:?}");
    assert!(
        heavy(&cli).contains(&"jobscope-audit".to_string()),
        "{cli:?}"
    );
    // The plugin, inside slurmstepd, links neither the report nor anything after it.
    let plugin = linked_closure(&meta, "jobscope-plugin");
    let after_plugin = STAGES.iter().position(|s| *s == "jobscope-plugin").unwrap() + 1;
    assert_eq!(STAGES[after_plugin], "jobscope-report");
    for later in &STAGES[after_plugin..] {
        assert!(!plugin.contains(*later), "the plugin links {later}");
    }
    // ...nor the collector and libbpf: it reads the pinned maps with bpf(2) itself.
    assert!(
        !plugin.contains("jobscope-kernel"),
        "the plugin links the collector"
    );
    assert!(!plugin.contains("libbpf-sys"), "the plugin links libbpf");
}

/// The audit is an engine: the admin products that mail (jobscope-admin) sit above it, and it
/// depends on the deliver crate in no way (linked, in its tests or its build).
#[test]
fn the_audit_engine_depends_on_no_delivery_and_its_products_do() {
    let meta = metadata();
    let edges = workspace_edges(&meta);
    let audit_to_deliver: Vec<_> = edges
        .iter()
        .filter(|(from, to, _)| from == "jobscope-audit" && to == "jobscope-deliver")
        .collect();
    assert_eq!(audit_to_deliver, Vec::<&(String, String, String)>::new());
    let audit = linked_closure(&meta, "jobscope-audit");
    assert!(audit.contains("parquet"), "{audit:?}");
    for mail in ["jobscope-deliver", "lettre"] {
        assert!(!audit.contains(mail), "the audit engine links {mail}");
    }
    // The same walk and the same edges find them where they are: the checks can fail.
    let admin = linked_closure(&meta, "jobscope-admin");
    assert!(admin.contains("jobscope-deliver"), "{admin:?}");
    assert!(admin.contains("lettre"), "{admin:?}");
    assert!(admin.contains("jobscope-audit"), "{admin:?}");
    assert!(edges
        .iter()
        .any(|(from, to, _)| from == "jobscope-admin" && to == "jobscope-deliver"));
}

/// What sampling links: the sampler itself, NVML and procfs.
const SAMPLING: &[&str] = &["jobscope-sampler", "nvml-wrapper", "procfs"];

#[test]
fn the_stages_after_sampling_link_nothing_of_it() {
    let meta = metadata();
    for stage in [
        "jobscope-common",
        "jobscope-config",
        "jobscope-report",
        "jobscope-archive",
        "jobscope-deliver",
        "jobscope-transport",
        "jobscope-audit",
        "jobscope-admin",
        // The Epilog summarises spools and removes the live snapshot (jobscope_common::live): it
        // samples nothing, so a compute node's Epilog loads no NVML.
        "jobscope-epilog",
    ] {
        let linked = linked_closure(&meta, stage);
        assert!(linked.contains("jobscope-model"), "{stage}: {linked:?}");
        let sampling: Vec<&str> = SAMPLING
            .iter()
            .copied()
            .filter(|s| linked.contains(*s))
            .collect();
        assert_eq!(sampling, Vec::<&str>::new(), "{stage} links sampling");
    }
    // The same walk finds them where they are linked: the check can fail.
    let plugin = linked_closure(&meta, "jobscope-plugin");
    for s in SAMPLING {
        assert!(
            plugin.contains(*s),
            "the plugin does not link {s}: {plugin:?}"
        );
    }
}

/// Whether a Rust source re-exports (part of) the model: `pub use jobscope_model…`, with any
/// leading `::`, or `pub extern crate jobscope_model`. `pub(crate) use` is an import, not an export.
fn reexports_the_model(source: &str) -> Vec<String> {
    source
        .lines()
        .map(str::trim_start)
        .filter(|l| {
            let l = l
                .strip_prefix("pub use ")
                .or_else(|| l.strip_prefix("pub extern crate "));
            l.is_some_and(|rest| rest.trim_start_matches("::").starts_with("jobscope_model"))
        })
        .map(str::to_string)
        .collect()
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The model is named from the model: no crate above it re-exports its modules or types (the
/// sampler did, and every stage above reached the model through it).
#[test]
fn no_crate_above_the_model_re_exports_it() {
    assert_eq!(
        reexports_the_model("  pub use jobscope_model::job::JobState;\npub(crate) use jobscope_model::spool::*;\npub use ::jobscope_model as m;\nuse jobscope_model::time;"),
        ["pub use jobscope_model::job::JobState;", "pub use ::jobscope_model as m;"]
    );
    let meta = metadata();
    let mut found = Vec::new();
    let mut files = 0;
    for p in meta["packages"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        if !STAGES.contains(&name) || name == "jobscope-model" {
            continue;
        }
        let manifest = std::path::Path::new(p["manifest_path"].as_str().unwrap());
        let mut sources = Vec::new();
        rust_files(&manifest.parent().unwrap().join("src"), &mut sources);
        for f in sources {
            files += 1;
            for line in reexports_the_model(&std::fs::read_to_string(&f).unwrap()) {
                found.push(format!("{}: {line}", f.display()));
            }
        }
    }
    assert!(files > 100, "too few sources read: {files}");
    assert!(found.is_empty(), "re-exports of the model: {found:#?}");
}

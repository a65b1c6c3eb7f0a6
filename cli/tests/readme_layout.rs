//! README.md's "## Layout" table is the newcomer's map of the crates. It drifts whenever a crate or
//! module is added, so this test holds it to the tree: one row per stage crate of the workspace, in
//! the order of `members` in Cargo.toml (the order data flows), every path a row names exists, and
//! every module directly under a crate's `src/` is named by its row.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// (crate, directory, the "inside" cell) of each row of the Layout table.
fn layout_rows() -> Vec<(String, String, String)> {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let section = readme
        .split("\n## Layout\n")
        .nth(1)
        .expect("README.md has a '## Layout' section");
    let section = section.split("\n## ").next().unwrap();
    let mut rows = Vec::new();
    for line in section.lines().filter(|l| l.starts_with("| `jobscope-")) {
        // | `name` (`dir/`) | stage | inside |
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
        assert_eq!(cells.len(), 3, "a Layout row has three cells: {line}");
        let name = cells[0].split('`').nth(1).expect("crate name in backticks");
        let dir = cells[0].split('`').nth(3).expect("directory in backticks");
        rows.push((
            name.to_string(),
            dir.trim_end_matches('/').to_string(),
            cells[2].to_string(),
        ));
    }
    rows
}

/// The workspace members that are stages (not test helpers or packaging tools), in their order.
fn stage_members() -> Vec<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let list = manifest
        .split("members = [")
        .nth(1)
        .and_then(|s| s.split(']').next())
        .expect("workspace members");
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty() && !m.starts_with("tests/") && !m.starts_with("packaging/"))
        .collect()
}

/// `a/{b,c}.rs` -> `a/b.rs`, `a/c.rs` (one brace group, as the table writes them).
fn expand(path: &str) -> Vec<String> {
    match (path.find('{'), path.find('}')) {
        (Some(open), Some(close)) if open < close => path[open + 1..close]
            .split(',')
            .map(|alt| format!("{}{}{}", &path[..open], alt, &path[close + 1..]))
            .collect(),
        _ => vec![path.to_string()],
    }
}

/// The backticked paths of an "inside" cell, expanded; the parenthesised words are prose.
fn named_paths(inside: &str) -> Vec<String> {
    inside
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|p| p.contains('/') || p.ends_with(".rs"))
        .flat_map(expand)
        .collect()
}

#[test]
fn the_layout_table_has_one_row_per_stage_crate_in_data_flow_order() {
    let rows: Vec<String> = layout_rows().into_iter().map(|(_, dir, _)| dir).collect();
    let members = stage_members();
    assert!(members.len() >= 10, "too few stage members: {members:?}");
    assert_eq!(rows, members, "README Layout rows vs Cargo.toml members");
    for (name, dir, _) in layout_rows() {
        let manifest = std::fs::read_to_string(root().join(&dir).join("Cargo.toml"))
            .unwrap_or_else(|e| panic!("{dir}/Cargo.toml: {e}"));
        assert!(
            manifest.contains(&format!("name = \"{name}\"")),
            "README names {dir}/ as {name}, its Cargo.toml disagrees"
        );
    }
}

#[test]
fn every_path_the_layout_table_names_exists() {
    let mut missing = Vec::new();
    for (_, dir, inside) in layout_rows() {
        let krate = root().join(&dir);
        for p in named_paths(&inside) {
            let p = p.trim_end_matches('/');
            if !krate.join(p).exists() && !krate.join("src").join(p).exists() {
                missing.push(format!("{dir}: {p}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "README Layout names paths that do not exist: {missing:?}"
    );
}

#[test]
fn every_module_of_every_stage_crate_is_on_the_map() {
    let mut unnamed = Vec::new();
    for (_, dir, inside) in layout_rows() {
        let krate = root().join(&dir);
        // A named file or directory under src/, by its first component: `summary/node.rs` names
        // the directory `summary`.
        let named: BTreeSet<String> = named_paths(&inside)
            .iter()
            .map(|p| p.strip_prefix("src/").unwrap_or(p).to_string())
            .filter_map(|p| p.split('/').next().map(str::to_string))
            .collect();
        let src = krate.join("src");
        for entry in std::fs::read_dir(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display())) {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            // The crate root and a test-only module need no entry of their own.
            if matches!(name.as_str(), "lib.rs" | "main.rs" | "tests.rs") {
                continue;
            }
            if !named.contains(&name) {
                unnamed.push(format!("{dir}/src/{name}"));
            }
        }
    }
    assert!(
        unnamed.is_empty(),
        "modules missing from README's Layout table: {unnamed:?}"
    );
}

#[test]
fn the_path_reader_expands_and_skips_prose() {
    // The reader itself, on a row written the way the table writes them: if it read nothing, the
    // tests above would pass on any README.
    let cell = "`spool/`, `summary/{node,job}.rs`, `lib.rs` (`main`), `../report-templates/`";
    assert_eq!(
        named_paths(cell),
        vec![
            "spool/",
            "summary/node.rs",
            "summary/job.rs",
            "lib.rs",
            "../report-templates/"
        ]
    );
}

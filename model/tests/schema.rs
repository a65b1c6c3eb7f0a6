//! The published schema must be exactly what the types produce: regenerate with
//! `JOBSCOPE_BLESS=1 cargo test -p jobscope-model --test schema` (or `jobscope schema`).

#[test]
fn published_schema_is_current() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/schema/job-summary.schema.json"
    );
    let want = jobscope_model::summary::json_schema();
    if std::env::var_os("JOBSCOPE_BLESS").is_some() {
        std::fs::write(path, serde_json::to_string_pretty(&want).unwrap() + "\n").unwrap();
    }
    let published: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(
        published, want,
        "docs/schema/job-summary.schema.json is stale"
    );
}

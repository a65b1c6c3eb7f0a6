//! The Grafana dashboard shipped in packaging/grafana/jobscope.json (docs/audit.md, "OpenMetrics").
//!
//! Without a Grafana to import it into (Debian does not package one), the checks are on its JSON
//! model: it can be imported as is ("Import dashboard" asks for the Prometheus data source its
//! `__inputs` declare, and every query goes to that one), every metric and label its queries name
//! is one `metrics::render` writes, and every series `render` writes is on a panel. What jobscope
//! writes is read from `render`'s own output, never listed here, so a renamed or added counter
//! fails this test until the dashboard follows.

use jobscope_audit::metrics::{self, Histograms};
use jobscope_audit::{ColType, Table, Value};
use serde_json::{json, Value as Json};
use std::collections::{BTreeMap, BTreeSet};

const DASHBOARD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../packaging/grafana/jobscope.json"
);
/// The data source input every panel, query and variable must use: Grafana replaces it with the
/// data source picked at import.
const DS_INPUT: &str = "DS_PROMETHEUS";
/// Grafana's own variables (the rest must be the dashboard's templating variables).
const GRAFANA_VARIABLES: &[&str] = &[
    "__range",
    "__range_s",
    "__range_ms",
    "__interval",
    "__interval_ms",
    "__rate_interval",
];
/// PromQL's aggregation operators and functions (prometheus.io, "Querying: functions" and
/// "operators"): an identifier followed by `(` must be one of them.
const PROMQL_FUNCTIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "abs",
    "absent",
    "absent_over_time",
    "ceil",
    "changes",
    "clamp",
    "clamp_max",
    "clamp_min",
    "day_of_month",
    "day_of_week",
    "day_of_year",
    "days_in_month",
    "delta",
    "deriv",
    "exp",
    "floor",
    "histogram_avg",
    "histogram_count",
    "histogram_fraction",
    "histogram_quantile",
    "histogram_stddev",
    "histogram_stdvar",
    "histogram_sum",
    "hour",
    "idelta",
    "increase",
    "irate",
    "label_join",
    "label_replace",
    "ln",
    "log2",
    "log10",
    "minute",
    "month",
    "predict_linear",
    "rate",
    "resets",
    "round",
    "scalar",
    "sgn",
    "sort",
    "sort_desc",
    "sort_by_label",
    "sort_by_label_desc",
    "sqrt",
    "time",
    "timestamp",
    "vector",
    "year",
    "avg_over_time",
    "min_over_time",
    "max_over_time",
    "sum_over_time",
    "count_over_time",
    "quantile_over_time",
    "stddev_over_time",
    "stdvar_over_time",
    "last_over_time",
    "present_over_time",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "cos",
    "cosh",
    "sin",
    "sinh",
    "tan",
    "tanh",
    "deg",
    "rad",
    "pi",
];
/// Keywords that take a list of label names in parentheses.
const PROMQL_GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
/// Other words that are not metric names.
const PROMQL_KEYWORDS: &[&str] = &[
    "and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "start", "end",
];

/// What jobscope writes: each series name (`jobscope_jobs_total`,
/// `jobscope_job_cpu_efficiency_pct_bucket`, …) with the label names it carries.
type Exported = BTreeMap<String, BTreeSet<String>>;

/// A usage table as `metrics::usage_query` groups it, one row with every column filled (so every
/// column `render` turns into a counter is there, whichever they are).
fn usage_table(user_label: bool) -> Table {
    let mut t = Table::new(metrics::usage_query(user_label).columns());
    let row = t
        .columns
        .iter()
        .map(|c| match c.kind {
            ColType::Int => Value::Int(3),
            ColType::Float => Value::Float(1.5),
            ColType::Text => Value::Text(format!("{}-1", c.name)),
            ColType::Bool => Value::Bool(true),
        })
        .collect();
    t.rows.push(row);
    t
}

/// Splits `a,b,"c,d"` at the commas outside double quotes.
fn split_outside_quotes(s: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let (mut quoted, mut escaped) = (false, false);
    for ch in s.chars() {
        if quoted {
            quoted = escaped || ch != '"';
            escaped = !escaped && ch == '\\';
        } else if ch == '"' {
            quoted = true;
        } else if ch == ',' {
            parts.push(String::new());
            continue;
        }
        parts.last_mut().unwrap().push(ch);
    }
    parts
}

/// Every series name in `render`'s output (without and with the user label), with its labels.
fn exported() -> Exported {
    let mut out = Exported::new();
    for user_label in [false, true] {
        let keys = metrics::usage_query(user_label).group_by.len();
        let hist: Histograms = vec![(
            (0..keys).map(|k| format!("key-{k}")).collect(),
            [0, 1, 1, 2, 3, 3],
            3,
            140.0,
        )];
        let text = metrics::render(&usage_table(user_label), &hist, user_label).unwrap();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            let labels = out.entry(line[..name_end].to_string()).or_default();
            if line[name_end..].starts_with('{') {
                let body = &line[name_end + 1..line.rfind('}').expect("a closing brace")];
                for part in split_outside_quotes(body) {
                    labels.insert(part.split('=').next().unwrap().trim().to_string());
                }
            }
        }
    }
    assert!(
        out.len() > 3,
        "render wrote too little to check against: {out:?}"
    );
    out
}

/// The names `$x`, `${x}`, `${x:format}` and `[[x]]` in a Grafana text.
fn variables(s: &str) -> BTreeSet<String> {
    let ident = |t: &str| -> String {
        t.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = BTreeSet::new();
    for (i, _) in s.match_indices('$') {
        let rest = &s[i + 1..];
        let name = match rest.strip_prefix('{') {
            Some(r) => ident(r),
            None => ident(rest),
        };
        out.insert(name);
    }
    for (i, _) in s.match_indices("[[") {
        out.insert(ident(&s[i + 2..]));
    }
    out
}

/// What one PromQL expression names.
#[derive(Debug, Default)]
struct Promql {
    metrics: BTreeSet<String>,
    /// (metric, label) of each label matcher in a selector.
    matchers: Vec<(String, String)>,
    /// The labels of `by (…)`, `without (…)`, `on (…)`, … clauses.
    grouping: BTreeSet<String>,
    problems: Vec<String>,
}

/// The end (exclusive) of the quoted string starting at `i`.
fn skip_string(c: &[char], i: usize) -> usize {
    let quote = c[i];
    let mut j = i + 1;
    while j < c.len() && c[j] != quote {
        j += if c[j] == '\\' && quote != '`' { 2 } else { 1 };
    }
    j + 1
}

/// The text from `i` up to the `close` outside strings, and the index after `close`.
fn until(c: &[char], i: usize, close: char) -> (String, usize) {
    let mut j = i;
    while j < c.len() && c[j] != close {
        j = if matches!(c[j], '"' | '\'' | '`') {
            skip_string(c, j)
        } else {
            j + 1
        };
    }
    (c[i..j.min(c.len())].iter().collect(), j + 1)
}

fn is_ident_start(ch: char) -> bool {
    ch.is_ascii_alphabetic() || ch == '_' || ch == ':'
}

fn is_ident(ch: char) -> bool {
    ch.is_ascii_alphanumeric() || ch == '_' || ch == ':'
}

/// A small PromQL lexer: enough to find every metric name (an identifier that is not a function,
/// keyword or label), the labels of the matchers and of the grouping clauses. Grafana variables
/// are skipped (they stand for label values and durations here).
fn promql(expr: &str) -> Promql {
    let c: Vec<char> = expr.chars().collect();
    let mut p = Promql::default();
    let mut last_metric: Option<String> = None;
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if matches!(ch, '"' | '\'' | '`') {
            i = skip_string(&c, i);
            last_metric = None;
        } else if ch == '$' {
            i += 1;
            if c.get(i) == Some(&'{') {
                i = until(&c, i, '}').1;
            } else {
                while i < c.len() && is_ident(c[i]) {
                    i += 1;
                }
            }
        } else if ch == '{' {
            let (body, j) = until(&c, i + 1, '}');
            match last_metric.take() {
                Some(m) => {
                    for part in split_outside_quotes(&body) {
                        let label: String =
                            part.trim().chars().take_while(|c| is_ident(*c)).collect();
                        if label.is_empty() {
                            p.problems
                                .push(format!("a matcher without a label: {part:?}"));
                        } else {
                            p.matchers.push((m.clone(), label));
                        }
                    }
                }
                None => p.problems.push(format!(
                    "a selector without a metric name ({{{body}}}): nothing checks what it selects"
                )),
            }
            i = j;
        } else if ch == '[' {
            i = until(&c, i + 1, ']').1;
            last_metric = None;
        } else if ch.is_ascii_digit()
            || (ch == '.' && c.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            // A number or a duration (1e-9, 0.5, 1d).
            while i < c.len() {
                let signed = matches!(c[i], '+' | '-') && matches!(c[i - 1], 'e' | 'E');
                if !(c[i].is_ascii_alphanumeric() || c[i] == '.' || signed) {
                    break;
                }
                i += 1;
            }
            last_metric = None;
        } else if is_ident_start(ch) {
            let start = i;
            while i < c.len() && is_ident(c[i]) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let mut k = i;
            while k < c.len() && c[k].is_whitespace() {
                k += 1;
            }
            let call = c.get(k) == Some(&'(');
            // `sum by (le) (…)`: an aggregation with its grouping clause first.
            let rest: String = c[k..].iter().collect();
            let grouped_first = PROMQL_FUNCTIONS.contains(&word.as_str())
                && ["by", "without"].iter().any(|g| {
                    rest.strip_prefix(g)
                        .and_then(|r| r.trim_start().chars().next())
                        == Some('(')
                });
            last_metric = None;
            if call && PROMQL_GROUPING.contains(&word.as_str()) {
                let (list, j) = until(&c, k + 1, ')');
                for label in list.split(',').map(str::trim).filter(|l| !l.is_empty()) {
                    p.grouping.insert(label.to_string());
                }
                i = j;
            } else if call {
                if !PROMQL_FUNCTIONS.contains(&word.as_str()) {
                    p.problems.push(format!("unknown PromQL function {word}()"));
                }
                i = k;
            } else if !grouped_first
                && !PROMQL_KEYWORDS.contains(&word.as_str())
                && !PROMQL_GROUPING.contains(&word.as_str())
            {
                p.metrics.insert(word.clone());
                last_metric = Some(word);
            }
        } else {
            i += 1;
            last_metric = None;
        }
    }
    if p.metrics.is_empty() {
        p.problems.push("queries no metric".into());
    }
    p
}

/// The problems of one expression against what jobscope exports: unknown metrics, labels that
/// the metric does not carry, `{{label}}` legends that the result cannot have.
fn check_expr(where_: &str, expr: &str, legend: &str, exp: &Exported, out: &mut Vec<String>) {
    let p = promql(expr);
    out.extend(p.problems.iter().map(|e| format!("{where_}: {e}: {expr}")));
    let mut labels = BTreeSet::new();
    for m in &p.metrics {
        match exp.get(m) {
            Some(l) => labels.extend(l.iter().cloned()),
            None => out.push(format!(
                "{where_}: queries {m}, which jobscope does not export"
            )),
        }
    }
    for (m, label) in &p.matchers {
        if exp.get(m).is_some_and(|l| !l.contains(label)) {
            out.push(format!("{where_}: {m} has no label {label:?}"));
        }
    }
    for label in &p.grouping {
        if !labels.contains(label) {
            out.push(format!(
                "{where_}: groups by {label:?}, which no metric of it has"
            ));
        }
    }
    // After an aggregation only the grouping labels are left to name a series by.
    let kept = if p.grouping.is_empty() {
        &labels
    } else {
        &p.grouping
    };
    for (i, _) in legend.match_indices("{{") {
        let name: String = legend[i + 2..]
            .chars()
            .take_while(|c| *c != '}')
            .collect::<String>()
            .trim()
            .to_string();
        if !kept.contains(&name) {
            out.push(format!(
                "{where_}: the legend names {{{{{name}}}}}, which the result has not (it has {kept:?})"
            ));
        }
    }
}

fn ds_ok(v: Option<&Json>) -> bool {
    v == Some(&json!({"type": "prometheus", "uid": format!("${{{DS_INPUT}}}")}))
}

/// Every object under `v` with a `datasource` key, and every `${DS_…}` string, by their path.
fn walk_datasources(v: &Json, path: &str, out: &mut Vec<String>) {
    match v {
        Json::Object(o) => {
            for (k, x) in o {
                let p = format!("{path}.{k}");
                if k == "datasource" {
                    // Annotations may use Grafana's own built-in source; nothing else may.
                    let builtin = path.starts_with(".annotations")
                        && *x == json!({"type": "grafana", "uid": "-- Grafana --"});
                    if !(ds_ok(Some(x)) || builtin) {
                        out.push(format!(
                            "{p} is {x}, not the imported data source ${{{DS_INPUT}}}"
                        ));
                    }
                }
                walk_datasources(x, &p, out);
            }
        }
        Json::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                walk_datasources(x, &format!("{path}[{i}]"), out);
            }
        }
        Json::String(s) => {
            for (i, _) in s.match_indices("${DS_") {
                let name: String = s[i + 2..].chars().take_while(|c| *c != '}').collect();
                if name != DS_INPUT {
                    out.push(format!(
                        "{path} uses ${{{name}}}, which __inputs does not declare"
                    ));
                }
            }
        }
        _ => {}
    }
}

/// Everything that would stop the dashboard from importing as is or from showing what jobscope
/// writes. Empty: fine.
fn problems(dash: &Json, exp: &Exported) -> Vec<String> {
    let mut out = Vec::new();
    let inputs = dash["__inputs"].as_array().cloned().unwrap_or_default();
    if !inputs.iter().any(|i| {
        i["name"] == DS_INPUT && i["type"] == "datasource" && i["pluginId"] == "prometheus"
    }) {
        out.push(format!(
            "__inputs declares no Prometheus data source {DS_INPUT}"
        ));
    }
    let requires = dash["__requires"].as_array().cloned().unwrap_or_default();
    let required =
        |kind: &str, id: &str| requires.iter().any(|r| r["type"] == kind && r["id"] == id);
    for (kind, id) in [("grafana", "grafana"), ("datasource", "prometheus")] {
        if !required(kind, id) {
            out.push(format!("__requires lacks {kind} {id}"));
        }
    }
    match dash["uid"].as_str() {
        Some(u)
            if (1..=40).contains(&u.len())
                && u.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') => {}
        other => out.push(format!(
            "uid {other:?} is not a stable Grafana uid (1-40 of [A-Za-z0-9_-])"
        )),
    }
    if !dash["id"].is_null() {
        out.push("id must be null: Grafana assigns it at import".into());
    }
    if dash["title"].as_str().is_none_or(str::is_empty) {
        out.push("no title".into());
    }
    // 36: data source references are objects ({type, uid}) from this version on.
    if dash["schemaVersion"].as_u64().is_none_or(|v| v < 36) {
        out.push(format!(
            "schemaVersion {} is older than 36",
            dash["schemaVersion"]
        ));
    }
    walk_datasources(dash, "", &mut out);

    // Templating: query variables on the imported data source, over exported metrics.
    let mut defined: BTreeSet<String> = GRAFANA_VARIABLES.iter().map(|s| s.to_string()).collect();
    let vars = dash["templating"]["list"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for v in &vars {
        let name = v["name"].as_str().unwrap_or_default();
        defined.insert(name.to_string());
        if v["type"] != "query" {
            continue;
        }
        let where_ = format!("variable {name}");
        if !ds_ok(v.get("datasource")) {
            out.push(format!("{where_}: not on the imported data source"));
        }
        if v["multi"] != true || v["includeAll"] != true {
            out.push(format!("{where_}: not multi-select with All"));
        }
        let query = v["query"]["query"]
            .as_str()
            .or(v["query"].as_str())
            .unwrap_or_default();
        if v["definition"].as_str().is_some_and(|d| d != query) {
            out.push(format!("{where_}: definition and query differ"));
        }
        let Some(args) = query
            .strip_prefix("label_values(")
            .and_then(|r| r.strip_suffix(')'))
        else {
            out.push(format!(
                "{where_}: {query:?} is not label_values(metric, label)"
            ));
            continue;
        };
        let Some((selector, label)) = args.rsplit_once(',') else {
            out.push(format!("{where_}: {query:?} names no metric"));
            continue;
        };
        check_expr(
            &where_,
            selector,
            &format!("{{{{{}}}}}", label.trim()),
            exp,
            &mut out,
        );
    }

    // Panels, with those inside collapsed rows.
    let mut panels: Vec<Json> = Vec::new();
    for p in dash["panels"].as_array().cloned().unwrap_or_default() {
        panels.extend(p["panels"].as_array().cloned().unwrap_or_default());
        panels.push(p);
    }
    if panels.is_empty() {
        out.push("no panels".into());
    }
    let mut ids = BTreeSet::new();
    let mut queried = BTreeSet::new();
    let mut boxes: Vec<(String, [u64; 4])> = Vec::new();
    for p in &panels {
        let title = p["title"].as_str().unwrap_or_default();
        let kind = p["type"].as_str().unwrap_or_default();
        let where_ = format!("panel {} ({title})", p["id"]);
        match p["id"].as_u64() {
            Some(id) if ids.insert(id) => {}
            _ => out.push(format!("{where_}: id missing or not unique")),
        }
        let g = &p["gridPos"];
        let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| g[k].as_u64().unwrap_or(u64::MAX));
        if w == 0 || h == 0 || x.saturating_add(w) > 24 || y == u64::MAX {
            out.push(format!(
                "{where_}: gridPos {g} is not inside the 24-column grid"
            ));
        } else {
            for (other, [x2, y2, w2, h2]) in &boxes {
                if x < x2 + w2 && *x2 < x + w && y < y2 + h2 && *y2 < y + h {
                    out.push(format!("{where_}: overlaps {other}"));
                }
            }
            boxes.push((where_.clone(), [x, y, w, h]));
        }
        if kind == "row" {
            if p.get("targets").is_some() {
                out.push(format!("{where_}: a row with queries"));
            }
            continue;
        }
        if !required("panel", kind) {
            out.push(format!("{where_}: __requires lacks panel {kind}"));
        }
        if !ds_ok(p.get("datasource")) {
            out.push(format!("{where_}: not on the imported data source"));
        }
        if p["description"].as_str().is_none_or(str::is_empty) {
            out.push(format!("{where_}: no description"));
        }
        let targets = p["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            out.push(format!("{where_}: no queries"));
        }
        let mut refs = BTreeSet::new();
        for t in &targets {
            let expr = t["expr"].as_str().unwrap_or_default();
            let r = t["refId"].as_str().unwrap_or_default();
            let where_ = format!("{where_} query {r}");
            if r.is_empty() || !refs.insert(r.to_string()) {
                out.push(format!("{where_}: refId missing or not unique"));
            }
            if !ds_ok(t.get("datasource")) {
                out.push(format!("{where_}: not on the imported data source"));
            }
            for v in variables(expr).difference(&defined) {
                out.push(format!("{where_}: ${v} is not a variable of the dashboard"));
            }
            check_expr(
                &where_,
                expr,
                t["legendFormat"].as_str().unwrap_or_default(),
                exp,
                &mut out,
            );
            queried.extend(promql(expr).metrics);
        }
    }
    for v in &vars {
        let q = v["query"]["query"]
            .as_str()
            .or(v["query"].as_str())
            .unwrap_or_default();
        for name in variables(q).difference(&defined) {
            out.push(format!(
                "variable {}: ${name} is not a variable of the dashboard",
                v["name"]
            ));
        }
    }
    for series in exp.keys().filter(|s| !queried.contains(*s)) {
        out.push(format!(
            "jobscope exports {series} but no panel queries it: add one"
        ));
    }
    if out.iter().any(|e| e.contains("does not export")) {
        out.push(format!(
            "(jobscope exports {:?})",
            exp.keys().collect::<Vec<_>>()
        ));
    }
    out
}

fn dashboard_text() -> String {
    std::fs::read_to_string(DASHBOARD).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"))
}

fn parse(text: &str) -> Json {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{DASHBOARD} is not valid JSON: {e}"))
}

#[test]
fn the_dashboard_imports_as_is_and_queries_only_what_jobscope_exports() {
    let exp = exported();
    let p = problems(&parse(&dashboard_text()), &exp);
    assert!(p.is_empty(), "{DASHBOARD}:\n  {}", p.join("\n  "));
}

/// The same checker, on the dashboard with one mistake each: every mistake is reported.
#[test]
fn the_checker_reports_typos_strange_data_sources_and_missing_panels() {
    let exp = exported();
    let text = dashboard_text();
    let reported = |mutated: &str, want: &str| {
        let p = problems(&parse(mutated), &exp);
        assert!(
            p.iter().any(|e| e.contains(want)),
            "{want:?} not reported; got {p:#?}"
        );
    };
    let once = |from: &str, to: &str| {
        assert!(
            text.contains(from),
            "the dashboard has no {from:?} to change"
        );
        text.replacen(from, to, 1)
    };
    // A metric name one letter off, and one that does not even start with jobscope_.
    reported(
        &once("jobscope_jobs_total{", "jobscope_job_total{"),
        "jobscope_job_total",
    );
    reported(
        &once("jobscope_jobs_total{", "jobscop_jobs_total{"),
        "jobscop_jobs_total",
    );
    // The Prometheus-style name without the _total jobscope writes.
    reported(
        &once(
            "jobscope_core_hours_wasted_total{",
            "jobscope_core_hours_wasted{",
        ),
        "jobscope_core_hours_wasted,",
    );
    // A misspelt label, grouping label and legend, function and variable.
    reported(&once("partition=~", "partiton=~"), "no label \"partiton\"");
    reported(
        &once("by (cluster, partition)", "by (cluster, partiton)"),
        "partiton",
    );
    reported(
        &once("{{cluster}}/{{partition}}", "{{cluster}}/{{user}}"),
        "{{user}}",
    );
    reported(
        &once("increase(", "incrase("),
        "unknown PromQL function incrase()",
    );
    reported(&once("$cluster", "$clutser"), "$clutser is not a variable");
    // A variable on a metric jobscope does not write.
    let from = "label_values(jobscope_jobs_total,";
    assert!(text.contains(from));
    reported(
        &text.replace(from, "label_values(jobscope_job_total,"),
        "variable cluster: queries jobscope_job_total",
    );
    // A data source of the exporting Grafana instead of the import's input.
    reported(
        &once(
            "\"uid\": \"${DS_PROMETHEUS}\"",
            "\"uid\": \"P1809F7CD0C75ACF3\"",
        ),
        "not the imported data source",
    );
    reported(
        &once("${DS_PROMETHEUS}", "${DS_PROM}"),
        "__inputs does not declare",
    );
    // Two panels with one id.
    let mut dash = parse(&text);
    let first = dash["panels"][1]["id"].clone();
    dash["panels"][2]["id"] = first;
    let p = problems(&dash, &exp);
    assert!(p.iter().any(|e| e.contains("not unique")), "{p:#?}");

    // A counter that no panel queries any more (as a new counter would be).
    let mut dash = parse(&text);
    let gone = "jobscope_gpu_energy_kwh_total";
    for panel in dash["panels"].as_array_mut().unwrap() {
        if let Some(targets) = panel["targets"].as_array_mut() {
            targets.retain(|t| !t["expr"].as_str().unwrap().contains(gone));
        }
    }
    let p = problems(&dash, &exp);
    assert!(
        p.iter()
            .any(|e| e.contains(&format!("jobscope exports {gone} but no panel queries it"))),
        "{p:#?}"
    );
}

#[test]
fn the_promql_lexer_finds_metrics_labels_and_grouping() {
    let p = promql(
        r#"100 * sum by (cluster) (increase(a_total{cluster=~"$c", x!="{,}"}[$__range] offset 1d))
           / on (cluster) (sum without (le) (b:rate5m) > 1e-9) or vector(0)"#,
    );
    assert_eq!(
        p.metrics,
        BTreeSet::from(["a_total".to_string(), "b:rate5m".to_string()])
    );
    assert_eq!(
        p.matchers,
        vec![
            ("a_total".to_string(), "cluster".to_string()),
            ("a_total".to_string(), "x".to_string())
        ]
    );
    assert_eq!(
        p.grouping,
        BTreeSet::from(["cluster".to_string(), "le".to_string()])
    );
    assert!(p.problems.is_empty(), "{:?}", p.problems);
    assert!(!promql(r#"sum({__name__=~"jobscope_.*"})"#)
        .problems
        .is_empty());
    assert_eq!(
        variables("a{b=\"$x\", c=\"${y:regex}\"}[[z]] $__range"),
        BTreeSet::from(["x", "y", "z", "__range"].map(String::from))
    );
}

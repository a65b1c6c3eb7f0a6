//! Rows ⇄ Arrow record batches (what the Parquet index stores and the engine reads). Text columns
//! are plain UTF-8 arrays; Parquet dictionary-encodes them on disk.

use super::row::{JobRow, NodeRow, COLUMNS, NODE_COLUMNS};
use super::table::{ColType, Value};
use arrow_array::builder::{BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{
    Array, ArrayRef, BooleanArray, DictionaryArray, Float64Array, Int64Array, RecordBatch,
    StringArray,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use std::sync::Arc;

fn schema_of(cols: &[(&str, ColType)]) -> SchemaRef {
    Arc::new(Schema::new(
        cols.iter()
            .map(|(n, k)| {
                let t = match k {
                    ColType::Int => DataType::Int64,
                    ColType::Float => DataType::Float64,
                    ColType::Text => DataType::Utf8,
                    ColType::Bool => DataType::Boolean,
                };
                Field::new(*n, t, true)
            })
            .collect::<Vec<_>>(),
    ))
}

/// The job table's Arrow schema ([`COLUMNS`], all nullable).
pub fn job_schema() -> SchemaRef {
    schema_of(COLUMNS)
}

pub fn node_schema() -> SchemaRef {
    schema_of(NODE_COLUMNS)
}

/// Builds one batch from rows given as values in `cols` order.
pub fn batch_of(cols: &[(&str, ColType)], rows: &[Vec<Value>]) -> anyhow::Result<RecordBatch> {
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(cols.len());
    for (c, (name, kind)) in cols.iter().enumerate() {
        let bad = |v: &Value| anyhow::anyhow!("column {name}: {v:?} is not {kind:?}");
        match kind {
            ColType::Int => {
                let mut b = Int64Builder::with_capacity(rows.len());
                for r in rows {
                    match &r[c] {
                        Value::Null => b.append_null(),
                        Value::Int(i) => b.append_value(*i),
                        v => return Err(bad(v)),
                    }
                }
                arrays.push(Arc::new(b.finish()));
            }
            ColType::Float => {
                let mut b = Float64Builder::with_capacity(rows.len());
                for r in rows {
                    match &r[c] {
                        Value::Null => b.append_null(),
                        Value::Float(f) => b.append_value(*f),
                        Value::Int(i) => b.append_value(*i as f64),
                        v => return Err(bad(v)),
                    }
                }
                arrays.push(Arc::new(b.finish()));
            }
            ColType::Text => {
                let mut b = StringBuilder::with_capacity(rows.len(), rows.len() * 8);
                for r in rows {
                    match &r[c] {
                        Value::Null => b.append_null(),
                        Value::Text(s) => b.append_value(s),
                        v => return Err(bad(v)),
                    }
                }
                arrays.push(Arc::new(b.finish()));
            }
            ColType::Bool => {
                let mut b = BooleanBuilder::with_capacity(rows.len());
                for r in rows {
                    match &r[c] {
                        Value::Null => b.append_null(),
                        Value::Bool(x) => b.append_value(*x),
                        v => return Err(bad(v)),
                    }
                }
                arrays.push(Arc::new(b.finish()));
            }
        }
    }
    Ok(RecordBatch::try_new(schema_of(cols), arrays)?)
}

pub fn job_batch(rows: &[JobRow]) -> anyhow::Result<RecordBatch> {
    let vals: Vec<Vec<Value>> = rows.iter().map(JobRow::values).collect();
    batch_of(COLUMNS, &vals)
}

pub fn node_batch(rows: &[NodeRow]) -> anyhow::Result<RecordBatch> {
    let vals: Vec<Vec<Value>> = rows.iter().map(NodeRow::values).collect();
    batch_of(NODE_COLUMNS, &vals)
}

/// Columns of [`COLUMNS`] the index files do not store, with the stored columns each is computed
/// from when read: they are exact functions of those, computed by the same functions as the
/// report's waste and `JobRow::of` (`jobscope_model::summary::analysis::{core_hours_allocated,
/// …}`; a test in audit/src/index/tests.rs holds the two to the same bits).
/// Full-precision floats barely compress, and these six were a third of a file (docs/audit.md).
pub const DERIVED: &[(&str, &[&str])] = &[
    ("core_hours_alloc", &["alloc_cores", "elapsed_s"]),
    ("core_hours_used", &["cpu_usage_s"]),
    (
        "core_hours_wasted",
        &["alloc_cores", "elapsed_s", "cpu_usage_s"],
    ),
    (
        "mem_gb_hours_alloc",
        &["alloc_mem_per_node_bytes", "node_count", "elapsed_s"],
    ),
    (
        "mem_gb_hours_wasted",
        &[
            "alloc_mem_per_node_bytes",
            "node_count",
            "elapsed_s",
            "mem_gb_hours_used",
        ],
    ),
    ("gpu_hours_used", &["gpu_hours_alloc", "gpu_hours_wasted"]),
];

fn is_derived(name: &str) -> bool {
    DERIVED.iter().any(|(n, _)| *n == name)
}

/// The job table as the index files store it: [`COLUMNS`] without [`DERIVED`].
pub fn stored_job_schema() -> SchemaRef {
    let cols: Vec<(&str, ColType)> = COLUMNS
        .iter()
        .copied()
        .filter(|(n, _)| !is_derived(n))
        .collect();
    schema_of(&cols)
}

/// A full job batch ([`job_schema`]) as stored: the derived columns left out.
pub fn stored_job_batch(b: &RecordBatch) -> anyhow::Result<RecordBatch> {
    let schema = stored_job_schema();
    let cols = schema
        .fields()
        .iter()
        .map(|f| {
            b.column_by_name(f.name())
                .cloned()
                .ok_or_else(|| anyhow::anyhow!("batch without column {}", f.name()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(schema, cols)?)
}

/// The stored columns to read for `columns` (derived ones replaced by their inputs), in order,
/// each once.
pub fn stored_inputs<'a>(columns: &[&'a str]) -> Vec<&'a str> {
    let mut out: Vec<&'a str> = Vec::new();
    for &c in columns {
        let inputs: &[&'a str] = match DERIVED.iter().find(|(n, _)| *n == c) {
            Some((_, inputs)) => inputs,
            None => std::slice::from_ref(&c),
        };
        for &i in inputs {
            if !out.contains(&i) {
                out.push(i);
            }
        }
    }
    out
}

/// `b` (read with [`stored_inputs`] of `columns`) as exactly `columns`, in that order: stored
/// columns as read, derived ones computed.
pub fn with_derived(b: &RecordBatch, columns: &[&str]) -> anyhow::Result<RecordBatch> {
    use arrow_array::{Array, Float64Array, Int64Array};
    use arrow_buffer::NullBuffer;
    let n = b.num_rows();
    let col = |name: &str| -> anyhow::Result<&ArrayRef> {
        b.column_by_name(name)
            .ok_or_else(|| anyhow::anyhow!("the index has no column {name}"))
    };
    let f = |name: &str| -> anyhow::Result<&Float64Array> {
        col(name)?
            .as_any()
            .downcast_ref::<Float64Array>()
            .ok_or_else(|| anyhow::anyhow!("column {name} is not Float64"))
    };
    let i = |name: &str| -> anyhow::Result<&Int64Array> {
        col(name)?
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| anyhow::anyhow!("column {name} is not Int64"))
    };
    // Whole columns at once: the values computed for every row from the raw buffers, valid where
    // every input is (a null slot's value is never read).
    let nulls = |arrays: &[&dyn Array]| {
        arrays.iter().fold(None, |acc, a| {
            NullBuffer::union(acc.as_ref(), a.logical_nulls().as_ref())
        })
    };
    let out = |values: Vec<f64>, nulls: Option<NullBuffer>| -> ArrayRef {
        Arc::new(Float64Array::new(values.into(), nulls))
    };
    use jobscope_model::summary::analysis as waste;
    let core_alloc = |cores: &Int64Array, el: &Float64Array| -> Vec<f64> {
        let (c, e) = (cores.values(), el.values());
        // A null slot's value is never read; a stored count is a u32 (`JobRow::alloc_cores`).
        let c = |r: usize| u32::try_from(c[r]).unwrap_or(0);
        (0..n)
            .map(|r| waste::core_hours_allocated(c(r), e[r]))
            .collect()
    };
    let mem_alloc = |m: &Int64Array, nodes: &Int64Array, el: &Float64Array| -> Vec<f64> {
        let (mv, nv, e) = (m.values(), nodes.values(), el.values());
        (0..n)
            .map(|r| {
                // A null node count is one node, as `max(node_count, 1)` (docs/audit.md).
                let k = if nodes.is_valid(r) {
                    u32::try_from(nv[r]).unwrap_or(0)
                } else {
                    1
                };
                waste::mem_gb_hours_allocated(mv[r] as u64, k, e[r])
            })
            .collect()
    };
    let wasted = |alloc: Vec<f64>, used: &[f64]| -> Vec<f64> {
        alloc
            .iter()
            .zip(used)
            .map(|(&a, &u)| waste::remaining_h(a, u))
            .collect()
    };
    let mut fields = Vec::with_capacity(columns.len());
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(columns.len());
    for &c in columns {
        let a: ArrayRef = match c {
            "core_hours_alloc" => {
                let (cores, el) = (i("alloc_cores")?, f("elapsed_s")?);
                out(core_alloc(cores, el), nulls(&[cores, el]))
            }
            "core_hours_used" => {
                let cpu = f("cpu_usage_s")?;
                Arc::new(cpu.unary::<_, arrow_array::types::Float64Type>(waste::core_hours_used))
            }
            "core_hours_wasted" => {
                let (cores, el, cpu) = (i("alloc_cores")?, f("elapsed_s")?, f("cpu_usage_s")?);
                let used: Vec<f64> = cpu
                    .values()
                    .iter()
                    .map(|&x| waste::core_hours_used(x))
                    .collect();
                out(
                    wasted(core_alloc(cores, el), &used),
                    nulls(&[cores, el, cpu]),
                )
            }
            "mem_gb_hours_alloc" => {
                let (m, nodes, el) = (
                    i("alloc_mem_per_node_bytes")?,
                    i("node_count")?,
                    f("elapsed_s")?,
                );
                out(mem_alloc(m, nodes, el), nulls(&[m, el]))
            }
            "mem_gb_hours_wasted" => {
                let (m, nodes, el, used) = (
                    i("alloc_mem_per_node_bytes")?,
                    i("node_count")?,
                    f("elapsed_s")?,
                    f("mem_gb_hours_used")?,
                );
                out(
                    wasted(mem_alloc(m, nodes, el), used.values()),
                    nulls(&[m, el, used]),
                )
            }
            "gpu_hours_used" => {
                let (a, w) = (f("gpu_hours_alloc")?, f("gpu_hours_wasted")?);
                out(wasted(a.values().to_vec(), w.values()), nulls(&[a, w]))
            }
            other => col(other)?.clone(),
        };
        fields.push(Field::new(c, a.data_type().clone(), true));
        arrays.push(a);
    }
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
}

/// Typed access to one batch's columns by name.
pub struct View<'a> {
    b: &'a RecordBatch,
}

impl<'a> View<'a> {
    pub fn new(b: &'a RecordBatch) -> View<'a> {
        View { b }
    }
    /// The batch's rows.
    pub fn rows(&self) -> usize {
        self.b.num_rows()
    }
    #[inline]
    pub fn col<T: 'static>(&self, name: &str) -> anyhow::Result<&'a T> {
        let a = self
            .b
            .column_by_name(name)
            .ok_or_else(|| anyhow::anyhow!("the index has no column {name}"))?;
        a.as_any()
            .downcast_ref::<T>()
            .ok_or_else(|| anyhow::anyhow!("column {name} has type {}", a.data_type()))
    }
    /// A text column, plain or dictionary-encoded (see [`Text`]).
    #[inline]
    pub fn t(&self, n: &str) -> anyhow::Result<Text<'a>> {
        let a = self
            .b
            .column_by_name(n)
            .ok_or_else(|| anyhow::anyhow!("the index has no column {n}"))?;
        if let Some(s) = a.as_any().downcast_ref::<StringArray>() {
            return Ok(Text::Plain(s));
        }
        if let Some(d) = a.as_any().downcast_ref::<DictionaryArray<Int32Type>>() {
            if let Some(values) = d.values().as_any().downcast_ref::<StringArray>() {
                return Ok(Text::Dict(d, values));
            }
        }
        anyhow::bail!("column {n} has type {}", a.data_type())
    }
    #[inline]
    pub fn i(&self, n: &str) -> anyhow::Result<&'a Int64Array> {
        self.col(n)
    }
    #[inline]
    pub fn f(&self, n: &str) -> anyhow::Result<&'a Float64Array> {
        self.col(n)
    }
    #[inline]
    pub fn b(&self, n: &str) -> anyhow::Result<&'a BooleanArray> {
        self.col(n)
    }
}

/// A text column as read: plain UTF-8 (rows in memory, [`crate::index::ParquetEngine::scan`]) or
/// dictionary-encoded (the index's low-cardinality columns as the Parquet engine's aggregation reads
/// them: each distinct value is looked at once per batch, not once per row).
#[derive(Clone, Copy)]
pub enum Text<'a> {
    Plain(&'a StringArray),
    Dict(&'a DictionaryArray<Int32Type>, &'a StringArray),
}

impl<'a> Text<'a> {
    #[inline]
    pub fn get(&self, i: usize) -> Option<&'a str> {
        match self {
            Text::Plain(a) => (!a.is_null(i)).then(|| a.value(i)),
            Text::Dict(d, values) => {
                if d.is_null(i) {
                    return None;
                }
                let k = d.keys().value(i) as usize;
                (!values.is_null(k)).then(|| values.value(k))
            }
        }
    }

    /// Rows whose value is one of `list` (a null never matches).
    pub fn retain_in(&self, keep: &mut Vec<usize>, list: &[String]) {
        match self {
            Text::Plain(_) => {
                keep.retain(|&i| self.get(i).is_some_and(|x| list.iter().any(|w| w == x)))
            }
            Text::Dict(d, values) => {
                let hit: Vec<bool> = (0..values.len())
                    .map(|k| !values.is_null(k) && list.iter().any(|w| w == values.value(k)))
                    .collect();
                let keys = d.keys();
                keep.retain(|&i| !d.is_null(i) && hit[keys.value(i) as usize]);
            }
        }
    }
}
/// Row `i`'s value (`None`: null).
#[inline]
pub fn oi(a: &Int64Array, i: usize) -> Option<i64> {
    (!a.is_null(i)).then(|| a.value(i))
}
/// Row `i`'s value (`None`: null).
#[inline]
pub fn of(a: &Float64Array, i: usize) -> Option<f64> {
    (!a.is_null(i)).then(|| a.value(i))
}

//! Rows ⇄ Arrow record batches (what the Parquet index stores and the engine reads). Text columns
//! are plain UTF-8 arrays; Parquet dictionary-encodes them on disk.

use super::row::{JobRow, NodeRow, COLUMNS, NODE_COLUMNS};
use super::table::{ColType, Value};
use arrow_array::builder::{BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
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

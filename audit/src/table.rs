//! The result of an audit query, independent of the engine that computed it: typed columns and
//! rows of values. Renderers (aligned text, CSV, JSON, Parquet) and the engine-comparison test
//! work on this alone.

use serde::Serialize;

/// A column's type. Integers are 64-bit; floats are f64; text is UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ColType {
    Int,
    Float,
    Text,
    Bool,
}

/// One cell. `Null` is "not known" (never written as 0).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Value {
    Null,
    Int(i64),
    Float(f64),
    Text(String),
    Bool(bool),
}

impl Value {
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Text(s) => Some(s),
            _ => None,
        }
    }
}

/// What a column's figures measure, declared with the column (query.rs, the admin tables): how a
/// person reads a cell ([`crate::render::human`]). The name says it to scripts (`_pct`, `_bytes`);
/// renderers read this, never the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unit {
    /// Text, flags, counts, labels and plain figures: shown as they are.
    #[default]
    None,
    /// Bytes, shown with their binary unit.
    Bytes,
    /// An instant in Unix seconds, shown on the wall clock of the table's zone.
    UnixS,
    /// The ISO weekday, 1 (Monday) to 7, shown as `Mon`…`Sun`.
    Weekday,
    /// A percentage, one decimal.
    Pct,
    /// A duration in seconds, spelt as durations are (`1h05m`).
    DurationS,
    /// Kilowatt-hours, two decimals.
    KWh,
    /// Hours (core-, GB-, GPU-hours): the report's figures.
    Hours,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Column {
    /// Machine name with its unit (`core_hours_alloc`, `cpu_eff_pct`).
    pub name: String,
    pub kind: ColType,
    /// How people read it; not part of any output for scripts (CSV, JSON, Parquet name and type
    /// only).
    #[serde(skip)]
    pub unit: Unit,
}

impl Column {
    pub fn new(name: &str, kind: ColType, unit: Unit) -> Column {
        Column {
            name: name.to_string(),
            kind,
            unit,
        }
    }
}

/// An audit answer. Rows are in the report's defined order (see [`super::query::Report`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Table {
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Value>>,
}

impl Table {
    pub fn new(columns: Vec<Column>) -> Table {
        Table {
            columns,
            rows: Vec::new(),
        }
    }

    pub fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// The same answer with only the columns named, in that order. A name that is not a column,
    /// an empty one or one given twice is an error that lists the valid names (a misspelt column
    /// would otherwise vanish without a word).
    pub fn select(&self, names: &[impl AsRef<str>]) -> Result<Table, String> {
        let valid = || {
            self.columns
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut picked: Vec<usize> = Vec::with_capacity(names.len());
        for n in names {
            let n = n.as_ref().trim();
            let Some(i) = self.column(n) else {
                return Err(if n.is_empty() {
                    format!("an empty column name; the columns are {}", valid())
                } else {
                    format!(
                        "{n:?} is not a column of this report; the columns are {}",
                        valid()
                    )
                });
            };
            if picked.contains(&i) {
                return Err(format!("the column {n:?} is named twice"));
            }
            picked.push(i);
        }
        Ok(Table {
            columns: picked.iter().map(|&i| self.columns[i].clone()).collect(),
            rows: self
                .rows
                .iter()
                .map(|r| picked.iter().map(|&i| r[i].clone()).collect())
                .collect(),
        })
    }

    /// The same answer, allowing floats to differ by a relative `rel` (engines sum in different
    /// orders). Column names, types, row order, nulls, integers and text must be identical.
    /// `Err` says where the first difference is.
    pub fn same_as(&self, other: &Table, rel: f64) -> Result<(), String> {
        if self.columns != other.columns {
            return Err(format!(
                "columns differ: {:?} vs {:?}",
                self.columns, other.columns
            ));
        }
        if self.rows.len() != other.rows.len() {
            return Err(format!(
                "row counts differ: {} vs {}",
                self.rows.len(),
                other.rows.len()
            ));
        }
        for (r, (a, b)) in self.rows.iter().zip(&other.rows).enumerate() {
            for (c, (x, y)) in a.iter().zip(b).enumerate() {
                let same = match (x, y) {
                    (Value::Float(x), Value::Float(y)) => {
                        (x - y).abs() <= rel * x.abs().max(y.abs()).max(1e-12)
                    }
                    _ => x == y,
                };
                if !same {
                    return Err(format!(
                        "row {r} column {}: {x:?} vs {y:?}",
                        self.columns[c].name
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Table {
        Table {
            columns: vec![
                Column::new("user", ColType::Text, Unit::None),
                Column::new("jobs", ColType::Int, Unit::None),
                Column::new("cpu_eff_pct", ColType::Float, Unit::Pct),
            ],
            rows: vec![vec![
                Value::Text("alice".into()),
                Value::Int(3),
                Value::Null,
            ]],
        }
    }

    #[test]
    fn select_keeps_the_columns_named_in_their_order_and_refuses_others() {
        let s = t().select(&["cpu_eff_pct", "user"]).unwrap();
        assert_eq!(
            s.columns,
            [
                Column::new("cpu_eff_pct", ColType::Float, Unit::Pct),
                Column::new("user", ColType::Text, Unit::None)
            ]
        );
        assert_eq!(s.rows, [vec![Value::Null, Value::Text("alice".into())]]);
        let e = t().select(&["user", "cpu"]).unwrap_err();
        assert_eq!(
            e,
            "\"cpu\" is not a column of this report; the columns are user, jobs, cpu_eff_pct"
        );
        assert!(t().select(&["jobs", "jobs"]).unwrap_err().contains("twice"));
        assert!(t()
            .select(&[""])
            .unwrap_err()
            .contains("an empty column name"));
    }
}

//! Report-level analysis of a [`super::JobSummary`]: scalability, classification, anomalies, advice.
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Analysis {}

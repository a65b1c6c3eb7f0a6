//! The spool on disk: the bounded writers ([`writer`]). The format, its types, decoding and thinning
//! are pure and live in `jobscope_model::spool`; the bounded reader is `jobscope_common::spool`.

// The format's names, for this crate's own code (not re-exported: other crates name the model).
pub(crate) use jobscope_model::spool::*;

pub mod writer;

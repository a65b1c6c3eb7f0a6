//! The spool on disk: the bounded writers and the bounded file reader ([`writer`]). The format, its
//! types, decoding and thinning are pure and live in `jobscope_model::spool`, re-exported here so the
//! plugin and the epilog name one `spool` module.

pub use jobscope_model::spool::*;

pub mod writer;

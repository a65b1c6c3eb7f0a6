//! The spool on disk: the bounded writers ([`writer`]) and the bounded reader ([`read`]). The format, its
//! types, decoding and thinning are pure and live in `jobscope_model::spool`, re-exported here so the
//! plugin and the epilog name one `spool` module.

pub use jobscope_model::spool::*;

pub mod read;
pub mod writer;

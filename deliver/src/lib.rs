//! jobscope's delivery: the report to its reader.
//!
//! - [`notify`]: who is mailed and when (mail policy, array digests, the report in the work dir);
//! - [`mail`]: the end-of-job mail (message, transports, a durable queue).
pub mod mail;
pub mod notify;

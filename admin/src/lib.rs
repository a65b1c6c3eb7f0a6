//! jobscope's admin products, made of the audit engine (jobscope-audit: the index, its queries and
//! their renderings) and sent through the deliver crate's mail queue:
//!
//! - [`cluster`]: the cluster report (`jobscope audit report`): charts, HTML, text and mail made of
//!   the audit's reports;
//! - [`alerts`]: rules over each user's jobs, and one mail per user and period (`jobscope alerts`);
//! - [`watch`]: the site's rules over the jobs running on this node (`jobscope watch`).
//!
//! The engine knows nothing of them: it does not link the deliver crate.
pub mod alerts;
pub mod cluster;
pub mod watch;

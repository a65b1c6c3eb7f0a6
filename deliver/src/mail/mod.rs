//! The end-of-job mail: built from the job summary ([`message`]), put in a durable queue
//! ([`queue`]) and delivered by SMTP or sendmail ([`transport`]) within a time bound, so a slow or
//! dead mail relay neither holds up the epilog nor loses a report.
//!
//! The epilog's part: [`message::choose_recipient`] → [`message::build_mail`] → [`queue::Queue::enqueue`]
//! → [`queue::Queue::flush`] with a deadline of a few seconds. What is not delivered then stays queued
//! for the next epilog or for `jobscope mail flush` (cron).

pub mod message;
pub mod queue;
pub mod transport;

/// A loopback SMTP server for tests: this crate's, and (feature `testing`) other crates' that send
/// through the queue end to end.
#[cfg(any(test, feature = "testing"))]
pub mod test_smtp;

/// The presenter's promises checked on whole mails: the text and HTML views agree on every figure.
#[cfg(test)]
mod view_tests;

//! Delivering one formatted message: SMTP (lettre's `SmtpTransport`) or a local sendmail program.
//!
//! Every delivery is bounded in time, because it runs inside the epilog:
//! - SMTP: lettre's timeout applies to the connect and to each command, and is set to the smaller of
//!   the configured timeout and the time the caller has left. A server that accepts and then says
//!   nothing is given up on after that long. (Name resolution of `host` is not covered by it: use an
//!   address or a name in /etc/hosts for a relay that must never stall the epilog.)
//! - sendmail: lettre's `SendmailTransport` waits for the program without a timeout, so we run the
//!   program ourselves, the way lettre does (`-i -f <from> -- <to…>`, message on stdin, bytes from
//!   lettre's `Message::formatted()`), in its own process group, and SIGKILL the whole group when it
//!   overruns. A program that never reads its input cannot block us either: stdin is written from a
//!   separate thread.
//!
//! Errors say whether trying again can help ([`SendError::is_permanent`]): SMTP 5xx replies and
//! sendmail's "no such user/host, bad data, bad usage" exit codes are permanent; the rest (refused
//! connection, timeout, 4xx, EX_TEMPFAIL, a killed program) are transient.

use jobscope_common::child::{wait_bounded, Bounds};
use lettre::address::Envelope;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The shortest time a delivery attempt is given, even right at the caller's deadline.
pub const MIN_ATTEMPT_TIME: Duration = Duration::from_millis(200);

/// How an SMTP connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TlsMode {
    /// Plain text (a node-local or site relay on a trusted network). Port 25 by convention.
    None,
    /// Plain text, then STARTTLS, which is required (no fall back to plain text). Port 587.
    Starttls,
    /// TLS from the first byte ("SMTPS"). Port 465.
    Tls,
}

#[derive(Clone)]
pub struct SmtpConfig {
    pub host: String,
    pub port: u16,
    pub tls: TlsMode,
    /// AUTH user and password, used only when both are set.
    pub user: Option<String>,
    pub password: Option<String>,
    /// Per connect / per command.
    pub timeout: Duration,
    /// Extra trusted CA certificate(s), PEM, for a relay with a site CA (TLS modes only).
    pub ca_file: Option<PathBuf>,
    /// The EHLO name; default: this host's name.
    pub helo_name: Option<String>,
}

impl std::fmt::Debug for SmtpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the password.
        f.debug_struct("SmtpConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("ca_file", &self.ca_file)
            .field("helo_name", &self.helo_name)
            .finish()
    }
}

#[derive(Debug, Clone)]
pub struct SendmailConfig {
    /// Absolute path (the epilog's PATH is minimal), e.g. `/usr/sbin/sendmail`.
    pub path: PathBuf,
    /// The program is killed (with its process group) after this long.
    pub timeout: Duration,
}

#[derive(Debug, Clone)]
pub enum Transport {
    Smtp(SmtpConfig),
    Sendmail(SendmailConfig),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Worth another try later (connection refused, timeout, 4xx, EX_TEMPFAIL, killed).
    #[error("{0}")]
    Transient(String),
    /// Will fail the same way again (5xx, unknown user): the message should go to the dead letters.
    #[error("{0}")]
    Permanent(String),
    /// The transport is misconfigured (no TLS support built in, missing program, bad CA file). Kept
    /// for retry: the message is fine, the site's setup needs fixing.
    #[error("mail transport configuration: {0}")]
    Config(String),
}

impl SendError {
    pub fn is_permanent(&self) -> bool {
        matches!(self, SendError::Permanent(_))
    }
}

/// Something that can deliver a formatted message. [`Transport`] is the real one; the queue takes any.
pub trait Deliver {
    /// Delivers `message` (RFC 5322 bytes) to `envelope`'s recipients, taking at most about `max_time`.
    fn deliver(
        &self,
        envelope: &Envelope,
        message: &[u8],
        max_time: Duration,
    ) -> Result<(), SendError>;
}

impl Deliver for Transport {
    fn deliver(
        &self,
        envelope: &Envelope,
        message: &[u8],
        max_time: Duration,
    ) -> Result<(), SendError> {
        match self {
            Transport::Smtp(c) => send_smtp(c, envelope, message, max_time),
            Transport::Sendmail(c) => send_sendmail(c, envelope, message, max_time),
        }
    }
}

impl Transport {
    /// A short description for logs (no secrets).
    pub fn describe(&self) -> String {
        match self {
            Transport::Smtp(c) => format!(
                "smtp://{}:{} (tls: {:?}, timeout {:?})",
                c.host, c.port, c.tls, c.timeout
            ),
            Transport::Sendmail(c) => {
                format!("sendmail {} (timeout {:?})", c.path.display(), c.timeout)
            }
        }
    }
}

fn attempt_time(configured: Duration, max_time: Duration) -> Duration {
    configured.min(max_time).max(MIN_ATTEMPT_TIME)
}

#[cfg(feature = "mail-tls")]
fn tls_parameters(
    c: &SmtpConfig,
) -> Result<lettre::transport::smtp::client::TlsParameters, SendError> {
    use lettre::transport::smtp::client::{Certificate, TlsParameters};
    let mut b = TlsParameters::builder(c.host.clone());
    if let Some(path) = &c.ca_file {
        let pem = std::fs::read(path)
            .map_err(|e| SendError::Config(format!("ca_file {}: {e}", path.display())))?;
        let cert = Certificate::from_pem(&pem)
            .map_err(|e| SendError::Config(format!("ca_file {}: {e}", path.display())))?;
        b = b.add_root_certificate(cert);
    }
    b.build_rustls()
        .map_err(|e| SendError::Config(format!("TLS setup: {e}")))
}

fn send_smtp(
    c: &SmtpConfig,
    envelope: &Envelope,
    message: &[u8],
    max_time: Duration,
) -> Result<(), SendError> {
    use lettre::transport::smtp::authentication::Credentials;
    use lettre::transport::smtp::extension::ClientId;
    use lettre::{SmtpTransport, Transport as _};

    #[allow(unused_mut)]
    let mut b = SmtpTransport::builder_dangerous(c.host.as_str())
        .port(c.port)
        .timeout(Some(attempt_time(c.timeout, max_time)));
    match c.tls {
        TlsMode::None => {}
        #[cfg(feature = "mail-tls")]
        TlsMode::Starttls => {
            b = b.tls(lettre::transport::smtp::client::Tls::Required(
                tls_parameters(c)?,
            ))
        }
        #[cfg(feature = "mail-tls")]
        TlsMode::Tls => {
            b = b.tls(lettre::transport::smtp::client::Tls::Wrapper(
                tls_parameters(c)?,
            ))
        }
        #[cfg(not(feature = "mail-tls"))]
        TlsMode::Starttls | TlsMode::Tls => {
            return Err(SendError::Config(format!(
                "tls = {:?} needs jobscope built with the `mail-tls` feature",
                c.tls
            )))
        }
    }
    if let (Some(u), Some(p)) = (&c.user, &c.password) {
        b = b.credentials(Credentials::new(u.clone(), p.clone()));
    }
    if let Some(h) = &c.helo_name {
        b = b.hello_name(ClientId::Domain(h.clone()));
    }
    match b.build().send_raw(envelope, message) {
        Ok(_) => Ok(()),
        Err(e) => {
            let what = format!("smtp {}:{}: {e}", c.host, c.port);
            if e.is_permanent() {
                Err(SendError::Permanent(what))
            } else {
                Err(SendError::Transient(what))
            }
        }
    }
}

/// sysexits(3) codes that another try will not fix.
fn sendmail_exit_is_permanent(code: i32) -> bool {
    matches!(
        code,
        64 /* EX_USAGE */ | 65 /* EX_DATAERR */ | 67 /* EX_NOUSER */ | 68 /* EX_NOHOST */
    )
}

fn send_sendmail(
    c: &SendmailConfig,
    envelope: &Envelope,
    message: &[u8],
    max_time: Duration,
) -> Result<(), SendError> {
    use std::os::unix::process::CommandExt;
    let limit = attempt_time(c.timeout, max_time);
    let mut cmd = Command::new(&c.path);
    cmd.arg("-i");
    if let Some(from) = envelope.from() {
        cmd.arg("-f").arg(AsRef::<str>::as_ref(from));
    }
    cmd.arg("--");
    for to in envelope.to() {
        cmd.arg(AsRef::<str>::as_ref(to));
    }
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        // Its own process group, so an overrun kills whatever it started too.
        .process_group(0);
    let started = Instant::now();
    // ETXTBSY: the program was just written and another thread of this process forked meanwhile,
    // so a child briefly holds it open for writing. It clears within milliseconds.
    let mut spawned = cmd.spawn();
    for _ in 0..20 {
        match &spawned {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(Duration::from_millis(10));
                spawned = cmd.spawn();
            }
            _ => break,
        }
    }
    let child = spawned.map_err(|e| {
        let what = format!("sendmail {}: {e}", c.path.display());
        match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => {
                SendError::Config(what)
            }
            _ => SendError::Transient(what),
        }
    })?;
    let ended = wait_bounded(
        child,
        Some(message.to_vec()),
        Bounds {
            limit: limit.saturating_sub(started.elapsed()),
            max_output_bytes: 4096,
            // A grandchild may keep stderr open: don't wait for it long.
            pipe_grace: Duration::from_millis(200),
            kill_group: true,
        },
    )
    .map_err(|e| SendError::Transient(format!("sendmail {}: waiting: {e}", c.path.display())))?;
    let Some(status) = ended.status else {
        return Err(SendError::Transient(format!(
            "sendmail {}: no answer within {:.1} s; killed",
            c.path.display(),
            limit.as_secs_f64()
        )));
    };
    let wrote = ended.input;
    let err_text = String::from_utf8_lossy(&ended.stderr.bytes)
        .trim()
        .to_string();
    let detail = if err_text.is_empty() {
        String::new()
    } else {
        format!(": {}", crate::mail::message::printable(&err_text))
    };
    match status.code() {
        Some(0) => match wrote {
            Ok(()) => Ok(()),
            Err(e) => Err(SendError::Transient(format!(
                "sendmail {}: exited 0 without reading the whole message ({e})",
                c.path.display()
            ))),
        },
        Some(code) => {
            let what = format!("sendmail {}: exit status {code}{detail}", c.path.display());
            if sendmail_exit_is_permanent(code) {
                Err(SendError::Permanent(what))
            } else {
                Err(SendError::Transient(what))
            }
        }
        None => Err(SendError::Transient(format!(
            "sendmail {}: killed by a signal{detail}",
            c.path.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mail::test_smtp::{Mode, Sink};
    use std::os::unix::fs::PermissionsExt;

    fn envelope() -> Envelope {
        Envelope::new(
            Some("jobscope@cluster.example.org".parse().unwrap()),
            vec!["alice@example.org".parse().unwrap()],
        )
        .unwrap()
    }

    const MSG: &[u8] =
        b"From: jobscope@cluster.example.org\r\nTo: alice@example.org\r\nSubject: t\r\n\r\nline\r\n.\r\n..two\r\nend\r\n";

    fn smtp(port: u16, timeout: Duration) -> Transport {
        Transport::Smtp(SmtpConfig {
            host: "127.0.0.1".into(),
            port,
            tls: TlsMode::None,
            user: None,
            password: None,
            timeout,
            ca_file: None,
            helo_name: Some("node-1.example.org".into()),
        })
    }

    fn script(dir: &std::path::Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn smtp_delivers_byte_exact_with_dot_stuffing() {
        let sink = Sink::start(Mode::Accept);
        smtp(sink.port(), Duration::from_secs(5))
            .deliver(&envelope(), MSG, Duration::from_secs(5))
            .unwrap();
        let got = sink.messages();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].from, "jobscope@cluster.example.org");
        assert_eq!(got[0].to, vec!["alice@example.org".to_string()]);
        assert_eq!(got[0].helo, "node-1.example.org");
        // lettre ends DATA with "\r\n.\r\n" even after a final CRLF: one empty line more, no other change.
        let mut want = MSG.to_vec();
        want.extend_from_slice(b"\r\n");
        assert_eq!(
            String::from_utf8_lossy(&got[0].data),
            String::from_utf8_lossy(&want)
        );
    }

    #[test]
    fn smtp_errors_are_classified() {
        let sink = Sink::start(Mode::RejectRcpt);
        let e = smtp(sink.port(), Duration::from_secs(5))
            .deliver(&envelope(), MSG, Duration::from_secs(5))
            .unwrap_err();
        assert!(e.is_permanent(), "{e}");
        let sink = Sink::start(Mode::TempFailData);
        let e = smtp(sink.port(), Duration::from_secs(5))
            .deliver(&envelope(), MSG, Duration::from_secs(5))
            .unwrap_err();
        assert!(matches!(e, SendError::Transient(_)), "{e}");
        let port = Sink::closed_port();
        let e = smtp(port, Duration::from_secs(5))
            .deliver(&envelope(), MSG, Duration::from_secs(5))
            .unwrap_err();
        assert!(matches!(e, SendError::Transient(_)), "{e}");
    }

    #[test]
    fn smtp_hanging_server_is_bounded_by_max_time() {
        let sink = Sink::start(Mode::Hang);
        let t0 = Instant::now();
        let e = smtp(sink.port(), Duration::from_secs(30))
            .deliver(&envelope(), MSG, Duration::from_millis(500))
            .unwrap_err();
        assert!(matches!(e, SendError::Transient(_)), "{e}");
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "at the 500 ms max time, well before the 30 s SMTP timeout: {:?}",
            t0.elapsed()
        );
    }

    #[cfg(not(feature = "mail-tls"))]
    #[test]
    fn tls_without_the_feature_is_a_config_error() {
        let mut t = smtp(25, Duration::from_secs(1));
        if let Transport::Smtp(c) = &mut t {
            c.tls = TlsMode::Starttls;
            c.password = Some("hunter2".into());
        }
        assert!(!format!("{t:?}").contains("hunter2"));
        let e = t
            .deliver(&envelope(), MSG, Duration::from_secs(1))
            .unwrap_err();
        assert!(matches!(e, SendError::Config(_)), "{e}");
    }

    #[test]
    fn sendmail_gets_args_and_the_exact_bytes() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("out");
        let p = script(
            d.path(),
            "sendmail",
            &format!(
                "printf '%s\\n' \"$@\" > {0}.args\ncat > {0}.msg",
                out.display()
            ),
        );
        let t = Transport::Sendmail(SendmailConfig {
            path: p,
            timeout: Duration::from_secs(10),
        });
        t.deliver(&envelope(), MSG, Duration::from_secs(10))
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(d.path().join("out.args")).unwrap(),
            "-i\n-f\njobscope@cluster.example.org\n--\nalice@example.org\n"
        );
        assert_eq!(std::fs::read(d.path().join("out.msg")).unwrap(), MSG);
    }

    #[test]
    fn sendmail_exit_codes() {
        let d = tempfile::tempdir().unwrap();
        for (code, permanent) in [(75, false), (67, true), (1, false)] {
            let p = script(
                d.path(),
                &format!("s{code}"),
                &format!("cat >/dev/null; echo 'no luck' >&2; exit {code}"),
            );
            let t = Transport::Sendmail(SendmailConfig {
                path: p,
                timeout: Duration::from_secs(10),
            });
            let e = t
                .deliver(&envelope(), MSG, Duration::from_secs(10))
                .unwrap_err();
            assert_eq!(e.is_permanent(), permanent, "{e}");
            assert!(e.to_string().contains("no luck"), "{e}");
        }
        let t = Transport::Sendmail(SendmailConfig {
            path: d.path().join("missing"),
            timeout: Duration::from_secs(1),
        });
        assert!(matches!(
            t.deliver(&envelope(), MSG, Duration::from_secs(1)),
            Err(SendError::Config(_))
        ));
    }

    #[test]
    fn hanging_sendmail_and_its_children_are_killed_in_time() {
        let d = tempfile::tempdir().unwrap();
        let pidfile = d.path().join("grandchild.pid");
        // Never reads stdin (a 1 MiB message fills the pipe), starts a grandchild, waits forever.
        let p = script(
            d.path(),
            "hang",
            &format!("sleep 300 &\necho $! > {}\nwait", pidfile.display()),
        );
        let t = Transport::Sendmail(SendmailConfig {
            path: p,
            timeout: Duration::from_millis(700),
        });
        let big = vec![b'x'; 1 << 20];
        let t0 = Instant::now();
        let e = t
            .deliver(&envelope(), &big, Duration::from_secs(30))
            .unwrap_err();
        let took = t0.elapsed();
        assert!(matches!(e, SendError::Transient(_)), "{e}");
        assert!(e.to_string().contains("killed"), "{e}");
        assert!(
            took < Duration::from_secs(15),
            "killed at the 700 ms timeout, well before the 30 s budget: {took:?}"
        );
        // The grandchild went with the group: gone, or a zombie awaiting its reaper.
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| s.rsplit(')').next().map(|r| r.trim().to_string()));
            match state {
                None => break,
                Some(s) if s.starts_with('Z') || s.starts_with('X') => break,
                Some(s) => assert!(Instant::now() < deadline, "grandchild still running: {s}"),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

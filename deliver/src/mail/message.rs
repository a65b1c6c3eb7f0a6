//! The end-of-job mail as a lettre [`Message`]: who it goes to, and its MIME structure. What the
//! mail SAYS (subject, text, HTML, every figure) comes from the presenter (`jobscope_report::present`): this
//! module draws the charts, puts their Content-IDs into the view, and assembles the parts.
//!
//! ```text
//! multipart/alternative
//! ├── text/plain                 the text report (report-templates/report.txt.hbs, or digest.txt.hbs)
//! └── multipart/related          (plain text/html when there are no charts)
//!     ├── text/html              report-templates/report.html.hbs, <img src="cid:node0-cpu@jobscope">
//!     └── image/png …            one busy-cores and one memory chart per node (first N nodes)
//! ```
//!
//! Every string here can come from a user: `sbatch -J`, `--mail-user`, even the account name. So:
//! - the view holds user text only after `present::clean` (control, bidi and invisible characters
//!   out, capped); the subject is one cleaned line, and lettre RFC 2047-encodes it: no header injection;
//! - the HTML registry escapes every `{{value}}` (handlebars' default), and the built-in templates use
//!   no `{{{triple}}}`: no markup from a job name reaches the HTML;
//! - an address is accepted only as a bare `local@domain` that lettre parses, without control
//!   characters, at most 254 characters, not starting with `-`.
//!
//! Content-IDs are built from node indexes, never from node names.

use jobscope_model::summary::JobSummary;
use jobscope_report::charts;
use jobscope_report::present::{clean, words, ChartImage, Templates, View};
use lettre::message::header::{self, ContentType, Header, HeaderName, HeaderValue};
/// A parsed recipient or sender ([`parse_address`]), as the mail's callers hold it.
pub use lettre::message::Mailbox;
use lettre::message::{Attachment, MultiPart, SinglePart};
use lettre::{Address, Message};

pub use jobscope_report::present::templates::{HTML_FILE, SUBJECT_FILE, SUBJECT_MAX_CHARS};
/// RFC 5321's limit on a forward-path, less the angle brackets.
pub const MAX_ADDRESS_LEN: usize = 254;

/// Why an address was refused. The caller logs it (with [`printable`] of the input); the archive
/// does not depend on the mail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("the address is empty")]
    Empty,
    #[error("the address contains control characters (CR, LF, …)")]
    ControlChars,
    #[error("the address has no '@'")]
    NoAt,
    #[error("the address is {0} bytes long, more than the {MAX_ADDRESS_LEN} allowed")]
    TooLong(usize),
    #[error("the address starts with '-'")]
    LeadingDash,
    #[error("not a valid address: {0}")]
    Invalid(String),
    #[error("no recipient: no usable --mail-user and the job's user name is unknown")]
    NoUser,
    #[error("no recipient: {0:?} has no domain and mail.domain is not configured")]
    NoDomain(String),
}

/// `s` made safe to put into a log line: escaped (`\r`, `\n`, `\u{…}`) and cut at 300 characters.
pub fn printable(s: &str) -> String {
    let e: String = s.escape_debug().take(300).collect();
    if s.escape_debug().nth(300).is_some() {
        e + "…"
    } else {
        e
    }
}

/// Parses one bare address (`local@domain`, no display name, no list).
pub fn parse_address(s: &str) -> Result<Mailbox, AddressError> {
    let s = s.trim_matches(|c| c == ' ' || c == '\t');
    if s.is_empty() {
        return Err(AddressError::Empty);
    }
    if s.chars().any(char::is_control) {
        return Err(AddressError::ControlChars);
    }
    if s.len() > MAX_ADDRESS_LEN {
        return Err(AddressError::TooLong(s.len()));
    }
    if !s.contains('@') {
        return Err(AddressError::NoAt);
    }
    // sendmail gets the address after `--`, but an address that looks like an option is refused anyway.
    if s.starts_with('-') {
        return Err(AddressError::LeadingDash);
    }
    let a: Address = s
        .parse()
        .map_err(|e: lettre::address::AddressError| AddressError::Invalid(e.to_string()))?;
    Ok(Mailbox::new(None, a))
}

/// Where the recipient came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecipientSource {
    /// `--mail-user` (qualified with the configured domain when it was a bare name).
    MailUser,
    /// The job's user name at the configured domain.
    UserAtDomain,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Recipient {
    pub mailbox: Mailbox,
    pub source: RecipientSource,
    /// `--mail-user` was set but refused (printable form, reason); the mail went to the user instead.
    /// The caller should log it.
    pub rejected_mail_user: Option<(String, AddressError)>,
}

/// Chooses the recipient: `--mail-user` if set and valid, else `<user>@<domain>`.
///
/// A `--mail-user` without `@` is a user name (SLURM itself fills `mail_user` with the submitting
/// user's name when the option is not given) and is qualified with `domain`, as SLURM's `MailDomain`
/// does.
pub fn choose_recipient(
    mail_user: Option<&str>,
    user: Option<&str>,
    domain: Option<&str>,
) -> Result<Recipient, AddressError> {
    let qualify = |name: &str| -> Result<Mailbox, AddressError> {
        if name.contains('@') {
            return parse_address(name);
        }
        if name.trim().is_empty() {
            return Err(AddressError::Empty);
        }
        if name.chars().any(char::is_control) {
            return Err(AddressError::ControlChars);
        }
        match domain.map(str::trim).filter(|d| !d.is_empty()) {
            Some(d) => parse_address(&format!("{}@{d}", name.trim())),
            None => Err(AddressError::NoDomain(printable(name))),
        }
    };
    let mut rejected = None;
    if let Some(mu) = mail_user.filter(|m| !m.trim().is_empty()) {
        match qualify(mu) {
            Ok(mailbox) => {
                return Ok(Recipient {
                    mailbox,
                    source: RecipientSource::MailUser,
                    rejected_mail_user: None,
                })
            }
            Err(e) => rejected = Some((printable(mu), e)),
        }
    }
    let user = user
        .filter(|u| !u.trim().is_empty())
        .ok_or(AddressError::NoUser)?;
    if user.contains('@') {
        // A user name is never an address; don't let one pick its own domain.
        return Err(AddressError::Invalid(format!(
            "user name {:?} contains '@'",
            printable(user)
        )));
    }
    Ok(Recipient {
        mailbox: qualify(user)?,
        source: RecipientSource::UserAtDomain,
        rejected_mail_user: rejected,
    })
}

/// A stable identifier for one mail about one job run: `<cluster>.<job_id>.<start_s>.<kind>`, made of
/// `[A-Za-z0-9_-]` and dots only (a safe file name for the queue, and the Message-ID's left side).
/// The start time keeps a requeued job's second run (same job id) from being taken for a duplicate.
pub fn mail_id(s: &JobSummary, kind: &str) -> String {
    let safe = |x: &str, max: usize| -> String {
        let v: String = x
            .chars()
            .take(max)
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if v.is_empty() {
            "_".into()
        } else {
            v
        }
    };
    format!(
        "{}.{}.{}.{}",
        safe(s.cluster.as_deref().unwrap_or("local"), 64),
        s.job_id,
        s.start_unix_ms / 1000,
        safe(kind, 32)
    )
}

/// Content-IDs of a node's charts (by index: node names never reach a header).
fn chart_cids(i: usize) -> (String, String) {
    (
        format!("node{i}-cpu@jobscope"),
        format!("node{i}-mem@jobscope"),
    )
}

/// Content-ID of the job's chart of waiting for a CPU.
const CPU_WAIT_CID: &str = "job-cpu-wait@jobscope";

/// `Auto-Submitted: auto-generated` (RFC 3834): vacation responders and ticket systems don't answer.
#[derive(Debug, Clone)]
struct AutoSubmitted;

impl Header for AutoSubmitted {
    fn name() -> HeaderName {
        HeaderName::new_from_ascii_str("Auto-Submitted")
    }
    fn parse(_s: &str) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        Ok(AutoSubmitted)
    }
    fn display(&self) -> HeaderValue {
        HeaderValue::new(Self::name(), "auto-generated".into())
    }
}

/// How the mail is built (from the site configuration).
#[derive(Debug, Clone)]
pub struct MailOptions {
    pub from: Mailbox,
    /// Chart size in pixels; charts are drawn for the first `max_chart_nodes` nodes only.
    pub chart_width: u32,
    pub chart_height: u32,
    pub max_chart_nodes: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum MailError {
    #[error("rendering the mail: {0}")]
    Render(#[from] jobscope_report::present::templates::RenderError),
    #[error("building the mail: {0}")]
    Build(#[from] lettre::error::Error),
}

/// The `kind` of an array digest mail.
pub const DIGEST_KIND: &str = "array-digest";

/// A built mail, ready for the queue.
#[derive(Debug)]
pub struct Mail {
    /// [`mail_id`]: the queue's key for this mail.
    pub id: String,
    pub message: Message,
    /// Problems that did not stop the mail (a chart that failed, a site template that was refused):
    /// for the caller to log.
    pub warnings: Vec<String>,
}

/// Builds the mail for job summary `s` from its presented `view` (`present::job_view`, or
/// `present::digest_view` for an array digest, which gets no charts). `kind` names this mail in its
/// id (`end` for the end-of-job report).
pub fn build_mail(
    s: &JobSummary,
    view: &View,
    to: &Mailbox,
    kind: &str,
    opts: &MailOptions,
    templates: &Templates,
) -> Result<Mail, MailError> {
    let id = mail_id(s, kind);
    let mut warnings = Vec::new();
    let mut view = view.clone();
    // A digest's content is its task table: one task's charts would show it as if it were the array.
    let charted = if view.digest.is_some() {
        0
    } else {
        opts.max_chart_nodes
    };

    // Charts first: the HTML names only the ones that exist.
    let mut images: Vec<InlineImage> = Vec::new();
    let size = (opts.chart_width, opts.chart_height);
    // One time axis for every chart of the job.
    let axis_s = charts::job_axis_s(s);
    let nodes = view
        .report
        .as_mut()
        .map(|r| &mut r.nodes[..])
        .unwrap_or(&mut []);
    let mut shown = 0;
    for (i, (n, nv)) in s
        .nodes
        .iter()
        .zip(nodes.iter_mut())
        .take(charted)
        .enumerate()
    {
        shown += 1;
        let (cpu_cid, mem_cid) = chart_cids(i);
        for (what, cid, png, slot) in [
            (
                "busy cores",
                cpu_cid,
                charts::busy_cores_png(n, axis_s, size.0, size.1),
                &mut nv.cpu_chart,
            ),
            (
                "memory",
                mem_cid,
                charts::memory_png(n, axis_s, size.0, size.1),
                &mut nv.mem_chart,
            ),
        ] {
            match png {
                Ok(png) => {
                    images.push(InlineImage {
                        cid: cid.clone(),
                        png,
                    });
                    *slot = Some(cid);
                }
                Err(e) => warnings.push(format!(
                    "job {}: {what} chart of node {} left out: {e}",
                    s.job_id,
                    printable(&clean(&n.node, 64))
                )),
            }
        }
    }
    // The job's waiting for a CPU, a line per node charted above (the kernel view), where a
    // collector gave it at least two readings.
    let waiting = charts::cpu_wait_nodes(&s.nodes, charted);
    if !waiting.is_empty() {
        match charts::cpu_wait_png(&waiting, axis_s, size.0, size.1) {
            Ok(png) => {
                let cid = CPU_WAIT_CID.to_string();
                images.push(InlineImage {
                    cid: cid.clone(),
                    png,
                });
                view.charts.cpu_wait = Some(ChartImage {
                    cid,
                    alt: words::cpu_wait_chart_alt(&waiting),
                });
            }
            Err(e) => warnings.push(format!(
                "job {}: waiting-for-a-CPU chart left out: {e}",
                s.job_id
            )),
        }
    }
    view.charts.width = size.0;
    view.charts.height = size.1;
    view.charts.shown = shown;
    view.charts.omitted = view.digest.is_none() && shown < s.nodes.len();

    let subject = templates.render_subject(&view, &mut warnings)?;
    let text = templates.render_text(&view)?;
    let html = templates.render_html(&view, &mut warnings)?;

    let message = assemble(
        &id,
        &opts.from,
        std::slice::from_ref(to),
        subject,
        text,
        html,
        images,
    )?;
    Ok(Mail {
        id,
        message,
        warnings,
    })
}

/// A picture the HTML part names as `cid:<cid>`: an inline part beside it.
#[derive(Debug, Clone)]
pub struct InlineImage {
    /// The Content-ID, without angle brackets (`node0-cpu@jobscope`): made by jobscope, never
    /// of user text.
    pub cid: String,
    pub png: Vec<u8>,
}

/// A jobscope mail from its rendered parts: the headers every one carries (Message-ID from `id`,
/// `Auto-Submitted`, `User-Agent`) and the MIME structure of the module's head, with `images` as
/// the inline parts of the HTML. The end-of-job report, the array digest and the cluster report
/// (`jobscope audit report --mail`) are all made here.
pub fn assemble(
    id: &str,
    from: &Mailbox,
    to: &[Mailbox],
    subject: String,
    text: String,
    html: String,
    images: Vec<InlineImage>,
) -> Result<Message, lettre::error::Error> {
    let images: Vec<SinglePart> = images
        .into_iter()
        .map(|i| {
            Attachment::new_inline(i.cid).body(
                i.png,
                ContentType::parse("image/png").expect("valid MIME type"),
            )
        })
        .collect();
    let text_part = SinglePart::plain(text);
    let html_part = SinglePart::html(html);
    let body = if images.is_empty() {
        MultiPart::alternative()
            .singlepart(text_part)
            .singlepart(html_part)
    } else {
        let related = images
            .into_iter()
            .fold(MultiPart::related().singlepart(html_part), |m, p| {
                m.singlepart(p)
            });
        MultiPart::alternative()
            .singlepart(text_part)
            .multipart(related)
    };

    let domain = from.email.domain().to_string();
    let builder = to
        .iter()
        .fold(Message::builder().from(from.clone()), |b, m| {
            b.to(m.clone())
        });
    builder
        .subject(subject)
        .message_id(Some(format!("<jobscope.{id}@{domain}>")))
        .header(AutoSubmitted)
        .header(header::UserAgent::from(
            jobscope_report::GENERATOR.to_string(),
        ))
        .multipart(body)
}

/// A mail of a plain-text part and an HTML part (no images) under queue id `id` (a stable
/// [`jobscope_common::fsutil::is_safe_name`], so that queueing it twice queues it once): what the
/// audit's alerts send. The caller renders both parts (HTML through the presenter's escaping
/// registry); the subject is made one clean line here, as the job mail's is.
pub fn text_and_html_mail(
    id: &str,
    from: &Mailbox,
    to: &Mailbox,
    subject: &str,
    text: String,
    html: String,
) -> Result<Mail, MailError> {
    let subject = jobscope_report::present::clean_line(subject, SUBJECT_MAX_CHARS);
    Ok(Mail {
        id: id.to_string(),
        message: assemble(
            id,
            from,
            std::slice::from_ref(to),
            subject,
            text,
            html,
            Vec::new(),
        )?,
        warnings: Vec::new(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use jobscope_model::summary::*;
    use jobscope_report::present::{job_view, Templates};
    use mail_parser::{MessageParser, MimeHeaders};

    pub(crate) fn summary() -> JobSummary {
        let timeline: Vec<Point> = (0..40)
            .map(|i| Point {
                t_s: i as f64 * 30.0,
                busy_cores: Some((i % 5) as f64),
                busy_cores_max: Some((i % 5) as f64 + 0.5),
                mem_bytes: Some((i as u64 + 1) << 28),
                mem_bytes_max: Some((i as u64 + 2) << 28),
                io_bytes_per_s: None,
                tasks: Some(3),
                cpu_wait_pct: None,
                runnable_threads: None,
            })
            .collect();
        let node = |name: &str| NodeSummary {
            node: name.into(),
            job_id: 1234,
            uid: 1000,
            start_unix_ms: 1_795_305_466_000,
            end_unix_ms: 1_795_305_466_000 + 11_520_000,
            elapsed_s: 11_520.0,
            alloc_cores: Some(4),
            alloc_mem_bytes: Some(16 << 30),
            cpu: CpuTotals {
                usage_s: Some(20_736.0),
                ..Default::default()
            },
            mem: MemTotals {
                peak_bytes: Some(11 << 29),
                limit_bytes: Some(16 << 30),
                ..Default::default()
            },
            tasks_max: Some(3),
            cpu_efficiency_pct: Some(45.0),
            steps: vec![StepSummary {
                step: "batch".into(),
                start_unix_ms: Some(1_795_305_466_000),
                end_unix_ms: Some(1_795_305_466_000 + 11_520_000),
                elapsed_s: Some(11_520.0),
                cpu_s: Some(20_000.0),
                mem_peak_bytes: Some(5 << 30),
                exit_status: Some(0),
            }],
            timeline: timeline.clone(),
            quality: Quality {
                samples: 40,
                sampler_ended_cleanly: true,
                ..Default::default()
            },
            ..Default::default()
        };
        JobSummary {
            schema_version: SCHEMA_VERSION,
            generator: "jobscope test".into(),
            cluster: Some("alpha".into()),
            job_id: 1234,
            array_job_id: None,
            array_task_id: None,
            name: Some("train".into()),
            user: Some("alice".into()),
            uid: Some(1000),
            gid: None,
            group: None,
            account: Some("proj1".into()),
            partition: Some("cpu".into()),
            qos: None,
            submit_unix_s: None,
            state: jobscope_model::job::JobState::Completed,
            end_reason: None,
            exit_code: Some(0),
            start_unix_ms: 1_795_305_466_000,
            end_unix_ms: 1_795_305_466_000 + 11_520_000,
            elapsed_s: 11_520.0,
            scheduler_start_unix_s: None,
            alloc: Allocation {
                nodes: 2,
                cores: Some(8),
                mem_per_node_bytes: Some(16 << 30),
                gpus: None,
                time_limit_s: Some(86_400),
            },
            cpu: CpuTotals {
                usage_s: Some(41_472.0),
                user_s: Some(40_000.0),
                system_s: Some(1_472.0),
                throttled_s: None,
                throttled_periods: None,
            },
            mem: MemTotals {
                peak_bytes: Some(11 << 29),
                limit_bytes: Some(16 << 30),
                ..Default::default()
            },
            io: IoTotals::default(),
            pressure: None,
            kernel: None,
            script_sha256: None,
            efficiency: Efficiency {
                cpu_pct: Some(45.0),
                mem_pct: Some(23.4),
                time_pct: Some(13.3),
            },
            nodes: vec![node("node-1"), node("node-2")],
            missing_nodes: vec![],
            partial: false,
            partial_reasons: vec![],
            samples: 80,
            user_options: Default::default(),
            analysis: None,
        }
    }

    pub(crate) fn opts() -> MailOptions {
        MailOptions {
            from: parse_address("jobscope@cluster.example.org").unwrap(),
            chart_width: 480,
            chart_height: 200,
            max_chart_nodes: 8,
        }
    }

    fn build(s: &JobSummary) -> Mail {
        let to = parse_address("alice@example.org").unwrap();
        build_mail(s, &job_view(s), &to, "end", &opts(), Templates::builtin()).unwrap()
    }

    #[test]
    fn builtin_subject() {
        let s = summary();
        let mut w = vec![];
        let subj = Templates::builtin()
            .render_subject(&job_view(&s), &mut w)
            .unwrap();
        assert_eq!(
            subj,
            "Job 1234 (train) COMPLETED in 3h12m: CPU 45 %, mem 23 %"
        );
        assert!(w.is_empty());
    }

    #[test]
    fn message_structure_text_html_and_inline_charts() {
        let s = summary();
        let text = Templates::builtin().render_text(&job_view(&s)).unwrap();
        let mail = build(&s);
        assert!(mail.warnings.is_empty(), "{:?}", mail.warnings);
        assert_eq!(mail.id, "alpha.1234.1795305466.end");
        let raw = mail.message.formatted();
        let m = MessageParser::default().parse(&raw).expect("parses");
        assert_eq!(
            m.subject(),
            Some("Job 1234 (train) COMPLETED in 3h12m: CPU 45 %, mem 23 %")
        );
        assert_eq!(
            m.message_id(),
            Some("jobscope.alpha.1234.1795305466.end@cluster.example.org")
        );
        assert_eq!(
            m.header_raw("Auto-Submitted").map(str::trim),
            Some("auto-generated")
        );
        assert_eq!(m.content_type().unwrap().subtype(), Some("alternative"));
        assert_eq!(m.body_text(0).unwrap().replace("\r\n", "\n"), text);
        assert!(
            text.starts_with("jobscope report: job 1234 (train)\n"),
            "{text}"
        );
        let html = m.body_html(0).unwrap();
        assert!(html.contains("Job 1234 (train)"));
        // 2 nodes × 2 charts, each a PNG whose Content-ID the HTML names.
        let imgs: Vec<_> = m.attachments().collect();
        assert_eq!(imgs.len(), 4);
        for p in imgs {
            assert_eq!(p.content_type().unwrap().ctype(), "image");
            let cid = p.content_id().expect("Content-ID");
            assert!(html.contains(&format!("src=\"cid:{cid}\"")), "{cid}");
            let dec = png::Decoder::new(std::io::Cursor::new(p.contents()));
            let info = dec.read_info().unwrap();
            assert_eq!((info.info().width, info.info().height), (480, 200));
        }
        let env = mail.message.envelope();
        assert_eq!(env.to().len(), 1);
        assert_eq!(env.to()[0].to_string(), "alice@example.org");
    }

    #[test]
    fn charts_only_for_the_first_nodes_and_none_at_all() {
        let s = summary();
        let to = parse_address("alice@example.org").unwrap();
        let mut o = opts();
        o.max_chart_nodes = 1;
        let mail = build_mail(&s, &job_view(&s), &to, "end", &o, Templates::builtin()).unwrap();
        let raw = mail.message.formatted();
        let m = MessageParser::default().parse(&raw).unwrap();
        assert_eq!(m.attachments().count(), 2);
        assert!(m.body_html(0).unwrap().contains("first 1 of 2 nodes"));
        o.max_chart_nodes = 0;
        let mail = build_mail(&s, &job_view(&s), &to, "end", &o, Templates::builtin()).unwrap();
        let raw = mail.message.formatted();
        let m = MessageParser::default().parse(&raw).unwrap();
        assert_eq!(m.attachments().count(), 0);
        assert!(m.body_html(0).unwrap().contains("node-2"));
        // A chart size out of range: the mail still goes, without charts, with warnings.
        o.max_chart_nodes = 8;
        o.chart_width = 1;
        let mail = build_mail(&s, &job_view(&s), &to, "end", &o, Templates::builtin()).unwrap();
        assert_eq!(mail.warnings.len(), 4, "{:?}", mail.warnings);
        let raw = mail.message.formatted();
        let m = MessageParser::default().parse(&raw).unwrap();
        assert_eq!(m.attachments().count(), 0);
        assert!(!m.body_html(0).unwrap().contains("cid:"));
    }

    #[test]
    fn hostile_strings_do_not_inject_headers_or_markup() {
        let mut s = summary();
        let lossy = String::from_utf8_lossy(b"bad\xff\xfeutf8").into_owned();
        let evil = format!(
            "x\r\nBcc: evil@example.com\r\nX-Evil: 1\n<script>alert('x')</script>\u{202E}{lossy}{}",
            "A".repeat(10 * 1024)
        );
        s.name = Some(evil.clone());
        s.user = Some(evil.clone());
        s.account = Some(evil.clone());
        s.end_reason = Some(jobscope_model::job::EndReason::Legacy { text: evil.clone() });
        s.partial = true;
        s.partial_reasons = vec![evil.clone()];
        s.nodes[0].node = evil.clone();
        s.nodes[0].steps[0].step = evil.clone();
        let mail = build(&s);
        let raw = mail.message.formatted();
        let m = MessageParser::default().parse(&raw).expect("parses");

        // Headers: exactly the ones we set, no Bcc, no X-Evil, one recipient.
        assert!(m.header_raw("Bcc").is_none());
        assert!(m.header_raw("X-Evil").is_none());
        assert_eq!(m.to().unwrap().iter().count(), 1);
        let raw_text = String::from_utf8_lossy(&raw);
        let head = &raw_text[..raw_text.find("\r\n\r\n").unwrap()];
        assert!(!head
            .lines()
            .any(|l| l.starts_with("Bcc:") || l.starts_with("X-Evil:")));
        for l in head.split("\r\n") {
            assert!(l.len() <= 998, "header line of {} bytes", l.len());
            assert!(!l.contains('\n') && !l.contains('\r'));
        }
        let subj = m.subject().unwrap();
        assert!(!subj.chars().any(|c| c.is_control() || c == '\u{202E}'));
        assert!(subj.chars().count() <= SUBJECT_MAX_CHARS + 1, "{subj}");
        assert!(
            subj.starts_with("Job 1234 (xBcc: evil@example.com"),
            "{subj}"
        );

        // HTML: the name is there, escaped, and no markup from it.
        let html = m.body_html(0).unwrap();
        assert!(!html.contains("<script"));
        assert!(html.contains("&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;"));
        assert!(html.contains('\u{FFFD}'));
        assert!(!html.contains('\u{202E}'));
        assert_eq!(html.matches("<img ").count(), 4);
        // The text part: the name is there, cleaned (no CR/LF injected lines, no bidi override).
        let got = m.body_text(0).unwrap().replace("\r\n", "\n");
        assert!(
            got.starts_with("jobscope report: job 1234 (xBcc: evil@example.comX-Evil: 1<script>"),
            "{got}"
        );
        assert!(!got.contains('\u{202E}') && !got.lines().any(|l| l.starts_with("Bcc:")));
    }

    /// `summary()` with the kernel view on both nodes: node-1's threads waited for a CPU 41 % of
    /// their runnable time (59 s running, 41 s waiting), at worst 83 % over an interval; node-2's
    /// 12 % (88 s, 12 s), at worst 20 %.
    fn with_kernel_view() -> JobSummary {
        let mut s = summary();
        for (n, (run_s, wait_s, worst)) in s
            .nodes
            .iter_mut()
            .zip([(59.0, 41.0, 83.0), (88.0, 12.0, 20.0)])
        {
            n.kernel = Some(KernelTotals {
                run_s: Some(run_s),
                cpu_wait_s: Some(wait_s),
                ..Default::default()
            });
            for (i, p) in n.timeline.iter_mut().enumerate().skip(1) {
                p.cpu_wait_pct = Some(if i == 20 { worst } else { 5.0 });
                p.runnable_threads = Some(4.0);
            }
        }
        s.kernel = KernelTotals::sum(s.nodes.iter().filter_map(|n| n.kernel.as_ref()));
        s
    }

    /// The inline images of `mail` by Content-ID, and its HTML part.
    fn images_and_html(mail: &Mail) -> (Vec<String>, String) {
        let raw = mail.message.formatted();
        let m = MessageParser::default().parse(&raw).expect("parses");
        let cids = m
            .attachments()
            .map(|p| {
                let dec = png::Decoder::new(std::io::Cursor::new(p.contents()));
                let info = dec.read_info().expect("a PNG");
                assert_eq!((info.info().width, info.info().height), (480, 200));
                p.content_id().expect("Content-ID").to_string()
            })
            .collect();
        (cids, m.body_html(0).unwrap().to_string())
    }

    #[test]
    fn the_cpu_wait_chart_is_inlined_under_the_kernel_view_only_with_one() {
        let alt = "Threads waited for a CPU 41 % of their runnable time on node node-1 (at worst 83 %), 12 % on node node-2 (at worst 20 %)";
        // No kernel view: the node charts only, and nothing of this chart in the HTML.
        let (cids, html) = images_and_html(&build(&summary()));
        assert_eq!(cids.len(), 4);
        assert!(!html.contains(CPU_WAIT_CID) && !html.contains("waited for a CPU"));

        let s = with_kernel_view();
        let mail = build(&s);
        assert!(mail.warnings.is_empty(), "{:?}", mail.warnings);
        let (cids, html) = images_and_html(&mail);
        assert_eq!(cids.len(), 5, "{cids:?}");
        assert!(cids.iter().any(|c| c == CPU_WAIT_CID), "{cids:?}");
        let img = html
            .find(&format!("src=\"cid:{CPU_WAIT_CID}\""))
            .expect("the HTML shows the chart");
        assert!(html.contains(&format!("alt=\"{alt}\"")), "{html}");
        // In the kernel view's row, before the waste table.
        let (kernel, waste) = (
            html.find("Kernel view").unwrap(),
            html.find("Waste").unwrap(),
        );
        assert!(kernel < img && img < waste, "{kernel} {img} {waste}");

        // The text part has no chart and says what it said without the timeline's shares.
        let mut no_timeline = s.clone();
        for p in no_timeline
            .nodes
            .iter_mut()
            .flat_map(|n| n.timeline.iter_mut())
        {
            p.cpu_wait_pct = None;
        }
        let text = Templates::builtin().render_text(&job_view(&s)).unwrap();
        assert_eq!(
            text,
            Templates::builtin()
                .render_text(&job_view(&no_timeline))
                .unwrap()
        );
        assert!(text.contains("Kernel view") && !text.contains("cid:"));
        // ... and without them, no chart in the mail (the totals alone are no picture of time).
        let (cids, _) = images_and_html(&build(&no_timeline));
        assert_eq!(cids.len(), 4);

        // Only the nodes charted: with one, one line, and the words say so.
        let to = parse_address("alice@example.org").unwrap();
        let mut o = opts();
        o.max_chart_nodes = 1;
        let mail = build_mail(&s, &job_view(&s), &to, "end", &o, Templates::builtin()).unwrap();
        let (cids, html) = images_and_html(&mail);
        assert_eq!(cids.len(), 3);
        assert!(html.contains(
            "alt=\"Threads waited for a CPU 41 % of their runnable time on node node-1 (at worst 83 %)\""
        ));
        // No charts at all, and a digest: none of this one either.
        o.max_chart_nodes = 0;
        let mail = build_mail(&s, &job_view(&s), &to, "end", &o, Templates::builtin()).unwrap();
        assert_eq!(images_and_html(&mail).0.len(), 0);
        let view = jobscope_report::present::digest_view(&s, 1234, Some("sweep"), &[]);
        let mail = build_mail(&s, &view, &to, DIGEST_KIND, &opts(), Templates::builtin()).unwrap();
        assert_eq!(images_and_html(&mail).0.len(), 0);
        // A size out of range: the mail goes without it, and says why.
        o.max_chart_nodes = 8;
        o.chart_width = 1;
        let mail = build_mail(&s, &job_view(&s), &to, "end", &o, Templates::builtin()).unwrap();
        assert_eq!(mail.warnings.len(), 5, "{:?}", mail.warnings);
        assert!(mail.warnings[4].contains("waiting-for-a-CPU chart left out"));
        assert!(!images_and_html(&mail).1.contains("cid:"));
    }

    #[test]
    fn the_cpu_wait_charts_words_are_escaped() {
        let mut s = with_kernel_view();
        s.nodes[0].node = "n1\" onerror=\"alert(1)\u{202E}<b>".into();
        let (_, html) = images_and_html(&build(&s));
        assert!(
            !html.contains("onerror=\"") && !html.contains("<b>") && !html.contains('\u{202E}')
        );
        assert!(
            html.contains("on node n1&quot; onerror&#x3D;&quot;alert(1)&lt;b&gt; (at worst 83 %)"),
            "{html}"
        );
    }

    #[test]
    fn a_digest_shows_its_table_in_both_parts_and_no_charts() {
        let mut s = summary();
        s.name = Some("<b>sweep</b>: array digest, 2 tasks".into());
        let rows = vec![jobscope_report::present::ArrayRow {
            task_id: 1,
            job_id: 1235,
            state: jobscope_model::job::JobState::Completed,
            elapsed_s: 61.0,
            cpu_pct: Some(50.0),
            mem_peak_bytes: Some(1 << 20),
            mem_pct: Some(10.0),
        }];
        let view = jobscope_report::present::digest_view(&s, 1234, Some("<b>sweep</b>"), &rows);
        let to = parse_address("alice@example.org").unwrap();
        let mail = build_mail(&s, &view, &to, DIGEST_KIND, &opts(), Templates::builtin()).unwrap();
        let raw = mail.message.formatted();
        let m = MessageParser::default().parse(&raw).unwrap();
        assert_eq!(m.attachments().count(), 0);
        let text = m.body_text(0).unwrap().replace("\r\n", "\n");
        assert!(
            text.starts_with(
                "jobscope array digest: job array 1234 (<b>sweep</b>)\n1 tasks, 1 completed\n"
            ),
            "{text}"
        );
        let row = |body: &str| {
            body.lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .find(|w| w.get(1) == Some(&"1235"))
                .unwrap_or_default()
                .join(" ")
        };
        assert_eq!(row(&text), "1 1235 COMPLETED 1m01s 50.0 % 1.0 MiB");
        let html = m.body_html(0).unwrap();
        assert_eq!(row(&html), row(&text), "{html}");
        assert!(
            html.contains("&lt;b&gt;sweep&lt;/b&gt;") && !html.contains("<b>"),
            "{html}"
        );
        assert!(mail.id.ends_with(".array-digest"));
    }

    #[test]
    fn addresses() {
        use AddressError::*;
        let cases: Vec<(String, AddressError)> = vec![
            ("".into(), Empty),
            ("alice@example.org\r\nBcc: x@y.z".into(), ControlChars),
            ("alice.example.org".into(), NoAt),
            (format!("{}@example.org", "a".repeat(250)), TooLong(262)),
            ("-oQ/tmp@example.org".into(), LeadingDash),
        ];
        for (a, want) in cases {
            assert_eq!(parse_address(&a).unwrap_err(), want, "{a:?}");
        }
        for bad in [
            "Alice <alice@example.org>",
            "a@b@c",
            "a b@example.org",
            "alice@",
            "@x",
        ] {
            assert!(matches!(parse_address(bad), Err(Invalid(_))), "{bad:?}");
        }
        assert_eq!(
            parse_address(" alice@example.org ").unwrap().to_string(),
            "alice@example.org"
        );
    }

    #[test]
    fn recipient_choice() {
        let d = Some("example.org");
        let r = choose_recipient(Some("bob@lab.example.com"), Some("alice"), d).unwrap();
        assert_eq!(r.mailbox.to_string(), "bob@lab.example.com");
        assert_eq!(r.source, RecipientSource::MailUser);
        // SLURM's default mail_user is the user name: qualified with the domain.
        let r = choose_recipient(Some("alice"), Some("alice"), d).unwrap();
        assert_eq!(r.mailbox.to_string(), "alice@example.org");
        assert_eq!(r.source, RecipientSource::MailUser);
        // A bad --mail-user: falls back to the user, and says why.
        let r = choose_recipient(Some("x@y\r\nBcc: z@w"), Some("alice"), d).unwrap();
        assert_eq!(r.mailbox.to_string(), "alice@example.org");
        assert_eq!(r.source, RecipientSource::UserAtDomain);
        let (shown, why) = r.rejected_mail_user.unwrap();
        assert_eq!(why, AddressError::ControlChars);
        assert!(shown.contains("\\r\\n"), "{shown}");
        // Nothing usable.
        assert_eq!(
            choose_recipient(None, None, d).unwrap_err(),
            AddressError::NoUser
        );
        assert!(matches!(
            choose_recipient(None, Some("alice"), None),
            Err(AddressError::NoDomain(_))
        ));
        assert!(choose_recipient(None, Some("evil@attacker.example"), d).is_err());
        assert!(choose_recipient(None, Some("a\nb"), d).is_err());
        assert!(choose_recipient(Some(""), Some("alice"), d)
            .unwrap()
            .rejected_mail_user
            .is_none());
    }

    #[test]
    fn site_templates_override_and_fall_back() {
        let s = summary();
        let dir = tempfile::tempdir().unwrap();
        // A good subject and an HTML template that does not parse.
        std::fs::write(
            dir.path().join(SUBJECT_FILE),
            "[{{cluster}}] job {{job_id}}: {{state}}\n",
        )
        .unwrap();
        std::fs::write(dir.path().join(HTML_FILE), "<p>{{#if state}}unclosed").unwrap();
        let (t, w) = Templates::load(Some(dir.path()));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("report.html.hbs does not parse"), "{}", w[0]);
        let mut w = vec![];
        assert_eq!(
            t.render_subject(&job_view(&s), &mut w).unwrap(),
            "[alpha] job 1234: COMPLETED"
        );
        assert!(t
            .render_html(&job_view(&s), &mut w)
            .unwrap()
            .contains("Job 1234"));
        assert!(w.is_empty());

        // Templates that parse but name a field the view lacks: strict mode fails the render, and the
        // built-in one is used, with a warning.
        std::fs::write(dir.path().join(SUBJECT_FILE), "{{no_such_field}}").unwrap();
        std::fs::write(dir.path().join(HTML_FILE), "<p>{{job.nope}}</p>").unwrap();
        let (t, w) = Templates::load(Some(dir.path()));
        assert!(w.is_empty(), "{w:?}");
        let mut w = vec![];
        assert!(t
            .render_subject(&job_view(&s), &mut w)
            .unwrap()
            .starts_with("Job 1234 (train)"));
        assert!(t
            .render_html(&job_view(&s), &mut w)
            .unwrap()
            .contains("<!DOCTYPE html>"));
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("subject.hbs failed to render"), "{}", w[0]);

        // A site subject that renders to nothing: the built-in one.
        std::fs::write(dir.path().join(SUBJECT_FILE), "{{#if partial}}x{{/if}}\r\n").unwrap();
        let (t, _) = Templates::load(Some(dir.path()));
        let mut w = vec![];
        assert!(t
            .render_subject(&job_view(&s), &mut w)
            .unwrap()
            .starts_with("Job 1234"));
        assert_eq!(w.len(), 1, "{w:?}");

        // A site HTML template escapes too.
        std::fs::write(dir.path().join(HTML_FILE), "<p>{{name}}</p>").unwrap();
        let (t, _) = Templates::load(Some(dir.path()));
        let mut s2 = s.clone();
        s2.name = Some("<b>x</b>".into());
        let out = t.render_html(&job_view(&s2), &mut w).unwrap();
        assert_eq!(out, "<p>&lt;b&gt;x&lt;/b&gt;</p>");

        // A missing directory: a warning, built-ins.
        let (_, w) = Templates::load(Some(&dir.path().join("nope")));
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn mail_ids_are_safe_names() {
        let mut s = summary();
        s.cluster = Some("../evil cluster\n".into());
        s.array_job_id = Some(1200);
        s.array_task_id = Some(34);
        let id = mail_id(&s, "end");
        assert_eq!(id, "___evil_cluster_.1234.1795305466.end");
        assert!(jobscope_common::fsutil::is_safe_name(&id));
        s.cluster = None;
        assert!(mail_id(&s, "end").starts_with("local."));
    }
}

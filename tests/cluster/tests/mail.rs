//! The end-of-job mail and the archive's tamper evidence, on the real test cluster: a real SMTP
//! server on loopback (aiosmtpd, started and stopped by each test), a real local MTA (exim4,
//! "local delivery only") behind `sendmail`, and `jobscope archive verify` on a copy of the archive.
//!
//! The test cluster's config (slurm-conf/jobscope.toml) mails `<user>@localhost` over SMTP to
//! 127.0.0.1:2525 with `min_elapsed_s = 0`, a 2 s flush budget and a 1 s first retry; tests that need
//! another transport or relay edit /etc/jobscope/jobscope.toml through a guard that restores it.
//! Every message is parsed with mail-parser and tied to its job by its Message-ID.
//!
//! Needs `slurm-conf/cluster.sh up` (as root) and slurm-conf/install-deps.sh's python3-aiosmtpd
//! and exim4-daemon-light.

use anyhow::{bail, ensure, Context, Result};
use jobscope_cluster_tests::jobscope::*;
use jobscope_cluster_tests::mail::*;
use jobscope_cluster_tests::*;
use mail_parser::{MessageParser, MimeHeaders};
use serde_json::Value;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(180);
const FROM: &str = "jobscope@localhost";
const DOMAIN: &str = "localhost";

/// ~4 s of CPU on one core holding ~100 MiB: a job with real numbers in its report.
const BURN_JOB: &str = r#"#!/bin/bash
python3 -c '
import time
a = bytearray(100 * 1024 * 1024)
for i in range(0, len(a), 4096):
    a[i] = 1
end = time.time() + 4
while time.time() < end:
    pass
'
"#;

const SHORT_JOB: &str = "#!/bin/bash\nsleep 2\n";

fn completed(id: u32) -> Result<()> {
    let state = wait_job_squeue(id, T)?;
    ensure!(state == "COMPLETED", "job {id}: {state}");
    Ok(())
}

/// Text with `\r\n` as `\n`, trailing whitespace off every line and off the end.
fn normalise(s: &str) -> String {
    s.replace("\r\n", "\n")
        .lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
        .trim_end()
        .to_string()
}

/// `4 s`, `12m05s`, `3h12m`, `1d01h00m` (the subject's durations) in seconds.
fn parse_short_duration(s: &str) -> Option<f64> {
    let mut total = 0.0;
    let mut num = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() || c == '.' {
            num.push(c);
            continue;
        }
        // `6 s`, as every duration is spelled beside `15.5 s`; `1m05s` stays one token.
        if c == ' ' {
            continue;
        }
        let n: f64 = num.parse().ok()?;
        num.clear();
        total += n * match c {
            'd' => 86_400.0,
            'h' => 3600.0,
            'm' => 60.0,
            's' => 1.0,
            _ => return None,
        };
    }
    num.is_empty().then_some(total)
}

/// `Job <label> (<name>) <STATE> in <elapsed>: CPU <c> %, mem <m> %` → (rest before " in ", elapsed s, c, m).
fn parse_subject(subject: &str) -> Option<(String, f64, f64, f64)> {
    let (head, tail) = subject.rsplit_once(" in ")?;
    let (elapsed, eff) = tail.split_once(": ")?;
    let eff = eff.strip_prefix("CPU ")?;
    let (cpu, mem) = eff.split_once(" %, mem ")?;
    let mem = mem.strip_suffix(" %")?;
    Some((
        head.to_string(),
        parse_short_duration(elapsed)?,
        cpu.parse().ok()?,
        mem.parse().ok()?,
    ))
}

/// The one address of an address header.
fn single_address(a: Option<&mail_parser::Address<'_>>) -> Result<String> {
    let a = a.context("header missing")?;
    let all: Vec<String> = a
        .iter()
        .filter_map(|x| x.address().map(str::to_string))
        .collect();
    ensure!(all.len() == 1, "expected one address, got {all:?}");
    Ok(all[0].clone())
}

/// Header checks every jobscope mail must pass, whatever the job's name: it parses, has exactly
/// one From and one To (with the expected recipient), no Bcc/Cc or injected header, no control
/// characters in the subject, header lines within RFC 5322's 998 bytes.
fn check_headers(d: &Delivered, to: &str) -> Result<()> {
    let m = d.parse()?;
    ensure!(
        d.rcpt_tos == vec![to.to_string()],
        "{}: envelope recipients {:?}, expected [{to}]",
        d.file.display(),
        d.rcpt_tos
    );
    ensure!(d.mail_from == FROM, "envelope sender {}", d.mail_from);
    ensure!(single_address(m.from())? == FROM);
    ensure!(single_address(m.to())? == to);
    ensure!(
        m.bcc().is_none() && m.cc().is_none(),
        "Bcc/Cc present: {:?} {:?}",
        m.bcc(),
        m.cc()
    );
    let names: Vec<String> = header_lines(&d.raw)
        .iter()
        .filter_map(|l| l.split_once(':').map(|(k, _)| k.to_ascii_lowercase()))
        .collect();
    let allowed = [
        "from",
        "to",
        "subject",
        "message-id",
        "auto-submitted",
        "user-agent",
        "mime-version",
        "date",
        "content-type",
        "content-transfer-encoding",
    ];
    for n in &names {
        ensure!(
            allowed.contains(&n.as_str()),
            "{}: unexpected header {n:?} (all: {names:?})",
            d.file.display()
        );
    }
    for l in header_block(&d.raw).split("\r\n") {
        ensure!(l.len() <= 998, "header line of {} bytes", l.len());
        ensure!(
            !l.contains('\n') && !l.contains('\r'),
            "bare CR/LF in a header line"
        );
    }
    let subject = m.subject().context("no subject")?;
    ensure!(
        !subject.chars().any(|c| c.is_control()),
        "control characters in the subject {subject:?}"
    );
    ensure!(
        m.header_raw("Auto-Submitted").map(str::trim) == Some("auto-generated"),
        "Auto-Submitted: {:?}",
        m.header_raw("Auto-Submitted")
    );
    Ok(())
}

fn html_of(d: &Delivered) -> Result<String> {
    let m = d.parse()?;
    ensure!(
        m.html_body_count() == 1,
        "{} HTML parts",
        m.html_body_count()
    );
    Ok(m.body_html(0).context("no HTML part")?.into_owned())
}

fn text_of(d: &Delivered) -> Result<String> {
    let m = d.parse()?;
    ensure!(
        m.text_body_count() == 1,
        "{} text parts",
        m.text_body_count()
    );
    let part = m.text_part(0).context("no text part")?;
    let ct = part
        .content_type()
        .context("text part without Content-Type")?;
    ensure!(
        ct.ctype() == "text" && ct.subtype() == Some("plain"),
        "first text part is {}/{:?}",
        ct.ctype(),
        ct.subtype()
    );
    Ok(m.body_text(0).context("no text part")?.into_owned())
}

/// Context for a failure: the epilog log lines of the job and what the sink received.
fn what_happened(cur: &LogCursor, job: u32, sink: Option<&SmtpSink>) -> String {
    let mut s = format!(
        "epilog log for job {job}:\n  {}",
        cur.job_lines(job).join("\n  ")
    );
    if let Some(sink) = sink {
        s += &format!(
            "\nthe sink ({}) has {} message(s): {:?}",
            sink.dir().display(),
            sink.messages().len(),
            sink.messages()
                .iter()
                .map(|d| d.message_id())
                .collect::<Vec<_>>()
        );
    }
    s += &format!("\nqueued for the job: {:?}", queued_for_job(job));
    s
}

/// The one mail about `job` the sink has now (the epilog delivers before it returns, so by the time
/// the job has left COMPLETING the mail is there).
fn the_mail(sink: &SmtpSink, cur: &LogCursor, job: u32) -> Result<Delivered> {
    let got = sink.for_job(job);
    ensure!(
        got.len() == 1,
        "job {job}: {} mails delivered, expected 1\n{}",
        got.len(),
        what_happened(cur, job, Some(sink))
    );
    Ok(got.into_iter().next().unwrap())
}

// ------------------------------------------------------------------ SMTP: headers, parts, values

/// One real job, one mail over SMTP: headers, the text part (exactly `jobscope show`), the HTML
/// part, the inline charts (real PNGs of the configured size), and the subject's numbers against
/// the archived summary.
#[test]
fn smtp_mail_matches_the_archived_report() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let sink = sink_with_empty_queue()?;
    let cur = LogCursor::now();
    let id = submit("alice", &["--job-name=mailcheck", "--mem=1G"], BURN_JOB)?;
    completed(id)?;
    let s = summary(id)?;
    let d = the_mail(&sink, &cur, id)?;
    let to = format!("alice@{DOMAIN}");
    check_headers(&d, &to)?;
    let m = d.parse()?;
    ensure!(
        d.job() == Some((id, "end".to_string())),
        "Message-ID {:?}",
        d.message_id()
    );

    // Subject: `Job <id> (mailcheck) COMPLETED in <elapsed>: CPU <c> %, mem <m> %`.
    let subject = m.subject().unwrap();
    let (head, elapsed, cpu, mem) =
        parse_subject(subject).with_context(|| format!("subject {subject:?}"))?;
    ensure!(
        head == format!("Job {id} (mailcheck) COMPLETED"),
        "subject {subject:?}"
    );
    let cpu_pct = f64_at(&s, "/efficiency/cpu_pct")?;
    let mem_pct = f64_at(&s, "/efficiency/mem_pct")?;
    ensure!(
        (cpu - cpu_pct).abs() <= 0.5,
        "subject CPU {cpu} % vs archived {cpu_pct:.2} %"
    );
    ensure!(
        (mem - mem_pct).abs() <= 0.5,
        "subject mem {mem} % vs archived {mem_pct:.2} %"
    );
    let elapsed_s = f64_at(&s, "/elapsed_s")?;
    ensure!(
        (elapsed - elapsed_s).abs() <= 1.0,
        "subject elapsed {elapsed} s vs archived {elapsed_s} s"
    );
    // The job burnt ~4 s of one core: the numbers are real, not zero.
    ensure!(cpu_pct > 30.0, "CPU efficiency {cpu_pct}");

    // Structure: multipart/alternative of text/plain and (HTML + charts).
    let ct = m.content_type().context("no Content-Type")?;
    ensure!(
        ct.ctype() == "multipart" && ct.subtype() == Some("alternative"),
        "top-level {}/{:?}",
        ct.ctype(),
        ct.subtype()
    );
    let text = text_of(&d)?;
    let shown = report_text(id)?;
    ensure!(
        normalise(&text) == normalise(&shown),
        "the mail's text part differs from `jobscope show {id}`:\n--- mail\n{text}\n--- show\n{shown}"
    );
    ensure!(text.contains(&format!("job {id} (mailcheck)")), "{text}");

    let html = html_of(&d)?;
    ensure!(html.contains(&format!("Job {id}")) && html.contains("mailcheck"));

    // Inline charts: a busy-cores and a memory chart per node, and, where the kernel view gave
    // a node at least two figures of its wait for a CPU (a collector ran: the host's test
    // cluster starts one), one chart of that wait; PNGs of the configured size, each named by
    // the HTML.
    let size = (
        config_u64("mail.chart_width")? as u32,
        config_u64("mail.chart_height")? as u32,
    );
    let node_list = s["nodes"].as_array().context("nodes")?;
    let nodes = node_list.len();
    let waits = |n: &Value| {
        n["timeline"].as_array().map_or(0, |t| {
            t.iter().filter(|p| p["cpu_wait_pct"].is_number()).count()
        })
    };
    let wait_chart = node_list.iter().any(|n| waits(n) >= 2);
    let imgs: Vec<_> = m.attachments().collect();
    ensure!(
        imgs.len() == 2 * nodes + usize::from(wait_chart),
        "{} images for {nodes} node(s){}",
        imgs.len(),
        if wait_chart {
            " and the wait for a CPU"
        } else {
            ""
        }
    );
    ensure!(
        html.contains("cid:job-cpu-wait@jobscope") == wait_chart,
        "the CPU-wait chart in the HTML: {}, expected {wait_chart}",
        !wait_chart
    );
    for p in imgs {
        let ct = p.content_type().context("image without Content-Type")?;
        ensure!(ct.ctype() == "image" && ct.subtype() == Some("png"));
        let cid = p.content_id().context("image without Content-ID")?;
        ensure!(
            html.contains(&format!("cid:{cid}")),
            "HTML does not show {cid}"
        );
        let dec = png::Decoder::new(std::io::Cursor::new(p.contents()));
        let reader = dec.read_info().context("not a PNG")?;
        let info = reader.info();
        ensure!(
            (info.width, info.height) == size,
            "{cid}: {}x{} PNG, configured {}x{}",
            info.width,
            info.height,
            size.0,
            size.1
        );
    }

    // Delivered by the epilog itself, nothing left queued.
    ensure!(
        queued_for_job(id).is_empty(),
        "{}",
        what_happened(&cur, id, Some(&sink))
    );
    ensure!(sent_markers_for_job(id).len() == 1);
    eprintln!(
        "job {id}: mail delivered in the epilog ({} ms): {subject}",
        cur.epilog_ms(id).unwrap_or(0)
    );
    Ok(())
}

/// `--jobscope-mail=never` is handed from sbatch via job_prolog to the extern step's spool and the
/// summary (`user_options.mail`): no mail, but archived. The job next to it, with `--mail-user`,
/// shows the sink was taking mail at the time, and goes to that address; a third, with
/// `--mail-type=FAIL`, completes and so gets no mail.
#[test]
fn opt_out_sends_nothing_and_mail_user_is_honoured() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let sink = sink_with_empty_queue()?;
    let cur = LogCursor::now();
    let never = submit(
        "alice",
        &["--job-name=optout", "--jobscope-mail=never"],
        SHORT_JOB,
    )?;
    // SLURM 22.05 shows --mail-user only together with --mail-type (scontrol; squeue --json has neither).
    let bob = submit(
        "alice",
        &[
            "--job-name=tobob",
            "--mail-type=END",
            "--mail-user=bob@localhost",
        ],
        SHORT_JOB,
    )?;
    // --mail-type=FAIL alone: the user only wants to hear about failures.
    let failonly = submit(
        "alice",
        &["--job-name=failonly", "--mail-type=FAIL"],
        SHORT_JOB,
    )?;
    completed(never)?;
    completed(bob)?;
    completed(failonly)?;

    let s = summary(never)?;
    ensure!(
        str_at(&s, "/user_options/mail")? == "never",
        "job {never}: user_options {}",
        s["user_options"]
    );
    // On its way the option went through the node's spool header.
    ensure!(
        str_at(&s, "/nodes/0/user_options/mail")? == "never",
        "job {never}: node user_options {}",
        s["nodes"][0]["user_options"]
    );
    ensure!(
        cur.job_lines(never)
            .iter()
            .any(|l| l.contains("no mail (policy never; policy from --jobscope-mail)")),
        "{}",
        what_happened(&cur, never, Some(&sink))
    );
    let d = the_mail(&sink, &cur, bob)?;
    check_headers(&d, "bob@localhost")?;
    summary(failonly)?;
    ensure!(
        cur.job_lines(failonly)
            .iter()
            .any(|l| l
                .contains("no mail (policy fail and the job completed; policy from --mail-type)")),
        "{}",
        what_happened(&cur, failonly, Some(&sink))
    );
    ensure!(sink.for_job(failonly).is_empty() && queued_for_job(failonly).is_empty());
    ensure!(
        sink.for_job(never).is_empty()
            && queued_for_job(never).is_empty()
            && sent_markers_for_job(never).is_empty(),
        "job {never} opted out but: {}",
        what_happened(&cur, never, Some(&sink))
    );
    Ok(())
}

// ------------------------------------------------------------------ sendmail through a real MTA

/// `mail.transport = "sendmail"`: /usr/sbin/sendmail is exim4 ("local delivery only"), which
/// writes the message into /var/mail/alice. It arrives once, with the right subject and text.
#[test]
fn sendmail_delivers_through_the_local_mta() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    // The Epilog runs where slurmd does: under 24.11, inside the root filesystem, whose own exim4
    // (slurm-conf/trixie/rootfs.sh) delivers into the /var/mail it shares with the host.
    let sendmail = release_root()
        .unwrap_or_else(|| PathBuf::from("/"))
        .join("usr/sbin/sendmail");
    let target = std::fs::read_link(&sendmail).unwrap_or_default();
    ensure!(
        target.to_string_lossy().contains("exim4"),
        "{} is not exim4 ({target:?}): run slurm-conf/install-deps.sh (it installs \
         exim4-daemon-light, local delivery only, where no other MTA is installed) or, for 24.11, \
         slurm-conf/trixie/rootfs.sh build",
        sendmail.display()
    );
    let _cfg = edit_config(&[("mail.transport", "sendmail".into())])?;
    // Old undelivered mail of other tests (queued for the SMTP sink they did not start) would take
    // the Epilog's flush budget before this job's mail: deliver it through exim first.
    let out = flush_queue(120)?;
    eprintln!("drained the mail queue: {out}");
    let cur = LogCursor::now();
    let mbox = MboxCursor::now("alice");
    let id = submit("alice", &["--job-name=viasendmail"], SHORT_JOB)?;
    completed(id)?;
    summary(id)?;
    let lines = cur.job_lines(id);
    ensure!(
        cur.lines()
            .iter()
            .any(|l| l.contains("via sendmail /usr/sbin/sendmail") && !l.contains(" 0 sent")),
        "{}",
        what_happened(&cur, id, None)
    );
    // exim delivers in a process of its own right after accepting: give it a moment.
    let about = |raw: &Vec<u8>| -> bool {
        MessageParser::default()
            .parse(raw)
            .and_then(|m| m.message_id().and_then(parse_mail_id))
            .is_some_and(|(j, _)| j == id)
    };
    wait_for(
        &format!("job {id}'s mail in {}", mbox.path().display()),
        Duration::from_secs(30),
        || mbox.messages().iter().any(about).then_some(()),
    )
    .with_context(|| format!("{lines:?}"))?;
    std::thread::sleep(Duration::from_secs(2));
    let mine: Vec<Vec<u8>> = mbox.messages().into_iter().filter(|m| about(m)).collect();
    ensure!(
        mine.len() == 1,
        "job {id}: {} copies in the mbox",
        mine.len()
    );
    let m = MessageParser::default().parse(&mine[0]).context("parse")?;
    let subject = m.subject().context("subject")?;
    ensure!(
        subject.starts_with(&format!("Job {id} (viasendmail) COMPLETED in ")),
        "subject {subject:?}"
    );
    ensure!(single_address(m.to())? == format!("alice@{DOMAIN}"));
    ensure!(single_address(m.from())? == FROM);
    // exim adds its own Received/Envelope-to/Return-path headers; the body is ours, intact.
    ensure!(
        m.return_address() == Some(FROM),
        "Return-path {:?}",
        m.return_address()
    );
    let text = m.body_text(0).context("text part")?;
    ensure!(
        normalise(&text) == normalise(&report_text(id)?),
        "text part differs"
    );
    ensure!(
        queued_for_job(id).is_empty(),
        "{}",
        what_happened(&cur, id, None)
    );
    Ok(())
}

// ------------------------------------------------------------------ relay down or hanging

/// The relay is down during the epilog: the job completes and is archived, its mail waits in the
/// queue; once the relay is back, `jobscope mail flush` delivers it exactly once, and a second flush
/// sends nothing more.
#[test]
fn smtp_down_then_flush_delivers_exactly_once() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    wait_smtp_port_free(Duration::from_secs(5))?;
    let cur = LogCursor::now();
    let id = submit("alice", &["--job-name=whiledown"], SHORT_JOB)?;
    completed(id)?;
    let s = summary(id)?;
    ensure!(str_at(&s, "/state")? == "COMPLETED");
    archive_file(id)?;
    let q = queued_for_job(id);
    ensure!(
        q.len() == 1,
        "job {id}: queued {q:?}\n{}",
        what_happened(&cur, id, None)
    );
    ensure!(
        cur.job_lines(id)
            .iter()
            .any(|l| l.starts_with(&format!("job {id}: mail ")) && l.contains(": Queued")),
        "{}",
        what_happened(&cur, id, None)
    );
    let lines = cur.lines();
    ensure!(
        lines
            .iter()
            .any(|l| l.contains("mail flush: ") && !l.contains(" 0 deferred")),
        "no deferred delivery logged: {lines:?}"
    );
    let listed = jobscope(&["mail", "list"])?;
    let qid = q[0].file_stem().unwrap().to_string_lossy().to_string();
    ensure!(
        listed.success() && listed.stdout.contains(&qid),
        "mail list: {listed:?}"
    );

    // The relay comes back.
    let t_up = Instant::now();
    let sink = SmtpSink::start()?;
    let up_ms = unix_ms_now();
    wait_until_due(id, Duration::from_secs(40))?;
    let t_flush = Instant::now();
    let out = flush_queue(60)?;
    let flush_ms = t_flush.elapsed().as_millis();
    let got = sink.for_job(id);
    ensure!(got.len() == 1, "after flush ({out}): {} mails", got.len());
    check_headers(&got[0], &format!("alice@{DOMAIN}"))?;
    ensure!(normalise(&text_of(&got[0])?) == normalise(&report_text(id)?));
    ensure!(queued_for_job(id).is_empty(), "still queued after delivery");
    ensure!(sent_markers_for_job(id).len() == 1);
    eprintln!(
        "job {id}: delivered {} ms after the relay came back ({} ms of that the flush: {out}); \
         {} ms from relay start to the flush",
        got[0].received_unix_ms.saturating_sub(up_ms),
        flush_ms,
        t_flush.duration_since(t_up).as_millis()
    );
    // Again: nothing more.
    let out2 = flush_queue(60)?;
    std::thread::sleep(Duration::from_millis(300));
    ensure!(
        sink.for_job(id).len() == 1,
        "a second flush ({out2}) sent it again"
    );
    Ok(())
}

fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A relay that accepts the connection and never answers: the epilog still returns within its
/// flush budget (+3 s for everything else), the mail stays queued, and goes out intact later.
#[test]
fn hanging_smtp_server_does_not_hold_up_the_epilog() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let budget_ms = config_u64("mail.flush_budget_s")? * 1000;
    let hang = HangingServer::start()?;
    let cur = LogCursor::now();
    let id = submit("alice", &["--job-name=hung-relay"], SHORT_JOB)?;
    completed(id)?;
    summary(id)?;
    let ms = cur
        .epilog_ms(id)
        .with_context(|| format!("no epilog timing line\n{}", what_happened(&cur, id, None)))?;
    ensure!(
        hang.connections() >= 1,
        "the epilog never connected to the hanging relay"
    );
    ensure!(
        ms < budget_ms + 3000,
        "epilog took {ms} ms with a hanging relay (flush budget {budget_ms} ms)"
    );
    ensure!(
        queued_for_job(id).len() == 1,
        "{}",
        what_happened(&cur, id, None)
    );
    eprintln!(
        "job {id}: epilog {ms} ms with a relay that never answers (budget {budget_ms} ms, {} connection(s))",
        hang.connections()
    );
    drop(hang);

    // The queued message is whole: it goes out once the relay works.
    let sink = SmtpSink::start()?;
    wait_until_due(id, Duration::from_secs(40))?;
    let out = flush_queue(60)?;
    let got = sink.for_job(id);
    ensure!(got.len() == 1, "after flush ({out}): {} mails", got.len());
    check_headers(&got[0], &format!("alice@{DOMAIN}"))?;
    ensure!(normalise(&text_of(&got[0])?) == normalise(&report_text(id)?));
    Ok(())
}

// ------------------------------------------------------------------ hostile input

struct Hostile {
    what: &'static str,
    args: Vec<OsString>,
    id: u32,
}

fn os(s: &str) -> OsString {
    OsString::from(s)
}

/// Job names and comments with CR/LF + `Bcc:`, markup, the longest name SLURM takes (1024
/// characters) and bytes that are not UTF-8; and `--mail-user` values that are not addresses.
/// Every mail parses, goes to the job's user only, has no injected header and no markup from the
/// name; the bad `--mail-user` is refused with a reason in the epilog log; everything is archived.
#[test]
fn hostile_names_and_mail_users_inject_nothing() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let sink = sink_with_empty_queue()?;
    let cur = LogCursor::now();
    let crlf = "x\r\nBcc: evil@example.com\r\nX-Injected: yes";
    let script = "<script>alert(1)</script>";
    let long = format!("long-{}", "L".repeat(1019));
    let mut jobs = vec![
        Hostile {
            what: "CR/LF + Bcc in the name",
            args: vec![os("-J"), os(crlf), os("--comment"), os(crlf)],
            id: 0,
        },
        Hostile {
            what: "markup in the name",
            args: vec![os("-J"), os(script), os("--comment"), os(script)],
            id: 0,
        },
        Hostile {
            what: "a 1024-character name",
            args: vec![os("-J"), os(&long)],
            id: 0,
        },
        Hostile {
            what: "bytes that are not UTF-8 in name and comment",
            args: vec![
                os("-J"),
                OsString::from_vec(b"bad\xff\xfeutf8".to_vec()),
                os("--comment"),
                OsString::from_vec(b"c\xffomment\xc3".to_vec()),
            ],
            id: 0,
        },
        Hostile {
            what: "CR/LF + Bcc in --mail-user",
            args: vec![
                os("-J"),
                os("badrcpt1"),
                os("--mail-type=END"),
                os("--mail-user=alice@localhost\r\nBcc: evil@example.com"),
            ],
            id: 0,
        },
        Hostile {
            what: "--mail-user that is no address",
            args: vec![
                os("-J"),
                os("badrcpt2"),
                os("--mail-type=END"),
                os("--mail-user=not an address"),
            ],
            id: 0,
        },
    ];
    for j in &mut jobs {
        j.id = submit_os("alice", &j.args, SHORT_JOB)
            .with_context(|| format!("submitting the job with {}", j.what))?;
    }
    for j in &jobs {
        completed(j.id).with_context(|| j.what)?;
    }
    let to = format!("alice@{DOMAIN}");
    for j in &jobs {
        let ctx = || format!("job {} ({})", j.id, j.what);
        let s = summary(j.id).with_context(ctx)?;
        let d = the_mail(&sink, &cur, j.id).with_context(ctx)?;
        check_headers(&d, &to).with_context(ctx)?;
        let m = d.parse()?;
        let subject = m.subject().unwrap_or_default().to_string();
        ensure!(
            subject.starts_with(&format!("Job {} (", j.id)),
            "{}: subject {subject:?}",
            ctx()
        );
        ensure!(
            subject.chars().count() <= 161,
            "{}: subject of {} chars",
            ctx(),
            subject.chars().count()
        );
        let html = html_of(&d)?;
        ensure!(
            !html.to_ascii_lowercase().contains("<script"),
            "{}: markup in the HTML",
            ctx()
        );
        ensure!(html.contains(&format!("Job {}", j.id)), "{}", ctx());
        text_of(&d).with_context(ctx)?;
        match j.what {
            "CR/LF + Bcc in the name" => {
                ensure!(subject.contains("xBcc: evil@example.com"), "{subject:?}");
            }
            "markup in the name" => {
                ensure!(
                    html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
                    "the name is not shown escaped"
                );
                ensure!(str_at(&s, "/name")? == script);
            }
            "a 1024-character name" => {
                ensure!(str_at(&s, "/name")? == long, "archived name differs");
                // The subject shows the first 60 characters of a name.
                ensure!(
                    subject.starts_with(&format!("Job {} (long-LLLL", j.id))
                        && subject.contains("L…) COMPLETED in "),
                    "long name not cut in the subject: {subject:?}"
                );
                ensure!(
                    html.contains(&long[..120]),
                    "the HTML shows the name's first 120 characters"
                );
            }
            "bytes that are not UTF-8 in name and comment" => {
                let name = str_at(&s, "/name")?;
                ensure!(
                    name.starts_with("bad") && name.contains('\u{FFFD}'),
                    "archived name {name:?}"
                );
            }
            "CR/LF + Bcc in --mail-user" => {
                let l = cur.job_lines(j.id);
                ensure!(
                    l.iter().any(|l| l.contains("--mail-user")
                        && l.contains("refused (the address contains control characters")),
                    "no refusal logged: {l:?}"
                );
            }
            "--mail-user that is no address" => {
                let l = cur.job_lines(j.id);
                ensure!(
                    l.iter()
                        .any(|l| l.contains("--mail-user not an address refused (")),
                    "no refusal logged: {l:?}"
                );
            }
            _ => {}
        }
    }
    // Nothing anywhere went to the injected address.
    for d in sink.messages() {
        ensure!(
            !d.rcpt_tos.iter().any(|r| r.contains("evil")),
            "{}: sent to {:?}",
            d.file.display(),
            d.rcpt_tos
        );
    }
    Ok(())
}

// ------------------------------------------------------------------ arrays

/// A 5-task array gets ONE digest mail when its last task ends: a row per task and the runtime and
/// memory histograms; no task gets a mail of its own.
#[test]
fn array_gets_one_digest_and_no_task_mails() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let sink = sink_with_empty_queue()?;
    let cur = LogCursor::now();
    let script = "#!/bin/bash\n#SBATCH --job-name=digest --array=1-5 --mem=500M\n\
                  python3 -c \"import time; a = bytearray($SLURM_ARRAY_TASK_ID * 30 * 1024 * 1024); \
                  a[::4096] = b'x' * len(a[::4096]); time.sleep(1 + $SLURM_ARRAY_TASK_ID)\"\n";
    let array = submit("alice", &[], script)?;
    let tasks = wait_array(array, 5, T)?;
    for t in &tasks {
        ensure!(t.state == "COMPLETED", "task {t:?}");
        let s = summary(t.job_id)?;
        ensure!(
            s["array_job_id"].as_u64() == Some(array as u64)
                && s["array_task_id"].as_u64() == t.array_task_id.map(u64::from),
            "job {}: array fields {} {}",
            t.job_id,
            s["array_job_id"],
            s["array_task_id"]
        );
    }
    let ids: Vec<u32> = tasks.iter().map(|t| t.job_id).collect();
    let about_array = |d: &Delivered| d.job().is_some_and(|(j, _)| j == array || ids.contains(&j));
    let digest = wait_for("the array digest", Duration::from_secs(30), || {
        sink.messages().into_iter().find(|d| about_array(d))
    })
    .with_context(|| what_happened(&cur, array, Some(&sink)))?;
    // The digest comes from the last task's epilog; give any stray per-task mail time to show.
    std::thread::sleep(Duration::from_secs(3));
    let all: Vec<Delivered> = sink
        .messages()
        .into_iter()
        .filter(|d| about_array(d))
        .collect();
    ensure!(
        all.len() == 1,
        "{} mails about array {array} (tasks {ids:?}): {:?}",
        all.len(),
        all.iter().map(|d| d.message_id()).collect::<Vec<_>>()
    );
    ensure!(
        digest.job() == Some((array, "array-digest".to_string())),
        "Message-ID {:?}",
        digest.message_id()
    );
    for id in &ids {
        ensure!(queued_for_job(*id).is_empty(), "job {id} has a queued mail");
    }
    check_headers(&digest, &format!("alice@{DOMAIN}"))?;
    let m = digest.parse()?;
    // The subject speaks for the array: its id, the longest task, the tasks' mean efficiencies.
    let subject = m.subject().unwrap_or_default();
    let (head, elapsed, cpu, mem) =
        parse_subject(subject).with_context(|| format!("subject {subject:?}"))?;
    ensure!(
        head == format!("Job {array} (digest: array digest, 5 tasks) COMPLETED"),
        "subject {subject:?}"
    );
    let mut sums = Vec::new();
    for t in &tasks {
        sums.push(summary(t.job_id)?);
    }
    let longest = sums
        .iter()
        .map(|s| f64_at(s, "/elapsed_s"))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .fold(0.0, f64::max);
    let mean = |ptr: &str| -> Result<f64> {
        let v = sums
            .iter()
            .map(|s| f64_at(s, ptr))
            .collect::<Result<Vec<_>>>()?;
        Ok(v.iter().sum::<f64>() / v.len() as f64)
    };
    ensure!(
        (elapsed - longest).abs() <= 1.0,
        "subject elapsed {elapsed} vs longest task {longest}"
    );
    let (mcpu, mmem) = (mean("/efficiency/cpu_pct")?, mean("/efficiency/mem_pct")?);
    ensure!(
        (cpu - mcpu).abs() <= 0.5,
        "subject CPU {cpu} vs the tasks' mean {mcpu:.2}"
    );
    ensure!(
        (mem - mmem).abs() <= 0.5,
        "subject mem {mem} vs the tasks' mean {mmem:.2}"
    );
    ensure!(
        m.attachments().count() == 0,
        "charts of one task in the digest"
    );
    let text = text_of(&digest)?;
    ensure!(
        text.contains(&format!(
            "jobscope array digest: job array {array} (digest)"
        )) && text.contains("5 tasks, 5 completed"),
        "{text}"
    );
    // One row per task: `<task> <job> COMPLETED <elapsed> <cpu> <mem>`.
    for t in &tasks {
        let task = t.array_task_id.unwrap();
        let row = text
            .lines()
            .map(str::split_whitespace)
            .map(|w| w.collect::<Vec<_>>())
            .find(|w| w.len() >= 6 && w[0] == task.to_string() && w[1].parse::<u32>().is_ok())
            .with_context(|| format!("no row for task {task}:\n{text}"))?;
        ensure!(
            row[1] == t.job_id.to_string() && row[2] == "COMPLETED",
            "row {row:?} for {t:?}"
        );
    }
    // The two histograms count all 5 tasks each.
    for title in ["Runtime:", "Memory peak:"] {
        let counts: Vec<usize> = text
            .split(title)
            .nth(1)
            .with_context(|| format!("no {title} histogram:\n{text}"))?
            .lines()
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
            .map(|l| l.split_whitespace().last().and_then(|c| c.parse().ok()))
            .collect::<Option<Vec<usize>>>()
            .with_context(|| format!("{title} histogram unreadable:\n{text}"))?;
        ensure!(
            counts.len() == 5 && counts.iter().sum::<usize>() == 5,
            "{title} {counts:?}"
        );
    }
    // The HTML alternative says the same: the task table, not one task's report.
    let html = html_of(&digest)?;
    ensure!(
        html.contains(&format!(
            "jobscope array digest: job array {array} (digest)"
        )),
        "HTML part is not the digest:\n{html}"
    );
    for t in &tasks {
        ensure!(
            html.lines().any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() >= 3
                    && w[0] == t.array_task_id.unwrap().to_string()
                    && w[1] == t.job_id.to_string()
            }),
            "HTML part has no row for task {:?}",
            t
        );
    }
    eprintln!("array {array}: one digest: {subject}");
    Ok(())
}

// ------------------------------------------------------------------ archive verify

fn cp_a(from: &Path, to: &Path) -> Result<()> {
    let out = Command::new("/bin/cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .output()?;
    ensure!(
        out.status.success(),
        "cp -a {} {}: {}",
        from.display(),
        to.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Day directories (`YYYY/MM/DD`) below an archive root.
fn day_dirs(root: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    let num = |p: &Path| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().chars().all(|c| c.is_ascii_digit()))
    };
    for y in std::fs::read_dir(root).into_iter().flatten().flatten() {
        if !num(&y.path()) {
            continue;
        }
        for m in std::fs::read_dir(y.path()).into_iter().flatten().flatten() {
            for d in std::fs::read_dir(m.path()).into_iter().flatten().flatten() {
                if d.path().is_dir() {
                    v.push(d.path());
                }
            }
        }
    }
    v.sort();
    v
}

/// Archive files from before the manifest existed are not evidence of anything: in the copy, drop
/// day directories without a MANIFEST, and unlisted files older than a day's first listed one.
/// Returns how many files were dropped.
fn drop_pre_manifest_files(root: &Path) -> Result<usize> {
    let mut dropped = 0;
    for day in day_dirs(root) {
        let manifest = day.join("MANIFEST");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            dropped += std::fs::read_dir(&day)?.count();
            std::fs::remove_dir_all(&day)?;
            continue;
        };
        let listed: Vec<&str> = text.lines().filter_map(|l| l.split(' ').nth(1)).collect();
        let first = listed
            .iter()
            .filter_map(|n| {
                std::fs::metadata(day.join(n))
                    .and_then(|m| m.modified())
                    .ok()
            })
            .min();
        for e in std::fs::read_dir(&day)?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".json") || listed.contains(&name.as_str()) {
                continue;
            }
            let mtime = e.metadata()?.modified()?;
            if first.is_some_and(|f| mtime < f) {
                std::fs::remove_file(e.path())?;
                dropped += 1;
            }
        }
    }
    Ok(dropped)
}

fn verify(config: &Path) -> Result<CmdOut> {
    jobscope(&["--config", &config.to_string_lossy(), "archive", "verify"])
}

/// `jobscope archive verify` on a copy of the real archive: clean → exit 0; one changed byte, one
/// deleted file and one inserted file are each reported (exit 1, the category and the file named).
#[test]
fn archive_verify_finds_edits_deletions_and_insertions() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let a = submit("alice", &["--job-name=verify-a"], SHORT_JOB)?;
    let b = submit("alice", &["--job-name=verify-b"], SHORT_JOB)?;
    completed(a)?;
    completed(b)?;
    let (fa, fb) = (archive_file(a)?, archive_file(b)?);
    let file_name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    let (name_a, name_b) = (file_name(&fa), file_name(&fb));
    let real_a = std::fs::read(&fa)?;
    let rel = |p: &Path| p.strip_prefix(ARCHIVE).unwrap().to_path_buf();

    let tmp = tempfile::Builder::new()
        .prefix("archive-verify-")
        .tempdir_in(std::env::temp_dir())?;
    let pristine = tmp.path().join("pristine");
    cp_a(Path::new(ARCHIVE), &pristine)?;
    let dropped = drop_pre_manifest_files(&pristine)?;
    // The owners' copies are checked against their records too (tests/cluster/tests/archive.rs);
    // copies of the records dropped above would be reported, so this copy goes without them.
    let _ = std::fs::remove_dir_all(pristine.join("users"));

    if dropped > 0 {
        eprintln!("left {dropped} archive file(s) from before the manifest out of the copy");
    }
    let work = tmp.path().join("archive");
    let config = tmp.path().join("jobscope.toml");
    std::fs::write(
        &config,
        config_with(&[("paths.archive_dir", work.to_string_lossy().as_ref().into())])?,
    )?;
    let fresh = || -> Result<()> {
        if work.exists() {
            std::fs::remove_dir_all(&work)?;
        }
        cp_a(&pristine, &work)
    };

    fresh()?;
    let out = verify(&config)?;
    ensure!(
        out.code == Some(0) && out.stdout.contains("all OK"),
        "clean copy: {out:?}"
    );

    // One changed byte.
    fresh()?;
    let p = work.join(rel(&fa));
    let mut bytes = std::fs::read(&p)?;
    let i = bytes.len() / 2;
    bytes[i] ^= 0x01;
    std::fs::write(&p, &bytes)?;
    let out = verify(&config)?;
    ensure!(out.code == Some(1), "edited: {out:?}");
    ensure!(
        out.stdout
            .lines()
            .any(|l| l.contains("EDITED") && l.contains(&format!(" {name_a}"))),
        "edited {name_a} not reported: {out:?}"
    );
    ensure!(
        !out.stdout.contains("REMOVED") && !out.stdout.contains("INSERTED"),
        "{out:?}"
    );

    // One deleted file.
    fresh()?;
    std::fs::remove_file(work.join(rel(&fb)))?;
    let out = verify(&config)?;
    ensure!(out.code == Some(1), "removed: {out:?}");
    ensure!(
        out.stdout
            .lines()
            .any(|l| l.contains("REMOVED") && l.contains(&format!(" {name_b}"))),
        "removed {name_b} not reported: {out:?}"
    );
    ensure!(
        !out.stdout.contains("EDITED") && !out.stdout.contains("INSERTED"),
        "{out:?}"
    );

    // One inserted file (a copy of a real summary, under an id never archived).
    fresh()?;
    let day = work.join(rel(&fa)).parent().unwrap().to_path_buf();
    std::fs::write(day.join("999999999.json"), &real_a)?;
    let out = verify(&config)?;
    ensure!(out.code == Some(1), "inserted: {out:?}");
    ensure!(
        out.stdout
            .lines()
            .any(|l| l.contains("INSERTED") && l.contains("999999999.json")),
        "inserted file not reported: {out:?}"
    );
    ensure!(
        !out.stdout.contains("EDITED") && !out.stdout.contains("REMOVED"),
        "{out:?}"
    );

    ensure!(
        std::fs::read(&fa)? == real_a,
        "the real archive was touched"
    );
    Ok(())
}

// ------------------------------------------------------------------ the schema, for all of it

fn json_files(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() && depth > 0 {
            json_files(&p, depth - 1, out);
        } else if p.extension().is_some_and(|x| x == "json") && p.is_file() {
            out.push(p);
        }
    }
}

/// Every archived summary this build's epilog wrote (written since it was installed: the tests'
/// jobs, hostile names included) validates against docs/schema/job-summary.schema.json.
#[test]
fn every_archived_summary_validates_against_the_schema() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let installed = std::fs::metadata("/usr/local/sbin/jobscope-epilog")
        .and_then(|m| m.modified())
        .context("jobscope-epilog is not installed (slurm-conf/cluster.sh install)")?;
    // At least one, whatever ran before.
    let id = submit_os(
        "alice",
        &[
            os("-J"),
            OsString::from_vec(b"schema \"<&>\xff\r\n".to_vec()),
        ],
        SHORT_JOB,
    )?;
    completed(id)?;
    // Records live under <archive>/YYYY/MM/DD/ (and owners' copies under users/); the audit
    // index beside them (<archive>/index/) holds its own JSON files that are not summaries.
    let mut files = Vec::new();
    for e in std::fs::read_dir(ARCHIVE)?.flatten() {
        let name = e.file_name();
        let year = name
            .to_str()
            .is_some_and(|n| n.len() == 4 && n.bytes().all(|b| b.is_ascii_digit()));
        if year || name == "users" {
            json_files(&e.path(), 4, &mut files);
        }
    }
    let mut checked = 0;
    let mut failures = Vec::new();
    for f in &files {
        if std::fs::metadata(f)?.modified()? < installed {
            continue;
        }
        checked += 1;
        let v: Value = match serde_json::from_slice(&std::fs::read(f)?) {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("{}: not JSON: {e}", f.display()));
                continue;
            }
        };
        if let Err(e) = validate(&v) {
            failures.push(format!("{}: {e:#}", f.display()));
        }
    }
    ensure!(
        files.iter().any(|f| f
            .file_name()
            .is_some_and(|n| is_archive_name_of(&n.to_string_lossy(), id))),
        "job {id} not archived"
    );
    if !failures.is_empty() {
        bail!(
            "{} of {checked} archived files do not validate:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
    eprintln!("{checked} archived summaries validated");
    Ok(())
}

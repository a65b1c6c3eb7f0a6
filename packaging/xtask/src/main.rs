//! Packaging helper: writes the man pages and shell completions that the `.deb` packages ship
//! (packaging/build-debs.sh, docs/packaging.md).
//!
//!   jobscope-xtask gen <out-dir> [--docs <repo>/docs]
//!
//! - `man/jobscope.1`: from the clap definition of `jobscope` (cli/src/lib.rs, `cli::command`),
//!   every subcommand and option included, so the page cannot drift from the program;
//! - `man/jobscope-kernel.8`: the kernel collector, from its clap definition
//!   (kernel/src/cli.rs, `jobscope_kernel::cli::command`);
//! - `man/jobscope-epilog.8`: the Epilog program (it has no options; its interface is SLURM's
//!   Epilog environment and its configuration, see cli/src/lib.rs `epilog_main`);
//! - `man/jobscope.toml.5`: docs/configuration.md turned into roff (one source for the keys);
//! - `completions/{jobscope.bash,_jobscope,jobscope.fish}`: clap_complete for bash, zsh and fish.

use clap::Command;
use clap_complete::Shell;
use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match run(&args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("jobscope-xtask: {e}");
            1
        }
    };
    std::process::exit(code);
}

fn run(args: &[String]) -> Result<(), String> {
    let usage = "usage: jobscope-xtask gen <out-dir> [--docs <docs-dir>]";
    let [cmd, out, rest @ ..] = args else {
        return Err(usage.into());
    };
    if cmd != "gen" {
        return Err(usage.into());
    }
    let docs = match rest {
        [] => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs"),
        [flag, d] if flag == "--docs" => PathBuf::from(d),
        _ => return Err(usage.into()),
    };
    let out = Path::new(out);
    let man = out.join("man");
    let comp = out.join("completions");
    for d in [&man, &comp] {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let write = |p: PathBuf, text: &str| {
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))
    };
    let version = env!("CARGO_PKG_VERSION");
    write(man.join("jobscope.1"), &jobscope_1(version)?)?;
    write(man.join("jobscope-epilog.8"), &jobscope_epilog_8(version))?;
    write(man.join("jobscope-kernel.8"), &jobscope_kernel_8(version)?)?;
    let conf_md = docs.join("configuration.md");
    let md =
        std::fs::read_to_string(&conf_md).map_err(|e| format!("{}: {e}", conf_md.display()))?;
    write(man.join("jobscope.toml.5"), &jobscope_toml_5(version, &md))?;
    for (shell, name) in [
        (Shell::Bash, "jobscope.bash"),
        (Shell::Zsh, "_jobscope"),
        (Shell::Fish, "jobscope.fish"),
    ] {
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut jobscope_cli::command(), "jobscope", &mut buf);
        let text = String::from_utf8(buf).map_err(|e| e.to_string())?;
        write(comp.join(name), &text)?;
    }
    println!("wrote {} and {}", man.display(), comp.display());
    Ok(())
}

/// Text for roff: backslashes and a leading `.` or `'` (a request) escaped.
fn esc(s: &str) -> String {
    let s = s.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}

fn th(name: &str, section: &str, version: &str, title: &str) -> String {
    format!(
        ".TH \"{}\" \"{section}\" \"\" \"jobscope {version}\" \"{title}\"\n",
        name.to_uppercase()
    )
}

/// jobscope(1).
fn jobscope_1(version: &str) -> Result<String, String> {
    page(
        jobscope_cli::command(),
        "1",
        version,
        ".SH FILES\n.TP\n\\fI/etc/jobscope/jobscope.toml\\fR\nThe site configuration (see \
         \\fBjobscope.toml\\fR(5)); \\fB\\-\\-config\\fR names another.\n.TP\n\
         \\fI/var/lib/jobscope/archive\\fR\nThe JSON archive that \\fBjobscope show\\fR reads.\n\
         .SH EXIT STATUS\n0 on success; 1 on an error (printed as one line on standard error), \
         and from \\fBarchive verify\\fR when it finds a problem.\n\
         .SH SEE ALSO\n\\fBjobscope\\-epilog\\fR(8), \\fBjobscope\\-kernel\\fR(8), \
         \\fBjobscope.toml\\fR(5), \\fBslurm.conf\\fR(5)\n",
    )
}

/// jobscope-kernel(8): the per-node collector the jobscope-kernel service runs.
fn jobscope_kernel_8(version: &str) -> Result<String, String> {
    page(
        jobscope_kernel::cli::command(),
        "8",
        version,
        ".SH FILES\n.TP\n\\fI/sys/fs/bpf/jobscope\\fR\nThe pinned maps the SPANK plugin's \
         sampler and \\fBjobscope run\\fR read (root only).\n.TP\n\
         \\fI/lib/systemd/system/jobscope\\-kernel.service\\fR\nRuns \\fBjobscope\\-kernel run \
         \\-\\-optional\\fR on every node; a drop-in overriding \\fIExecStart\\fR turns on \
         \\fB\\-\\-syscalls\\fR.\n.TP\n\\fI/usr/share/doc/jobscope/kernel.md\\fR\nWhat is \
         counted, how, and what it costs.\n\
         .SH EXIT STATUS\n0 on success (and with \\fB\\-\\-optional\\fR where the kernel cannot run \
         the programs); 1 on an error, printed on standard error.\n\
         .SH SEE ALSO\n\\fBjobscope\\fR(1), \\fBjobscope.toml\\fR(5), \\fBbpftool\\fR(8)\n",
    )
}

/// A command's page: clap_mangen's title, name, synopsis, description and options, then one
/// subsection per (visible) subcommand with its own synopsis and options, then `tail`.
fn page(cmd: Command, section: &str, version: &str, tail: &str) -> Result<String, String> {
    let name = cmd.get_name().to_string();
    let man = clap_mangen::Man::new(cmd.clone())
        .section(section)
        .source(format!("jobscope {version}"))
        .manual("jobscope manual");
    let mut buf = Vec::new();
    man.render_title(&mut buf).map_err(|e| e.to_string())?;
    man.render_name_section(&mut buf)
        .map_err(|e| e.to_string())?;
    man.render_synopsis_section(&mut buf)
        .map_err(|e| e.to_string())?;
    man.render_description_section(&mut buf)
        .map_err(|e| e.to_string())?;
    man.render_options_section(&mut buf)
        .map_err(|e| e.to_string())?;
    let mut s = String::from_utf8(buf).map_err(|e| e.to_string())?;
    s.push_str(".SH COMMANDS\n");
    for sub in cmd.get_subcommands().filter(|c| !c.is_hide_set()) {
        subcommand(&mut s, &name, sub);
    }
    s.push_str(tail);
    Ok(s)
}

fn subcommand(s: &mut String, parent: &str, cmd: &Command) {
    let name = format!("{parent} {}", cmd.get_name());
    if cmd.has_subcommands() {
        // A group's own options (`jobscope alerts --dry-run`, which its subcommands share):
        // a section of the group's, before its subcommands'.
        if cmd.get_arguments().any(|a| !a.is_hide_set() && !is_meta(a)) {
            write!(
                s,
                ".SS \"{}\"\n\\fB{}\\fR [\\fIoptions\\fR] [\\fIcommand\\fR]\n.br\n",
                esc(&name),
                esc(&name)
            )
            .ok();
            if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
                writeln!(s, "{}", esc(&about.to_string())).ok();
            }
            options(s, cmd, true);
        }
        for sub in cmd.get_subcommands().filter(|c| !c.is_hide_set()) {
            subcommand(s, &name, sub);
        }
        return;
    }
    let mut synopsis = format!("\\fB{}\\fR", esc(&name));
    for a in cmd.get_arguments().filter(|a| a.is_positional()) {
        let v = a
            .get_value_names()
            .and_then(|v| v.first())
            .map_or_else(|| a.get_id().to_string(), |v| v.to_string());
        write!(synopsis, " \\fI<{}>\\fR", esc(&v)).ok();
    }
    if cmd
        .get_arguments()
        .any(|a| !a.is_positional() && !a.is_global_set())
    {
        synopsis.push_str(" [\\fIoptions\\fR]");
    }
    write!(s, ".SS \"{}\"\n{synopsis}\n.br\n", esc(&name)).ok();
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        writeln!(s, "{}", esc(&about.to_string())).ok();
    }
    options(s, cmd, false);
}

/// `help` and `version`, which every command has.
fn is_meta(a: &clap::Arg) -> bool {
    matches!(a.get_id().as_str(), "help" | "version")
}

/// The options of `cmd`, one `.TP` each; `with_global`: also those it passes to its subcommands.
fn options(s: &mut String, cmd: &Command, with_global: bool) {
    for a in cmd.get_arguments() {
        if a.is_hide_set() || (a.is_global_set() && !with_global) || is_meta(a) {
            continue;
        }
        let head = if a.is_positional() {
            format!("\\fI<{}>\\fR", esc(a.get_id().as_str()))
        } else {
            let long = a.get_long().map(|l| format!("\\fB\\-\\-{}\\fR", esc(l)));
            let takes = a.get_action().takes_values();
            let v = a
                .get_value_names()
                .and_then(|v| v.first())
                .map_or_else(|| a.get_id().to_string().to_uppercase(), |v| v.to_string());
            format!(
                "{}{}",
                long.unwrap_or_default(),
                if takes {
                    format!(" \\fI{}\\fR", esc(&v))
                } else {
                    String::new()
                }
            )
        };
        let help = a
            .get_long_help()
            .or(a.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        let default = a
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect::<Vec<_>>();
        let default = if default.is_empty() {
            String::new()
        } else {
            format!(" [default: {}]", default.join(","))
        };
        write!(s, ".TP\n{head}\n{}{}\n", esc(&help), esc(&default)).ok();
    }
}

/// jobscope-epilog(8). The program has no options: SLURM runs it as `Epilog=`.
fn jobscope_epilog_8(version: &str) -> String {
    let mut s = th("jobscope-epilog", "8", version, "jobscope manual");
    s.push_str(
        r#".SH NAME
jobscope\-epilog \- jobscope's SLURM Epilog: one report per job, archived, then mailed
.SH SYNOPSIS
In \fBslurm.conf\fR(5) on every compute node:
.PP
.nf
.RS 4
Epilog=/usr/sbin/jobscope\-epilog
.RE
.fi
.SH DESCRIPTION
\fBjobscope\-epilog\fR runs as root on every node of every job when the job ends, as SLURM's
\fBEpilog=\fR program. It turns this node's spool (written by the jobscope SPANK plugin) into a node
summary. The last node of a job to report combines all node summaries into one report, writes it to
the JSON archive with a hash\-chained manifest, and then mails it through a durable, node\-local queue
(archive first, mail second).
.PP
It asks slurmctld about its own job once (\fBscontrol show job \-o\fR \fIJOBID\fR), with a time
limit, and bounds every other wait (mail relay, claim of the job), so it cannot hold a node.
.SH OPTIONS
None. Everything comes from SLURM's Epilog environment and the configuration file.
.SH ENVIRONMENT
.TP
\fBSLURM_JOB_ID\fR, \fBSLURMD_NODENAME\fR, \fBSLURM_NODELIST\fR, \fBSLURM_JOB_UID\fR, \fBSLURM_JOB_EXIT_CODE2\fR, \fBSLURM_JOB_DERIVED_EC\fR, \fBSLURM_CLUSTER_NAME\fR
Set by slurmd for the Epilog: the job, this node, the job's nodes, its owner and how it ended.
.TP
\fBJOBSCOPE_CONFIG\fR
Another configuration file. A file named here must exist and parse; otherwise the defaults apply
and the log says why.
.SH EXIT STATUS
Always 0: a failing Epilog drains the node in SLURM. Problems go to the log file
(\fBpaths.log_file\fR, by default \fI/var/log/jobscope/epilog.log\fR).
.SH FILES
.TP
\fI/etc/jobscope/jobscope.toml\fR
The site configuration, see \fBjobscope.toml\fR(5).
.TP
\fI/var/spool/jobscope\fR
The node\-local spool the plugin writes (root only).
.TP
\fI/var/lib/jobscope/state\fR, \fI/var/lib/jobscope/archive\fR
Node summaries waiting for a job's other nodes, and the archive. Both must be shared by the nodes
of a multi\-node job.
.TP
\fI/var/log/jobscope/epilog.log\fR
The log.
.SH NOTES
The timers \fBjobscope\-reap.timer\fR and \fBjobscope\-mail\-flush.timer\fR finish what an Epilog
could not: reports for jobs whose other nodes never reported, and mail the relay did not take.
.SH SEE ALSO
\fBjobscope\fR(1), \fBjobscope.toml\fR(5), \fBslurm.conf\fR(5), \fBspank\fR(7)
"#,
    );
    s
}

/// jobscope.toml(5) from docs/configuration.md (CommonMark with tables): headings become
/// sections, tables one tagged paragraph per key, code blocks literal text.
fn jobscope_toml_5(version: &str, md: &str) -> String {
    let mut out = th("jobscope.toml", "5", version, "jobscope manual");
    out.push_str(".SH NAME\njobscope.toml \\- jobscope's site configuration file\n");
    out.push_str(".SH SYNOPSIS\n\\fI/etc/jobscope/jobscope.toml\\fR\n");
    out.push_str(".SH DESCRIPTION\n");
    let mut r = Roff::default();
    for ev in Parser::new_ext(md, Options::ENABLE_TABLES) {
        r.event(ev);
    }
    out.push_str(&r.out);
    out.push_str(".SH SEE ALSO\n\\fBjobscope\\fR(1), \\fBjobscope\\-epilog\\fR(8)\n");
    out
}

#[derive(Default)]
struct Roff {
    out: String,
    /// Inline text of the block being read.
    line: String,
    in_code: bool,
    /// Open lists: `Some(n)` numbered from n, `None` bulleted.
    lists: Vec<Option<u64>>,
    /// Whether the current list item has had a block yet.
    item_started: bool,
    table_head: Vec<String>,
    row: Vec<String>,
    in_head: bool,
}

impl Roff {
    fn flush(&mut self) {
        let l = self.line.trim().to_string();
        self.line.clear();
        if !l.is_empty() {
            // A line that starts with a request character after escaping is guarded in `esc`;
            // font escapes start with a backslash and are safe.
            self.out.push_str(&l);
            self.out.push('\n');
        }
    }

    fn event(&mut self, ev: Event) {
        match ev {
            Event::Start(Tag::Heading { .. }) => self.flush(),
            Event::End(TagEnd::Heading(level)) => {
                let text = std::mem::take(&mut self.line);
                match level {
                    HeadingLevel::H1 => {}
                    HeadingLevel::H2 => {
                        writeln!(self.out, ".SH \"{}\"", text.trim().to_uppercase()).ok();
                    }
                    _ => {
                        writeln!(self.out, ".SS \"{}\"", text.trim()).ok();
                    }
                }
            }
            Event::Start(Tag::Paragraph) => {
                self.flush();
                if self.lists.is_empty() {
                    self.out.push_str(".PP\n");
                } else if self.item_started {
                    let indent = 2 * self.lists.len();
                    writeln!(self.out, ".IP \"\" {indent}").ok();
                }
                self.item_started = true;
            }
            Event::End(TagEnd::Paragraph) => self.flush(),
            Event::Start(Tag::List(start)) => {
                self.flush();
                if !self.lists.is_empty() {
                    self.out.push_str(".RS\n");
                }
                self.lists.push(start);
            }
            Event::End(TagEnd::List(_)) => {
                self.flush();
                self.lists.pop();
                if !self.lists.is_empty() {
                    self.out.push_str(".RE\n");
                }
            }
            Event::Start(Tag::Item) => {
                self.flush();
                let tag = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        let t = format!("{n}.");
                        *n += 1;
                        t
                    }
                    _ => "\\(bu".to_string(),
                };
                writeln!(self.out, ".IP {tag} 4").ok();
                self.item_started = true;
            }
            Event::End(TagEnd::Item) => self.flush(),
            Event::Start(Tag::CodeBlock(_)) => {
                self.flush();
                self.in_code = true;
                self.out.push_str(".PP\n.RS 4\n.nf\n");
            }
            Event::End(TagEnd::CodeBlock) => {
                self.in_code = false;
                self.out.push_str(".fi\n.RE\n");
            }
            Event::Start(Tag::Table(_)) => {
                self.flush();
                self.table_head.clear();
            }
            Event::Start(Tag::TableHead) => self.in_head = true,
            Event::End(TagEnd::TableHead) => {
                self.in_head = false;
                self.table_head = std::mem::take(&mut self.row);
            }
            Event::Start(Tag::TableRow) => self.row.clear(),
            Event::End(TagEnd::TableCell) => {
                let cell = std::mem::take(&mut self.line);
                self.row.push(cell.trim().to_string());
            }
            Event::End(TagEnd::TableRow) => {
                let row = std::mem::take(&mut self.row);
                if let Some((first, rest)) = row.split_first() {
                    writeln!(self.out, ".TP\n{first}").ok();
                    let mut parts = Vec::new();
                    for (i, cell) in rest.iter().enumerate() {
                        if cell.is_empty() {
                            continue;
                        }
                        let head = self.table_head.get(i + 1).map(String::as_str).unwrap_or("");
                        if head.eq_ignore_ascii_case("meaning") || head.is_empty() {
                            parts.push(cell.clone());
                        } else {
                            parts.push(format!("{head}: {cell}."));
                        }
                    }
                    // Type and default first, the meaning after them.
                    writeln!(self.out, "{}", parts.join("\n.br\n")).ok();
                }
            }
            Event::End(TagEnd::Table) => {}
            Event::Text(t) => {
                if self.in_code {
                    for l in t.lines() {
                        let e = l.replace('\\', "\\e");
                        let e = if e.starts_with('.') || e.starts_with('\'') {
                            format!("\\&{e}")
                        } else {
                            e
                        };
                        self.out.push_str(&e);
                        self.out.push('\n');
                    }
                } else {
                    let e = esc(&t);
                    if self.line.is_empty() && !self.in_head {
                        self.line.push_str(&e);
                    } else {
                        self.line
                            .push_str(&t.replace('\\', "\\e").replace('-', "\\-"));
                    }
                }
            }
            Event::Code(t) => {
                write!(
                    self.line,
                    "\\fB{}\\fR",
                    t.replace('\\', "\\e").replace('-', "\\-")
                )
                .ok();
            }
            Event::Start(Tag::Strong) => self.line.push_str("\\fB"),
            Event::End(TagEnd::Strong) => self.line.push_str("\\fR"),
            Event::Start(Tag::Emphasis) => self.line.push_str("\\fI"),
            Event::End(TagEnd::Emphasis) => self.line.push_str("\\fR"),
            Event::SoftBreak | Event::HardBreak => self.line.push(' '),
            Event::Rule => {
                self.flush();
                self.out.push_str(".PP\n");
            }
            // Link targets (other documents of the repository) are dropped; the text stays.
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every visible subcommand and every option of `cmd` appears in `page`; no hidden
    /// subcommand does.
    fn names_every_visible_command(cmd: &Command, page: &str) {
        fn walk(cmd: &Command, page: &str, path: &str) {
            for sub in cmd.get_subcommands() {
                let name = format!("{path} {}", sub.get_name());
                let heading = format!(".SS \"{}\"", esc(&name));
                if sub.is_hide_set() {
                    assert!(!page.contains(&heading), "hidden {name} is in the page");
                    continue;
                }
                if !sub.has_subcommands() {
                    assert!(page.contains(&heading), "{name}");
                }
                for a in sub.get_arguments().filter(|a| !a.is_hide_set()) {
                    if let Some(l) = a.get_long().filter(|l| *l != "help") {
                        assert!(page.contains(&format!("\\-\\-{}", esc(l))), "{name} --{l}");
                    }
                }
                walk(sub, page, &name);
            }
        }
        walk(cmd, page, cmd.get_name());
    }

    #[test]
    fn the_man_page_names_every_subcommand_and_option() {
        names_every_visible_command(&jobscope_cli::command(), &jobscope_1("0").unwrap());
    }

    #[test]
    fn the_collector_page_names_its_commands_and_hides_the_test_ones() {
        let page = jobscope_kernel_8("0").unwrap();
        names_every_visible_command(&jobscope_kernel::cli::command(), &page);
        for sub in ["run", "status"] {
            assert!(
                page.contains(&format!(".SS \"jobscope\\-kernel {sub}\"")),
                "{sub}"
            );
        }
        for hidden in ["workload", "bench"] {
            assert!(!page.contains(hidden), "{hidden}");
        }
        assert!(page.contains("\\-\\-syscalls"));
        assert!(page.contains("\\-\\-page\\-cache"));
    }

    /// The configuration page carries every key of the reference's tables, and no line of it is
    /// a stray roff request made of document text.
    #[test]
    fn the_config_page_has_every_key() {
        let md = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md"),
        )
        .unwrap();
        let page = jobscope_toml_5("0", &md);
        let mut keys = 0;
        for line in md.lines().filter(|l| l.starts_with("| `")) {
            let key = line.split('`').nth(1).unwrap();
            assert!(
                page.contains(&format!("\\fB{}\\fR", key.replace('-', "\\-"))),
                "{key}"
            );
            keys += 1;
        }
        assert!(keys > 20, "only {keys} keys found in the tables");
        assert!(page.contains(".SH \"[PATHS]\""));
        let requests = [
            ".TH", ".SH", ".SS", ".PP", ".TP", ".IP", ".RS", ".RE", ".nf", ".fi", ".br",
        ];
        for l in page.lines().filter(|l| l.starts_with('.')) {
            assert!(
                requests.iter().any(|r| l.starts_with(r)),
                "stray request line {l:?}"
            );
        }
    }

    #[test]
    fn text_cannot_start_a_request() {
        assert_eq!(esc(".so /etc/passwd"), "\\&.so /etc/passwd");
        assert_eq!(esc("a\\b-c"), "a\\eb\\-c");
    }
}

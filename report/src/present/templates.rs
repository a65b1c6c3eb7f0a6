//! The handlebars registries that render a [`View`]: the text report and text digest (no escaping:
//! plain text), the subject (no escaping, then [`clean_line`]d: it is a header) and the HTML report
//! and HTML digest (handlebars' HTML escaping, the only place HTML is escaped). A site may override
//! the subject and the HTML report with its own files; a site template that cannot be read, parsed
//! or rendered is answered by the built-in one and a warning for the caller to log.

use super::clean::clean_line;
use super::View;
/// What a template's rendering can fail with (the presenter's callers name it through this crate).
pub use handlebars::RenderError;
use handlebars::{handlebars_helper, Handlebars};
use std::path::Path;

pub const TEXT_TEMPLATE: &str = include_str!("../../../report-templates/report.txt.hbs");
pub const SUBJECT_TEMPLATE: &str = include_str!("../../../report-templates/subject.hbs");
pub const HTML_TEMPLATE: &str = include_str!("../../../report-templates/report.html.hbs");
pub const DIGEST_TEXT_TEMPLATE: &str = include_str!("../../../report-templates/digest.txt.hbs");
pub const DIGEST_HTML_TEMPLATE: &str = include_str!("../../../report-templates/digest.html.hbs");
pub const TEXT_AS_HTML_TEMPLATE: &str = include_str!("../../../report-templates/text.html.hbs");
/// File names looked for in the site's template override directory.
pub const SUBJECT_FILE: &str = "subject.hbs";
pub const HTML_FILE: &str = "report.html.hbs";

/// The subject is cut to this many characters (before RFC 2047 encoding), with `…` appended.
pub const SUBJECT_MAX_CHARS: usize = 160;
/// A site template larger than this is not read.
const MAX_TEMPLATE_BYTES: u64 = 1024 * 1024;

const TEXT: &str = "report.txt";
const DIGEST_TEXT: &str = "digest.txt";
const SUBJECT: &str = "subject";
const SUBJECT_SITE: &str = "subject.site";
const HTML: &str = "report.html";
const HTML_SITE: &str = "report.html.site";
const DIGEST_HTML: &str = "digest.html";

fn as_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

// Column layout for the digest's table: `{{rpad value width}}` pads on the right (left-aligned),
// `{{lpad value width}}` on the left. Widths count terminal columns (a CJK character takes two).
handlebars_helper!(rpad: |v: Json, w: u64| {
    let s = as_text(v);
    let n = super::width(&s);
    format!("{s}{}", " ".repeat((w as usize).saturating_sub(n)))
});
handlebars_helper!(lpad: |v: Json, w: u64| {
    let s = as_text(v);
    let n = super::width(&s);
    format!("{}{s}", " ".repeat((w as usize).saturating_sub(n)))
});

// `{{plural n "core"}}`: the number and its noun, singular or plural as the number asks
// (`format::plural`: "1 core", "2 cores"); a value that is not a count (`n/a`) keeps the plural.
handlebars_helper!(plural: |v: Json, noun: str| {
    let s = as_text(v);
    match s.parse::<u64>() {
        Ok(n) => super::format::plural(n, noun),
        Err(_) => format!("{s} {noun}s"),
    }
});

/// A registry as every jobscope template is rendered with: strict (a name the view lacks is an
/// error, not an empty string), HTML-escaping every value when `escape` (plain text otherwise), with
/// the padding helpers and `plural`. The cluster report (admin/src/cluster/page.rs) renders with it too.
pub fn registry(escape: bool) -> Handlebars<'static> {
    let mut h = Handlebars::new();
    h.set_strict_mode(true);
    if !escape {
        h.register_escape_fn(handlebars::no_escape);
    }
    h.register_helper("rpad", Box::new(rpad));
    h.register_helper("lpad", Box::new(lpad));
    h.register_helper("plural", Box::new(plural));
    h
}

/// The report's templates: the built-in ones, plus a site's own subject and HTML where configured.
pub struct Templates {
    text: Handlebars<'static>,
    subject: Handlebars<'static>,
    html: Handlebars<'static>,
}

impl Templates {
    /// Only the built-in templates, compiled once per process: compiling the five templates costs
    /// several milliseconds, more than the rest of a report (see `report/benches/summary.rs`).
    pub fn builtin() -> &'static Self {
        static BUILTIN: std::sync::OnceLock<Templates> = std::sync::OnceLock::new();
        BUILTIN.get_or_init(Self::compile_builtin)
    }

    fn compile_builtin() -> Self {
        let mut text = registry(false);
        text.register_template_string(TEXT, TEXT_TEMPLATE)
            .expect("built-in text template is valid");
        text.register_template_string(DIGEST_TEXT, DIGEST_TEXT_TEMPLATE)
            .expect("built-in digest template is valid");
        let mut subject = registry(false);
        subject
            .register_template_string(SUBJECT, SUBJECT_TEMPLATE)
            .expect("built-in subject template is valid");
        // The default escape function (html_escape) stays in place.
        let mut html = registry(true);
        html.register_template_string(HTML, HTML_TEMPLATE)
            .expect("built-in HTML template is valid");
        html.register_template_string(DIGEST_HTML, DIGEST_HTML_TEMPLATE)
            .expect("built-in HTML digest template is valid");
        Templates {
            text,
            subject,
            html,
        }
    }

    /// The built-in templates, overridden by `dir/subject.hbs` and `dir/report.html.hbs` where those
    /// exist and parse. Returns warnings for the caller to log.
    pub fn load(override_dir: Option<&Path>) -> (Self, Vec<String>) {
        let mut t = Self::compile_builtin();
        let mut warnings = Vec::new();
        let Some(dir) = override_dir else {
            return (t, warnings);
        };
        if !dir.is_dir() {
            warnings.push(format!(
                "mail template directory {} is not a directory; using the built-in templates",
                dir.display()
            ));
            return (t, warnings);
        }
        for (file, name, reg) in [
            (SUBJECT_FILE, SUBJECT_SITE, &mut t.subject),
            (HTML_FILE, HTML_SITE, &mut t.html),
        ] {
            let path = dir.join(file);
            let src = match read_template(&path) {
                Ok(Some(s)) => s,
                Ok(None) => continue,
                Err(e) => {
                    warnings.push(format!(
                        "mail template {}: {e}; using the built-in one",
                        path.display()
                    ));
                    continue;
                }
            };
            if let Err(e) = reg.register_template_string(name, src) {
                warnings.push(format!(
                    "mail template {} does not parse: {e}; using the built-in one",
                    path.display()
                ));
            }
        }
        (t, warnings)
    }

    /// Renders `site` if the site has one, else (or if that fails, with a warning) the built-in.
    fn render(
        reg: &Handlebars<'static>,
        name: &str,
        site: &str,
        file: &str,
        view: &View,
        warnings: &mut Vec<String>,
    ) -> Result<String, handlebars::RenderError> {
        if reg.has_template(site) {
            match reg.render(site, view) {
                Ok(s) => return Ok(s),
                Err(e) => warnings.push(format!(
                    "site mail template {file} failed to render: {e}; using the built-in one"
                )),
            }
        }
        reg.render(name, view)
    }

    /// The text report, or the text digest when the view is a digest's.
    pub fn render_text(&self, view: &View) -> Result<String, handlebars::RenderError> {
        if view.digest.is_some() {
            self.text.render(DIGEST_TEXT, view)
        } else {
            self.text.render(TEXT, view)
        }
    }

    /// The subject line: rendered, then one line, cleaned and capped ([`clean_line`]).
    pub fn render_subject(
        &self,
        view: &View,
        warnings: &mut Vec<String>,
    ) -> Result<String, handlebars::RenderError> {
        let raw = Self::render(
            &self.subject,
            SUBJECT,
            SUBJECT_SITE,
            SUBJECT_FILE,
            view,
            warnings,
        )?;
        let subject = clean_line(&raw, SUBJECT_MAX_CHARS);
        if subject.is_empty() && self.subject.has_template(SUBJECT_SITE) {
            warnings.push(format!(
                "site mail template {SUBJECT_FILE} rendered an empty subject; using the built-in one"
            ));
            let raw = self.subject.render(SUBJECT, view)?;
            return Ok(clean_line(&raw, SUBJECT_MAX_CHARS));
        }
        Ok(subject)
    }

    /// The HTML report, or the HTML digest when the view is a digest's.
    pub fn render_html(
        &self,
        view: &View,
        warnings: &mut Vec<String>,
    ) -> Result<String, handlebars::RenderError> {
        if view.digest.is_some() {
            return self.html.render(DIGEST_HTML, view);
        }
        Self::render(&self.html, HTML, HTML_SITE, HTML_FILE, view, warnings)
    }
}

/// A mail whose content is plain text (the audit's alerts) as its HTML part: `title` and the whole
/// `text` escaped by this module's HTML registry (the one place HTML is escaped), the text as
/// preformatted lines, so the two parts of the mail say the same thing character for character.
/// The caller has cleaned the untrusted parts of `text` ([`super::clean`]).
pub fn render_text_as_html(title: &str, text: &str) -> Result<String, RenderError> {
    static REG: std::sync::OnceLock<Handlebars<'static>> = std::sync::OnceLock::new();
    let reg = REG.get_or_init(|| {
        let mut h = registry(true);
        h.register_template_string("text.html", TEXT_AS_HTML_TEMPLATE)
            .expect("built-in text-as-HTML template is valid");
        h
    });
    reg.render(
        "text.html",
        &serde_json::json!({ "title": title, "text": text, "generator": crate::GENERATOR }),
    )
}

/// Reads a site template: `Ok(None)` if there is none; refuses anything but a regular file of at most
/// 1 MiB in UTF-8.
fn read_template(path: &Path) -> Result<Option<String>, String> {
    let md = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    if !md.is_file() {
        return Err("not a regular file".into());
    }
    if md.len() > MAX_TEMPLATE_BYTES {
        return Err(format!(
            "{} bytes, more than the {MAX_TEMPLATE_BYTES} allowed",
            md.len()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| "not UTF-8".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Markup in the title or the text reaches the page as text, every character of the text
    /// is there (escaped), and the page has no markup but the template's.
    #[test]
    fn text_as_html_escapes_title_and_text() {
        let text = "job  <script>alert(1)</script> & \"q\" 'a'\n  second line";
        let html = render_text_as_html("<b>t</b>", text).unwrap();
        assert!(!html.contains("<script") && !html.contains("<b>"), "{html}");
        assert!(
            html.contains("&lt;b&gt;t&lt;&#x2F;b&gt;") || html.contains("&lt;b&gt;t&lt;/b&gt;"),
            "{html}"
        );
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;q&quot; &#x27;a&#x27;\n  second line"), "{html}");
        assert_eq!(
            html.matches('<').count(),
            TEXT_AS_HTML_TEMPLATE.matches('<').count()
        );
    }
}

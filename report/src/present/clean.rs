//! The one cleaning function for untrusted strings (job names, node and step names, SLURM's words,
//! readers' notes): every view (text report, `jobscope show`, HTML mail, subject, array digest, the
//! report in the work directory) shows user-supplied text only after [`clean`].
//!
//! HTML escaping is not done here: it is handlebars' job in the HTML registry only (see
//! `templates.rs`), so text views show `<b>` as typed and HTML views show it escaped.

/// Characters that must never reach a view (control, bidi, invisible): defined once, in
/// `jobscope_model::text`, where one-line messages escape them instead.
pub(crate) use jobscope_model::text::is_hidden;

/// `s` without [`is_hidden`] characters, cut to `max_chars` characters with `…` appended when cut
/// (trailing spaces before the `…` dropped).
pub fn clean(s: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max_chars.saturating_mul(4)));
    for (n, c) in s.chars().filter(|&c| !is_hidden(c)).enumerate() {
        if n == max_chars {
            out.truncate(out.trim_end().len());
            out.push('…');
            return out;
        }
        out.push(c);
    }
    out
}

/// [`clean`] for a one-line header value (the subject): whitespace and control characters between
/// words become one space, leading and trailing whitespace goes.
pub fn clean_line(s: &str, max_chars: usize) -> String {
    let words: Vec<&str> = s
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect();
    clean(&words.join(" "), max_chars)
}

/// The columns `s` takes on a terminal: East Asian wide and fullwidth characters (CJK names) take
/// two, combining marks none (Unicode's East Asian Width, through unicode-width), so that tables
/// and padding line up whatever script a name is written in.
pub fn width(s: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(s)
}

/// [`clean_line`], cut to at most `max_cols` terminal columns ([`width`]) with `…` (one column)
/// appended when cut: a wide character that would straddle the edge goes too.
pub fn clean_line_cols(s: &str, max_cols: usize) -> String {
    let full = clean_line(s, usize::MAX);
    if width(&full) <= max_cols {
        return full;
    }
    let mut out = String::new();
    let mut cols = 0;
    for c in full.chars() {
        let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if cols + w > max_cols.saturating_sub(1) {
            break;
        }
        cols += w;
        out.push(c);
    }
    out.truncate(out.trim_end().len());
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_characters_take_two_columns_and_are_cut_by_columns() {
        assert_eq!(width("abc"), 3);
        assert_eq!(width("日本語"), 6);
        assert_eq!(width("Jörg"), 4);
        // e + combining acute: one column
        assert_eq!(width("e\u{301}"), 1);
        assert_eq!(clean_line_cols("日本語のジョブ", 8), "日本語…");
        assert_eq!(width(&clean_line_cols("日本語のジョブ", 8)), 7);
        // a wide character that would end one column past the edge goes
        assert_eq!(clean_line_cols("a日本語", 5), "a日…");
        assert_eq!(clean_line_cols("short", 8), "short");
        assert_eq!(clean_line_cols("ab\u{202E}cd efgh", 6), "abcd…");
    }

    #[test]
    fn strips_control_bidi_invisible_and_caps() {
        assert_eq!(clean("a\r\nb\x1b[31mc", 100), "ab[31mc");
        assert_eq!(clean(&"x".repeat(10), 4), "xxxx…");
        assert_eq!(clean("ab cd", 3), "ab…");
        assert_eq!(
            clean(
                "evil\u{202E}txt.exe\u{2066}x\u{2069}\u{200B}\u{FEFF}\u{061C}\u{E0041}",
                100
            ),
            "eviltxt.exex"
        );
        // Visible non-ASCII stays.
        assert_eq!(clean("Jörg 日本 ✓", 100), "Jörg 日本 ✓");
        assert_eq!(clean("\u{85}\u{9B}x", 100), "x", "C1 controls (NEL, CSI)");
    }

    #[test]
    fn one_line() {
        assert_eq!(
            clean_line("a\r\nb\tc  d\u{202E}e\u{200B}f", 100),
            "a b c def"
        );
        assert_eq!(clean_line("  lead\n", 100), "lead");
        assert_eq!(clean_line("abcdef", 3), "abc…");
        assert_eq!(clean_line("ab cdef", 3), "ab…");
    }
}

//! Characters that must never reach a view or a one-line message, and the one way a message shows
//! a value that has them: escaped, so that the message stays one line and shows what was there.
//!
//! Views of user text (reports, mails, tables) drop these characters
//! (`jobscope_report::present::clean`); messages that echo a value someone must fix (a
//! configuration error, a refused argument) show them escaped ([`escape_hidden`], [`quoted`]).

use std::borrow::Cow;

/// Characters that must never reach a view: control characters (C0, DEL, C1: CR, LF, ESC, …),
/// bidirectional overrides and isolates (U+202A–U+202E, U+2066–U+2069) and marks, and invisible
/// or zero-width characters, which can reorder or hide what is shown around them.
pub fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00AD}'                     // soft hyphen
            | '\u{034F}'                   // combining grapheme joiner
            | '\u{061C}'                   // Arabic letter mark (bidi)
            | '\u{115F}' | '\u{1160}'      // Hangul fillers
            | '\u{17B4}' | '\u{17B5}'
            | '\u{180B}'..='\u{180F}'      // Mongolian variation selectors, vowel separator
            | '\u{200B}'..='\u{200F}'      // zero-width space/joiners, LRM, RLM
            | '\u{2028}' | '\u{2029}'      // line and paragraph separators
            | '\u{202A}'..='\u{202E}'      // bidi embeddings and overrides
            | '\u{2060}'..='\u{206F}'      // word joiner, invisible operators, bidi isolates, deprecated formats
            | '\u{3164}' | '\u{FFA0}'      // Hangul fillers
            | '\u{FE00}'..='\u{FE0F}'      // variation selectors
            | '\u{FEFF}'                   // BOM / zero-width no-break space
            | '\u{FFF9}'..='\u{FFFB}'      // interlinear annotation
            | '\u{E0000}'..='\u{E007F}'    // tags
        )
}

/// `c` escaped as Rust writes it: `\n`, `\r`, `\t`, else `\u{1b}`.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' | '\r' | '\t' => out.extend(c.escape_default()),
        _ => out.extend(c.escape_unicode()),
    }
}

/// `s` with every [`is_hidden`] character escaped (`\r`, `\n`, `\u{1b}`, `\u{202e}`): one line,
/// no terminal escape, nothing reordered or hidden, and what was there still to be read. Borrowed
/// when there is nothing to escape.
pub fn escape_hidden(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_hidden) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_hidden(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A value echoed in a message: in double quotes, `"` and `\` escaped and every [`is_hidden`]
/// character too (as [`escape_hidden`]), cut to `max_chars` characters of the value with `…`
/// after the closing quote when cut. Like Rust's `{:?}` of a string, which leaves some invisible
/// characters (Hangul fillers) as they are.
pub fn quoted(s: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max_chars) + 2);
    out.push('"');
    let mut cut = false;
    for (n, c) in s.chars().enumerate() {
        if n == max_chars {
            cut = true;
            break;
        }
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if is_hidden(c) => push_escaped(&mut out, c),
            c => out.push(c),
        }
    }
    out.push('"');
    if cut {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_values_are_one_line_without_controls_and_say_what_was_there() {
        assert_eq!(escape_hidden("/var/spool/jobscope"), "/var/spool/jobscope");
        assert!(matches!(escape_hidden("/plain"), Cow::Borrowed(_)));
        assert_eq!(
            escape_hidden("a\r\nb\x1b[31mc\u{202E}d\u{3164}e"),
            "a\\r\\nb\\u{1b}[31mc\\u{202e}d\\u{3164}e"
        );
        assert_eq!(quoted("rel/x", 100), "\"rel/x\"");
        assert_eq!(
            quoted("a\"b\\c\r\u{2066}\u{85}", 100),
            "\"a\\\"b\\\\c\\r\\u{2066}\\u{85}\""
        );
        assert_eq!(quoted("abcdef", 3), "\"abc\"…");
        assert_eq!(quoted("Jörg 日本", 100), "\"Jörg 日本\"");
        for s in [
            escape_hidden("x\u{2028}y\u{9b}z").into_owned(),
            quoted("\n\u{202E}\x7f", 10),
        ] {
            assert!(!s.chars().any(is_hidden), "{s:?}");
        }
    }
}

//! How keys and values are written on one line by `krabka read`, and read back by
//! `krabka produce --escaped`, so that every line is unambiguous and round-trips.
//!
//! | bytes | printed |
//! | --- | --- |
//! | `\` | `\\` |
//! | tab, newline, carriage return | `\t`, `\n`, `\r` |
//! | any other control character (U+0000..U+001F, U+007F, U+0080..U+009F) | `\xNN` for each of its bytes |
//! | a byte that is not part of valid UTF-8 | `\xNN` |
//! | everything else | itself |
//!
//! A record without a key prints `-`; a key that is exactly `-` prints `\-` (and an empty key
//! an empty field). A field cut at its character limit ends in `\…`, which [`unescape`]
//! refuses: a cut value cannot be appended as if it were whole.

/// What ends a field cut at its character limit.
pub const CUT: &str = "\\…";

/// What a record without a key prints as its key.
pub const NO_KEY: &str = "-";

/// Escapes `bytes` (see the module docs), cut after `max` characters (a byte that is not
/// UTF-8 counts as one) with [`CUT`].
pub fn escape(bytes: &[u8], max: usize) -> String {
    let mut out = String::with_capacity(bytes.len().min(max.saturating_add(8)));
    let mut shown = 0usize;
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if shown == max {
                out.push_str(CUT);
                return out;
            }
            push_char(&mut out, c);
            shown += 1;
        }
        for b in chunk.invalid() {
            if shown == max {
                out.push_str(CUT);
                return out;
            }
            push_byte(&mut out, *b);
            shown += 1;
        }
    }
    out
}

/// Escapes a key: `-` for none, `\-` for the key `-`, else [`escape`].
pub fn escape_key(key: Option<&[u8]>, max: usize) -> String {
    match key {
        None => NO_KEY.to_owned(),
        Some(k) if k == NO_KEY.as_bytes() => "\\-".to_owned(),
        Some(k) => escape(k, max),
    }
}

fn push_byte(out: &mut String, b: u8) {
    out.push_str(&format!("\\x{b:02x}"));
}

fn push_char(out: &mut String, c: char) {
    match c {
        '\\' => out.push_str("\\\\"),
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        c if c.is_control() => {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                push_byte(out, b);
            }
        }
        c => out.push(c),
    }
}

/// Decodes the escapes of [`escape`] (and `\-`, a `-`).
///
/// # Errors
/// A message naming the sequence that is not an escape (`\q`, a lone `\` at the end, `\x`
/// without two hex digits), or saying the field was cut (`\…`).
pub fn unescape(s: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(s.len());
    let mut chars = s.char_indices();
    while let Some((at, c)) = chars.next() {
        if c != '\\' {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        let byte = at + 1;
        match chars.next().map(|(_, e)| e) {
            Some('\\') => out.push(b'\\'),
            Some('t') => out.push(b'\t'),
            Some('n') => out.push(b'\n'),
            Some('r') => out.push(b'\r'),
            Some('-') => out.push(b'-'),
            Some('x') => {
                let hex: String = chars.by_ref().take(2).map(|(_, h)| h).collect();
                let value = (hex.len() == 2)
                    .then(|| u8::from_str_radix(&hex, 16).ok())
                    .flatten()
                    .ok_or_else(|| {
                        format!(
                            "`\\x{hex}` at byte {byte} is not an escape: \\x takes two hex digits"
                        )
                    })?;
                out.push(value);
            }
            Some('…') => {
                return Err(format!(
                    "`{CUT}` at byte {byte} marks a field `krabka read` cut at --value-chars: \
                     it is not the whole value"
                ));
            }
            Some(other) => {
                return Err(format!(
                    "`\\{other}` at byte {byte} is not an escape (\\\\, \\t, \\n, \\r, \\xNN, \\-)"
                ));
            }
            None => {
                return Err(format!(
                    "a lone `\\` ends the field at byte {byte} (a backslash is written `\\\\`)"
                ));
            }
        }
    }
    Ok(out)
}

/// Decodes a key: `-` is no key, anything else [`unescape`]d.
///
/// # Errors
/// As [`unescape`].
pub fn unescape_key(s: &str) -> Result<Option<Vec<u8>>, String> {
    if s == NO_KEY {
        Ok(None)
    } else {
        unescape(s).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_bytes_backslashes_and_invalid_utf8_print_escaped_and_read_back() {
        let cases: [(&[u8], &str); 8] = [
            (b"plain text", "plain text"),
            (b"a\tb\nc\rd", "a\\tb\\nc\\rd"),
            (b"back\\slash \\t", "back\\\\slash \\\\t"),
            (b"\x00\x1b[31m\x7f", "\\x00\\x1b[31m\\x7f"),
            (b"\xff\xfe ok", "\\xff\\xfe ok"),
            ("\u{85}é…".as_bytes(), "\\xc2\\x85é…"),
            (b"", ""),
            (b"-", "-"),
        ];
        for (bytes, shown) in cases {
            assert_eq!(escape(bytes, usize::MAX), shown, "{bytes:?}");
            assert_eq!(unescape(shown).as_deref(), Ok(bytes), "{shown}");
            assert!(!shown.contains(['\t', '\n', '\r']));
        }
    }

    #[test]
    fn no_key_the_key_dash_and_the_empty_key_differ() {
        assert_eq!(escape_key(None, 10), "-");
        assert_eq!(escape_key(Some(b"-"), 10), "\\-");
        assert_eq!(escape_key(Some(b""), 10), "");
        assert_eq!(escape_key(Some(b"--"), 10), "--");
        assert_eq!(unescape_key("-"), Ok(None));
        assert_eq!(unescape_key("\\-"), Ok(Some(b"-".to_vec())));
        assert_eq!(unescape_key(""), Ok(Some(Vec::new())));
    }

    #[test]
    fn a_cut_field_is_marked_and_refused_on_input() {
        assert_eq!(escape(b"abcdef", 3), "abc\\…");
        assert_eq!(escape(b"abc", 3), "abc");
        assert_eq!(escape(b"\xff\xff\xff", 2), "\\xff\\xff\\…");
        assert_eq!(escape(b"abc", 0), "\\…");
        assert!(unescape("abc\\…").is_err_and(|e| e.contains("cut")));
    }

    #[test]
    fn bad_escapes_are_named() {
        for (bad, says) in [
            ("a\\q", "`\\q`"),
            ("a\\", "lone"),
            ("\\x4", "two hex digits"),
            ("\\xzz", "two hex digits"),
        ] {
            let e = unescape(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert_eq!(
            unescape("\\X41"),
            Err("`\\X` at byte 1 is not an escape (\\\\, \\t, \\n, \\r, \\xNN, \\-)".to_owned())
        );
        assert_eq!(unescape("\\x41\\x4A"), Ok(b"AJ".to_vec()));
    }
}

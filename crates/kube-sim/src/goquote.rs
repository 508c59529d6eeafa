//! Strings quoted as Go's `%q` (`strconv.Quote`) quotes them, as upstream's
//! messages do: a field error's value (`Invalid value: "..."`), the name in
//! `errors.NewInvalid`/`NewNotFound` and the like. Rust's `{:?}` differs
//! for control and non-ASCII characters (`\u{1b}` for Go's `\x1b`, U+00AD
//! kept where Go writes `\u00ad`, U+E0001 kept where Go writes
//! `\U000e0001`, U+FEFF...), so every such message uses [`quote`].

mod isprint;

/// `strconv.Quote(s)`: `s` in double quotes, runes `unicode.IsPrint`
/// finds printable kept as they are, `"` and `\` backslashed, `\a` `\b`
/// `\f` `\n` `\r` `\t` `\v` by name, other bytes below 0x20 and 0x7f as
/// `\x..`, other runes as `\u....` (below 0x10000) or `\U........`.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    push_escaped(&mut out, s);
    out.push('"');
    out
}

/// [`quote`] of bytes that need not be UTF-8 (a percent-unescaped request
/// path): each byte that is no part of a valid UTF-8 sequence is `\x..`, as
/// Go's `utf8.DecodeRuneInString` finds it invalid one byte at a time.
pub fn quote_bytes(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len() + 2);
    out.push('"');
    for chunk in b.utf8_chunks() {
        push_escaped(&mut out, chunk.valid());
        for byte in chunk.invalid() {
            push_hex(&mut out, "\\x", u32::from(*byte), 2);
        }
    }
    out.push('"');
    out
}

/// `strconv.IsPrint`: letters, marks, numbers, punctuation, symbols and the
/// ASCII space (not U+00A0, U+3000 or other spaces, nor U+00AD).
pub fn is_print(c: char) -> bool {
    let r = u32::from(c);
    if r <= 0xff {
        return (0x20..=0x7e).contains(&r) || ((0xa1..=0xff).contains(&r) && r != 0xad);
    }
    let table = isprint::PRINT;
    // The first range that ends at or after r.
    let i = table.partition_point(|&(_, hi)| hi < r);
    table.get(i).is_some_and(|&(lo, _)| lo <= r)
}

fn push_escaped(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if is_print(c) => out.push(c),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if c < ' ' || c == '\u{7f}' => push_hex(out, "\\x", u32::from(c), 2),
            c if u32::from(c) < 0x10000 => push_hex(out, "\\u", u32::from(c), 4),
            c => push_hex(out, "\\U", u32::from(c), 8),
        }
    }
}

fn push_hex(out: &mut String, prefix: &str, v: u32, digits: usize) {
    out.push_str(prefix);
    out.push_str(&format!("{v:0digits$x}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Go's strconv.Quote answers (go1.26), for these inputs.
    #[test]
    fn quotes_as_go_does() {
        let cases = [
            ("", r#""""#),
            ("plain", r#""plain""#),
            ("a\u{1b}b", r#""a\x1bb""#),
            ("a\u{9}b\u{a}", r#""a\tb\n""#),
            ("a\u{22}b\u{5c}", r#""a\"b\\""#),
            ("it's", r#""it's""#),
            ("\u{e9}\u{1f600}", r#""é😀""#),
            ("a\u{ad}b", r#""a\u00adb""#),
            ("a\u{200b}b", r#""a\u200bb""#),
            ("\u{7f}\u{80}\u{9f}", r#""\x7f\u0080\u009f""#),
            ("\u{e0001}\u{10ffff}", r#""\U000e0001\U0010ffff""#),
            ("\u{fffd}\u{feff}", r#""�\ufeff""#),
            ("\u{a0}\u{2028}", r#""\u00a0\u2028""#),
            ("\u{7}\u{8}\u{c}\u{b}\u{d}\u{0}", r#""\a\b\f\v\r\x00""#),
            ("<&>", r#""<&>""#),
            ("\u{378}\u{377}", r#""\u0378ͷ""#),
            ("\u{1f600}\u{1fffe}", r#""😀\U0001fffe""#),
            ("\u{3000} ", r#""\u3000 ""#),
            ("\u{20000}\u{2fffe}", r#""𠀀\U0002fffe""#),
            ("\u{e000}\u{f8ff}", r#""\ue000\uf8ff""#),
        ];
        for (s, want) in cases {
            assert_eq!(quote(s), want, "{s:?}");
            assert_eq!(quote_bytes(s.as_bytes()), want, "{s:?} as bytes");
        }
    }

    #[test]
    fn invalid_utf8_bytes_are_hex_escaped_one_by_one() {
        let cases: [(&[u8], &str); 6] = [
            (&[0xff], r#""\xff""#),
            (&[0x61, 0xc3], r#""a\xc3""#),
            (&[0xe2, 0x80], r#""\xe2\x80""#),
            (&[0xed, 0xa0, 0x80], r#""\xed\xa0\x80""#),
            (&[0xf4, 0x90, 0x80, 0x80], r#""\xf4\x90\x80\x80""#),
            (&[0xe2, 0x80, 0x41, 0xc3, 0xa9], r#""\xe2\x80Aé""#),
        ];
        for (b, want) in cases {
            assert_eq!(quote_bytes(b), want, "{b:x?}");
        }
    }

    #[test]
    fn the_print_table_is_sorted_and_disjoint() {
        let t = isprint::PRINT;
        assert!(t.iter().all(|(lo, hi)| lo <= hi));
        assert!(t.windows(2).all(|w| w[0].1 + 1 < w[1].0));
        assert!(is_print('\u{100}') && !is_print('\u{378}') && !is_print('\u{10fffd}'));
    }
}

//! Keeping secrets out of text a user or an attacker can read: credentials
//! in URLs (`https://user:password@host/`) are replaced before a URL, or an
//! error that quotes one, reaches a log line, an Event, `explain` or a
//! metric label.

/// What replaces a password (or a user-only userinfo, which is often a token).
pub const REDACTED: &str = "***";

/// Replaces the credentials of every `scheme://userinfo@host` URL in `text`:
/// `https://user:pass@host/` → `https://user:***@host/`, and
/// `https://token@host/` → `https://***@host/`. Other text is unchanged.
pub fn redact_url_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        // The authority ends at the path, query or fragment, or at a
        // character a URL cannot hold unencoded. (Sub-delimiters such as
        // `'`, `(`, `)` and `,` may be in a password: they do not end it.)
        let end = tail
            .find(|c: char| {
                matches!(
                    c,
                    '/' | '?'
                        | '#'
                        | '"'
                        | '<'
                        | '>'
                        | '`'
                        | '['
                        | ']'
                        | '{'
                        | '}'
                        | '|'
                        | '^'
                        | '\\'
                ) || c.is_whitespace()
                    || c.is_control()
            })
            .unwrap_or(tail.len());
        // An IPv6 host is bracketed: `[` ends the part, after any userinfo.
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => {
                let userinfo = &authority[..at];
                match userinfo.split_once(':') {
                    Some((user, _)) => {
                        out.push_str(user);
                        out.push(':');
                        out.push_str(REDACTED);
                    }
                    None => out.push_str(REDACTED),
                }
                out.push_str(&authority[at..]);
            }
            None => {
                // Not consumed: a `://` may overlap its end (`x://a://...`).
                rest = tail;
                continue;
            }
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// Whether `url` carries credentials in its userinfo.
pub fn has_url_credentials(url: &str) -> bool {
    redact_url_credentials(url) != url
}

/// For text that may hold a URL too malformed to parse: everything between
/// `://` and the last `@` is replaced (over-redacting rather than leaking).
pub fn redact_loosely(text: &str) -> String {
    match (text.find("://"), text.rfind('@')) {
        (Some(i), Some(at)) if at > i + 3 => {
            format!("{}{REDACTED}{}", &text[..i + 3], &text[at..])
        }
        _ => redact_url_credentials(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn passwords_and_tokens_are_replaced() {
        for (input, want) in [
            ("https://user:pass@host/", "https://user:***@host/"),
            ("https://user:pass@host", "https://user:***@host"),
            (
                "http://tok3n@10.0.0.1:8080/api?x=1",
                "http://***@10.0.0.1:8080/api?x=1",
            ),
            ("https://u:p%40ss@[::1]:443/x", "https://u:***@[::1]:443/x"),
            (
                "error sending request for url (https://a:b@lb.example.com/v1/loadbalancers/x): connection refused",
                "error sending request for url (https://a:***@lb.example.com/v1/loadbalancers/x): connection refused",
            ),
            (
                "PUT \"https://a:b@h/\" failed; GET https://c:d@i/ too",
                "PUT \"https://a:***@h/\" failed; GET https://c:***@i/ too",
            ),
            ("https://host/path@x", "https://host/path@x"),
            ("no url here: user:pass@host", "no url here: user:pass@host"),
            ("https://", "https://"),
            ("http://admin:pw-'(x),@h/", "http://admin:***@h/"),
            ("url (https://u:p@h) failed", "url (https://u:***@h) failed"),
            ("", ""),
        ] {
            assert_eq!(redact_url_credentials(input), want, "{input}");
        }
        assert!(has_url_credentials("https://u:p@h/"));
        assert!(!has_url_credentials("https://h/"));
        assert_eq!(redact_loosely("https://u:pa/ss@h/"), "https://***@h/");
        assert_eq!(redact_loosely("not a url"), "not a url");
        assert_eq!(redact_url_credentials("x://a://u:p@h/"), "x://a://u:***@h/");
    }

    proptest! {
        /// Whatever the text, a password placed in a URL's userinfo never
        /// survives, and text without `://` is left alone.
        #[test]
        fn a_password_never_survives(
            before in "[ -~]{0,20}",
            user in "[a-z]{1,8}",
            password in "[A-Za-z0-9]{8,16}",
            host in "[a-z]{1,10}(\\.[a-z]{1,5})?(:[0-9]{1,5})?",
            after in "(/[ -~]{0,20})?",
        ) {
            let text = format!("{before}https://{user}:{password}@{host}{after}");
            let out = redact_url_credentials(&text);
            prop_assert!(!out.contains(&format!("{user}:{password}@")), "{out}");
        }

        #[test]
        fn any_text_is_handled(text in any::<String>()) {
            let out = redact_url_credentials(&text);
            if !text.contains("://") {
                prop_assert_eq!(out, text);
            }
        }
    }
}

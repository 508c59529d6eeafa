//! Printing an error with its causes.

/// The error and its causes, `a: b: c`, skipping a cause whose text the
/// message before it already contains. Many errors (kube's among them) put
/// their source in their own message *and* return it from `source()`, so
/// printing the chain naively (anyhow's `{:#}`) repeats a cause two or
/// three times.
pub fn display_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(cause) = cur {
        let text = cause.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("reading kubeconfig /x")]
    struct Outer(#[source] Middle);

    /// Embeds its source in its message, as kube's errors do.
    #[derive(Debug, thiserror::Error)]
    #[error("failed to read kubeconfig from '/x': {0}")]
    struct Middle(#[source] std::io::Error);

    #[test]
    fn each_cause_is_printed_once() {
        let e = Outer(Middle(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "No such file or directory (os error 2)",
        )));
        assert_eq!(
            display_chain(&e),
            "reading kubeconfig /x: failed to read kubeconfig from '/x': No such file or directory (os error 2)"
        );
    }
}

//! Structured logs through tracing: `--log-format=text|json`, `--log-level`
//! (a level or a full EnvFilter directive such as `info,kube=warn`).

use anyhow::{Context, Result};
use tracing_subscriber::EnvFilter;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The levels `--log-level` takes alone.
pub const LEVELS: &str = "off, error, warn, info, debug, trace";

/// Checks `--log-level`: tracing's filter syntax, where every directive
/// without `=` must be a level. (tracing reads a bare word as a target
/// name, so a typo such as `verbose` would silently log almost nothing.)
pub fn validate_level(level: &str) -> Result<(), String> {
    let is_level =
        |s: &str| !s.is_empty() && s.parse::<tracing_subscriber::filter::LevelFilter>().is_ok();
    for directive in level.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        match directive.rsplit_once('=') {
            None if !directive.contains('[') && !is_level(directive) => {
                return Err(format!(
                    "{directive:?} is neither a level ({LEVELS}) nor a target=level directive"
                ));
            }
            Some((_, l)) if !is_level(l) => {
                return Err(format!("{directive:?}: {l:?} is not a level ({LEVELS})"));
            }
            _ => {}
        }
    }
    EnvFilter::try_new(level)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

pub fn init(format: LogFormat, level: &str) -> Result<()> {
    let filter =
        EnvFilter::try_new(level).with_context(|| format!("invalid --log-level {level:?}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true);
    let res = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
    };
    res.map_err(|e| anyhow::anyhow!("initialising logging: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_directives_pass_and_bare_words_do_not() {
        for ok in [
            "info",
            "DEBUG",
            "off",
            "info,kube=warn",
            "protection_manager=debug",
            "warn,",
        ] {
            assert_eq!(validate_level(ok), Ok(()), "{ok}");
        }
        assert_eq!(
            validate_level("verbose").unwrap_err(),
            "\"verbose\" is neither a level (off, error, warn, info, debug, trace) nor a target=level directive"
        );
        assert_eq!(
            validate_level("info,kube=loud").unwrap_err(),
            "\"kube=loud\": \"loud\" is not a level (off, error, warn, info, debug, trace)"
        );
    }
}

//! protection-manager: one binary hosting the protection finalizer
//! controllers. This crate only wires: flags → protection-core's host and the
//! controller crates' descriptors.

mod cli;
mod controllers;
mod explain;
mod lien;
mod logging;
mod release_check;
mod run;
mod strip;
mod uninstall;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // Before any thread exists (the async runtimes start below).
    malloc_tune::tune();
    let cli = cli::Cli::parse();
    match cli.command {
        cli::Command::Version => {
            println!("{}", cli::version_text());
            ExitCode::SUCCESS
        }
        cli::Command::FeatureGates(args) => match cli::feature_gates(&args) {
            Ok(table) => {
                print!("{table}");
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        cli::Command::Explain(args) => {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return fail(&anyhow::anyhow!("starting the async runtime: {e}")),
            };
            // Kinds no explain hook names: the ProtectionRules' kinds.
            if explain::parse_target(&args.target).is_err()
                && let Some((resource, name)) = args.target.split_once('/')
            {
                return match rt.block_on(explain::explain_rules(&args, resource, name)) {
                    Ok((true, text)) => {
                        print!("{text}");
                        ExitCode::SUCCESS
                    }
                    Ok((false, text)) => {
                        eprint!("{text}");
                        ExitCode::FAILURE
                    }
                    Err(e) => fail(&e),
                };
            }
            match rt.block_on(explain::explain(&args)) {
                // A missing object is an error, as for kubectl: the text
                // names it, on stderr, and the exit code is non-zero.
                Ok(report) if !report.found => {
                    eprint!("{}", report.render(k8s_openapi::jiff::Timestamp::now()));
                    ExitCode::FAILURE
                }
                Ok(report) => {
                    print!("{}", report.render(k8s_openapi::jiff::Timestamp::now()));
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        cli::Command::Lien(cmd) => {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return fail(&anyhow::anyhow!("starting the async runtime: {e}")),
            };
            let out = match &cmd {
                cli::LienCommand::Add(a) => rt.block_on(lien::add(a)),
                cli::LienCommand::Remove(a) => rt.block_on(lien::remove(a)),
                cli::LienCommand::List(a) => rt.block_on(lien::list(a)),
            };
            match out {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        cli::Command::ReleaseCheck(args) => {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return fail(&anyhow::anyhow!("starting the async runtime: {e}")),
            };
            match rt.block_on(release_check::release_check(&args)) {
                Ok(line) => {
                    println!("{line}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        cli::Command::StripFinalizers(args) => {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return fail(&anyhow::anyhow!("starting the async runtime: {e}")),
            };
            match rt.block_on(strip::strip_finalizers(&args)) {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        cli::Command::ValidateConfig(args) => match run::validate_config(&args) {
            Ok(line) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        cli::Command::Run(args) => {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return fail(&anyhow::anyhow!("starting the async runtime: {e}")),
            };
            match rt.block_on(run::run(*args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e),
            }
        }
    }
}

/// Prints the error and each cause once (kube's errors repeat their cause
/// in their own text, so `{:#}` would print it two or three times).
fn fail(e: &anyhow::Error) -> ExitCode {
    let e: &(dyn std::error::Error + 'static) = e.as_ref();
    // A server that answered, but not as the Kubernetes API does, is named
    // for what it is, not as unreachable.
    let mut text = protection_core::errors::display_chain(e);
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(k) = c.downcast_ref::<kube::Error>()
            && let Some(m) = protection_host::client::not_the_kubernetes_api(k)
        {
            text = format!("{e}: {m}");
            break;
        }
        cause = c.source();
    }
    eprintln!(
        "Error: {}",
        protection_core::redact::redact_url_credentials(&text)
    );
    ExitCode::FAILURE
}

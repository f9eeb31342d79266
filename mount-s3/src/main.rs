//! `mount-s3`: mountctl's front end on AWS's published Mountpoint crates.
//!
//! The command line and each part's configuration (cli.rs), the mount itself (run.rs), background mode
//! (daemon.rs), mounts from a list of objects (manifest.rs), the FUSE adapter that keeps the kernel's page cache
//! (keep_cache.rs, with opened_versions.rs, and list_on_lookup.rs for readers by name), the session around it
//! (fuse_session.rs) and the read-ahead across files (ahead/). This file parses, runs, and turns the outcome into one line and an exit status: 0 mounted (and,
//! in the foreground, unmounted cleanly), 1 failed, 2 refused (the command line or a file it names is wrong).

mod ahead;
mod build_info;
mod cli;
mod daemon;
mod fuse_session;
mod keep_cache;
mod list_on_lookup;
mod manifest;
mod opened_versions;
mod run;

use std::fmt;
use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser as _;
use clap::error::ErrorKind;

use crate::cli::{CliArgs, Refusal};

fn main() -> ExitCode {
    // First, while this process has one thread: the daemon of a background mount takes its status socket.
    let status = match daemon::StatusSocket::inherited() {
        Ok(status) => status,
        Err(error) => return exit(&error),
    };
    let args = match CliArgs::try_parse() {
        Ok(args) => args,
        Err(error) => return refuse(&error),
    };
    match run::run(args, status) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => exit(&error),
    }
}

/// One line naming what was refused, exit 2; `--help` and `--version` print as usual.
fn refuse(error: &clap::Error) -> ExitCode {
    match cli::refusal_line(error) {
        Some(line) => {
            let _ = writeln!(std::io::stderr(), "mount-s3: {line}");
            ExitCode::from(2)
        }
        None if error.kind() == ErrorKind::DisplayVersion => {
            let _ = writeln!(std::io::stdout(), "{}", build_info::VERSION_LINE);
            ExitCode::SUCCESS
        }
        None => {
            let _ = error.print();
            ExitCode::SUCCESS
        }
    }
}

fn exit(error: &anyhow::Error) -> ExitCode {
    if let Some(Reported { code }) = error.downcast_ref::<Reported>() {
        return ExitCode::from(*code);
    }
    let (code, line) = outcome(error);
    tracing::error!("{line}");
    let _ = writeln!(std::io::stderr(), "{line}");
    ExitCode::from(code)
}

/// The exit status and the one line for an error: 2 for a refusal anywhere in its chain, else 1.
pub fn outcome(error: &anyhow::Error) -> (u8, String) {
    if error.chain().any(|cause| cause.is::<Refusal>()) {
        (2, format!("mount-s3: {error:#}"))
    } else {
        (1, format!("mount-s3: error: {error:#}"))
    }
}

/// An outcome already told (by the daemon to the command, or by the command on stderr): `main` only sets the
/// exit status.
#[derive(Debug)]
pub struct Reported {
    pub code: u8,
}

impl fmt::Display for Reported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "reported, exit status {}", self.code)
    }
}

impl std::error::Error for Reported {}

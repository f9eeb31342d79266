//! `mount-s3`: mountctl's front end on AWS's published Mountpoint crates.
//!
//! One args struct (cli.rs), one `run` (run.rs) that builds the client, the file system and the session, and
//! this file: parse, mount in the foreground or as a daemon, print AWS's ready line, wait for the end.

mod build_info;
mod cli;
mod manifest;
mod run;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt as _;
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use clap::Parser as _;
use clap::error::{ContextKind, ErrorKind};

use crate::cli::CliArgs;

pub use crate::build_info::{FS_VERSION, VERSION, VERSION_LINE};

/// Set in the daemon child that a background mount starts: mount, say so on stdout, then go quiet.
const DAEMON_CHILD_ENV: &str = "MOUNTCTL_MOUNT_S3_DAEMON_CHILD";
/// As long as AWS's CLI waits for its daemon to mount.
const DAEMON_READY_TIMEOUT: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    let args = match CliArgs::try_parse() {
        Ok(args) => args,
        Err(error) => return refuse(error),
    };
    let outcome = if args.foreground {
        foreground(&args, false)
    } else if std::env::var_os(DAEMON_CHILD_ENV).is_some() {
        foreground(&args, true)
    } else {
        background(&args)
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            eprintln!("mount-s3: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// One line naming what was refused, exit 2; `--help` and `--version` print as usual.
fn refuse(error: clap::Error) -> ExitCode {
    match error.kind() {
        ErrorKind::DisplayVersion => {
            println!("{VERSION_LINE}");
            return ExitCode::SUCCESS;
        }
        ErrorKind::DisplayHelp | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        ErrorKind::UnknownArgument => {
            let flag = error.get(ContextKind::InvalidArg).map(|v| v.to_string()).unwrap_or_default();
            eprintln!(
                "mount-s3: unsupported option {flag}: this mount-s3 ({VERSION}) does not take it; see `mount-s3 --help`"
            );
        }
        _ => {
            let rendered = error.render().to_string();
            let first = rendered.lines().next().unwrap_or("invalid arguments").trim_start_matches("error: ");
            eprintln!("mount-s3: {first} (see `mount-s3 --help`)");
        }
    }
    ExitCode::from(2)
}

fn foreground(args: &CliArgs, daemon_child: bool) -> anyhow::Result<()> {
    let _logging = mountpoint_s3_fs::logging::init_logging(run::logging_config(args, !daemon_child))?;
    let _metrics = mountpoint_s3_fs::metrics::install(None)?;
    let session = run::mount(args)?;
    println!("{} is mounted at {}", args.bucket_description(), args.mount_point.display());
    if daemon_child {
        quiet_standard_streams();
    }
    session.join()
}

/// Without --foreground AWS's CLI returns once the daemon has mounted. Ours starts itself again as that
/// daemon, in a session of its own, before any S3 or FUSE state exists (nothing is forked mid-flight).
fn background(_args: &CliArgs) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(DAEMON_CHILD_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = sender.send(line);
    });
    match receiver.recv_timeout(DAEMON_READY_TIMEOUT) {
        Ok(line) if line.contains(" is mounted at ") => {
            print!("{line}");
            Ok(())
        }
        Ok(_) => {
            let status = child.wait()?;
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            eprint!("{text}");
            anyhow::bail!("the mount process exited ({status}) before mounting")
        }
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("the mount process was not ready within {} s", DAEMON_READY_TIMEOUT.as_secs())
        }
    }
}

/// The daemon's parent has read the ready line and gone: stdout and stderr now lead nowhere.
fn quiet_standard_streams() {
    use std::os::fd::AsRawFd as _;
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: dup2 onto the process's own standard descriptors, with a descriptor we own.
        unsafe {
            libc::dup2(null.as_raw_fd(), 1);
            libc::dup2(null.as_raw_fd(), 2);
        }
    }
}

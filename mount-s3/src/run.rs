//! `run`: mount in the foreground, or start the daemon and wait for its ready line, or be that daemon; and
//! `mount`, which builds the client, the file system and the FUSE session, in that order, and nothing else.

use std::io::{BufRead as _, BufReader, Read as _};
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::Context as _;
use mountpoint_s3_client::S3CrtClient;
use mountpoint_s3_fs::data_cache::ManagedCacheDir;
use mountpoint_s3_fs::fuse::session::FuseSession;
use mountpoint_s3_fs::logging::init_logging;
use mountpoint_s3_fs::memory::{CandidateSize, PagedPool};
use mountpoint_s3_fs::s3::S3Personality;
use mountpoint_s3_fs::{MountpointConfig, Runtime, Superblock, SuperblockConfig, metrics};

use crate::build_info;
use crate::cli::{CACHE_BLOCK_SIZE, CliArgs};
use crate::manifest;

/// Set in the daemon child that a background mount starts: mount, say so on stdout, then go quiet.
const DAEMON_CHILD_ENV: &str = "MOUNTCTL_MOUNT_S3_DAEMON_CHILD";
/// As long as AWS's CLI waits for its daemon to mount.
const DAEMON_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Mounts as `args` ask: in this process with --foreground (or as the daemon of a background mount); else
/// starts that daemon and returns once it has mounted.
pub fn run(args: &CliArgs) -> anyhow::Result<()> {
    if args.foreground {
        foreground(args, false)
    } else if std::env::var_os(DAEMON_CHILD_ENV).is_some() {
        foreground(args, true)
    } else {
        background(args)
    }
}

fn foreground(args: &CliArgs, daemon_child: bool) -> anyhow::Result<()> {
    let _logging = init_logging(args.logging_config(!daemon_child)).context("cannot start logging")?;
    let _metrics = metrics::install(None).context("cannot start metrics")?;
    let session = mount(args)?;
    println!("{}", args.ready_line());
    if daemon_child {
        quiet_standard_streams()?;
    }
    session.join()
}

/// Without --foreground AWS's CLI returns once the daemon has mounted. Ours starts itself again as that
/// daemon, in a process group of its own, before any S3 or FUSE state exists (nothing is forked mid-flight).
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
fn quiet_standard_streams() -> anyhow::Result<()> {
    use std::os::fd::AsRawFd as _;
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null").context("cannot open /dev/null")?;
    for fd in [1, 2] {
        // SAFETY: dup2 onto the process's own standard descriptors, with a descriptor we own.
        if unsafe { libc::dup2(null.as_raw_fd(), fd) } == -1 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("cannot point descriptor {fd} at /dev/null"));
        }
    }
    Ok(())
}

/// Mounts and returns the running session; the caller says so and joins it.
pub fn mount(args: &CliArgs) -> anyhow::Result<FuseSession> {
    tracing::info!("{}", build_info::VERSION_LINE);
    let s3_path = args.s3_path()?;
    // A bad object list is refused before the network is touched.
    let listed = match &args.manifest {
        Some(path) => {
            let directory = manifest::directory_name(&s3_path, args.manifest_directory.as_deref())?;
            Some((manifest::read_object_list(path)?, directory))
        }
        None => None,
    };
    let memory_limit = args.memory_limit();
    let client_config = args.client_config(memory_limit)?;
    let fuse_session_config = args.fuse_session_config()?;
    let pool = PagedPool::config()
        .with_candidate_sizes([
            CandidateSize::prunable(CACHE_BLOCK_SIZE as usize),
            CandidateSize::prunable(client_config.part_config.read_size_bytes),
            CandidateSize::new(client_config.part_config.write_size_bytes),
        ])
        .with_memory_limit(memory_limit.bytes())
        .with_maintenance_interval(Duration::from_secs(60))
        .build();

    // A mount from a list never lists: the first request it makes is the first read.
    let validate = if listed.is_some() { None } else { Some(&s3_path) };
    let client: S3CrtClient = client_config
        .create_client(pool.clone(), validate)
        .with_context(|| format!("cannot reach {}", s3_path.bucket_description()))?;

    let runtime = Runtime::new(client.event_loop_group());
    let personality = S3Personality::infer_from_bucket(&s3_path.bucket, &client.endpoint_config());
    let mut data_cache_config = args.data_cache_config();
    let cache_dir = match &mut data_cache_config.disk_cache_config {
        Some(disk) => {
            // A directory of its own under --cache, emptied now and removed when the session ends.
            let managed = ManagedCacheDir::new_from_parent_with_cache_key(&disk.cache_directory, None, true)
                .with_context(|| format!("cannot use cache directory {}", disk.cache_directory.display()))?;
            disk.cache_directory = managed.as_path_buf();
            Some(managed)
        }
        None => None,
    };
    let filesystem_config = args.filesystem_config(personality);
    let mountpoint_config = MountpointConfig::new(fuse_session_config, filesystem_config, data_cache_config)?;
    let mut session = match listed {
        Some((objects, directory)) => {
            let mount = manifest::metablock(objects, &s3_path, directory)?;
            tracing::info!("serving the listed objects under {}/", mount.directory_name);
            let mut session = mountpoint_config.create_fuse_session(mount.metablock, client, runtime, pool)?;
            let store = mount.store;
            session.run_on_close(Box::new(move || drop(store)));
            session
        }
        None => {
            let superblock = Superblock::new(
                client.clone(),
                s3_path,
                SuperblockConfig { cache_config: args.cache_config(), s3_personality: personality },
            );
            mountpoint_config.create_fuse_session(superblock, client, runtime, pool)?
        }
    };
    if let Some(managed) = cache_dir {
        session.run_on_close(Box::new(move || drop(managed)));
    }
    Ok(session)
}

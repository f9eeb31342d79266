//! Background mode (no --foreground): the command returns once a daemon of its own has mounted, or says why
//! it could not, and a mount never outlives a command that did not report it.
//!
//! The command starts itself again as the daemon, in a new session (so a Ctrl-C at the terminal reaches only
//! the command), with one end of a socket pair, before any S3 or FUSE state exists (no fork mid-flight).
//! Over that socket the daemon sends one word: "mounted", or an exit status and the line to print. The
//! command prints its ready line and answers "accepted"; only then does the daemon keep its mount. If the
//! command ends first (interrupted, killed, or given up after 30 s), the daemon sees its end of the socket
//! close: before it has changed anything it exits at once; after, it unmounts and exits.

use std::env;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsRawFd as _, FromRawFd as _, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};

use crate::Reported;
use crate::cli::CliArgs;

/// Names the daemon's end of the socket; set only by the command for the daemon it starts.
const STATUS_FD_ENV: &str = "MOUNTCTL_MOUNT_S3_STATUS_FD";
/// As long as AWS's CLI waits for its daemon to mount.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the daemon waits for the command to accept its mount (it answers as soon as it has printed).
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the command waits for a daemon that will not mount to end.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// The daemon's progress: its checks have passed, it is writing and mounting.
const CHECKED: u8 = b'c';
/// The daemon's word for success; any other byte but CHECKED is the exit status of a failure, its line following.
const MOUNTED: u8 = 0;
/// The command's answer to MOUNTED.
const ACCEPTED: u8 = b'k';
/// The daemon's exit status when its command went away before it had changed anything.
const ABANDONED_EXIT: i32 = 1;

/// The command's side: start the daemon, wait for its word, print the ready line or its failure.
pub fn start(args: &CliArgs) -> anyhow::Result<()> {
    let (ours, theirs) = UnixStream::pair().context("cannot create a socket to hear from the mount process")?;
    let their_fd = theirs.as_raw_fd();
    let exe = env::current_exe().context("cannot find this program's own executable to start the mount process")?;
    let mut command = Command::new(exe);
    command
        .args(env::args_os().skip(1))
        .env(STATUS_FD_ENV, their_fd.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    // Its stderr stays ours until it has mounted, so that a crash while starting is seen.
    // SAFETY: only async-signal-safe calls (setsid, fcntl) run between fork and exec.
    unsafe {
        command.pre_exec(move || {
            if libc::setsid() == -1 {
                return Err(io::Error::last_os_error());
            }
            set_close_on_exec(their_fd, false)
        });
    }
    let mut child = command.spawn().context("cannot start the mount process")?;
    drop(theirs); // the daemon holds the only other end now: its exit closes the socket
    let pid = child.id();
    let mut checked = false;
    match wait_for_word(&ours, Instant::now() + READY_TIMEOUT, &mut checked) {
        Word::Mounted => {
            let mut stdout = io::stdout().lock();
            // Nothing to do if our stdout is closed: the mount stands, and the exit status says so.
            let _ = writeln!(stdout, "{}", args.ready_line()).and_then(|()| stdout.flush());
            if (&ours).write_all(&[ACCEPTED]).is_ok() {
                return Ok(());
            }
            // The daemon stopped listening: it gave up waiting for us (it then unmounts and says so), or ended.
            match wait_for_word(&ours, Instant::now() + EXIT_TIMEOUT, &mut checked) {
                Word::Failed { code, line } => {
                    let _ = writeln!(io::stderr(), "{line}");
                    let _ = wait_for_exit(&mut child, EXIT_TIMEOUT);
                    Err(Reported { code }.into())
                }
                _ => bail!(
                    "the mount process {pid} ended right after it mounted; check `mount | grep fuse` for a mount \
                     left behind (`fusermount3 -uz DIR` clears it)"
                ),
            }
        }
        Word::Failed { code, line } => {
            let _ = writeln!(io::stderr(), "{line}");
            let _ = wait_for_exit(&mut child, EXIT_TIMEOUT);
            Err(Reported { code }.into())
        }
        Word::Closed => match wait_for_exit(&mut child, EXIT_TIMEOUT) {
            Some(status) => bail!(
                "the mount process ended ({status}) before it mounted anything; run the same command with \
                 --foreground to see why"
            ),
            None => bail!("the mount process {pid} stopped answering before it mounted; see its log, or kill it"),
        },
        Word::Late => {
            drop(ours); // the daemon's cue to stop: it has either changed nothing yet, or unmounts
            let doing = if checked {
                format!(
                    "had checked {} and was still mounting (a long object list takes a while to load: mount it with \
                     --foreground)",
                    describe_target(args)
                )
            } else {
                format!("was still checking {} (is the endpoint answering?)", describe_target(args))
            };
            match wait_for_exit(&mut child, EXIT_TIMEOUT) {
                Some(_) => bail!(
                    "no mount within {} s: the mount process {doing}; it has stopped and nothing is mounted; run \
                     with --foreground to see its log",
                    READY_TIMEOUT.as_secs()
                ),
                None => bail!(
                    "no mount within {} s, and the mount process {pid} is still stopping; check `mount | grep \
                     fuse` and kill it if it stays",
                    READY_TIMEOUT.as_secs()
                ),
            }
        }
    }
}

fn describe_target(args: &CliArgs) -> String {
    match &args.endpoint_url {
        Some(url) => format!("{} at {url}", args.bucket_description()),
        None => args.bucket_description(),
    }
}

/// What the daemon said.
enum Word {
    Mounted,
    Failed {
        code: u8,
        line: String,
    },
    /// Its end closed with no word: it crashed or was killed.
    Closed,
    /// No word before the deadline.
    Late,
}

/// Reads until the daemon's word, its end, or the deadline; `checked` notes the progress it reported.
fn wait_for_word(socket: &UnixStream, deadline: Instant, checked: &mut bool) -> Word {
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || socket.set_read_timeout(Some(left)).is_err() {
            return Word::Late;
        }
        match (&*socket).read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                for &byte in &chunk[..n] {
                    if received.is_empty() && byte == CHECKED {
                        *checked = true;
                    } else {
                        received.push(byte);
                    }
                }
                if received.first() == Some(&MOUNTED) {
                    return Word::Mounted;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => return Word::Late,
            Err(_) => break,
        }
    }
    match received.split_first() {
        None => Word::Closed,
        Some((code, line)) => Word::Failed { code: *code, line: String::from_utf8_lossy(line).into_owned() },
    }
}

/// Its exit status, or None if it is still running at the end of `limit`.
fn wait_for_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
            _ => return None,
        }
    }
}

/// The daemon's end of the socket, taken from the environment.
pub struct StatusSocket(UnixStream);

impl StatusSocket {
    /// The socket this process was started with, if it is a daemon. Call first thing in `main`, while the
    /// process has one thread: the variable is removed, so that nothing this process starts inherits it.
    pub fn inherited() -> anyhow::Result<Option<Self>> {
        let Some(value) = env::var_os(STATUS_FD_ENV) else {
            return Ok(None);
        };
        // SAFETY: no other thread exists yet to read the environment while it changes.
        unsafe { env::remove_var(STATUS_FD_ENV) };
        let fd: RawFd =
            value.to_str().and_then(|v| v.parse().ok()).filter(|fd| *fd > 2 && is_socket(*fd)).ok_or_else(|| {
                anyhow!("{STATUS_FD_ENV} names no open socket; only mount-s3 sets it, for its daemon")
            })?;
        set_close_on_exec(fd, true).context("cannot keep the status socket to this process")?;
        // SAFETY: the descriptor is open (checked above), and our parent passed it to this process alone.
        Ok(Some(Self(unsafe { UnixStream::from_raw_fd(fd) })))
    }

    /// Starts watching for the command's answer, or its end; the daemon then reports through the returned value.
    pub fn watch_parent(self) -> anyhow::Result<Reporter> {
        let listener = self.0.try_clone().context("cannot watch the status socket")?;
        let state = Arc::new(Shared { stage: Mutex::new(Stage::Checking), changed: Condvar::new() });
        let watched = state.clone();
        thread::Builder::new()
            .name("parent-watch".into())
            .spawn(move || watch(listener, &watched))
            .context("cannot start the thread that watches the command")?;
        Ok(Reporter { socket: self.0, state })
    }
}

fn is_socket(fd: RawFd) -> bool {
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes into the buffer it is given, and only reads the descriptor's metadata.
    if unsafe { libc::fstat(fd, stat.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: fstat succeeded, so it filled the buffer.
    let mode = unsafe { stat.assume_init() }.st_mode;
    mode & libc::S_IFMT == libc::S_IFSOCK
}

fn set_close_on_exec(fd: RawFd, close: bool) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor number only reads or sets its flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags == -1 {
        return Err(io::Error::last_os_error());
    }
    let flags = if close { flags | libc::FD_CLOEXEC } else { flags & !libc::FD_CLOEXEC };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// How far the daemon has gone, as the watch thread needs to know it when the command ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Reading and checking only (the network included): nothing written, nothing mounted.
    Checking,
    /// Writing the cache directory and the list's store, and mounting.
    Changing,
    /// Mounted, said so, waiting for the command to accept.
    Reported,
    Accepted,
    /// The command ended after Checking, or did not answer in time: the daemon must undo what it mounts.
    Abandoned,
    /// The daemon has told its failure.
    Failed,
}

struct Shared {
    stage: Mutex<Stage>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Stage> {
        self.stage.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The watch thread: one read, which returns with the command's answer or when the command has gone.
fn watch(mut socket: UnixStream, state: &Shared) {
    let mut answer = [0u8; 1];
    let accepted = loop {
        match socket.read(&mut answer) {
            Ok(1) => break answer[0] == ACCEPTED,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            _ => break false,
        }
    };
    let mut stage = state.lock();
    match (*stage, accepted) {
        (Stage::Checking, _) => {
            // Held under the lock, so the main thread cannot be between its checks and its first change.
            // SAFETY: _exit ends the process at once; nothing of ours needs undoing at this stage.
            unsafe { libc::_exit(ABANDONED_EXIT) }
        }
        (Stage::Reported, true) => *stage = Stage::Accepted,
        (Stage::Changing | Stage::Reported, _) => *stage = Stage::Abandoned,
        (Stage::Accepted | Stage::Abandoned | Stage::Failed, _) => {}
    }
    state.changed.notify_all();
}

/// The daemon's side of the socket.
pub struct Reporter {
    socket: UnixStream,
    state: Arc<Shared>,
}

impl Reporter {
    /// Called once the checks have passed, before the first change: from here on an ended command means
    /// "unmount", no longer "exit at once".
    pub fn begin_changes(&self) -> anyhow::Result<()> {
        let mut stage = self.state.lock();
        if *stage == Stage::Abandoned {
            bail!("the command that started this mount has ended; not mounting");
        }
        *stage = Stage::Changing;
        // Progress, for the command's message should it give up waiting; if it has gone, the watch thread knows.
        let _ = (&self.socket).write_all(&[CHECKED]);
        Ok(())
    }

    /// Says "mounted" and waits for the command to accept; an error means the mount must go.
    pub fn mounted(&self) -> anyhow::Result<()> {
        let mut stage = self.state.lock();
        if *stage == Stage::Abandoned {
            bail!("the command that started this mount ended while it was mounting");
        }
        (&self.socket)
            .write_all(&[MOUNTED])
            .context("cannot tell the command that started this mount (it has ended)")?;
        *stage = Stage::Reported;
        let (mut stage, _) = self
            .state
            .changed
            .wait_timeout_while(stage, ACCEPT_TIMEOUT, |stage| *stage == Stage::Reported)
            .unwrap_or_else(PoisonError::into_inner);
        match *stage {
            Stage::Accepted => Ok(()),
            Stage::Reported => {
                // From here a late answer must fail at the command (its write then meets a closed end), so that
                // it never reports a mount this process is about to undo.
                *stage = Stage::Abandoned;
                let _ = self.socket.shutdown(std::net::Shutdown::Read);
                bail!(
                    "the command that started this mount did not answer within {} s (was its output blocked?)",
                    ACCEPT_TIMEOUT.as_secs()
                )
            }
            _ => bail!("the command that started this mount ended before it could report the mount"),
        }
    }

    /// Tells the command why it failed (if it is still there to hear) and returns the error for `main`,
    /// which then only sets the exit status: the command prints the line.
    pub fn failed(&self, error: anyhow::Error) -> anyhow::Error {
        let (code, line) = crate::outcome(&error);
        tracing::error!("{line}");
        *self.state.lock() = Stage::Failed;
        let mut word = vec![code];
        word.extend_from_slice(line.as_bytes());
        // The command may have ended: then there is no one to tell.
        let _ = (&self.socket).write_all(&word);
        let _ = self.socket.shutdown(std::net::Shutdown::Write);
        Reported { code }.into()
    }
}

/// Points stdin, stdout and stderr at /dev/null: once the daemon has mounted, the command's terminal or pipes
/// are no longer its own (a reader of the command's output must see it end when the command ends).
pub fn go_quiet() -> anyhow::Result<()> {
    let null = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null").context("cannot open /dev/null")?;
    for fd in 0..=2 {
        // SAFETY: dup2 onto this process's own standard descriptors, from a descriptor we own.
        if unsafe { libc::dup2(null.as_raw_fd(), fd) } == -1 {
            return Err(io::Error::last_os_error())
                .with_context(|| format!("cannot point descriptor {fd} at /dev/null"));
        }
    }
    Ok(())
}

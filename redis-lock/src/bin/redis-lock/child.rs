//! The command `run` supervises: start it, learn when it exits, signal it, read its status.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus};

use libc::c_int;

use crate::exit::{self, Failure};

/// Starts `command` with stdio inherited, `env` added to the environment and the variables
/// named in `unset` removed from it.
pub(crate) fn spawn(
    command: &[OsString],
    env: &[(&str, String)],
    unset: &[&str],
) -> Result<Child, Failure> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| Failure::usage("missing command after `--`"))?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    for name in unset {
        cmd.env_remove(name);
    }
    for (name, value) in env {
        cmd.env(name, value);
    }
    cmd.spawn().map_err(|e| {
        let name = program.to_string_lossy();
        match e.kind() {
            io::ErrorKind::NotFound => {
                Failure::new(exit::NOT_FOUND, format!("{name}: command not found"))
            }
            io::ErrorKind::PermissionDenied => Failure::new(
                exit::CANNOT_EXECUTE,
                format!("{name}: permission denied (not executable?)"),
            ),
            _ => Failure::new(exit::CANNOT_EXECUTE, format!("{name}: cannot execute: {e}")),
        }
    })
}

/// Calls `exited` on a thread of its own once `child` has exited. The child is left
/// unreaped (`WNOWAIT`) so its pid cannot be reused while we may still signal it; the caller
/// reaps it with `Child::wait` afterwards.
pub(crate) fn on_exit(child: &Child, exited: impl FnOnce() + Send + 'static) -> io::Result<()> {
    let pid = child.id();
    std::thread::Builder::new()
        .name("redis-lock-child".into())
        .spawn(move || {
            loop {
                // SAFETY: an all-zero `siginfo_t` is a valid value for waitid to overwrite.
                let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                // SAFETY: `info` is a valid, writable `siginfo_t`; `pid` is our child.
                let r = unsafe {
                    libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT)
                };
                if r == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                    break;
                }
            }
            exited();
        })?;
    Ok(())
}

/// Sends `signo` to `child`, which must not have been reaped yet.
pub(crate) fn signal(child: &Child, signo: c_int) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: no memory-safety preconditions. The child is not reaped before the
        // supervision loop ends (see `on_exit`), so `pid` still names it.
        unsafe {
            libc::kill(pid, signo);
        }
    }
}

/// The shell convention: the exit code, or 128 + the signal that killed the command.
pub(crate) fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(exit::CANNOT_EXECUTE)
}

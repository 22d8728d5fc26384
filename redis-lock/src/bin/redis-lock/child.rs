//! The command `run` supervises: start it, learn when it exits, signal it, read its status.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus};

use libc::c_int;

use crate::exit::{self, Failure};

/// The signal the command gets from the kernel when redis-lock dies without waiting for it
/// (SIGKILL, the OOM killer, a crash): see [`die_with_parent`].
///
/// SIGKILL, not SIGTERM. Nobody is left to supervise: no grace period can be waited out, no
/// SIGKILL can follow a SIGTERM the command ignores or is slow to act on, and the lock is no
/// longer renewed, so it frees at its TTL and another run may start. A command that survived
/// a SIGTERM (a shell in the middle of a builtin, a program that traps TERM to finish its
/// work) would then run next to that one: exactly what the lock is for. A command that must
/// clean up after itself still can when redis-lock is stopped the ordinary way (SIGTERM,
/// SIGINT, ...): those are forwarded to it, and redis-lock waits for it.
#[cfg(any(target_os = "linux", target_os = "android"))]
const PARENT_DEATH_SIGNAL: c_int = libc::SIGKILL;

/// Makes the kernel send [`PARENT_DEATH_SIGNAL`] to the command when redis-lock dies, so the
/// command never outlives the process that holds its lock (Linux's `PR_SET_PDEATHSIG`).
///
/// Covered: the command's own process (with `-c TEXT`, the `sh`). Not covered: processes it
/// starts (the setting is not inherited across `fork`: a shell script's children outlive it
/// unless it `exec`s its last command), a set-user-ID or set-group-ID program or one with
/// file capabilities (the kernel clears the setting when it executes one, `sudo` for
/// instance), and a program that changes its credentials or clears the setting itself.
///
/// The kernel sends it when the *thread* that forked exits: `run` spawns the command from
/// the main thread, which lives until redis-lock exits.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: no preconditions; read before the fork, in the parent.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe functions may be called: `prctl`, `getppid`, `getpid` and `kill` are.
    // It allocates nothing (the error is made from a raw errno).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::c_ulong::try_from(PARENT_DEATH_SIGNAL).unwrap_or(9),
            ) == -1
            {
                return Err(io::Error::last_os_error());
            }
            // redis-lock may have died between the fork and the `prctl`: then the signal
            // never comes, and the child was handed to another parent (init, or a
            // subreaper). Do what the signal would have done. (A death after this check
            // sends the signal: SIGKILL needs no handler, so the one the child inherited
            // from redis-lock until the exec cannot catch it.)
            if libc::getppid() != parent {
                libc::kill(libc::getpid(), PARENT_DEATH_SIGNAL);
            }
            Ok(())
        });
    }
}

/// Elsewhere there is no parent-death signal: a command outlives a killed redis-lock there.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn die_with_parent(_: &mut Command) {}

/// Starts `command` with stdio inherited, `env` added to the environment and the variables
/// named in `unset` removed from it. The command is killed if redis-lock dies without waiting
/// for it ([`die_with_parent`]).
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
    die_with_parent(&mut cmd);
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

//! The `redis-lock` command-line tool (feature `cli`).
//!
//! `redis-lock` is `flock(1)` across machines: it runs a command only while holding a lock,
//! renews the lock while the command runs, and releases it when the command exits.
//!
//! ```sh
//! cargo install redis-lock-sync --features cli           # installs ~/.cargo/bin/redis-lock
//! cargo run -p redis-lock-sync --features cli -- --help  # or run it from a checkout
//! ```
//!
//! The library alone does not build or depend on any of it (`clap`, `signal-hook`); the
//! `cli` feature also turns on `tls`.
//!
//! # Subcommands
//!
//! ```sh
//! export REDIS_URL=redis://redis.internal:6379/      # or --url; default redis://127.0.0.1:6379/
//!
//! redis-lock run nightly-report -- ./report.sh --full # waits for the lock, then runs the command
//! redis-lock run --no-wait --on-busy skip backup -- ./backup.sh   # busy? exit 0 without running
//! redis-lock run --wait 2m --ttl 30s --kill-on-loss migrate -- ./migrate.sh
//! redis-lock run --permits 3 exports -- ./export.sh   # at most 3 of these at once (a semaphore)
//! redis-lock run account:7 --also account:9 -- ./transfer.sh    # both locks, all or none
//!
//! redis-lock status nightly-report          # held (exit 0) or free (exit 1), by whom, since when
//! redis-lock status nightly-report --json
//! redis-lock list 'report-*' --json         # held locks and semaphores in use (SCAN, never KEYS)
//! redis-lock release nightly-report --force # operators: break a lock, says whose it was
//! redis-lock release --handle               # inside run: finish the lock early ($REDIS_LOCK_HANDLE)
//! redis-lock extend --handle --ttl 10m      # extend it; or --handle TEXT for a handle passed on
//! redis-lock watch 'report-*'               # live: holders, waiters, handoffs, releases
//! redis-lock watch nightly-report --json    # the same, one JSON object per change, as it happens
//! redis-lock run scheduler --metadata 10.0.0.7 -- ./sched   # run as the leader, with a value
//! redis-lock leader scheduler --json        # who leads: its value, host, pid, token (exit 1: none)
//! ```
//!
//! A cron job on several machines that must run on only one of them at a time:
//!
//! ```text
//! REDIS_URL=redis://redis.internal:6379/
//! */15 * * * * /usr/local/bin/redis-lock run backup --no-wait --on-busy skip -- /opt/backup.sh
//! ```
//!
//! Whoever comes first runs the backup; the others exit 0 at once and print nothing (so cron
//! mails nothing). With `--on-busy fail` (the default) they exit 75 instead, or the code
//! given by `--busy-exit-code N` (like `flock -E`).
//!
//! # `run` options
//!
//! | option | meaning |
//! |---|---|
//! | `--ttl DURATION` | default 30s; renewed every TTL/3 |
//! | `-w` / `--wait DURATION`, `-n` / `--no-wait` | default: wait until the lock is free |
//! | `--on-busy fail\|skip`, `-E` / `--busy-exit-code N` | what a busy lock does (default: exit 75) |
//! | `--hold-at-least DURATION`, `--cooldown DURATION` | keep the lock taken, by nobody, after the command ends; `0` means none |
//! | `--read` / `-s` / `--shared`, `--write` / `-x` / `--exclusive` | a read share or the write lock of a read-write lock, like `flock -s` / `-x` |
//! | `--permits N` | a permit of the semaphore KEY of N permits |
//! | `--also NAME` | repeatable: hold NAME too, all or none |
//! | `--metadata TEXT` | shown by `status` and `list` |
//! | `--kill-on-loss`, `--kill-grace DURATION` | on a loss, SIGTERM the command, SIGKILL after the grace (default 10s), exit 124 |
//! | `-c TEXT` / `--command TEXT` | run `sh -c TEXT` instead of a command after `--` |
//!
//! Durations: `500ms`, `30s`, `2m`, `1h`, or bare seconds; at most 365 days (longer is a usage
//! error, exit 64). For every subcommand: `--url` (`REDIS_URL`), `--namespace`
//! (`REDIS_LOCK_NAMESPACE`) and `--connect-timeout DURATION` (`REDIS_LOCK_CONNECT_TIMEOUT`,
//! default 2s).
//!
//! # What `run` does
//!
//! - The command inherits stdin, stdout and stderr, and finds `REDIS_LOCK_KEY`,
//!   `REDIS_LOCK_NAMESPACE`, `REDIS_LOCK_FENCING_TOKEN`, `REDIS_LOCK_TTL_MS` and
//!   `REDIS_LOCK_HANDLE` (the lock's lease handle, a secret: whoever has it owns the lock) in
//!   its environment; with `--also`, `REDIS_LOCK_KEYS` and `REDIS_LOCK_FENCING_TOKENS`
//!   (`name=token,...`) instead of a handle. Variables a run does not set are removed, so a
//!   `run` inside another never passes the outer lock's handle on. `release --handle` and
//!   `extend --handle`, given no text, read the variable, which keeps the secret off the
//!   command line that `ps` shows.
//! - SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1 and SIGUSR2 are forwarded to the command, which
//!   is waited for before the lock is released. Signals go to the command's process, not its
//!   children: a shell script should `exec` its last command or trap TERM.
//! - If `redis-lock` dies without waiting for the command (SIGKILL, the OOM killer), the
//!   kernel kills the command at once (Linux, `PR_SET_PDEATHSIG`), so it never runs on
//!   without the lock. Not covered: the processes the command starts, and set-user-ID
//!   programs, for which the kernel clears the setting.
//! - If the lock is lost while the command runs, `redis-lock` warns on stderr; with
//!   `--kill-on-loss` the command gets SIGTERM, then SIGKILL after `--kill-grace`. `run`
//!   cannot tell the command's own early `release --handle` from a loss, so finish early
//!   only as the command's last step, or without `--kill-on-loss`.
//! - A lock cooling down, or just handed to a waiter that has not claimed it yet, has no
//!   holder: `status`, `list`, `watch` and `release --force` say so, and in JSON `host`,
//!   `pid` and `acquired_at` are `null`. The JSON's `has_owner` says whether anybody owns the
//!   lock, not whether you do.
//! - `status` and `list` show a semaphore's permits in use of its limit, its holders and
//!   waiters, and a read-write lock's mode, readers and writers waiting. `watch` shows
//!   locks and semaphores (a name, or those a glob matches); `--interval` is 10ms to 365
//!   days.
//! - While it waits on a terminal, a status line on stderr shows for how long and who holds
//!   the lock.
//! - `rediss://` URLs work; `rediss://host:port/#insecure` skips certificate verification.
//!
//! # Exit codes
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success; `run`: the command exited 0, or the lock was busy with `--on-busy skip` |
//! | 1 | `status`: the lock is free; `release --force`: it was not held |
//! | 64 | bad command line: unknown option, bad duration, URL, key or namespace, missing command |
//! | 69 | Redis unreachable or failing |
//! | 70 | the system refused what redis-lock needs (signal handlers, a thread) |
//! | 75 | `run`: the lock stayed busy with `--on-busy fail`; see `--busy-exit-code` |
//! | 124 | `run --kill-on-loss`: the lock was lost and the command terminated; `release/extend --handle`: the lock is not the handle's any more |
//! | 126 | `run`: the command cannot be executed |
//! | 127 | `run`: the command was not found |
//! | 128+N | `run`: the command was killed by signal N, or redis-lock got signal N while waiting |
//! | other | `run`: the command's own exit code |

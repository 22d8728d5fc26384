//! The command line: clap definitions, help texts, and the parsed settings.
//!
//! clap's builder API rather than its derive macros: the derive pulls in `syn` 2 while the
//! workspace's proc macros use `syn` 3, and the builder compiles faster.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Arg, ArgAction, ArgMatches, Command};

use crate::duration;
use crate::exit::{self, Failure};

/// Redis to use when neither `--url` nor `REDIS_URL` is given.
pub(crate) const DEFAULT_URL: &str = "redis://127.0.0.1:6379/";

/// Where the locks live.
#[derive(Debug)]
pub(crate) struct Connection {
    pub(crate) url: String,
    pub(crate) namespace: String,
    /// `--connect-timeout`: how long a connection to Redis may take to open.
    pub(crate) connect_timeout: Duration,
}

/// The library's default connect timeout, which `--connect-timeout` replaces.
const DEFAULT_CONNECT_TIMEOUT: &str = "2s";

/// What to do when the lock stays busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnBusy {
    Fail,
    Skip,
}

/// `redis-lock run`.
#[derive(Debug)]
pub(crate) struct RunArgs {
    pub(crate) key: String,
    /// `--also NAME`: more locks taken together with `key`, all or none.
    pub(crate) also: Vec<String>,
    pub(crate) ttl: Duration,
    /// `None`: wait until the lock is free.
    pub(crate) wait: Option<Duration>,
    pub(crate) on_busy: OnBusy,
    pub(crate) busy_exit_code: i32,
    /// `None`: no minimum hold (the option left out, or 0).
    pub(crate) hold_at_least: Option<Duration>,
    /// `None`: no cool-down (the option left out, or 0).
    pub(crate) cooldown: Option<Duration>,
    /// `--read` / `--write`: a side of a read-write lock; `None`: a mutex.
    pub(crate) mode: Option<redis_lock::LockMode>,
    pub(crate) metadata: Option<String>,
    /// `Some(grace)` with `--kill-on-loss`.
    pub(crate) kill_on_loss: Option<Duration>,
    pub(crate) command: Vec<OsString>,
    /// `--permits N`: hold a permit of the semaphore KEY of N permits instead of the lock.
    pub(crate) permits: Option<u32>,
}

/// One parsed invocation.
#[derive(Debug)]
pub(crate) enum Action {
    Run(Box<RunArgs>),
    Status {
        key: String,
        json: bool,
    },
    Leader {
        election: String,
        json: bool,
    },
    List {
        pattern: String,
        json: bool,
    },
    Release {
        key: String,
        json: bool,
    },
    /// `release --handle`: finish a lock this process was handed.
    ReleaseHandle {
        handle: String,
        json: bool,
    },
    /// `extend --handle --ttl`.
    Extend {
        handle: String,
        ttl: Duration,
        json: bool,
    },
    Watch(crate::watch::WatchArgs),
}

/// What the command line asked for.
#[derive(Debug)]
pub(crate) enum Parsed {
    Do(Connection, Action),
    /// Help or version text: print it to stdout and exit 0.
    Print(String),
}

const ABOUT: &str = "Run commands under a distributed lock on Redis: flock(1) across machines";

const TOP_EXAMPLES: &str = "\
Examples:
  redis-lock run nightly-report -- ./report.sh --full
  redis-lock --url redis://redis.internal:6379/ status nightly-report --json
  redis-lock list 'report-*'
  redis-lock release nightly-report --force
  redis-lock watch 'report-*'

  # crontab lines, on every machine: whoever comes first runs the backup, the others skip
  # it (cron's PATH is short, so give full paths)
  REDIS_URL=redis://redis.internal:6379/
  */15 * * * * /usr/local/bin/redis-lock run backup --no-wait --on-busy skip -- /opt/backup.sh

Redis is taken from --url, else $REDIS_URL, else redis://127.0.0.1:6379/. For TLS use
rediss://host:port/ (rediss://host:port/#insecure skips certificate verification).
Lock NAME is stored under the key NAMESPACE{NAME}: lock:{NAME} by default.
A Redis that refuses the connection fails at once; one that accepts it but does not answer
fails after --connect-timeout (default 2s, or $REDIS_LOCK_CONNECT_TIMEOUT): exit 69.

Run 'redis-lock <command> --help' for the options of each command.";

const RUN_AFTER: &str = "\
Examples:
  # Run the report; another machine running the same line waits until this one is done.
  redis-lock run nightly-report -- ./report.sh --full

  # crontab lines: every 15 minutes on every machine, whoever comes first runs the backup;
  # the others exit 0 at once without running it (cron's PATH is short: give full paths).
  REDIS_URL=redis://redis.internal:6379/
  */15 * * * * /usr/local/bin/redis-lock run backup --no-wait --on-busy skip -- /opt/backup.sh

  # Wait at most 2 minutes for the lock (exit 75 if it is still busy); stop the migration
  # if the lock is lost while it runs.
  redis-lock run --wait 2m --ttl 30s --kill-on-loss migrate -- ./migrate.sh

  # Like flock -E 0: treat a busy lock as success, but say so on stderr.
  redis-lock run --no-wait --busy-exit-code 0 cleanup -- ./cleanup.sh

Durations: 500ms, 30s, 2m, 1h, 1.5s, or a bare number of seconds.

The command inherits stdin, stdout and stderr, and gets these environment variables:
  REDIS_LOCK_KEY            the lock name
  REDIS_LOCK_NAMESPACE      the namespace
  REDIS_LOCK_FENCING_TOKEN  this acquisition's fencing token: higher than every earlier
                            holder's; pass it to what you write to, to reject stale writers
  REDIS_LOCK_TTL_MS         the lock's TTL in milliseconds
  REDIS_LOCK_HANDLE         the lock's lease handle, for 'redis-lock release --handle' and
                            'extend --handle' (a secret: whoever has it owns the lock)
  REDIS_LOCK_KEYS           with --also: every lock name, sorted, comma-separated
  REDIS_LOCK_FENCING_TOKENS with --also: NAME=TOKEN for each lock, comma-separated
Those of them this run does not set are removed from the command's environment (a run
inside another run does not pass the outer lock's handle or key list on).

With --also NAME (repeatable) the command runs holding KEY and every NAME together: all are
taken at once or none (no deadlock with another run asking for the same names in another
order); there is no handle then.

While the command runs, the lock is renewed every TTL/3; it is released when the command
exits, and redis-lock exits with the command's exit code. SIGHUP, SIGINT, SIGQUIT, SIGTERM,
SIGUSR1 and SIGUSR2 are forwarded to the command (SIGINT and SIGQUIT typed at the terminal
already reach it, so they are not sent twice); redis-lock waits for it to exit, then releases
the lock. Signals go to the command's process only: a shell script should 'exec' its last
command or trap TERM. If redis-lock dies without waiting for the command (killed with
SIGKILL, by the OOM killer, a crash), the kernel kills the command at once with SIGKILL (on
Linux), so it never runs on without the lock, and the lock frees up when its TTL runs out.
That covers the command's own process only: what it started (a script's children) lives on
unless the script 'exec's its last command, and a set-user-ID program such as sudo is not
covered. While waiting for the lock, SIGHUP, SIGINT, SIGQUIT and SIGTERM end redis-lock
with 128+N.

If the lock is lost while the command runs (it expired because renewals failed for a whole
TTL, Redis lost it, an operator broke it), redis-lock warns on stderr and the command keeps
running; with --kill-on-loss the command gets SIGTERM, then SIGKILL after --kill-grace, and
redis-lock exits with 124.

While waiting on a terminal, a status line on stderr shows how long it has waited and who
holds the lock; nothing of that is printed when stderr is not a terminal.";

const LEADER_AFTER: &str = "\
An election is a lock: its leader is the holder, and the value it announced is the lock's
metadata (what `LockClient::campaign` stores, or `redis-lock run --metadata VALUE`). Prints
the value, then the leader's host, pid, fencing token and time left; exit code 0 when there
is a leader, 1 when there is none (69 when Redis cannot be asked).

Run a command as the leader, announcing its address:
  redis-lock run scheduler --metadata 10.0.0.7:8080 -- ./scheduler
  redis-lock leader scheduler            # 10.0.0.7:8080 (host web-3, pid 4242, token 17)

The JSON form is one object: {\"election\", \"namespace\", \"leader\"} and, when there is
one, \"value\", \"host\", \"pid\", \"fencing_token\", \"remaining_ttl_ms\" (null without expiry).
";

const STATUS_AFTER: &str = "\
Exit code 0 when the lock is held, 1 when it is free (69 when Redis cannot be asked), so
scripts can test it:
  if redis-lock status nightly-report >/dev/null; then echo busy; fi

The JSON form is one object: {\"key\", \"namespace\", \"held\"} and, when held, \"host\", \"pid\",
\"acquired_at\" (RFC 3339, Redis clock), \"acquired_at_unix_ms\", \"remaining_ttl_ms\" (null
without expiry), \"fencing_token\", \"metadata\" (null when none), \"has_owner\" (whether
anybody owns the lock, not whether you do: false during a minimum hold or cool-down after
release, when it stays taken by nobody), \"hold_until\" and \"cooling_until\" (null when
none). \"host\", \"pid\" and the \"acquired_at\" fields are null while nobody's information is
stored with the lock: cooling down after its release, or just handed to a waiter that has
not claimed it yet (the text form says which); \"fencing_token\" is null when none is stored.
\"mode\" is \"read\" or \"write\" for a read-write lock, null for a mutex and for any lock
cooling down (a read-write lock's cool-down is not told apart from a mutex's).";

const LIST_AFTER: &str = "\
PATTERN is a Redis glob on lock names (default '*'): 'report-*', 'job-?', 'db-[ab]'.
Locks are found with SCAN (never KEYS), so Redis keeps serving other clients meanwhile.

The JSON form is an array of the objects 'redis-lock status --json' prints.

Example:
  redis-lock list 'report-*' --json";

const RELEASE_AFTER: &str = "\
Deletes the lock whoever holds it and wakes one waiter, then says whose lock it broke.
The holder is not stopped: it finds out at its next renewal (redis-lock run then warns, and
with --kill-on-loss stops its command). Exit code 0 when a lock was broken, 1 when it was not
held.

With --handle instead of KEY --force, releases the lock that handle stands for (the one a
'run' passed to its command in $REDIS_LOCK_HANDLE), if it is still the handle's: a script
finishes its lock early. Exit code 0 when released, 124 when the lock was not the handle's
any more (expired or taken over).

Examples:
  redis-lock release nightly-report --force
  redis-lock release --handle    # the handle in $REDIS_LOCK_HANDLE, kept off the command line";

const EXTEND_AFTER: &str = "\
Makes the lock the handle stands for expire DURATION from now (one renewal). While 'run'
still supervises the command, its watchdog keeps renewing to its own --ttl every ttl/3, so
extend a lock this way when nobody else renews it (a handle passed on, its first owner gone).
Exit code 0 when extended, 124 when the lock was not the handle's any more.

Example (--handle alone reads $REDIS_LOCK_HANDLE, off the command line that ps shows):
  redis-lock extend --handle --ttl 10m";

fn duration_arg(name: &'static str, value: &'static str) -> Arg {
    Arg::new(name)
        .long(name)
        .value_name(value)
        .value_parser(duration::parse)
}

/// A duration option refused outside `min..=max` when parsed (exit 64), for values that feed
/// clock arithmetic (`Instant + grace` panics past the clock's range) or that the library
/// would refuse only after connecting.
fn bounded_duration_arg(
    name: &'static str,
    value: &'static str,
    min: Duration,
    max: Duration,
) -> Arg {
    Arg::new(name)
        .long(name)
        .value_name(value)
        .value_parser(move |text: &str| duration::parse_within(text, min, max))
}

/// The shortest `--ttl` the library takes (Redis expiry has millisecond resolution).
const MIN_TTL: Duration = Duration::from_millis(1);

/// The shortest `watch --interval`: every look is a round trip to Redis.
const MIN_INTERVAL: Duration = Duration::from_millis(10);

fn key_arg() -> Arg {
    Arg::new("key")
        .value_name("KEY")
        .required(true)
        .help("Lock name")
}

/// The environment variable `run` passes the handle in; `--handle` without a value reads it.
pub(crate) const HANDLE_ENV: &str = "REDIS_LOCK_HANDLE";

fn handle_arg() -> Arg {
    Arg::new("handle")
        .long("handle")
        .value_name("HANDLE")
        // `--handle` alone reads the handle from the environment: a secret on a command line
        // is readable by every user of the host (`ps`), an environment is not.
        .num_args(0..=1)
        .default_missing_value("")
        .help("A lease handle, as 'run' passes it to its command in $REDIS_LOCK_HANDLE (a secret: whoever has it owns the lock); --handle alone reads $REDIS_LOCK_HANDLE, which keeps it off the command line (ps)")
}

/// The handle given with `--handle`, or (with no value) the one in `$REDIS_LOCK_HANDLE`.
fn handle(m: &ArgMatches) -> Result<String, Failure> {
    match m.get_one::<String>("handle").map(String::as_str) {
        Some("") | None => std::env::var(HANDLE_ENV).map_err(|_| {
            Failure::usage(format!(
                "--handle without a value reads ${HANDLE_ENV}, which is not set (it is set for \
                 the command of 'redis-lock run')"
            ))
        }),
        Some(text) => Ok(text.to_owned()),
    }
}

fn json_arg(what: &'static str) -> Arg {
    Arg::new("json")
        .long("json")
        .action(ArgAction::SetTrue)
        .help(what)
}

/// The whole command-line interface.
pub(crate) fn command() -> Command {
    Command::new("redis-lock")
        .version(env!("CARGO_PKG_VERSION"))
        .about(ABOUT)
        .after_help(format!("{TOP_EXAMPLES}\n\n{}", exit::table()))
        .subcommand_required(true)
        .arg_required_else_help(true)
        .arg(
            Arg::new("url")
                .long("url")
                .value_name("URL")
                .env("REDIS_URL")
                // The URL may carry a password: never echo it in --help.
                .hide_env_values(true)
                .default_value(DEFAULT_URL)
                .global(true)
                .help("Redis: redis://[user:password@]host[:port][/db], or rediss://"),
        )
        .arg(
            Arg::new("namespace")
                .long("namespace")
                .value_name("PREFIX")
                .env("REDIS_LOCK_NAMESPACE")
                .hide_env_values(true)
                .default_value("lock:")
                .global(true)
                .help("Prefix of the lock keys in Redis"),
        )
        .arg(
            bounded_duration_arg(
                "connect-timeout",
                "DURATION",
                Duration::from_millis(1),
                redis_lock::MAX_TTL,
            )
            .env("REDIS_LOCK_CONNECT_TIMEOUT")
            .hide_env_values(true)
            .default_value(DEFAULT_CONNECT_TIMEOUT)
            .global(true)
            .help(
                "Longest time a connection to Redis may take to open, handshake included: a \
                 refused connection fails at once, a server that does not answer within it \
                 exits 69",
            ),
        )
        .subcommand(
            Command::new("run")
                .about("Run a command while holding a lock")
                .override_usage("redis-lock run KEY [OPTIONS] -- COMMAND [ARGS]...")
                .after_help(format!("{RUN_AFTER}\n\n{}", exit::table()))
                .arg(key_arg())
                .arg(
                    Arg::new("also")
                        .long("also")
                        .value_name("NAME")
                        .action(ArgAction::Append)
                        .conflicts_with("hold-at-least")
                        .help(
                            "Another lock to hold with KEY, all or none (repeatable; \
                             deadlock-free whatever the order)",
                        ),
                )
                .arg(
                    bounded_duration_arg("ttl", "DURATION", MIN_TTL, redis_lock::MAX_TTL)
                        .default_value("30s")
                        .help(
                            "Lock TTL: renewed every TTL/3; a crashed holder's lock frees after it",
                        ),
                )
                .arg(
                    duration_arg("wait", "DURATION").short('w').help(
                        "Longest wait for a busy lock [default: until it is free] (flock -w)",
                    ),
                )
                .arg(
                    Arg::new("no-wait")
                        .long("no-wait")
                        .short('n')
                        .action(ArgAction::SetTrue)
                        .conflicts_with("wait")
                        .help("Do not wait: one attempt (same as --wait 0; flock -n)"),
                )
                .arg(
                    Arg::new("on-busy")
                        .long("on-busy")
                        .value_name("ACTION")
                        .value_parser(["fail", "skip"])
                        .default_value("fail")
                        .help("Busy lock: fail (exit 75) or skip (exit 0, command not run)"),
                )
                .arg(
                    Arg::new("busy-exit-code")
                        .long("busy-exit-code")
                        .short('E')
                        .value_name("N")
                        .value_parser(clap::value_parser!(u8))
                        .default_value("75")
                        .help("Exit code for a busy lock with --on-busy fail (flock -E)"),
                )
                // 0 is none for both, as the library's default minimum hold is zero (a
                // zero `LockOptions::cooldown` is refused there, so it is not passed on).
                .arg(
                    bounded_duration_arg(
                        "hold-at-least",
                        "DURATION",
                        Duration::ZERO,
                        redis_lock::MAX_TTL,
                    )
                    .help(
                        "Keep the lock at least this long, even if the command ends sooner \
                         (0: none)",
                    ),
                )
                .arg(
                    bounded_duration_arg(
                        "cooldown",
                        "DURATION",
                        Duration::ZERO,
                        redis_lock::MAX_TTL,
                    )
                    .help(
                        "Keep the lock taken, by nobody, this long after the command ends: the \
                         next run cannot start sooner (the later of this and --hold-at-least; \
                         0: none)",
                    ),
                )
                .arg(
                    Arg::new("read")
                        .long("read")
                        .short('s')
                        .visible_alias("shared")
                        .action(ArgAction::SetTrue)
                        .conflicts_with_all(["write", "hold-at-least", "permits", "also"])
                        .help(
                            "Take a read share of a read-write lock: other --read runs share it, \
                             a --write run waits for them (flock -s)",
                        ),
                )
                .arg(
                    Arg::new("write")
                        .long("write")
                        .short('x')
                        .visible_alias("exclusive")
                        .action(ArgAction::SetTrue)
                        .conflicts_with_all(["hold-at-least", "permits", "also"])
                        .help(
                            "Take the write lock of a read-write lock: alone, waits for the \
                             --read runs in and keeps new ones out (flock -x)",
                        ),
                )
                .arg(
                    Arg::new("metadata")
                        .long("metadata")
                        .value_name("TEXT")
                        .help("Text stored with the lock, shown by status and list (not secret)"),
                )
                .arg(
                    Arg::new("kill-on-loss")
                        .long("kill-on-loss")
                        .action(ArgAction::SetTrue)
                        .help(
                            "Lost lock: SIGTERM the command (SIGKILL after --kill-grace), exit 124",
                        ),
                )
                .arg(
                    bounded_duration_arg(
                        "kill-grace",
                        "DURATION",
                        Duration::ZERO,
                        redis_lock::MAX_TTL,
                    )
                    .default_value("10s")
                    .requires("kill-on-loss")
                    .help("Time between SIGTERM and SIGKILL for --kill-on-loss"),
                )
                .arg(
                    Arg::new("permits")
                        .long("permits")
                        .value_name("N")
                        .value_parser(
                            clap::value_parser!(u32).range(1..=i64::from(redis_lock::MAX_PERMITS)),
                        )
                        .conflicts_with_all(["hold-at-least", "cooldown", "also"])
                        .help(
                            "Hold a permit of the semaphore KEY of N permits instead of the lock: \
                             at most N commands run at once (the limit stored in Redis wins)",
                        ),
                )
                .arg(
                    Arg::new("shell-command")
                        .long("command")
                        .short('c')
                        .value_name("TEXT")
                        .value_parser(clap::value_parser!(OsString))
                        .conflicts_with("command")
                        .help("Run TEXT with `sh -c` instead of COMMAND (flock -c)"),
                )
                .arg(
                    Arg::new("command")
                        .value_name("COMMAND")
                        .num_args(1..)
                        .trailing_var_arg(true)
                        .allow_hyphen_values(true)
                        .value_parser(clap::value_parser!(OsString))
                        .help("The command to run and its arguments, after --"),
                ),
        )
        .subcommand(
            Command::new("status")
                .about("Tell whether a lock is held, and by whom")
                .after_help(STATUS_AFTER)
                .arg(key_arg())
                .arg(json_arg("Print one JSON object")),
        )
        .subcommand(
            Command::new("leader")
                .about("Tell who leads an election (a lock), and the value it announced")
                .after_help(LEADER_AFTER)
                .arg(key_arg())
                .arg(json_arg("Print one JSON object")),
        )
        .subcommand(
            Command::new("list")
                .about("List the locks held under the namespace")
                .after_help(LIST_AFTER)
                .arg(
                    Arg::new("pattern")
                        .value_name("PATTERN")
                        .default_value("*")
                        .help("Glob on lock names"),
                )
                .arg(json_arg("Print a JSON array")),
        )
        .subcommand(
            Command::new("watch")
                .about("Watch who holds and who waits, live")
                .after_help(WATCH_AFTER)
                .arg(
                    Arg::new("target")
                        .value_name("NAME|PATTERN")
                        .required(true)
                        .help("A lock name, or a glob on lock names (with * ? or [)"),
                )
                .arg(
                    Arg::new("interval")
                        .long("interval")
                        .value_name("DURATION")
                        .value_parser(|text: &str| {
                            duration::parse_within(text, MIN_INTERVAL, redis_lock::MAX_TTL).map_err(
                                |e| {
                                    if e.contains("shorter") {
                                        format!("{e}: every look is a round trip to Redis")
                                    } else {
                                        e
                                    }
                                },
                            )
                        })
                        .default_value("500ms")
                        .help("How often to look (10ms at least)"),
                )
                .arg(
                    duration_arg("duration", "DURATION")
                        .help("Stop after this long [default: until interrupted]"),
                )
                .arg(json_arg("Print one JSON object per change")),
        )
        .subcommand(
            Command::new("release")
                .about(
                    "Break a lock whoever holds it (operators only), or release one by its handle",
                )
                .after_help(RELEASE_AFTER)
                .arg(key_arg().required(false).required_unless_present("handle"))
                .arg(
                    Arg::new("force")
                        .long("force")
                        .action(ArgAction::SetTrue)
                        .required_unless_present("handle")
                        .help("Required with KEY: breaking another's lock must be deliberate"),
                )
                .arg(handle_arg().conflicts_with_all(["key", "force"]))
                .arg(json_arg("Print one JSON object")),
        )
        .subcommand(
            Command::new("extend")
                .about("Extend a lock by its handle ($REDIS_LOCK_HANDLE under 'run')")
                .after_help(EXTEND_AFTER)
                .arg(handle_arg().required(true))
                .arg(
                    bounded_duration_arg("ttl", "DURATION", MIN_TTL, redis_lock::MAX_TTL)
                        .required(true)
                        .help("The lock expires this long from now unless renewed"),
                )
                .arg(json_arg("Print one JSON object")),
        )
}

const WATCH_AFTER: &str = "\
Looks every --interval (one round trip for a lock name, two for a semaphore's; for a pattern
two SCANs, one for locks and one for semaphores, and one round trip per match) and shows what
changed since the look before: held or free (at the first look; free only for a name),
acquired, handoff (a new fencing token under a lock that stayed held: it changed hands
between two looks), released, waiters (the number of waiting threads changed), permits (a
semaphore's permits in use or its limit changed, or a permit was taken anew). A semaphore
counts as held while a permit of it is. For a lock name, a look is also taken as soon as
Redis announces a change to it (client-side tracking, where the server allows it), so a
change is shown within milliseconds; otherwise changes faster than the interval are seen only
as their net effect.

On a terminal the screen is redrawn: one row per lock or semaphore (holder, pid, time to
expiry, fencing token, waiters; for a semaphore its permits in use of the limit) and the
latest changes. Otherwise one line per change; with --json one JSON object per change (event,
key, held, host, pid, acquired_at, remaining_ttl_ms, fencing_token, waiters, queued, time;
host, pid and acquired_at null while nobody's information is stored, as in 'status --json';
for a semaphore kind, limit and in_use instead of the holder fields). A failed look is
reported and the next one tried; a name the library refuses (empty, too long) is a usage
error, exit 64. Runs until interrupted, or for --duration.

Examples:
  redis-lock watch nightly-report
  redis-lock watch 'invoice:*' --interval 200ms
  redis-lock watch backup --json --duration 1h >> backup-lock.log";

/// Parses `args` (program name first).
pub(crate) fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, Failure> {
    let matches = match command().try_get_matches_from(args) {
        Ok(m) => m,
        Err(e) => return clap_outcome(&e),
    };
    let connection = Connection {
        url: string(&matches, "url"),
        namespace: string(&matches, "namespace"),
        connect_timeout: matches
            .get_one::<Duration>("connect-timeout")
            .copied()
            .unwrap_or(Duration::from_secs(2)),
    };
    let action = match matches.subcommand() {
        Some(("run", m)) => Action::Run(Box::new(run_args(m)?)),
        Some(("status", m)) => Action::Status {
            key: string(m, "key"),
            json: m.get_flag("json"),
        },
        Some(("leader", m)) => Action::Leader {
            election: string(m, "key"),
            json: m.get_flag("json"),
        },
        Some(("list", m)) => Action::List {
            pattern: string(m, "pattern"),
            json: m.get_flag("json"),
        },
        Some(("release", m)) if m.contains_id("handle") => Action::ReleaseHandle {
            handle: handle(m)?,
            json: m.get_flag("json"),
        },
        Some(("release", m)) => Action::Release {
            key: string(m, "key"),
            json: m.get_flag("json"),
        },
        Some(("extend", m)) => Action::Extend {
            handle: handle(m)?,
            ttl: m
                .get_one::<Duration>("ttl")
                .copied()
                .unwrap_or(Duration::from_secs(30)),
            json: m.get_flag("json"),
        },
        Some(("watch", m)) => {
            let interval = m
                .get_one::<Duration>("interval")
                .copied()
                .unwrap_or(Duration::from_millis(500));
            Action::Watch(crate::watch::WatchArgs {
                target: string(m, "target"),
                interval,
                duration: m.get_one::<Duration>("duration").copied(),
                json: m.get_flag("json"),
            })
        }
        _ => {
            return Err(Failure::usage(
                "missing command (run, status, list, watch, release, extend)",
            ));
        }
    };
    Ok(Parsed::Do(connection, action))
}

fn run_args(m: &ArgMatches) -> Result<RunArgs, Failure> {
    let command: Vec<OsString> = match m.get_one::<OsString>("shell-command") {
        Some(text) => vec!["sh".into(), "-c".into(), text.clone()],
        None => m
            .get_many::<OsString>("command")
            .map(|values| values.cloned().collect())
            .unwrap_or_default(),
    };
    if command.is_empty() {
        return Err(Failure::usage(
            "missing command after `--`: redis-lock run KEY [OPTIONS] -- COMMAND [ARGS]... \
             (or -c 'shell text')",
        ));
    }
    let wait = if m.get_flag("no-wait") {
        Some(Duration::ZERO)
    } else {
        m.get_one::<Duration>("wait").copied()
    };
    Ok(RunArgs {
        key: string(m, "key"),
        also: m
            .get_many::<String>("also")
            .map(|values| values.cloned().collect())
            .unwrap_or_default(),
        ttl: *m
            .get_one::<Duration>("ttl")
            .unwrap_or(&Duration::from_secs(30)),
        wait,
        on_busy: match m.get_one::<String>("on-busy").map(String::as_str) {
            Some("skip") => OnBusy::Skip,
            _ => OnBusy::Fail,
        },
        busy_exit_code: i32::from(*m.get_one::<u8>("busy-exit-code").unwrap_or(&75)),
        hold_at_least: m
            .get_one::<Duration>("hold-at-least")
            .copied()
            .filter(|d| !d.is_zero()),
        cooldown: m
            .get_one::<Duration>("cooldown")
            .copied()
            .filter(|d| !d.is_zero()),
        mode: if m.get_flag("read") {
            Some(redis_lock::LockMode::Read)
        } else if m.get_flag("write") {
            Some(redis_lock::LockMode::Write)
        } else {
            None
        },
        metadata: m.get_one::<String>("metadata").cloned(),
        kill_on_loss: m.get_flag("kill-on-loss").then(|| {
            *m.get_one::<Duration>("kill-grace")
                .unwrap_or(&Duration::from_secs(10))
        }),
        command,
        permits: m.get_one::<u32>("permits").copied(),
    })
}

fn string(m: &ArgMatches, id: &str) -> String {
    m.get_one::<String>(id).cloned().unwrap_or_default()
}

/// Help and version go to stdout with exit 0; every other clap error becomes one line.
fn clap_outcome(e: &clap::Error) -> Result<Parsed, Failure> {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => Ok(Parsed::Print(e.to_string())),
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => Err(Failure::usage(
            "missing command (run, status, list, watch, release, extend); see 'redis-lock --help'",
        )),
        _ => Err(Failure::usage(one_line(&e.to_string()))),
    }
}

/// clap's multi-line error text as one line: the first paragraph, without "error: ".
fn one_line(text: &str) -> String {
    let first = text.split("\n\n").next().unwrap_or(text);
    let first = first.trim().strip_prefix("error: ").unwrap_or(first.trim());
    first.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_args(args: &[&str]) -> Result<Parsed, Failure> {
        parse(
            std::iter::once("redis-lock")
                .chain(args.iter().copied())
                .map(OsString::from),
        )
    }

    fn run(args: &[&str]) -> RunArgs {
        match parse_args(args) {
            Ok(Parsed::Do(_, Action::Run(r))) => *r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_interface_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn run_takes_the_command_after_double_dash() {
        let r = run(&["run", "job", "--ttl", "5s", "--", "ls", "-l", "--ttl"]);
        assert_eq!(r.key, "job");
        assert_eq!(r.ttl, Duration::from_secs(5));
        assert_eq!(r.command, ["ls", "-l", "--ttl"]);
        assert_eq!(r.wait, None);
        assert_eq!(r.on_busy, OnBusy::Fail);
        assert_eq!(r.busy_exit_code, exit::BUSY);
    }

    #[test]
    fn run_options() {
        let r = run(&[
            "run",
            "--no-wait",
            "--on-busy",
            "skip",
            "--kill-on-loss",
            "--kill-grace",
            "2s",
            "--busy-exit-code",
            "3",
            "job",
            "--",
            "true",
        ]);
        assert_eq!(r.wait, Some(Duration::ZERO));
        assert_eq!(r.on_busy, OnBusy::Skip);
        assert_eq!(r.kill_on_loss, Some(Duration::from_secs(2)));
        assert_eq!(r.busy_exit_code, 3);
        assert_eq!(r.permits, None);
        let r = run(&["run", "--permits", "3", "exports", "--", "true"]);
        assert_eq!(r.permits, Some(3));
    }

    #[test]
    fn usage_errors_are_one_line() {
        for args in [
            &["run", "job", "--ttl", "5x", "--", "true"][..],
            &["run", "job"],
            &["run", "job", "--"],
            &["run", "--wait", "1s", "--no-wait", "job", "--", "true"],
            &["run", "--permits", "0", "job", "--", "true"],
            &["run", "--permits", "10001", "job", "--", "true"],
            &[
                "run",
                "--permits",
                "2",
                "--cooldown",
                "1s",
                "job",
                "--",
                "true",
            ],
            &[
                "run",
                "--permits",
                "2",
                "job",
                "--also",
                "other",
                "--",
                "true",
            ],
            &["run", "--read", "--permits", "2", "job", "--", "true"],
            &["run", "--write", "job", "--also", "other", "--", "true"],
            &["release", "job"],
            &["frobnicate"],
            &[],
        ] {
            match parse_args(args) {
                Err(f) => {
                    assert_eq!(f.code, exit::USAGE, "{args:?}");
                    assert!(!f.message.contains('\n'), "{args:?}: {}", f.message);
                    assert!(!f.message.is_empty());
                }
                Ok(other) => panic!("{args:?} parsed as {other:?}"),
            }
        }
    }

    #[test]
    fn durations_past_their_bounds_are_usage_errors() {
        let huge = "18446744073709551615.999999999";
        for (args, needle) in [
            (
                &[
                    "run",
                    "--kill-on-loss",
                    "--kill-grace",
                    huge,
                    "j",
                    "--",
                    "true",
                ][..],
                "--kill-grace",
            ),
            (&["run", "--ttl", "8761h", "j", "--", "true"], "--ttl"),
            (&["run", "--ttl", "0", "j", "--", "true"], "--ttl"),
            (
                &["run", "--cooldown", huge, "j", "--", "true"],
                "--cooldown",
            ),
            (
                &["run", "--hold-at-least", huge, "j", "--", "true"],
                "--hold-at-least",
            ),
            (&["watch", "x", "--interval", huge], "--interval"),
            (&["watch", "x", "--interval", "5ms"], "round trip"),
            (&["extend", "--handle", "h", "--ttl", huge], "--ttl"),
        ] {
            match parse_args(args) {
                Err(f) => {
                    assert_eq!(f.code, exit::USAGE, "{args:?}");
                    assert!(f.message.contains(needle), "{args:?}: {}", f.message);
                    assert!(!f.message.contains('\n'), "{args:?}: {}", f.message);
                }
                Ok(other) => panic!("{args:?} parsed as {other:?}"),
            }
        }
        let r = run(&[
            "run",
            "--kill-on-loss",
            "--kill-grace",
            "8760h",
            "j",
            "--",
            "true",
        ]);
        assert_eq!(r.kill_on_loss, Some(redis_lock::MAX_TTL));
    }

    #[test]
    fn connect_timeout_is_global_with_the_library_default() {
        let connect = |args: &[&str]| match parse_args(args) {
            Ok(Parsed::Do(connection, _)) => connection.connect_timeout,
            other => panic!("{args:?} parsed as {other:?}"),
        };
        assert_eq!(connect(&["status", "x"]), Duration::from_secs(2));
        assert_eq!(
            connect(&["--connect-timeout", "300ms", "status", "x"]),
            Duration::from_millis(300)
        );
        assert_eq!(
            connect(&["run", "x", "--connect-timeout", "1.5s", "--", "true"]),
            Duration::from_millis(1500)
        );
        for bad in ["0", "5x", "8761h"] {
            match parse_args(&["--connect-timeout", bad, "status", "x"]) {
                Err(f) => {
                    assert_eq!(f.code, exit::USAGE, "{bad}");
                    assert!(f.message.contains("--connect-timeout"), "{}", f.message);
                }
                Ok(other) => panic!("{bad} parsed as {other:?}"),
            }
        }
    }

    #[test]
    fn zero_minimum_hold_and_cooldown_are_none() {
        let r = run(&[
            "run",
            "--hold-at-least",
            "0",
            "--cooldown",
            "0s",
            "j",
            "--",
            "true",
        ]);
        assert_eq!((r.hold_at_least, r.cooldown), (None, None));
        let r = run(&[
            "run",
            "--hold-at-least",
            "1s",
            "--cooldown",
            "2s",
            "j",
            "--",
            "true",
        ]);
        assert_eq!(
            (r.hold_at_least, r.cooldown),
            (Some(Duration::from_secs(1)), Some(Duration::from_secs(2)))
        );
    }

    #[test]
    fn help_is_printed_not_failed() {
        for args in [&["--help"][..], &["run", "--help"], &["--version"]] {
            assert!(matches!(parse_args(args), Ok(Parsed::Print(_))), "{args:?}");
        }
    }
}

//! A fenced store: the resource side of fencing tokens.
//!
//! The store remembers the highest fencing token it has accepted and rejects writes carrying
//! a lower one. It is a file, shared by every thread and process that opens the same path:
//! each write takes an exclusive `flock` on it, reads the last accepted token, and appends.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// An append-only log that accepts a write only if its token is at least the highest token
/// accepted so far.
#[derive(Debug, Clone)]
pub struct FencedStore {
    path: PathBuf,
}

/// A write carried a token lower than one the store has already accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejected {
    /// The highest token accepted so far.
    pub highest: u64,
}

struct Flock(File);

impl Flock {
    fn exclusive(file: File) -> io::Result<Flock> {
        // SAFETY: `flock` has no memory-safety preconditions; the fd is open for the call.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Flock(file))
    }
}

impl Drop for Flock {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe {
            libc::flock(self.0.as_raw_fd(), libc::LOCK_UN);
        }
    }
}

impl FencedStore {
    /// The store kept in `path` (created on the first write).
    pub fn new(path: impl AsRef<Path>) -> FencedStore {
        FencedStore {
            path: path.as_ref().to_owned(),
        }
    }

    /// Appends `entry` (one line, no newline) under `token`, unless a higher token was
    /// accepted before.
    ///
    /// # Errors
    ///
    /// An I/O error from the file.
    pub fn write(&self, token: u64, entry: &str) -> io::Result<Result<(), Rejected>> {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&self.path)?;
        let mut locked = Flock::exclusive(file)?;
        let highest = highest_in(&locked.0)?;
        if let Some(highest) = highest
            && token < highest
        {
            return Ok(Err(Rejected { highest }));
        }
        locked
            .0
            .write_all(format!("{token} {entry}\n").as_bytes())?;
        Ok(Ok(()))
    }

    /// Every accepted write, in order: `(token, entry)`.
    ///
    /// # Errors
    ///
    /// An I/O error from the file (a missing file is an empty store).
    pub fn entries(&self) -> io::Result<Vec<(u64, String)>> {
        let file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        BufReader::new(file)
            .lines()
            .map(|line| {
                let line = line?;
                let (token, entry) = line.split_once(' ').unwrap_or((&line, ""));
                let token = token.parse().map_err(io::Error::other)?;
                Ok((token, entry.to_owned()))
            })
            .collect()
    }
}

fn highest_in(file: &File) -> io::Result<Option<u64>> {
    let mut highest = None;
    for line in BufReader::new(file).lines() {
        let line = line?;
        if let Some(token) = line.split(' ').next().and_then(|t| t.parse::<u64>().ok()) {
            highest = Some(highest.map_or(token, |h: u64| h.max(token)));
        }
    }
    Ok(highest)
}

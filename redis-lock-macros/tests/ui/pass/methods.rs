//! Receivers (`&self`, `&mut self`, `self`), trait impl methods, borrowed returns, the
//! guard binding and `{self.field}` keys.

#![deny(warnings)]
#![allow(dead_code)]

use redis_lock::{LockClient, distributed_lock};

#[derive(Debug)]
enum AppError {
    Lock(redis_lock::Error),
    Empty,
}

impl From<redis_lock::Error> for AppError {
    fn from(e: redis_lock::Error) -> Self {
        AppError::Lock(e)
    }
}

struct Account {
    id: u64,
    name: String,
    log: Vec<String>,
    locks: LockClient,
}

impl Account {
    /// A doc comment that stays.
    #[distributed_lock(key = "account:{self.id}", client = &self.locks)]
    pub fn name(&self) -> Result<&str, AppError> {
        if self.name.is_empty() {
            return Err(AppError::Empty);
        }
        Ok(&self.name)
    }

    #[distributed_lock(key = "account:{self.id}", client = &self.locks, ttl = 5)]
    fn log_mut(&mut self, line: &str) -> Result<&mut Vec<String>, AppError> {
        self.log.push(line.to_owned());
        Ok(&mut self.log)
    }

    #[distributed_lock(key = "account:{self.id}", client = &self.locks.clone(), guard = lock)]
    fn close(self) -> Result<(String, u64), AppError> {
        lock.ensure_held()?;
        Ok((self.name, lock.fencing_token()))
    }

    #[distributed_lock(key = "account:{id}:{self.name}", client = &self.locks, wait = "0s")]
    fn with_param(&self, id: u32) -> redis_lock::Result<u32> {
        Ok(id)
    }
}

trait Job {
    fn run(&self, round: u32) -> Result<u32, AppError>;

    #[distributed_lock(key = "job:default", on_busy = "skip")]
    fn provided(&self) {}
}

struct Nightly;

impl Job for Nightly {
    #[distributed_lock(key = "nightly:{round}", retry = "exponential:10ms..1s", wait = 3)]
    fn run(&self, round: u32) -> Result<u32, AppError> {
        Ok(round + 1)
    }
}

fn main() {}

//! The expansion uses absolute paths and hidden names: local items and variables named like
//! the ones it uses change nothing, and attributes are kept.

#![deny(warnings, unused_variables, dead_code)]

use redis_lock::distributed_lock;

mod core {}
mod std {}

// Names the expansion could collide with, if it used relative paths.
struct Result;
struct Option;
struct Duration;
struct LockClient;
struct LockOptions;
struct ControlFlow;
struct Held;
fn format() {}

type Outcome<T> = ::core::result::Result<T, redis_lock::Error>;

/// Doc comments and attributes stay on the function.
#[inline]
#[must_use = "the count matters"]
#[distributed_lock(key = "hygiene:{held}", ttl = 1)]
fn shadowing(held: u32, ret: u32) -> Outcome<u32> {
    // If the attributes above were dropped, `deny(dead_code)` would fail on `unused` below;
    // if the inner attribute were dropped, `deny(unused_variables)` would fail on `x`.
    #![allow(unused_variables)]
    let x = 1;
    let __redis_lock_held = held;
    let __redis_lock_ret = ret;
    let _ = (Result, Option, Duration, LockClient, LockOptions, ControlFlow, Held, format);
    Ok(__redis_lock_held + __redis_lock_ret)
}

#[allow(dead_code)]
#[distributed_lock(key = "unused")]
fn unused() -> Outcome<()> {
    Ok(())
}

fn main() {
    let _count = shadowing;
}

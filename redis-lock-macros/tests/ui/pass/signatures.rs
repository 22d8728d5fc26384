//! Generics with `where` clauses, `impl Trait` arguments and returns, lifetimes, patterns,
//! `mut` parameters, coercions in the body, and every return type `on_busy = "skip"` takes.

#![deny(warnings)]
#![allow(dead_code)]

use std::fmt::{Debug, Display};
use std::sync::LazyLock;

use redis_lock::{LockClient, distributed_lock};

static LOCKS: LazyLock<LockClient> =
    LazyLock::new(|| LockClient::open("redis://127.0.0.1/").unwrap());

struct Order<'a> {
    id: (u32, &'a str),
}

#[distributed_lock(key = "{item}:{n}", client = &LOCKS)]
fn generic<T, const N: usize>(item: T, n: usize) -> Result<[T; N], redis_lock::Error>
where
    T: Display + Copy,
{
    let _ = n;
    Ok([item; N])
}

#[distributed_lock(key = "order:{order.id.0}:{order.id.1}", client = &*LOCKS)]
fn borrowed<'a>(order: &Order<'a>, extra: impl AsRef<str>) -> redis_lock::Result<&'a str> {
    let _ = extra.as_ref();
    Ok(order.id.1)
}

#[distributed_lock(key = "pair:{a}:{b}:{c.0}", client = &LOCKS)]
fn patterns((a, b): (u8, u8), Order { id: c }: Order<'_>) -> redis_lock::Result<u8> {
    let _ = c;
    Ok(a + b)
}

#[distributed_lock(key = "mut", client = &LOCKS)]
fn mutated(mut values: Vec<u8>) -> redis_lock::Result<Vec<u8>> {
    values.push(1);
    Ok(values)
}

#[distributed_lock(key = "dyn", client = &LOCKS)]
fn boxed(n: u8) -> Result<Box<dyn Debug>, Box<dyn std::error::Error>> {
    if n == 0 {
        return Err("zero".into());
    }
    let parsed: u32 = "7".parse()?;
    Ok(Box::new(parsed + u32::from(n)))
}

#[distributed_lock(key = "impl", client = &LOCKS)]
fn opaque(n: u8) -> redis_lock::Result<impl Display> {
    Ok(n)
}

#[distributed_lock(key = "recursive:{n}", client = &LOCKS)]
fn recursive(n: u32) -> redis_lock::Result<u32> {
    if n == 0 { Ok(0) } else { Ok(recursive(n - 1)? + 1) }
}

#[distributed_lock(key = "unit", on_busy = "skip", client = &LOCKS)]
fn skip_unit() {}

#[distributed_lock(key = "option", on_busy = "skip", hold_at_least = "1m", client = &LOCKS)]
fn skip_option() -> Option<u32> {
    Some(1)
}

#[distributed_lock(key = "result", on_busy = "skip", client = &LOCKS)]
fn skip_result() -> Result<(), redis_lock::Error> {
    Ok(())
}

#[distributed_lock(key = "result-option", on_busy = "skip", client = &LOCKS)]
fn skip_result_option() -> redis_lock::Result<Option<String>> {
    Ok(None)
}

#[distributed_lock(key = "unsafe", client = &LOCKS)]
unsafe fn not_safe(p: *const u8) -> redis_lock::Result<u8> {
    // SAFETY: the caller promises a valid pointer.
    Ok(unsafe { *p })
}

#[distributed_lock(key = "default-client", ttl = "500ms", retry = "fixed:5ms")]
pub(crate) fn default_client() -> redis_lock::Result<()> {
    Ok(())
}

fn main() {}

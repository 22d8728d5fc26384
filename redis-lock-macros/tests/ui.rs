//! Compile-time behaviour of `#[distributed_lock]`: what it accepts (`ui/pass`, compiled and
//! run with warnings denied) and what it rejects, with the exact messages (`ui/fail/*.stderr`).
//!
//! The messages depend on the compiler version, so this runs on stable only. After a change,
//! regenerate with `TRYBUILD=overwrite cargo test -p redis-lock-sync-macros --test ui` and read
//! every changed `.stderr`: the caret must point at the offending token.

#[rustversion::stable]
#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}

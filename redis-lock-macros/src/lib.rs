//! Procedural macros for `redis-lock`. Use them through the `redis-lock` crate.

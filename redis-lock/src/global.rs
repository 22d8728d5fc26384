//! The process-wide default client: what `#[distributed_lock]` uses when no `client = ...` is
//! given.

use std::sync::OnceLock;

use crate::client::LockClient;
use crate::error::{Error, Result};

static DEFAULT: OnceLock<LockClient> = OnceLock::new();

/// The environment variable `default_client` reads when no default client was set.
const REDIS_URL_VAR: &str = "REDIS_URL";

/// Makes `client` the process-wide default client, the one `#[distributed_lock]` functions
/// use when they have no `client = ...` option. Call it once, at startup, before the first
/// locked call.
///
/// # Errors
///
/// [`Error::InvalidInput`] when a default client is already in place: set before, or built
/// from `REDIS_URL` by an earlier locked call. The first one stays.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> redis_lock::Result<()> {
/// let locks = redis_lock::LockClient::builder("redis://127.0.0.1/")
///     .namespace("billing:")
///     .build()?;
/// redis_lock::set_default_client(locks)?;
/// # Ok(()) }
/// ```
pub fn set_default_client(client: LockClient) -> Result<()> {
    DEFAULT.set(client).map_err(|_| {
        Error::invalid(
            "default client",
            "a default client is already in place (set it once, at startup, before the first \
             locked call)",
        )
    })
}

/// The process-wide default client: the one given to [`set_default_client`], or else one
/// built with default settings from the `REDIS_URL` environment variable on first use (and
/// kept from then on).
///
/// # Errors
///
/// [`Error::InvalidInput`] when no client was set and `REDIS_URL` is unset, empty or not a
/// valid Redis URL. Nothing is kept then, so a later call tries again.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> redis_lock::Result<()> {
/// // With REDIS_URL=redis://127.0.0.1/ in the environment:
/// let guard = redis_lock::default_client()?.lock("report")?;
/// # drop(guard); Ok(()) }
/// ```
pub fn default_client() -> Result<&'static LockClient> {
    if let Some(client) = DEFAULT.get() {
        return Ok(client);
    }
    let client = from_env(std::env::var(REDIS_URL_VAR).ok())?;
    // Another thread may have won the race; its client stays and ours is dropped.
    Ok(DEFAULT.get_or_init(|| client))
}

fn from_env(url: Option<String>) -> Result<LockClient> {
    match url {
        Some(url) if !url.trim().is_empty() => LockClient::open(url.trim()).map_err(|e| match e {
            // The reason is already redacted by the builder.
            Error::InvalidInput { reason, .. } => Error::invalid(REDIS_URL_VAR, reason),
            other => other,
        }),
        _ => Err(Error::invalid(
            "client",
            "no default lock client: call `redis_lock::set_default_client` at startup, set \
             the REDIS_URL environment variable, or give `#[distributed_lock]` a \
             `client = ...` option",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_url_is_a_clear_error() {
        for url in [None, Some(String::new()), Some("  ".to_owned())] {
            let err = from_env(url).unwrap_err();
            let text = err.to_string();
            assert!(
                matches!(err, Error::InvalidInput { what: "client", .. }),
                "{err:?}"
            );
            assert!(text.contains("set_default_client"), "{text}");
            assert!(text.contains("REDIS_URL"), "{text}");
        }
    }

    #[test]
    fn a_bad_url_names_the_variable_without_its_password() {
        let err = from_env(Some("redis://:hunter2@".to_owned() + "\u{0}bad")).unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidInput {
                    what: "REDIS_URL",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn a_good_url_builds_a_client_without_connecting() {
        // Port 1 on loopback: nothing listens there, and nothing is sent.
        let client = from_env(Some("redis://127.0.0.1:1/".to_owned())).unwrap();
        assert_eq!(client.namespace(), "lock:");
    }
}

//! Where a client's connections go: one target per store (one, or one per Redlock server),
//! made from the URLs the builder was given, with a description free of passwords.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::store::connection::Target;
use crate::store::sentinel::SentinelTarget;

use super::Builder;
use super::redact::redact_url;
use super::source::{Source, server_places};

/// How often a cluster client retries a command that was redirected (`MOVED`, `ASK`) or told
/// to try again (`TRYAGAIN` while a slot migrates, `CLUSTERDOWN`), waiting between 10 ms and
/// `CLUSTER_MAX_RETRY_WAIT_MS` (growing) before each retry.
#[cfg(feature = "cluster")]
pub(crate) const CLUSTER_RETRIES: u32 = 8;
#[cfg(feature = "cluster")]
const CLUSTER_MIN_RETRY_WAIT_MS: u64 = 10;
#[cfg(feature = "cluster")]
const CLUSTER_MAX_RETRY_WAIT_MS: u64 = 500;

impl Builder {
    /// Where connections go (one target per store), and a description for logs and `Debug`
    /// (no passwords).
    pub(super) fn targets(&self) -> Result<(Vec<(Target, String)>, String)> {
        let Source::Redlock(urls) = &self.source else {
            return self.target().map(|(t, d)| (vec![(t, d.clone())], d));
        };
        self.sentinel_only()?;
        if urls.is_empty() {
            return Err(Error::invalid("urls", "no redis server given"));
        }
        let mut targets: Vec<(Target, String)> = Vec::with_capacity(urls.len());
        // Where each server listed so far is reached, and its URL.
        let mut seen: Vec<(String, &str)> = Vec::new();
        for url in urls {
            let client = redis::Client::open(url.as_str())
                .map_err(|e| Error::invalid("urls", format!("{} ({e})", redact_url(url))))?;
            // The same server twice would count its vote twice: one server down (or one
            // holder's) would be two votes of the majority.
            let places = server_places(client.get_connection_info().addr());
            if let Some((place, first)) = seen.iter().find(|(place, _)| places.contains(place)) {
                return Err(Error::invalid(
                    "urls",
                    format!(
                        "{} and {} are the same server ({place}; another database of a \
                         server is not another server): Redlock would count its vote twice",
                        redact_url(first),
                        redact_url(url)
                    ),
                ));
            }
            seen.extend(places.into_iter().map(|place| (place, url.as_str())));
            targets.push((Target::Server(client), redact_url(url)));
        }
        Ok((targets, self.source.describe()))
    }

    /// Where connections go, and a description of it for logs and `Debug` (no passwords).
    fn target(&self) -> Result<(Target, String)> {
        let description = self.source.describe();
        self.sentinel_only()?;
        let target = match &self.source {
            Source::Redlock(_) => unreachable_redlock()?,
            Source::Url(url) => Target::Server(
                redis::Client::open(url.as_str()).map_err(|e| url_error("url", url, e))?,
            ),
            Source::Pool(_, client) => Target::Server((**client).clone()),
            #[cfg(feature = "cluster")]
            Source::Cluster(urls) => self.cluster_target(urls, &description)?,
            Source::Sentinel { master, sentinels } => self.sentinel_target(master, sentinels)?,
        };
        Ok((target, description))
    }

    /// A Redis Cluster from its seed nodes, with the client's timeouts and the redirection
    /// retries (`CLUSTER_RETRIES`).
    #[cfg(feature = "cluster")]
    fn cluster_target(&self, urls: &[String], description: &str) -> Result<Target> {
        if urls.is_empty() {
            return Err(Error::invalid("urls", "no cluster node given"));
        }
        let mut nodes = Vec::with_capacity(urls.len());
        for url in urls {
            nodes.push(
                redis::IntoConnectionInfo::into_connection_info(url.as_str())
                    .map_err(|e| url_error("urls", url, e))?,
            );
        }
        let client = redis::cluster::ClusterClientBuilder::new(nodes)
            .connection_timeout(self.connect_timeout)
            .response_timeout(self.io_timeout)
            .retries(CLUSTER_RETRIES)
            .min_retry_wait(CLUSTER_MIN_RETRY_WAIT_MS)
            .max_retry_wait(CLUSTER_MAX_RETRY_WAIT_MS)
            .build()
            .map_err(|e| Error::invalid("urls", format!("{description} ({e})")))?;
        Ok(Target::Cluster(client))
    }

    /// The master the sentinels name `master`, reached with the master's credentials
    /// (`master_auth`) and the client's timeouts.
    fn sentinel_target(&self, master: &str, sentinels: &[String]) -> Result<Target> {
        self.check_sentinel_settings(master, sentinels)?;
        let mut infos = Vec::with_capacity(sentinels.len());
        for url in sentinels {
            infos.push(
                redis::IntoConnectionInfo::into_connection_info(url.as_str())
                    .map_err(|e| url_error("sentinels", url, e))?,
            );
        }
        let mut settings = redis::RedisConnectionInfo::default();
        if let Some((user, password)) = &self.master_auth {
            if let Some(user) = user {
                settings = settings.set_username(user);
            }
            settings = settings.set_password(password);
        }
        let template = redis::IntoConnectionInfo::into_connection_info("redis://127.0.0.1/")
            .map_err(Error::Redis)?
            .set_redis_settings(settings);
        Ok(Target::Sentinel(Arc::new(SentinelTarget::new(
            master.to_owned(),
            infos,
            template,
            self.connect_timeout,
            self.io_timeout,
        ))))
    }
}

/// A URL the `redis` crate refused, shown without its password.
fn url_error(what: &'static str, url: &str, e: redis::RedisError) -> Error {
    Error::invalid(what, format!("{} ({e})", redact_url(url)))
}

/// `target` is only asked for sources with one store.
fn unreachable_redlock() -> Result<Target> {
    Err(Error::invalid(
        "urls",
        "a redlock client has one target per server",
    ))
}

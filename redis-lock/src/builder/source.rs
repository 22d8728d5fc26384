//! Where a client was told to connect (`Source`), told apart for `Debug` and for lease
//! handles, which record which deployment they belong to (`origin`).

use super::redact::redact_url;

/// Where the client was told to connect, as the builder was made.
pub(super) enum Source {
    Url(String),
    // Boxed: with TLS support a `redis::Client` is a few hundred bytes.
    Pool(r2d2::Pool<redis::Client>, Box<redis::Client>),
    /// Seed nodes of a Redis Cluster.
    #[cfg(feature = "cluster")]
    Cluster(Vec<String>),
    /// Independent servers, locked by majority (Redlock).
    Redlock(Vec<String>),
    /// A master found through sentinels.
    Sentinel {
        master: String,
        sentinels: Vec<String>,
    },
}

impl Source {
    pub(super) fn describe(&self) -> String {
        let list = |urls: &[String]| {
            urls.iter()
                .map(|u| redact_url(u))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Source::Url(url) => redact_url(url),
            Source::Pool(..) => "<existing pool>".to_owned(),
            #[cfg(feature = "cluster")]
            Source::Cluster(urls) => format!("cluster [{}]", list(urls)),
            Source::Redlock(urls) => format!("redlock [{}]", list(urls)),
            Source::Sentinel { master, sentinels } => {
                format!("sentinel master {master:?} via [{}]", list(sentinels))
            }
        }
    }
}

/// Where a Redlock server listed at `addr` is reached, for telling one listed twice: a TCP
/// server's host name and port as written, and every address the name resolves to now (so
/// `localhost` and `127.0.0.1` meet at `127.0.0.1:6379`; IPv4-mapped IPv6 addresses count as
/// IPv4); a Unix socket's path, resolved if it exists. The database is left out: another
/// database of one server is the same server.
///
/// Address resolution only, at build, which connects to nothing: a Redlock must build (and
/// work) while a minority of its servers is down, and a server down at build could not tell
/// its identity anyway. So one server reached under two addresses that do not resolve alike
/// (two interfaces, a proxy, NAT) is not caught; a name that does not resolve at build is
/// compared as written. Asking each server for its `run_id` would catch those too, but only
/// for the servers up at build, at the cost of a connection to each.
pub(super) fn server_places(addr: &redis::ConnectionAddr) -> Vec<String> {
    use std::net::ToSocketAddrs;
    let (host, port) = match addr {
        redis::ConnectionAddr::Tcp(host, port) => (host, *port),
        redis::ConnectionAddr::TcpTls { host, port, .. } => (host, *port),
        redis::ConnectionAddr::Unix(path) => {
            let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
            return vec![format!("unix socket {}", path.display())];
        }
        // A kind of address added to the `redis` crate later: as written.
        other => return vec![other.to_string()],
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let mut places = vec![format!("{}:{port}", host.to_ascii_lowercase())];
    if let Ok(resolved) = (host, port).to_socket_addrs() {
        places
            .extend(resolved.map(|at| {
                std::net::SocketAddr::new(at.ip().to_canonical(), at.port()).to_string()
            }));
    }
    places
}

/// Which deployment the client locks on, as lease handles record it
/// (`handle::origin_matches`): `kind;db;server;...`, each server the places it is reached at
/// (`server_places`: as written and resolved, sorted) joined by `,`. A Sentinel master is
/// known by its name, a Cluster only as one (its seeds differ from client to client). No
/// passwords: addresses and names only.
pub(super) fn origin(source: &Source) -> String {
    let server = |client: &redis::Client| {
        let info = client.get_connection_info();
        let mut places = server_places(info.addr());
        places.sort();
        places.dedup();
        (info.redis_settings().db(), places.join(","))
    };
    let servers = |kind: &str, clients: Vec<redis::Client>| {
        let found: Vec<(i64, String)> = clients.iter().map(server).collect();
        let db = found.first().map_or(0, |(db, _)| *db);
        let mut text = format!("{kind};{db}");
        for (_, places) in found {
            text.push(';');
            text.push_str(&places);
        }
        text
    };
    let open = |url: &String| redis::Client::open(url.as_str()).ok();
    match source {
        Source::Url(url) => servers("server", open(url).into_iter().collect()),
        Source::Pool(_, client) => servers("server", vec![(**client).clone()]),
        Source::Redlock(urls) => servers("redlock", urls.iter().filter_map(open).collect()),
        #[cfg(feature = "cluster")]
        Source::Cluster(_) => "cluster;0".to_owned(),
        Source::Sentinel { master, .. } => format!("sentinel;0;{master}"),
    }
}

//! A TLS `redis-server` with certificates made for the test by `openssl`.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::server::{RedisServer, find_binary, free_port};

/// A throwaway certificate authority and a server certificate it signed for `127.0.0.1`
/// (subject alternative name `IP:127.0.0.1`), in a temporary directory. Made with the
/// `openssl` command (`$REDIS_LOCK_OPENSSL_BIN`, or `openssl` on `PATH`).
#[derive(Debug)]
pub struct TlsCerts {
    dir: tempfile::TempDir,
}

fn openssl(dir: &Path, args: &[&str]) -> io::Result<()> {
    let bin = find_binary("REDIS_LOCK_OPENSSL_BIN", "openssl")?;
    let out = Command::new(bin)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "openssl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

impl TlsCerts {
    /// Makes a CA and a server certificate for `127.0.0.1`, valid for one day.
    ///
    /// # Errors
    ///
    /// When `openssl` is missing or fails.
    pub fn generate() -> io::Result<TlsCerts> {
        let dir = tempfile::Builder::new()
            .prefix("redis-lock-tls")
            .tempdir()?;
        let d = dir.path();
        std::fs::write(
            d.join("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
        )?;
        openssl(
            d,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "1",
                "-subj",
                "/CN=redis-lock test CA",
            ],
        )?;
        openssl(
            d,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        )?;
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.crt",
                "-days",
                "1",
                "-extfile",
                "server.ext",
            ],
        )?;
        Ok(TlsCerts { dir })
    }

    /// The CA certificate (PEM file).
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// The server certificate (PEM file).
    pub fn server_cert(&self) -> PathBuf {
        self.dir.path().join("server.crt")
    }

    /// The server's private key (PEM file).
    pub fn server_key(&self) -> PathBuf {
        self.dir.path().join("server.key")
    }

    /// The CA certificate's PEM bytes, for `redis::TlsCertificates::root_cert`.
    ///
    /// # Errors
    ///
    /// When the file cannot be read.
    pub fn ca_pem(&self) -> io::Result<Vec<u8>> {
        std::fs::read(self.ca_cert())
    }
}

/// A `redis-server` that serves TLS on one port (for the client under test) and plain TCP on
/// another (for the test to look at keys through [`server`](Self::server)).
#[derive(Debug)]
pub struct TlsRedisServer {
    server: RedisServer,
    tls_port: u16,
    certs: TlsCerts,
}

impl TlsRedisServer {
    /// Generates certificates and starts the server.
    ///
    /// # Panics
    ///
    /// When `openssl` or `redis-server` (built with TLS) are missing or fail.
    pub fn start() -> TlsRedisServer {
        match Self::try_start() {
            Ok(s) => s,
            Err(e) => panic!("starting a TLS redis-server failed: {e}"),
        }
    }

    /// Generates certificates and starts the server.
    ///
    /// # Errors
    ///
    /// When `openssl` or `redis-server` (built with TLS) are missing or fail.
    pub fn try_start() -> io::Result<TlsRedisServer> {
        let certs = TlsCerts::generate()?;
        let (cert, key, ca) = (certs.server_cert(), certs.server_key(), certs.ca_cert());
        let path = |p: &Path| p.to_string_lossy().into_owned();
        let (cert, key, ca) = (path(&cert), path(&key), path(&ca));
        let mut last = None;
        // The TLS port, like the plain one, can be taken before redis-server binds it.
        for _ in 0..3 {
            let tls_port = free_port()?.to_string();
            let args = [
                "--tls-port",
                tls_port.as_str(),
                "--tls-cert-file",
                cert.as_str(),
                "--tls-key-file",
                key.as_str(),
                "--tls-ca-cert-file",
                ca.as_str(),
                "--tls-auth-clients",
                "no",
            ];
            match RedisServer::try_start_with(&args) {
                Ok(server) => {
                    return Ok(TlsRedisServer {
                        server,
                        tls_port: tls_port.parse().map_err(io::Error::other)?,
                        certs,
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("TLS redis-server did not start")))
    }

    /// The TLS port on 127.0.0.1.
    pub fn tls_port(&self) -> u16 {
        self.tls_port
    }

    /// `rediss://127.0.0.1:<tls port>/`: verifies the server certificate (against the
    /// system's roots unless the client is given [`TlsCerts::ca_pem`]).
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.tls_port)
    }

    /// `rediss://127.0.0.1:<tls port>/#insecure`: TLS without certificate verification.
    pub fn insecure_url(&self) -> String {
        format!("{}#insecure", self.url())
    }

    /// The same server over plain TCP, to look at keys.
    pub fn server(&self) -> &RedisServer {
        &self.server
    }

    /// The certificates the server uses.
    pub fn certs(&self) -> &TlsCerts {
        &self.certs
    }
}

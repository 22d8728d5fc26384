//! A TLS `redis-server` with certificates made for the test (by `rcgen`, in-process).

use std::io;
use std::path::{Path, PathBuf};

use super::server::{RedisServer, free_port};

/// A throwaway certificate authority and a server certificate it signed for `127.0.0.1`
/// (subject alternative name `IP:127.0.0.1`), in a temporary directory, made in-process with
/// `rcgen` (no `openssl` command needed).
#[derive(Debug)]
pub struct TlsCerts {
    dir: tempfile::TempDir,
}

fn rcgen_error(e: rcgen::Error) -> io::Error {
    io::Error::other(format!("making test certificates: {e}"))
}

impl TlsCerts {
    /// Makes a CA and a server certificate for `127.0.0.1` (ECDSA P-256).
    ///
    /// # Errors
    ///
    /// When the certificates cannot be made or written.
    pub fn generate() -> io::Result<TlsCerts> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        let dir = tempfile::Builder::new()
            .prefix("redis-lock-tls")
            .tempdir()?;
        let d = dir.path();
        let ca_key = KeyPair::generate().map_err(rcgen_error)?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(rcgen_error)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "redis-lock test CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).map_err(rcgen_error)?;
        let issuer = Issuer::new(ca, ca_key);
        let server_key = KeyPair::generate().map_err(rcgen_error)?;
        let mut server =
            CertificateParams::new(vec!["127.0.0.1".to_owned()]).map_err(rcgen_error)?;
        server
            .distinguished_name
            .push(DnType::CommonName, "127.0.0.1");
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_cert = server
            .signed_by(&server_key, &issuer)
            .map_err(rcgen_error)?;
        std::fs::write(d.join("ca.crt"), ca_cert.pem())?;
        std::fs::write(d.join("server.crt"), server_cert.pem())?;
        std::fs::write(d.join("server.key"), server_key.serialize_pem())?;
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
    /// When `redis-server` (built with TLS) is missing or fails.
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
    /// When `redis-server` (built with TLS) is missing or fails.
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

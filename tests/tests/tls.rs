//! TLS: `rediss://` against a TLS redis-server whose certificates the test makes with openssl.
#![cfg(feature = "tls")]

use std::time::Duration;

use redis_lock::LockClient;
use redis_lock::testing::TlsRedisServer;
use redis_lock_tests::client_for;

#[test]
fn locks_over_tls_without_verification() {
    let tls = TlsRedisServer::start();
    let locks = client_for(&tls.insecure_url());
    locks.ping().unwrap();
    let guard = locks
        .options("tls")
        .ttl(Duration::from_millis(600))
        .acquire()
        .unwrap();
    // The watchdog renews over TLS too.
    std::thread::sleep(Duration::from_millis(1000));
    assert!(!guard.is_lost());
    assert!(guard.remaining_ttl().unwrap().is_some());
    // What the client wrote over TLS is in the server (seen over the plain port).
    let fence = redis_lock_tests::stored_fence(&mut tls.server().connection(), "lock:{tls}");
    assert_eq!(fence, Some(guard.fencing_token()));
    assert!(
        client_for(&tls.insecure_url())
            .try_lock("tls")
            .unwrap()
            .is_none()
    );
    assert_eq!(
        guard.release().unwrap(),
        redis_lock::ReleaseOutcome::Released
    );
}

#[test]
fn locks_over_tls_verified_against_the_test_ca() {
    let tls = TlsRedisServer::start();
    let client = redis::Client::build_with_tls(
        tls.url(),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(tls.certs().ca_pem().unwrap()),
        },
    )
    .unwrap();
    let pool = r2d2::Pool::builder()
        .test_on_check_out(false)
        .connection_timeout(Duration::from_secs(5))
        .build_unchecked(client.clone());
    let locks = LockClient::from_pool(pool, client).unwrap();
    let guard = locks.try_lock("verified").unwrap().unwrap();
    assert!(locks.inspect("verified").unwrap().unwrap().owned);
    drop(guard);
    assert!(locks.inspect("verified").unwrap().is_none());
}

#[test]
fn unverifiable_certificate_is_refused() {
    let tls = TlsRedisServer::start();
    // No #insecure and a CA the system does not know: the handshake fails, with an error.
    let locks = client_for(&tls.url());
    let err = locks.try_lock("x").unwrap_err();
    assert!(err.is_connection_error(), "{err}");
    // Plain TCP to the TLS port does not get through either.
    let plain = client_for(&format!("redis://127.0.0.1:{}/", tls.tls_port()));
    assert!(plain.try_lock("x").is_err());
}

//! Real S3 servers for the tests: s3s-fs served in-process over HTTP on 127.0.0.1 with SigV4
//! checked (`krabka_remote_s3::test_server`), and the Ceph RGW cluster started by
//! `scripts/ceph-rgw` (read from the environment).
#![allow(dead_code, unused_imports, clippy::unwrap_used, clippy::expect_used)]

use krabka_remote_s3::{S3Config, S3Credentials};

pub use krabka_remote_s3::test_server::{ACCESS_KEY, BUCKET, SECRET_KEY, TestServer};

/// Starts the in-process s3s-fs server (the crate's `test-server` feature).
pub fn start_server() -> TestServer {
    TestServer::start().expect("start the in-process S3 server")
}

/// The Ceph RGW under test, from the variables `scripts/ceph-rgw start` prints. `None` when not
/// set; under `CI=true` a missing Ceph is a failure, not a skip.
pub fn ceph_config() -> Option<S3Config> {
    let endpoint = std::env::var("KRABKA_TEST_CEPH_ENDPOINT")
        .ok()
        .filter(|v| !v.is_empty());
    let Some(endpoint) = endpoint else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but KRABKA_TEST_CEPH_ENDPOINT is not set: .ci/run must start Ceph RGW with scripts/ceph-rgw"
        );
        eprintln!(
            "KRABKA_TEST_CEPH_ENDPOINT not set: skipping the Ceph RGW test (see crates/remote-s3/README.md)"
        );
        return None;
    };
    let var = |n: &str| {
        std::env::var(n)
            .unwrap_or_else(|_| panic!("{n} must be set with KRABKA_TEST_CEPH_ENDPOINT"))
    };
    Some(
        S3Config::new(var("KRABKA_TEST_CEPH_BUCKET"))
            .with_endpoint(endpoint)
            .with_credentials(S3Credentials::static_keys(
                var("KRABKA_TEST_CEPH_ACCESS_KEY"),
                var("KRABKA_TEST_CEPH_SECRET_KEY"),
            ))
            .with_prefix(format!("t-{}", uuid::Uuid::new_v4())),
    )
}

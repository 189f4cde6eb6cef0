//! The whole conformance kit against s3s-fs, started in-process on 127.0.0.1 with SigV4 checked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::OnceLock;

use krabka_remote_s3::S3RemoteStorage;
use krabka_remote_storage::RemoteStorageManager;

fn store() -> Option<&'static dyn RemoteStorageManager> {
    static STORE: OnceLock<S3RemoteStorage> = OnceLock::new();
    Some(STORE.get_or_init(|| {
        let server = support::start_server();
        let storage = S3RemoteStorage::new(server.config().with_prefix("kit")).unwrap();
        // The server lives as long as the test process.
        std::mem::forget(server);
        storage
    }))
}

/// Runs one check against the shared in-process server.
fn run(_name: &'static str, check: krabka_remote_storage::testkit::Check) {
    if let Some(store) = store() {
        check(store);
    }
}

krabka_remote_storage::conformance_tests!(run);

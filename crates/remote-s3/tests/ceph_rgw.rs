//! The conformance kit against a Ceph RGW cluster (3 OSDs, 3-way replication) started by
//! `scripts/ceph-rgw start`. Reads `KRABKA_TEST_CEPH_*`; without it these tests pass vacuously,
//! except under `CI=true`, where they fail. The OSD kill is in `ceph_rgw_osd_loss.rs`, a test
//! binary of its own: cargo runs test binaries one after another, so the peering stall it causes
//! never overlaps these tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::OnceLock;

use krabka_remote_s3::S3RemoteStorage;
use krabka_remote_storage::RemoteStorageManager;

fn store() -> Option<&'static dyn RemoteStorageManager> {
    static STORE: OnceLock<Option<S3RemoteStorage>> = OnceLock::new();
    STORE
        .get_or_init(|| support::ceph_config().map(|c| S3RemoteStorage::new(c).unwrap()))
        .as_ref()
        .map(|s| s as &dyn RemoteStorageManager)
}

mod ceph_conformance {
    use super::store;

    /// Runs one check against the cluster (none configured: see the file's docs).
    fn run(_name: &'static str, check: krabka_remote_storage::testkit::Check) {
        if let Some(store) = store() {
            check(store);
        }
    }

    krabka_remote_storage::conformance_tests!(run);
}

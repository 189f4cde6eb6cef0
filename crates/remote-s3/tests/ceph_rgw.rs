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
    crate::conformance_tests!(store;
        copy_then_fetch_whole_segment_and_ranges,
        range_past_the_end_is_invalid_argument,
        each_index_type_round_trips,
        missing_optional_index_is_segment_not_found,
        fetch_of_unknown_segment_is_segment_not_found,
        delete_then_fetch_is_segment_not_found,
        delete_twice_is_ok,
        recopy_under_the_same_id_replaces_cleanly,
        partitions_and_topics_never_collide,
        zero_byte_segment,
        large_segment_100_mib,
        eight_threads_copy_and_fetch_at_once,
        custom_metadata_is_passed_back,
    );
}

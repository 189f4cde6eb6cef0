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

conformance_tests!(store;
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

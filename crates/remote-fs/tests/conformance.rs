#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The full conformance kit, one test per check, each against its own root.

use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::testkit;

fn run(name: &str) {
    let root = tempfile::tempdir().unwrap();
    let rsm = FsRemoteStorage::new(root.path()).unwrap();
    let (_, check) = testkit::CHECKS
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no conformance check named {name}"));
    check(&rsm);
    // Every check deletes what it copied: nothing, not even a temp file, may remain.
    assert_eq!(
        rsm.list_objects().unwrap(),
        Vec::<std::path::PathBuf>::new()
    );
}

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        $(#[test] fn $name() { run(stringify!($name)); })*

        #[test]
        fn every_kit_check_has_a_test_here() {
            let here = [$(stringify!($name)),*];
            for (name, _) in testkit::CHECKS {
                assert!(here.contains(name), "conformance check {name} is not run");
            }
        }
    };
}

conformance!(
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

#[test]
fn run_all_passes_on_one_shared_root() {
    let root = tempfile::tempdir().unwrap();
    let rsm = FsRemoteStorage::new(root.path()).unwrap();
    for (name, check) in testkit::CHECKS {
        if *name != "large_segment_100_mib" {
            check(&rsm);
        }
    }
}

#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The full conformance kit, one test per check, each against its own root.

use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::testkit;

/// Runs one check against a fresh root, then checks the check left nothing behind.
fn run(_name: &'static str, check: testkit::Check) {
    let root = tempfile::tempdir().unwrap();
    let rsm = FsRemoteStorage::new(root.path()).unwrap();
    check(&rsm);
    // Every check deletes what it copied: nothing, not even a temp file, may remain.
    assert_eq!(
        rsm.list_objects().unwrap(),
        Vec::<std::path::PathBuf>::new()
    );
}

krabka_remote_storage::conformance_tests!(run);

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

//! The conformance kit every backend's tests run, plus test doubles for the layers above.
//!
//! Each check takes any `&dyn RemoteStorageManager`, creates its own temporary files, uses
//! fresh random topic ids (so it can run against a shared, non-empty store such as an S3
//! bucket), deletes what it copied, and panics with a message naming the check and the
//! contract broken. Run them all with [`run_all`], or one `#[test]` per entry of [`CHECKS`]:
//!
//! ```
//! use krabka_remote_storage::testkit::{self, InMemoryRemoteStorage};
//!
//! let store = InMemoryRemoteStorage::new();
//! testkit::copy_then_fetch_whole_segment_and_ranges(&store);
//! assert!(testkit::CHECKS.len() >= 10);
//! ```
//!
//! Also here: [`FaultInjecting`], a decorator that fails or stalls chosen calls,
//! [`Counting`], a decorator that counts calls and fetched bytes, slows chosen methods down
//! and runs a test's hook before each call, and [`InMemoryRemoteStorage`], a map-backed
//! reference backend.

mod checks;
mod counting;
mod fault;
mod fixtures;
mod memory;

pub use checks::{
    copy_then_fetch_whole_segment_and_ranges, custom_metadata_is_passed_back,
    delete_then_fetch_is_segment_not_found, delete_twice_is_ok, each_index_type_round_trips,
    eight_threads_copy_and_fetch_at_once, fetch_of_unknown_segment_is_segment_not_found,
    inclusive_end_past_the_last_byte_reads_to_the_end, large_segment_100_mib,
    missing_optional_index_is_segment_not_found, partitions_and_topics_never_collide,
    range_starting_past_the_end_is_invalid_argument, recopy_under_the_same_id_replaces_cleanly,
    zero_byte_segment,
};
pub use counting::{Call, CallCounts, Counting};
pub use fault::{FaultInjecting, FaultStats, Faults, Method};
pub use memory::InMemoryRemoteStorage;

use crate::manager::RemoteStorageManager;

/// A conformance check.
pub type Check = fn(&dyn RemoteStorageManager);

/// Every check, by name, so a backend can run each as its own test.
pub const CHECKS: &[(&str, Check)] = &[
    (
        "copy_then_fetch_whole_segment_and_ranges",
        copy_then_fetch_whole_segment_and_ranges,
    ),
    (
        "range_starting_past_the_end_is_invalid_argument",
        range_starting_past_the_end_is_invalid_argument,
    ),
    (
        "inclusive_end_past_the_last_byte_reads_to_the_end",
        inclusive_end_past_the_last_byte_reads_to_the_end,
    ),
    ("each_index_type_round_trips", each_index_type_round_trips),
    (
        "missing_optional_index_is_segment_not_found",
        missing_optional_index_is_segment_not_found,
    ),
    (
        "fetch_of_unknown_segment_is_segment_not_found",
        fetch_of_unknown_segment_is_segment_not_found,
    ),
    (
        "delete_then_fetch_is_segment_not_found",
        delete_then_fetch_is_segment_not_found,
    ),
    ("delete_twice_is_ok", delete_twice_is_ok),
    (
        "recopy_under_the_same_id_replaces_cleanly",
        recopy_under_the_same_id_replaces_cleanly,
    ),
    (
        "partitions_and_topics_never_collide",
        partitions_and_topics_never_collide,
    ),
    ("zero_byte_segment", zero_byte_segment),
    ("large_segment_100_mib", large_segment_100_mib),
    (
        "eight_threads_copy_and_fetch_at_once",
        eight_threads_copy_and_fetch_at_once,
    ),
    (
        "custom_metadata_is_passed_back",
        custom_metadata_is_passed_back,
    ),
];

/// Defines one `#[test]` per conformance check in the calling test file, each calling
/// `$run(name, check)`, plus `every_conformance_check_has_a_test`, which fails when [`CHECKS`]
/// gains a check this list lacks. `$run` is a `fn(&'static str, Check)` that builds (or shares)
/// the backend under test and runs `check` on it, so each backend states only how to make its
/// store:
///
/// ```ignore
/// use krabka_remote_storage::testkit::Check;
///
/// fn run(_name: &'static str, check: Check) {
///     let root = tempfile::tempdir().unwrap();
///     check(&krabka_remote_fs::FsRemoteStorage::new(root.path()).unwrap());
/// }
///
/// krabka_remote_storage::conformance_tests!(run);
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($run:path) => {
        $crate::conformance_tests!(@each $run;
            copy_then_fetch_whole_segment_and_ranges,
            range_starting_past_the_end_is_invalid_argument,
            inclusive_end_past_the_last_byte_reads_to_the_end,
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
    };
    (@each $run:path; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $run(stringify!($name), $crate::testkit::$name);
            }
        )*

        #[test]
        fn every_conformance_check_has_a_test() {
            let here = [$(stringify!($name)),*];
            for (name, _) in $crate::testkit::CHECKS {
                assert!(here.contains(name), "conformance check `{name}` has no test here");
            }
        }
    };
}

/// Runs every check in [`CHECKS`], in order.
///
/// # Panics
/// On the first broken contract, naming the check.
pub fn run_all(rsm: &dyn RemoteStorageManager) {
    for (name, check) in CHECKS {
        // Shown with `--nocapture`: finds a hanging check against a remote store.
        println!("conformance check: {name}");
        check(rsm);
    }
}

//! Read replicas under hostile buckets and shared limits (docs/tiering.md, "Read replicas"):
//! manifests, heads and epoch records of gigabytes read bounded; a group's refreshes never
//! more than its permits at once, whoever calls them; its request budget a rate bound on every
//! request its replicas send; a missing object under a missing head costing no listing per
//! read; the lag gauges sampled while the bucket is down.
//!
//! Each scenario runs on the filesystem backend and the in-process S3 server (the gauges on
//! the server alone, which is stopped under them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

#[allow(dead_code)]
#[path = "replica/backend.rs"]
mod backend;
#[allow(dead_code)]
#[path = "replica/util.rs"]
mod util;

#[path = "replica_limits/budget.rs"]
mod budget;
#[path = "replica_limits/gauges.rs"]
mod gauges;
#[path = "replica_limits/hostile.rs"]
mod hostile;
#[path = "replica_limits/missing.rs"]
mod missing;
#[path = "replica_limits/permits.rs"]
mod permits;
#[path = "replica_limits/probe.rs"]
mod probe;

use backend::Backend;

#[test]
#[ignore = "the child process of the hostile-object test on the filesystem"]
fn hostile_objects_child_under_an_address_space_limit() {
    hostile::child_checks_the_hostile_view();
}

#[test]
fn fs_hostile_manifest_and_head_are_read_bounded() {
    hostile::hostile_manifest_and_head(&Backend::fs());
}

#[test]
fn s3_hostile_manifest_and_head_are_read_bounded() {
    hostile::hostile_manifest_and_head(&Backend::s3());
}

#[test]
fn fs_hostile_epoch_record_is_read_bounded() {
    hostile::hostile_epoch_record(&Backend::fs());
}

#[test]
fn s3_hostile_epoch_record_is_read_bounded() {
    hostile::hostile_epoch_record(&Backend::s3());
}

#[test]
fn fs_group_permits_bound_concurrent_refreshes() {
    permits::group_permits_bound_concurrent_refreshes(&Backend::fs());
}

#[test]
fn s3_group_permits_bound_concurrent_refreshes() {
    permits::group_permits_bound_concurrent_refreshes(&Backend::s3());
}

#[test]
fn fs_budget_bounds_the_request_rate() {
    budget::budget_bounds_the_request_rate(&Backend::fs());
}

#[test]
fn s3_budget_bounds_the_request_rate() {
    budget::budget_bounds_the_request_rate(&Backend::s3());
}

#[test]
fn fs_missing_object_under_a_missing_head() {
    missing::missing_object_under_a_missing_head(&Backend::fs());
}

#[test]
fn s3_missing_object_under_a_missing_head() {
    missing::missing_object_under_a_missing_head(&Backend::s3());
}

#[test]
fn s3_lag_gauges_while_the_bucket_is_down() {
    gauges::lag_gauges_while_the_bucket_is_down(Backend::s3());
}

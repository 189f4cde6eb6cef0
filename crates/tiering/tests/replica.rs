//! Read replicas and followers against a live writer (docs/tiering.md, "Read replicas and
//! followers"): one writer with retention and three replica processes reading under load; a
//! replica opened while a copy is in flight; the writer fenced and replaced while replicas
//! read; the partition head lost or damaged; a segment deleted between a refresh and a read;
//! a follower trimming only what the writer finished; what refreshes cost.
//!
//! Each scenario runs on the filesystem backend and the in-process S3 server; the
//! multi-process one also on Ceph RGW when `.ci/run` started it (`KRABKA_TEST_CEPH_*`;
//! skipped otherwise, a failure under `CI=true`). The replica processes are this test binary
//! run again with only the ignored child test (`replica/child.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

#[path = "replica/backend.rs"]
mod backend;
#[path = "replica/child.rs"]
mod child;
#[path = "replica/follower.rs"]
mod follower;
#[path = "replica/head.rs"]
mod head;
#[path = "replica/load.rs"]
mod load;
#[path = "replica/lost.rs"]
mod lost;
#[path = "replica/util.rs"]
mod util;
#[path = "replica/views.rs"]
mod views;

use std::time::Duration;

use backend::Backend;

/// How long the writer runs under the replica processes' reads.
const LOAD: Duration = Duration::from_secs(4);

#[test]
#[ignore = "the child process of the multi-process replica tests"]
fn replica_process_reads_until_its_deadline() {
    if let Ok(out) = std::env::var(child::OUT_VAR) {
        child::run_child(out.into());
    }
}

#[test]
fn fs_writer_with_retention_and_three_replica_processes() {
    load::writer_with_retention_and_three_replica_processes(&Backend::fs(), LOAD);
}

#[test]
fn s3_writer_with_retention_and_three_replica_processes() {
    load::writer_with_retention_and_three_replica_processes(&Backend::s3(), LOAD);
}

#[test]
fn ceph_writer_with_retention_and_three_replica_processes() {
    if let Some(b) = Backend::ceph("replica-load") {
        load::writer_with_retention_and_three_replica_processes(&b, LOAD);
    }
}

#[test]
fn fs_replica_opened_while_a_copy_is_in_flight() {
    views::replica_opened_while_a_copy_is_in_flight(&Backend::fs());
}

#[test]
fn s3_replica_opened_while_a_copy_is_in_flight() {
    views::replica_opened_while_a_copy_is_in_flight(&Backend::s3());
}

#[test]
fn fs_writer_fenced_and_replaced_while_replicas_read() {
    views::writer_fenced_and_replaced_while_replicas_read(&Backend::fs());
}

#[test]
fn s3_writer_fenced_and_replaced_while_replicas_read() {
    views::writer_fenced_and_replaced_while_replicas_read(&Backend::s3());
}

#[test]
fn fs_head_lost_or_damaged() {
    head::head_lost_or_damaged(&Backend::fs());
}

#[test]
fn s3_head_lost_or_damaged() {
    head::head_lost_or_damaged(&Backend::s3());
}

#[test]
fn fs_segment_deleted_between_refresh_and_read() {
    views::segment_deleted_between_refresh_and_read(&Backend::fs());
}

#[test]
fn s3_segment_deleted_between_refresh_and_read() {
    views::segment_deleted_between_refresh_and_read(&Backend::s3());
}

#[test]
fn fs_follower_trims_only_what_the_writer_finished() {
    follower::follower_trims_only_what_the_writer_finished(&Backend::fs());
}

#[test]
fn s3_follower_trims_only_what_the_writer_finished() {
    follower::follower_trims_only_what_the_writer_finished(&Backend::s3());
}

#[test]
fn fs_refresh_costs() {
    head::refresh_costs(&Backend::fs());
}

#[test]
fn s3_refresh_costs() {
    head::refresh_costs(&Backend::s3());
}

#[test]
fn ceph_refresh_costs() {
    if let Some(b) = Backend::ceph("replica-costs") {
        head::refresh_costs(&b);
    }
}

#[test]
fn ceph_head_lost_or_damaged() {
    if let Some(b) = Backend::ceph("replica-head") {
        head::head_lost_or_damaged(&b);
    }
}

#[test]
fn ceph_writer_fenced_and_replaced_while_replicas_read() {
    if let Some(b) = Backend::ceph("replica-fenced") {
        views::writer_fenced_and_replaced_while_replicas_read(&b);
    }
}

#[test]
fn fs_readers_and_background_refreshes_in_one_process() {
    load::readers_and_background_refreshes_in_one_process(&Backend::fs(), LOAD / 2);
}

#[test]
fn s3_readers_and_background_refreshes_in_one_process() {
    load::readers_and_background_refreshes_in_one_process(&Backend::s3(), LOAD / 2);
}

#[test]
fn s3_bucket_unreachable_keeps_the_view() {
    head::bucket_unreachable(Backend::s3());
}

#[test]
fn fs_follower_follows_the_writers_retention() {
    follower::follower_follows_the_writers_retention(&Backend::fs());
}

#[test]
fn s3_follower_follows_the_writers_retention() {
    follower::follower_follows_the_writers_retention(&Backend::s3());
}

#[test]
fn ceph_replica_opened_while_a_copy_is_in_flight() {
    if let Some(b) = Backend::ceph("replica-inflight") {
        views::replica_opened_while_a_copy_is_in_flight(&b);
    }
}

#[test]
fn ceph_segment_deleted_between_refresh_and_read() {
    if let Some(b) = Backend::ceph("replica-deleted") {
        views::segment_deleted_between_refresh_and_read(&b);
    }
}

#[test]
fn ceph_follower_trims_only_what_the_writer_finished() {
    if let Some(b) = Backend::ceph("replica-follower") {
        follower::follower_trims_only_what_the_writer_finished(&b);
    }
}

#[test]
fn ceph_follower_follows_the_writers_retention() {
    if let Some(b) = Backend::ceph("replica-follows") {
        follower::follower_follows_the_writers_retention(&b);
    }
}

#[test]
fn fs_a_lost_object_of_a_finished_segment_is_named_never_lag() {
    lost::a_lost_object_of_a_finished_segment_is_named_never_lag(&Backend::fs());
}

#[test]
fn s3_a_lost_object_of_a_finished_segment_is_named_never_lag() {
    lost::a_lost_object_of_a_finished_segment_is_named_never_lag(&Backend::s3());
}

#[test]
fn fs_a_rolled_back_head_is_reported_never_current() {
    lost::a_rolled_back_head_is_reported_never_current(&Backend::fs());
}

#[test]
fn s3_a_rolled_back_head_is_reported_never_current() {
    lost::a_rolled_back_head_is_reported_never_current(&Backend::s3());
}

//! The whole conformance kit over `Transforming` on the filesystem backend, once per transform:
//! zstd only, AES-256-GCM only, and both. Small chunks and fetch runs so that every check
//! crosses chunk and request boundaries.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use std::sync::Arc;

use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::testkit::Check;
use krabka_remote_transform::Transforming;
use support::{Mode, config};

fn run_mode(mode: Mode, check: Check) {
    let root = tempfile::tempdir().unwrap();
    let fs = Arc::new(FsRemoteStorage::new(root.path()).unwrap());
    let config = config(mode)
        .with_chunk_size(16 << 10)
        .unwrap()
        .with_fetch_run_bytes(40 << 10);
    check(&Transforming::new(fs, config));
}

macro_rules! mode {
    ($module:ident, $mode:expr) => {
        mod $module {
            fn run(_name: &'static str, check: krabka_remote_storage::testkit::Check) {
                super::run_mode($mode, check);
            }
            krabka_remote_storage::conformance_tests!(run);
        }
    };
}

mode!(zstd, super::Mode::Zstd);
mode!(encrypted, super::Mode::Encrypted);
mode!(zstd_and_encrypted, super::Mode::Both);

//! The whole conformance kit over `Transforming` on the S3 backend against the in-process
//! s3s-fs server (SigV4 checked), once per transform: zstd only, AES-256-GCM only, and both.
//! One server for the whole file, one key prefix per transform.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use std::sync::{Arc, OnceLock};

use krabka_remote_s3::S3RemoteStorage;
use krabka_remote_s3::test_server::TestServer;
use krabka_remote_storage::testkit::Check;
use krabka_remote_transform::Transforming;
use support::{Mode, config};

fn server() -> &'static TestServer {
    static SERVER: OnceLock<TestServer> = OnceLock::new();
    SERVER.get_or_init(|| TestServer::start().expect("start the in-process S3 server"))
}

fn store(mode: Mode) -> &'static Transforming {
    static STORES: OnceLock<[Transforming; 3]> = OnceLock::new();
    let stores = STORES.get_or_init(|| {
        support::MODES.map(|m| {
            let s3 = S3RemoteStorage::new(server().config().with_prefix(format!("{m:?}"))).unwrap();
            Transforming::new(
                Arc::new(s3),
                // Small chunks; the default 8 MiB fetch runs keep the 100 MiB check to a dozen
                // GETs (each request to the in-process server costs tens of milliseconds).
                config(m).with_chunk_size(16 << 10).unwrap(),
            )
        })
    });
    &stores[mode as usize]
}

fn run_mode(mode: Mode, check: Check) {
    check(store(mode));
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

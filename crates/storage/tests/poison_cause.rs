//! A poisoned log says why: every refusal after a failed write or fsync carries that first
//! failure (a full disk's "No space left on device"), not only "an earlier write failed".
#![cfg(feature = "fault-injection")]
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use krabka_protocol::Message;
use krabka_storage::{Error, Log, Options, SyncPolicy};

fn open(dir: &std::path::Path) -> Log {
    Log::open(
        dir,
        Options {
            sync: SyncPolicy::EveryAppend,
            ..Options::default()
        },
    )
    .unwrap()
}

#[test]
fn every_refusal_after_a_failed_write_names_that_first_failure_and_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    log.append(&Message::new("one")).unwrap();
    log.faults().fail_nth_write(1);
    let first = log.append(&Message::new("two")).unwrap_err();
    let segment = dir.path().join("00000000000000000001.log");
    assert!(
        matches!(&first, Error::Io { path, .. } if *path == segment),
        "{first:?}"
    );
    // A later fault of another kind does not replace the first cause.
    log.faults().fail_nth_fsync(1);
    for _ in 0..3 {
        let refused = log.append(&Message::new("three")).unwrap_err();
        let Error::Poisoned { dir: d, cause } = &refused else {
            panic!("{refused:?}");
        };
        assert_eq!(d, dir.path());
        assert_eq!(cause.kind, std::io::ErrorKind::Other);
        assert_eq!(cause.message, first.to_string());
        let line = refused.to_string();
        assert!(line.contains("injected Write fault"), "{line}");
        assert!(line.contains(&segment.display().to_string()), "{line}");
    }
    let synced = log.sync().unwrap_err();
    assert!(
        matches!(&synced, Error::Poisoned { cause, .. } if cause.message == first.to_string()),
        "{synced:?}"
    );
}

#[test]
fn a_failed_fsync_is_the_cause_a_poisoned_log_names() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    log.faults().fail_nth_fsync(1);
    let first = log.append(&Message::new("one")).unwrap_err();
    assert!(
        first.to_string().contains("injected Fsync fault"),
        "{first}"
    );
    let refused = log.append(&Message::new("two")).unwrap_err();
    assert!(
        matches!(&refused, Error::Poisoned { cause, .. } if cause.message == first.to_string()),
        "{refused:?}"
    );
    assert!(
        refused.to_string().contains("injected Fsync fault"),
        "{refused}"
    );
}

//! A broker embedding krabka opens its partition directories through `PartitionDir`: it gets
//! every refusal the `krabka` command gives, from the library alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use krabka_protocol::Message;
use krabka_remote_transform::TransformConfig;
use krabka_storage::Options;
use krabka_tiering::partition::{OpenOptions, PartitionQuery, RecoverOptions};
use krabka_tiering::{Access, Error, PartitionDir, RemoteTier, TieringConfig};

fn remote(root: &Path) -> RemoteTier {
    RemoteTier::fs(root, true, TransformConfig::default()).expect("fs remote")
}

fn options(access: Access) -> OpenOptions {
    OpenOptions {
        log: Options {
            max_bytes: 1024,
            ..Options::default()
        },
        config: TieringConfig {
            retention_ms: None,
            ..TieringConfig::default()
        },
        ..OpenOptions::new(access)
    }
}

/// A log of 60 records in `dir`, tiered to `root`; returns the partition it was tiered under.
fn tiered_log(dir: &Path, root: &Path) -> krabka_remote_storage::TopicIdPartition {
    let part = PartitionDir::open(dir, &remote(root), options(Access::Owner)).expect("open");
    for i in 0..60 {
        part.log()
            .append(&Message::new(format!("record {i:03} {}", "x".repeat(40))))
            .expect("append");
    }
    let report = part.log().run_once().expect("round");
    assert!(report.segments_copied > 0, "{report:?}");
    let topic = part.topic().clone();
    part.into_log().close().expect("close");
    topic
}

/// Every file under `dir`, with its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).expect("read")));
            }
        }
    }
    out.sort();
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read dir") {
        let e = e.expect("entry");
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).expect("copy");
        }
    }
}

#[test]
fn an_empty_directory_over_a_populated_remote_is_refused_and_left_empty() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("remote");
    tiered_log(&tmp.path().join("orders"), &root);
    let lost = tmp.path().join("elsewhere").join("orders");
    std::fs::create_dir_all(&lost).expect("mkdir");
    let e = PartitionDir::open(&lost, &remote(&root), options(Access::Owner))
        .expect_err("an empty log over remote data is refused");
    assert!(
        matches!(
            e,
            Error::Ownership(krabka_tiering::OwnershipError::RemoteHoldsPartition { .. })
        ),
        "{e}"
    );
    let left = without_locks(snapshot(&lost));
    assert!(
        left.iter().all(|(p, _)| p
            .extension()
            .is_some_and(|x| x == "log" || x == "index" || x == "timeindex")),
        "only the empty local log may exist: {left:?}"
    );
    assert!(!lost.join("topic").exists() && !lost.join("remote-metadata").exists());
}

#[test]
fn a_log_bound_to_one_remote_is_refused_over_another() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("orders");
    tiered_log(&dir, &tmp.path().join("remote"));
    let other = tmp.path().join("other");
    let e = PartitionDir::open(&dir, &remote(&other), options(Access::Owner))
        .expect_err("another remote");
    assert!(
        matches!(
            e,
            Error::Ownership(krabka_tiering::OwnershipError::WrongRemote { .. })
        ),
        "{e}"
    );
    // A missing directory for a bound log is refused before it is created.
    let missing = tmp.path().join("typo");
    let e = PartitionDir::fs_remote(&dir, &missing, Access::Owner, TransformConfig::default())
        .expect_err("a missing remote of a bound log");
    assert!(
        matches!(
            e,
            Error::Ownership(krabka_tiering::OwnershipError::WrongRemote { .. })
        ),
        "{e}"
    );
    assert!(!missing.exists());
    // A reader never creates a remote, bound or not.
    let fresh = tmp.path().join("fresh");
    std::fs::create_dir_all(&fresh).expect("mkdir");
    let e = PartitionDir::fs_remote(
        &fresh,
        &missing,
        Access::ReadOnly,
        TransformConfig::default(),
    )
    .expect_err("a reader over a missing remote");
    assert!(
        matches!(
            e,
            Error::Ownership(krabka_tiering::OwnershipError::RemoteUnusable { .. })
        ),
        "{e}"
    );
    assert!(!missing.exists());
}

#[test]
fn a_copied_directory_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("orders");
    let root = tmp.path().join("remote");
    tiered_log(&dir, &root);
    let copy = tmp.path().join("copy").join("orders");
    copy_dir(&dir, &copy);
    let e = PartitionDir::open(&copy, &remote(&root), options(Access::Owner)).expect_err("a copy");
    assert!(
        matches!(
            e,
            Error::Ownership(krabka_tiering::OwnershipError::CopiedDirectory { .. })
        ),
        "{e}"
    );
}

#[test]
fn recovery_finds_a_partition_by_topic_id_or_name_whatever_the_directory_is_called() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("remote");
    let tp = tiered_log(&tmp.path().join("orders"), &root);
    let tier = remote(&root);
    // A wrong topic id: found nowhere.
    let wrong = RecoverOptions {
        partition: PartitionQuery {
            topic_id: Some(krabka_remote_storage::Uuid::new_v4()),
            ..PartitionQuery::default()
        },
        ..RecoverOptions::default()
    };
    let e = PartitionDir::recover(&tmp.path().join("a"), &tier, &wrong).expect_err("wrong id");
    assert!(
        matches!(
            e,
            Error::Ownership(krabka_tiering::OwnershipError::PartitionNotFound { .. })
        ),
        "{e}"
    );
    // A directory's name that is no topic: not found by name...
    let e = PartitionDir::recover(&tmp.path().join("b"), &tier, &RecoverOptions::default())
        .expect_err("by the directory's name");
    assert!(
        matches!(
            e,
            Error::Ownership(krabka_tiering::OwnershipError::PartitionNotFound {
                by_name: true,
                ..
            })
        ),
        "{e}"
    );
    // ...but by its topic id alone, or by its name.
    for (name, query) in [
        (
            "by-id",
            PartitionQuery {
                topic_id: Some(tp.topic_id()),
                ..PartitionQuery::default()
            },
        ),
        (
            "by-name",
            PartitionQuery {
                topic: Some(tp.topic().to_owned()),
                partition: Some(0),
                ..PartitionQuery::default()
            },
        ),
    ] {
        let dir = tmp.path().join(name);
        let options = RecoverOptions {
            partition: query,
            ..RecoverOptions::default()
        };
        let recovered = PartitionDir::recover(&dir, &tier, &options).expect("recover");
        assert_eq!(recovered.report.partition, tp);
        assert!(recovered.missing_keys.is_empty());
        // The recovered directory now records the partition: asking for another is refused.
        let e = PartitionDir::recover(&dir, &tier, &wrong).expect_err("another partition");
        assert!(
            matches!(
                e,
                Error::Ownership(krabka_tiering::OwnershipError::TopicMismatch { .. })
            ),
            "{e}"
        );
        let part = PartitionDir::open(&dir, &tier, options_read()).expect("read-only open");
        let first = part.log().first_seq().expect("first");
        let records = part.log().read(first, 1000).expect("read");
        assert_eq!(records.first().map(|r| r.seq), Some(1));
        assert_eq!(part.topic(), &tp);
    }
}

fn options_read() -> OpenOptions {
    options(Access::ReadOnly)
}

#[test]
fn recovery_into_a_live_log_is_refused_and_changes_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("remote");
    let dir = tmp.path().join("orders");
    tiered_log(&dir, &root);
    let live = PartitionDir::open(&dir, &remote(&root), options(Access::Owner)).expect("open");
    let before = snapshot(&dir);
    let e = PartitionDir::recover(&dir, &remote(&root), &RecoverOptions::default())
        .expect_err("a live log");
    assert!(
        matches!(
            e,
            Error::Ownership(krabka_tiering::OwnershipError::InUse { .. })
        ),
        "{e}"
    );
    assert_eq!(snapshot(&dir), before);
    live.into_log().close().expect("close");
}

#[test]
fn a_read_only_open_writes_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("remote");
    let dir = tmp.path().join("orders");
    tiered_log(&dir, &root);
    let before = snapshot(&dir);
    let remote_before = snapshot(&root);
    {
        let part = PartitionDir::open(&dir, &remote(&root), options_read()).expect("open");
        let records = part.log().read(1, 1000).expect("read");
        assert_eq!(records.len(), 60);
        let e = part.log().run_once().expect_err("a reader copies nothing");
        assert!(
            matches!(
                e,
                Error::Ownership(krabka_tiering::OwnershipError::ReadOnly { .. })
            ),
            "{e}"
        );
    }
    assert_eq!(without_locks(snapshot(&dir)), without_locks(before));
    assert_eq!(snapshot(&root), remote_before);

    // A torn last metadata event (an append cut short): the read-only open leaves it where it
    // is, serves every remote segment recorded before it, and the owner's open still cuts it.
    let metadata_log = current_metadata_log(&dir);
    let len = std::fs::metadata(&metadata_log)
        .expect("metadata log")
        .len();
    let placement = {
        let part = PartitionDir::open(&dir, &remote(&root), options_read()).expect("open");
        part.placement().expect("placement")
    };
    std::fs::OpenOptions::new()
        .append(true)
        .open(&metadata_log)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"torn"))
        .expect("append garbage");
    let before = without_locks(snapshot(&dir));
    let dirs_before = dirs_under(&dir);
    {
        let part = PartitionDir::open(&dir, &remote(&root), options_read())
            .expect("a read-only open tolerates a torn last metadata event");
        assert!(
            part.torn_event_cut().is_none(),
            "a read-only open cuts nothing"
        );
        assert_eq!(part.placement().expect("placement"), placement);
        assert_eq!(part.log().read(1, 1000).expect("read").len(), 60);
    }
    assert_eq!(without_locks(snapshot(&dir)), before);
    assert_eq!(dirs_under(&dir), dirs_before);
    assert_eq!(snapshot(&root), remote_before);
    let owner = PartitionDir::open(&dir, &remote(&root), options(Access::Owner)).expect("open");
    let cut = owner.torn_event_cut().expect("the owner's open cuts it");
    assert_eq!(
        (cut.path.as_path(), cut.position, cut.bytes),
        (metadata_log.as_path(), len, 4)
    );
    assert_eq!(owner.placement().expect("placement"), placement);
    owner.into_log().close().expect("close");
}

/// The `.log` file the current generation of `dir`'s durable metadata appends to.
fn current_metadata_log(dir: &Path) -> PathBuf {
    let metadata = dir.join("remote-metadata");
    let current = std::fs::read_to_string(metadata.join("CURRENT")).expect("CURRENT");
    let generation: u64 = current
        .trim_end()
        .trim_end_matches(" v2")
        .parse()
        .expect("a generation number");
    let generation_dir = metadata.join(format!("gen-{generation:020}"));
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&generation_dir)
        .expect("generation dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    logs.pop().expect("a segment file")
}

/// `snapshot` without the lock files (which any open of a log creates).
fn without_locks(files: Vec<(PathBuf, Vec<u8>)>) -> Vec<(PathBuf, Vec<u8>)> {
    files
        .into_iter()
        .filter(|(p, _)| p.file_name().is_some_and(|n| n != ".lock"))
        .collect()
}

/// Every directory under `dir` (`snapshot` lists files only).
fn dirs_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                out.push(p.clone());
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn tiering_files_are_its_own_and_storage_reports_none_of_them() {
    for own in [
        "topic",
        "topic.tmp",
        "remote-binding",
        "tiering-log-start",
        "tiering-lost-seqs",
        "remote-metadata",
    ] {
        assert!(krabka_tiering::partition::is_own_file(own), "{own}");
    }
    assert!(!krabka_tiering::partition::is_own_file("topicx"));
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("orders");
    tiered_log(&dir, &tmp.path().join("remote"));
    std::fs::write(dir.join("tiering-lost-seqs.tmp"), b"x").expect("write");
    let part = PartitionDir::open(
        &dir,
        &remote(&tmp.path().join("remote")),
        options(Access::Owner),
    )
    .expect("open");
    assert!(
        part.recovery_report().ignored_files.is_empty(),
        "{:?}",
        part.recovery_report().ignored_files
    );
}

/// A writer that died after claiming the partition and before recording the topic file opens
/// again under the partition its binding names (the file is then written), and so does a reader.
#[test]
fn a_lost_topic_file_is_taken_from_the_binding_not_guessed_from_the_name() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("remote");
    let dir = tmp.path().join("orders");
    let tp = tiered_log(&dir, &root);
    std::fs::remove_file(dir.join("topic")).expect("remove the topic file");
    let reader = PartitionDir::open(&dir, &remote(&root), options_read()).expect("read-only");
    assert_eq!(reader.topic(), &tp);
    assert_eq!(reader.log().read(1, 1000).expect("read").len(), 60);
    assert!(!dir.join("topic").exists(), "a reader writes nothing");
    reader.into_log().close().expect("close");
    let writer = PartitionDir::open(&dir, &remote(&root), options(Access::Owner)).expect("owner");
    assert_eq!(writer.topic(), &tp);
    writer.into_log().close().expect("close");
    let again = krabka_tiering::partition::topic::read_topic_file(&dir).expect("read");
    assert_eq!(again, Some(tp));
}

/// A reader given a directory that does not exist creates nothing.
#[test]
fn a_reader_of_a_missing_directory_creates_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("remote");
    tiered_log(&tmp.path().join("orders"), &root);
    let missing = tmp.path().join("typo");
    let e = PartitionDir::open(&missing, &remote(&root), options_read()).expect_err("missing");
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(!missing.exists());
}

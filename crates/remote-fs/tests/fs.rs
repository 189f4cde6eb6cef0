#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Filesystem specifics: the on-disk layout, hostile names, atomic copies, stray temp files.

use std::path::{Path, PathBuf};

use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::*;

struct Local {
    dir: tempfile::TempDir,
}

impl Local {
    fn new(log: &[u8]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("s.log"), log).unwrap();
        std::fs::write(dir.path().join("s.index"), b"idx").unwrap();
        std::fs::write(dir.path().join("s.timeindex"), b"tix").unwrap();
        Self { dir }
    }

    fn data(&self) -> LogSegmentData {
        let p = |n: &str| self.dir.path().join(n);
        let mut d = LogSegmentData::new(p("s.log"), p("s.index"), p("s.timeindex"));
        d.leader_epoch_index = bytes::Bytes::from_static(b"0\n1\n0 0\n");
        d
    }
}

fn meta(topic: &str, partition: i32, start: u64) -> RemoteLogSegmentMetadata {
    let tp = TopicIdPartition::new(Uuid::new_v4(), topic, partition);
    RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp), start, start + 9)
        .build()
        .unwrap()
}

#[test]
fn files_land_at_the_documented_layout() {
    let root = tempfile::tempdir().unwrap();
    let rsm = FsRemoteStorage::new(root.path()).unwrap();
    let local = Local::new(b"hello");
    let m = meta("orders", 3, 1000);
    assert_eq!(rsm.copy_log_segment_data(&m, &local.data()).unwrap(), None);
    let tp = m.topic_id_partition();
    let dir = format!("orders-3-{}", tp.topic_id());
    let stem = format!("00000000000000001000-{}", m.remote_log_segment_id().id());
    let want: Vec<PathBuf> = [
        ".index",
        ".leader-epoch-checkpoint",
        ".log",
        ".manifest",
        ".timeindex",
    ]
    .iter()
    .map(|s| Path::new(&dir).join(format!("{stem}{s}")))
    .collect();
    assert_eq!(rsm.list_objects().unwrap(), want);
    assert_eq!(std::fs::read(root.path().join(&want[2])).unwrap(), b"hello");
}

#[test]
fn hostile_topic_names_are_rejected_and_write_nothing() {
    let root = tempfile::tempdir().unwrap();
    let store = root.path().join("store");
    let rsm = FsRemoteStorage::new(&store).unwrap();
    let local = Local::new(b"x");
    let long = "a".repeat(300);
    for name in [
        "../x",
        "a/b",
        "a\0b",
        long.as_str(),
        "..",
        ".",
        "",
        "/etc",
        "a\\b",
    ] {
        let m = meta(name, 0, 0);
        let copy = rsm.copy_log_segment_data(&m, &local.data());
        assert!(
            matches!(copy, Err(RemoteStorageError::InvalidArgument { .. })),
            "{name:?}: {copy:?}"
        );
        assert!(matches!(
            rsm.fetch_log_segment(&m, 0, None),
            Err(RemoteStorageError::InvalidArgument { .. })
        ));
        assert!(matches!(
            rsm.fetch_index(&m, IndexType::Offset),
            Err(RemoteStorageError::InvalidArgument { .. })
        ));
        assert!(matches!(
            rsm.delete_log_segment_data(&m),
            Err(RemoteStorageError::InvalidArgument { .. })
        ));
    }
    let negative = meta("ok", -1, 0);
    let copy = rsm.copy_log_segment_data(&negative, &local.data());
    assert!(
        matches!(&copy, Err(RemoteStorageError::InvalidArgument { message })
            if message.contains("partition -1 of topic `ok` is negative")),
        "{copy:?}"
    );
    assert!(rsm.list_objects().unwrap().is_empty());
    // Nothing escaped next to the store either.
    let siblings: Vec<_> = std::fs::read_dir(root.path()).unwrap().collect();
    assert_eq!(siblings.len(), 1);
}

#[test]
fn delete_removes_stray_temp_files_of_the_segment_only() {
    let root = tempfile::tempdir().unwrap();
    let rsm = FsRemoteStorage::new(root.path()).unwrap();
    let local = Local::new(b"data");
    let a = meta("t", 0, 0);
    let b = RemoteLogSegmentMetadata::builder(
        RemoteLogSegmentId::generate(a.topic_id_partition().clone()),
        10,
        19,
    )
    .build()
    .unwrap();
    rsm.copy_log_segment_data(&a, &local.data()).unwrap();
    rsm.copy_log_segment_data(&b, &local.data()).unwrap();
    // What a crash mid-copy leaves: a temp file next to the final names.
    let log_a = root.path().join(layout::log_key(&a).unwrap());
    let stray = PathBuf::from(format!("{}.tmp-1-0", log_a.display()));
    std::fs::write(&stray, b"partial").unwrap();
    rsm.delete_log_segment_data(&a).unwrap();
    let left = rsm.list_objects().unwrap();
    // b's data, three indexes and manifest.
    assert_eq!(left.len(), 5, "{left:?}");
    let stem_b = layout::segment_stem(&b);
    assert!(left.iter().all(|p| p.to_string_lossy().contains(&stem_b)));
}

#[test]
fn a_failed_copy_leaves_no_file_under_a_final_name() {
    let root = tempfile::tempdir().unwrap();
    let rsm = FsRemoteStorage::new(root.path()).unwrap();
    let local = Local::new(b"data");
    let m = meta("t", 0, 0);
    let mut data = local.data();
    data.time_index = local.dir.path().join("missing.timeindex");
    let err = rsm.copy_log_segment_data(&m, &data).unwrap_err();
    assert!(matches!(err, RemoteStorageError::Io { .. }), "{err:?}");
    // The files before the failure are complete under final names (deleted by the caller's
    // cleanup); no temp file and no partial time index remain.
    let left = rsm.list_objects().unwrap();
    assert!(
        left.iter().all(|p| !p.to_string_lossy().contains(".tmp-")),
        "{left:?}"
    );
    assert!(matches!(
        rsm.fetch_index(&m, IndexType::Timestamp),
        Err(RemoteStorageError::SegmentNotFound { .. })
    ));
    rsm.delete_log_segment_data(&m).unwrap();
    assert!(rsm.list_objects().unwrap().is_empty());
}

#[test]
fn a_root_that_is_a_file_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    let got = FsRemoteStorage::new(&file);
    assert!(
        matches!(&got, Err(RemoteStorageError::StoreUnavailable { bucket, message, .. })
            if bucket == &file.display().to_string()
                && message.contains("it exists and is not a directory (a regular file)")),
        "{got:?}"
    );
    assert_eq!(
        std::fs::read(&file).unwrap(),
        b"x",
        "the file is left as it was"
    );
    // Under a file: nothing can be created there.
    assert!(matches!(
        FsRemoteStorage::new(file.join("sub")),
        Err(RemoteStorageError::StoreUnavailable { .. })
    ));
}

/// `fs:///` would put a partition's `_identity`, `_epoch` and `_head` among the system's own
/// directories: the filesystem root is refused however it is spelled, before anything is
/// written.
#[test]
fn the_filesystem_root_is_refused_however_spelled() {
    let dir = tempfile::tempdir().unwrap();
    let to_root = dir.path().join("to-root");
    std::os::unix::fs::symlink("/", &to_root).unwrap();
    let tmp_up = std::env::temp_dir().join("..");
    let before: Vec<_> = std::fs::read_dir("/")
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    for root in [
        PathBuf::from("/"),
        PathBuf::from("//"),
        PathBuf::from("/./"),
        PathBuf::from("/.."),
        tmp_up.clone(),
        to_root.clone(),
        to_root.join("."),
    ] {
        let got = FsRemoteStorage::new(&root);
        assert!(
            matches!(&got, Err(RemoteStorageError::StoreUnavailable { message, .. })
                if message.contains("it is the filesystem root (/)")),
            "{}: {got:?}",
            root.display()
        );
    }
    let after: Vec<_> = std::fs::read_dir("/")
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(before, after, "nothing was created in /");
    // A directory below the root, through the same symlink, is fine.
    let below = to_root
        .join(dir.path().strip_prefix("/").unwrap())
        .join("remote");
    let rsm = FsRemoteStorage::new(&below).unwrap();
    assert!(rsm.root().is_dir());
}

/// A `..` after a directory that does not exist yet cannot be resolved before it is created
/// (`/missing/..` is the root): refused, and nothing is created.
#[test]
fn a_parent_step_under_a_missing_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("missing").join("..").join("remote");
    let got = FsRemoteStorage::new(&root);
    assert!(
        matches!(&got, Err(RemoteStorageError::StoreUnavailable { message, .. })
            if message.contains("`..` follows") && message.contains("missing")),
        "{got:?}"
    );
    assert!(!dir.path().join("missing").exists());
    // `..` over directories that exist resolves as usual.
    std::fs::create_dir(dir.path().join("there")).unwrap();
    let rsm = FsRemoteStorage::new(dir.path().join("there").join("..").join("remote")).unwrap();
    assert!(rsm.root().is_dir());
    assert!(dir.path().join("remote").is_dir());
}

#[test]
fn a_segment_shrunk_on_disk_reports_the_real_size() {
    // The range is checked against the file and the metadata: bytes the file still has read,
    // and a range reaching into the bytes the truncation cut is Corrupt, not a short read
    // dressed as success (an inclusive end past the segment's end reads to the end only where
    // the segment really ends).
    let root = tempfile::tempdir().unwrap();
    let rsm = FsRemoteStorage::new(root.path()).unwrap();
    let local = Local::new(&[7u8; 100]);
    let tp = TopicIdPartition::new(Uuid::new_v4(), "t", 0);
    let m = RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp), 0, 9)
        .segment_size_in_bytes(100)
        .build()
        .unwrap();
    rsm.copy_log_segment_data(&m, &local.data()).unwrap();
    let log = root.path().join(layout::log_key(&m).unwrap());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(50)
        .unwrap();
    assert_eq!(
        rsm.fetch_log_segment(&m, 40, Some(49)).unwrap(),
        vec![7u8; 10]
    );
    for (start, end) in [
        (40, Some(60)),
        (40, Some(u32::MAX)),
        (0, None),
        (60, Some(70)),
    ] {
        let got = rsm.fetch_log_segment(&m, start, end);
        assert!(
            matches!(&got, Err(RemoteStorageError::Corrupt { location, reason })
                if location.ends_with(&layout::log_key(&m).unwrap())
                    && reason.contains("the object is 50 bytes, its metadata records 100")),
            "{start}..={end:?}: {got:?}"
        );
    }
    // Past the recorded end as well: the truncation still shows.
    assert!(matches!(
        rsm.fetch_log_segment(&m, 40, Some(200)),
        Err(RemoteStorageError::Corrupt { .. })
    ));
}

#[test]
fn a_249_character_topic_copies_fetches_and_deletes() {
    let root = tempfile::tempdir().unwrap();
    let rsm = FsRemoteStorage::new(root.path()).unwrap();
    let local = Local::new(b"hello world");
    for (topic, partition) in [
        ("x".repeat(MAX_TOPIC_NAME_LEN), i32::MAX),
        (
            format!("{}.b", "x".repeat(MAX_TOPIC_NAME_LEN - 2)),
            i32::MAX,
        ),
        ("x".repeat(MAX_TOPIC_NAME_LEN), 0),
    ] {
        let m = meta(&topic, partition, u64::MAX - 9);
        let m = m.with_custom_metadata(rsm.copy_log_segment_data(&m, &local.data()).unwrap());
        assert_eq!(rsm.fetch_log_segment(&m, 6, Some(10)).unwrap(), b"world");
        assert_eq!(rsm.fetch_index(&m, IndexType::Offset).unwrap(), b"idx");
        let dir = layout::partition_dir(m.topic_id_partition()).unwrap();
        assert!(dir.len() < 255, "{dir}");
        assert!(dir.starts_with(&"x".repeat(100)), "readable: {dir}");
        assert!(root.path().join(&dir).is_dir());
        rsm.delete_log_segment_data(&m).unwrap();
        assert!(
            rsm.fetch_log_segment(&m, 0, None)
                .unwrap_err()
                .is_not_found(),
            "{topic}"
        );
    }
    assert!(rsm.list_objects().unwrap().is_empty());
}

//! Metadata rebuilt from a bucket knows only what the backend stored (the transformed size and
//! the backend's own custom metadata); `Transforming::recover_metadata` reads the transform
//! header at the head of the stored `.log` and gives back the metadata the copy returned.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use std::sync::Arc;

use krabka_remote_fs::FsRemoteStorage;
use krabka_remote_storage::{RemoteLogSegmentMetadata, RemoteStorageManager};
use krabka_remote_transform::{TransformConfig, TransformError, Transforming};
use support::*;

/// The metadata as the backend's copy saw it: the stored size, no custom metadata (remote-fs
/// returns none).
fn as_stored(m: &RemoteLogSegmentMetadata, stored: u32) -> RemoteLogSegmentMetadata {
    RemoteLogSegmentMetadata::builder(
        m.remote_log_segment_id().clone(),
        m.start_offset(),
        m.end_offset(),
    )
    .max_timestamp_ms(m.max_timestamp_ms())
    .event_timestamp_ms(m.event_timestamp_ms())
    .segment_leader_epochs(m.segment_leader_epochs().clone())
    .segment_size_in_bytes(u64::from(stored))
    .build()
    .unwrap()
}

#[test]
fn recovered_metadata_equals_what_the_copy_returned() {
    for mode in MODES {
        let root = tempfile::tempdir().unwrap();
        let fs: Arc<dyn RemoteStorageManager> =
            Arc::new(FsRemoteStorage::new(root.path()).unwrap());
        let t = Transforming::new(fs.clone(), config(mode).with_chunk_size(4096).unwrap());
        let s = segment_of(&tp(), None, payload(5, 50_000, true), true);
        let m = copy(&t, &s);
        let stored = t.inspect(&m).unwrap().unwrap().stored_bytes;
        let bare = as_stored(&m, stored);
        assert_eq!(t.recover_metadata(&bare).unwrap(), m, "{mode:?}");
        // Idempotent on metadata that already carries the record.
        assert_eq!(t.recover_metadata(&m).unwrap(), m);
        // Without the key (encrypted modes) the metadata is still recovered; reading then needs
        // the key.
        let keyless = Transforming::new(fs.clone(), TransformConfig::new());
        let recovered = keyless.recover_metadata(&bare).unwrap();
        assert_eq!(recovered, m);
        assert_eq!(t.fetch_log_segment(&recovered, 0, None).unwrap(), s.log);
        // A key that does not open the header is an error, not a silent recovery.
        if !matches!(mode, Mode::Zstd) {
            let impostor = Transforming::new(
                fs.clone(),
                TransformConfig::new().with_encryption(Arc::new(
                    krabka_remote_transform::KeyRing::new(
                        krabka_remote_transform::MasterKey::with_id(key(0x5a).id(), [1; 32]),
                    ),
                )),
            );
            let e = impostor.recover_metadata(&bare).unwrap_err();
            assert!(matches!(
                transform_error(&e, m.remote_log_segment_id()),
                TransformError::WrongKey { .. }
            ));
        }
        // Untransformed segments come back as they are.
        let raw = segment_of(&tp(), None, payload(6, 10_000, false), false);
        let rm = copy(fs.as_ref(), &raw);
        assert_eq!(t.recover_metadata(&rm).unwrap(), rm);
        let tiny = segment_of(&tp(), None, b"short".to_vec(), false);
        let tm = copy(fs.as_ref(), &tiny);
        assert_eq!(t.recover_metadata(&tm).unwrap(), tm);
    }
}

#[test]
fn a_damaged_header_is_not_recovered_and_never_taken_for_an_untransformed_segment() {
    // Byte 0 is the magic, 5 the flags, 30 inside the segment uuid, 60 the chunk size (past the
    // identity), 200 the chunk table.
    for (at, mode) in [
        (0, Mode::Zstd),
        (3, Mode::Encrypted),
        (5, Mode::Both),
        (30, Mode::Encrypted),
        (60, Mode::Zstd),
        (200, Mode::Both),
    ] {
        let store = MapStore::new();
        let t = Transforming::new(store.clone(), config(mode).with_chunk_size(4096).unwrap());
        let s = segment_of(&tp(), None, payload(5, 20_000, true), false);
        let m = copy(&t, &s);
        let stored = t.inspect(&m).unwrap().unwrap().stored_bytes;
        store.mutate(m.remote_log_segment_id(), None, |o| o[at] ^= 1);
        let e = t.recover_metadata(&as_stored(&m, stored)).unwrap_err();
        let found = transform_error(&e, m.remote_log_segment_id());
        assert!(
            matches!(found, TransformError::Corrupt { object, .. } if object == "transform header"),
            "byte {at}, {mode:?}: {found}"
        );
        if at < 4 {
            assert!(found.to_string().contains("bad magic"), "{found}");
        }
    }
}

#[test]
fn key_ids_come_from_the_metadata_and_without_the_key_recovery_still_names_it() {
    let store = MapStore::new();
    let t = Transforming::new(store.clone(), config(Mode::Encrypted));
    let s = segment_of(&tp(), None, payload(7, 10_000, true), false);
    let m = copy(&t, &s);
    let id = key(0x5a).id();
    assert_eq!(t.key_id(&m).unwrap(), Some(id));
    assert!(t.has_key(id).unwrap());
    // The id is in the custom metadata: no request needed, and recovery restores it.
    assert!(m.custom_metadata().unwrap().value().starts_with(b"KTX2"));
    let stored = t.inspect(&m).unwrap().unwrap().stored_bytes;
    let keyless = Transforming::new(store.clone(), TransformConfig::new());
    let recovered = keyless.recover_metadata(&as_stored(&m, stored)).unwrap();
    assert_eq!(keyless.key_id(&recovered).unwrap(), Some(id));
    assert!(!keyless.has_key(id).unwrap());
    // Unencrypted segments have none.
    let z = Transforming::new(store.clone(), config(Mode::Zstd));
    let zm = copy(&z, &segment_of(&tp(), None, payload(8, 5_000, true), false));
    assert_eq!(z.key_id(&zm).unwrap(), None);
    assert!(zm.custom_metadata().unwrap().value().starts_with(b"KTX1"));
}

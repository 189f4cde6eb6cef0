//! Unit tests of the data model.

use uuid::Uuid;

use super::*;
use crate::error::RemoteStorageError;
use RemoteLogSegmentState::*;

fn tp() -> TopicIdPartition {
    TopicIdPartition::new(Uuid::new_v4(), "t", 0)
}

#[test]
fn lifecycle_transitions() {
    let all = [
        CopySegmentStarted,
        CopySegmentFinished,
        DeleteSegmentStarted,
        DeleteSegmentFinished,
    ];
    let allowed = [
        (CopySegmentStarted, CopySegmentFinished),
        (CopySegmentStarted, DeleteSegmentStarted),
        (CopySegmentFinished, DeleteSegmentStarted),
        (DeleteSegmentStarted, DeleteSegmentFinished),
    ];
    for a in all {
        for b in all {
            let expect = a == b || allowed.contains(&(a, b));
            assert_eq!(a.can_transition_to(b), expect, "{a:?} -> {b:?}");
        }
        assert_eq!(RemoteLogSegmentState::from_code(a.code()), Some(a));
    }
    assert_eq!(RemoteLogSegmentState::from_code(9), None);
}

#[test]
fn apply_rejects_invalid_transition_and_foreign_segment() {
    let id = RemoteLogSegmentId::generate(tp());
    let m = RemoteLogSegmentMetadata::builder(id.clone(), 0, 9)
        .build()
        .unwrap();
    let fin = m
        .apply(&RemoteLogSegmentMetadataUpdate::to_state(
            id.clone(),
            CopySegmentFinished,
            1,
        ))
        .unwrap();
    assert_eq!(fin.state(), CopySegmentFinished);
    assert_eq!(fin.broker_id(), 1);
    let back = fin.apply(&RemoteLogSegmentMetadataUpdate::to_state(
        id.clone(),
        CopySegmentStarted,
        1,
    ));
    assert!(matches!(
        back,
        Err(RemoteStorageError::InvalidStateTransition { .. })
    ));
    let other = RemoteLogSegmentId::generate(tp());
    assert!(matches!(
        m.apply(&RemoteLogSegmentMetadataUpdate::to_state(
            other,
            CopySegmentFinished,
            0
        )),
        Err(RemoteStorageError::InvalidArgument { .. })
    ));
}

#[test]
fn metadata_is_validated() {
    let id = RemoteLogSegmentId::generate(tp());
    let reason_of = |r: Result<RemoteLogSegmentMetadata, RemoteStorageError>| match r {
        Err(RemoteStorageError::InvalidMetadata { reason }) => reason,
        other => panic!("expected InvalidMetadata, got {other:?}"),
    };
    let backwards = reason_of(RemoteLogSegmentMetadata::builder(id.clone(), 10, 9).build());
    assert!(
        backwards.contains("end offset 9 is before start offset 10")
            && backwards.contains(&id.to_string()),
        "{backwards}"
    );
    let huge = reason_of(
        RemoteLogSegmentMetadata::builder(id.clone(), 0, 0)
            .segment_size_in_bytes(u64::from(u32::MAX) + 1)
            .build(),
    );
    assert!(huge.contains("does not fit u32"), "{huge}");
    let no_epochs = reason_of(RemoteLogSegmentMetadata::builder(id, 0, 0).build_strict());
    assert!(no_epochs.contains("leader epochs are empty"), "{no_epochs}");
}

#[test]
fn topic_identity_ignores_the_name() {
    let id = Uuid::new_v4();
    assert_eq!(
        TopicIdPartition::new(id, "a", 1),
        TopicIdPartition::new(id, "b", 1)
    );
    assert_ne!(
        TopicIdPartition::new(id, "a", 1),
        TopicIdPartition::new(id, "a", 2)
    );
}

#[test]
fn hostile_topic_names_are_rejected() {
    let long = "x".repeat(250);
    for name in [
        "",
        ".",
        "..",
        "../x",
        "a/b",
        "a\0b",
        "a b",
        "ü",
        long.as_str(),
    ] {
        let got = validate_topic_name(name);
        assert!(
            matches!(&got, Err(RemoteStorageError::InvalidArgument { message })
                if message.starts_with(&format!("topic name {name:?} is invalid"))),
            "{name:?}: {got:?}"
        );
    }
    assert!(validate_topic_name(&"x".repeat(249)).is_ok());
    let negative = TopicIdPartition::new(Uuid::new_v4(), "ok", -1).validate();
    assert!(
        matches!(&negative, Err(RemoteStorageError::InvalidArgument { message })
            if message.contains("partition -1 of topic `ok` is negative")),
        "{negative:?}"
    );
}

#[test]
fn custom_metadata_cap() {
    let cm = CustomMetadata::new(vec![0u8; 129]);
    let over = cm.check_size(DEFAULT_CUSTOM_METADATA_MAX_BYTES);
    assert!(
        matches!(&over, Err(RemoteStorageError::InvalidMetadata { reason })
            if reason.contains("129 bytes exceeds the cap of 128 bytes")),
        "{over:?}"
    );
    assert!(cm.check_size(129).is_ok());
}

#[test]
fn index_suffixes_match_kafka() {
    let suffixes: Vec<_> = IndexType::ALL.iter().map(|t| t.suffix()).collect();
    assert_eq!(
        suffixes,
        [
            ".index",
            ".timeindex",
            ".snapshot",
            ".txnindex",
            ".leader-epoch-checkpoint"
        ]
    );
}

use super::*;

fn tp() -> TopicIdPartition {
    TopicIdPartition::new(Uuid::from_u128(7), "orders", 3)
}

fn epoch(n: u64, start: u64) -> EpochRecord {
    EpochRecord::new(
        n,
        start,
        Uuid::from_u128(u128::from(n)),
        1000,
        format!("host:{n}"),
    )
}

#[test]
fn records_round_trip() {
    let id = IdentityRecord::new(tp(), 42);
    assert_eq!(IdentityRecord::decode(&id.encode(), "k").unwrap(), id);
    let e = epoch(5, 99);
    assert_eq!(EpochRecord::decode(&e.encode(), "k").unwrap(), e);
}

#[test]
fn every_flipped_byte_and_truncation_is_a_corrupt_error_naming_the_key() {
    for bytes in [
        IdentityRecord::new(tp(), 42).encode(),
        epoch(2, 10).encode(),
    ] {
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x20;
            for bad in [&b[..], &bytes[..i]] {
                let decoded = (
                    IdentityRecord::decode(bad, "key-x"),
                    EpochRecord::decode(bad, "key-x"),
                );
                for err in [decoded.0.err(), decoded.1.err()] {
                    match err {
                        Some(RemoteStorageError::Corrupt { location, .. }) => {
                            assert_eq!(location, "key-x");
                        }
                        other => panic!("byte {i}: {other:?}"),
                    }
                }
            }
        }
    }
}

#[test]
fn a_record_of_one_kind_is_not_read_as_the_other() {
    let id = IdentityRecord::new(tp(), 42).encode();
    assert!(matches!(
        EpochRecord::decode(&id, "k"),
        Err(RemoteStorageError::Corrupt { .. })
    ));
    let e = epoch(1, 1).encode();
    assert!(matches!(
        IdentityRecord::decode(&e, "k"),
        Err(RemoteStorageError::Corrupt { .. })
    ));
}

#[test]
fn epoch_zero_and_huge_records_are_refused() {
    let zero = EpochRecord {
        epoch: 0,
        ..epoch(1, 1)
    };
    assert!(matches!(
        EpochRecord::decode(&zero.encode(), "k"),
        Err(RemoteStorageError::Corrupt { .. })
    ));
    let huge = vec![0u8; MAX_RECORD_LEN + 1];
    assert!(matches!(
        EpochRecord::decode(&huge, "k"),
        Err(RemoteStorageError::Corrupt { .. })
    ));
}

#[test]
fn a_long_claimant_is_cut_at_a_character_boundary() {
    let e = EpochRecord::new(1, 1, Uuid::nil(), 0, "é".repeat(MAX_CLAIMANT_LEN));
    assert!(e.claimant.len() <= MAX_CLAIMANT_LEN);
    assert_eq!(EpochRecord::decode(&e.encode(), "k").unwrap(), e);
}

#[test]
fn a_later_epoch_supersedes_copies_holding_seqs_at_or_after_its_start() {
    let epochs = [epoch(1, 1), epoch(2, 501), epoch(3, 801)];
    // Epoch 1's copy of 1..=500 belongs to the lineage; of 401..=600 is superseded by epoch 2.
    assert_eq!(superseding_epoch(1, 500, &epochs), None);
    assert_eq!(superseding_epoch(1, 600, &epochs).map(|e| e.epoch), Some(2));
    assert_eq!(superseding_epoch(1, 900, &epochs).map(|e| e.epoch), Some(2));
    assert_eq!(superseding_epoch(2, 800, &epochs), None);
    assert_eq!(superseding_epoch(2, 801, &epochs).map(|e| e.epoch), Some(3));
    assert_eq!(superseding_epoch(3, u64::MAX, &epochs), None);
    // Copies without a known writer epoch (0) are left to copy order.
    assert_eq!(superseding_epoch(0, 900, &epochs), None);
}

#[test]
fn epoch_names_parse_only_as_written() {
    let key = layout::epoch_key("d", 12);
    let name = key.strip_prefix("d/").unwrap();
    assert_eq!(layout::parse_epoch_name(name), Some(12));
    assert!(layout::is_ownership_name(name));
    assert!(layout::is_ownership_name(layout::IDENTITY_NAME));
    assert_eq!(layout::parse_epoch_name("_epoch-12"), None);
    assert_eq!(
        layout::parse_epoch_name("_epoch-0000000000000000001x"),
        None
    );
    assert!(!layout::is_ownership_name("00000000000000000001-x.log"));
}

#[test]
fn a_partition_in_another_segment_format_is_named_and_refused() {
    let id = IdentityRecord::new(tp(), 42);
    assert_eq!(id.log_format, LOG_FORMAT_KAFKA_BATCHES);
    assert!(id.check_format("d/_identity").is_ok());
    for (format, words) in [
        (LOG_FORMAT_KRABKA_FRAMES, "old per-record frames"),
        (9, "segment format 9"),
    ] {
        let old = IdentityRecord {
            log_format: format,
            ..id.clone()
        };
        let decoded = IdentityRecord::decode(&old.encode(), "d/_identity").unwrap();
        let err = decoded.check_format("d/_identity").unwrap_err();
        assert!(
            matches!(&err, RemoteStorageError::UnsupportedFormat { location, format }
                if location == "d/_identity" && format.contains(words)),
            "{err:?}"
        );
    }
}

//! Property tests: random plaintexts (text-like and random), chunk sizes and fetch-run caps,
//! and random inclusive ranges, always equal to the plaintext slice.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use krabka_remote_storage::{RemoteStorageError, RemoteStorageManager};
use krabka_remote_transform::{ChunkCompression, TransformConfig, Transforming};
use proptest::prelude::*;
use support::*;

fn mode_config(mode: u8) -> TransformConfig {
    match mode {
        0 => config(Mode::Zstd),
        1 => config(Mode::Encrypted),
        2 => config(Mode::Both),
        // Zstd at a high level, to vary the frames.
        _ => TransformConfig::new().with_compression(ChunkCompression::Zstd { level: 19 }),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_ranges_equal_the_plaintext(
        mode in 0u8..4,
        len in 0usize..60_000,
        text in any::<bool>(),
        seed in any::<u64>(),
        chunk_kib in 1u32..9,
        run in 1u32..40_000,
        cache in any::<bool>(),
        ranges in prop::collection::vec((any::<u32>(), any::<u32>(), any::<bool>()), 1..24),
    ) {
        let store = MapStore::new();
        let config = mode_config(mode)
            .with_chunk_size(chunk_kib * 1024)
            .unwrap()
            .with_fetch_run_bytes(run)
            .with_copy_threads(1 + (seed % 3) as usize)
            .with_header_cache_entries(usize::from(cache));
        let writer = Transforming::new(store.clone(), config.clone());
        let s = segment_of(&tp(), None, payload(seed, len, text), false);
        let m = copy(&writer, &s);
        let reader = Transforming::new(store.clone(), config);
        for (a, b, open) in ranges {
            if len == 0 {
                prop_assert_eq!(reader.fetch_log_segment(&m, 0, None).unwrap(), Vec::<u8>::new());
                break;
            }
            let (a, b) = (a % len as u32, b % len as u32);
            let (start, end) = (a.min(b), a.max(b));
            if open {
                let got = reader.fetch_log_segment(&m, start, None).unwrap();
                prop_assert_eq!(&got[..], &s.log[start as usize..]);
            } else {
                let got = reader.fetch_log_segment(&m, start, Some(end)).unwrap();
                prop_assert_eq!(&got[..], &s.log[start as usize..=end as usize]);
            }
        }
        // An inclusive end past the last byte reads to the end, as on an untransformed store;
        // a start past the end stays InvalidArgument.
        if len > 0 {
            let start = (seed % len as u64) as u32;
            let over = reader.fetch_log_segment(&m, start, Some(len as u32)).unwrap();
            prop_assert_eq!(&over[..], &s.log[start as usize..]);
            let far = reader.fetch_log_segment(&m, start, Some(u32::MAX)).unwrap();
            prop_assert_eq!(&far[..], &s.log[start as usize..]);
        }
        let past = reader.fetch_log_segment(&m, len as u32, Some(len as u32));
        let invalid = matches!(past, Err(RemoteStorageError::InvalidArgument { .. }));
        prop_assert!(invalid, "{:?}", past);
    }
}

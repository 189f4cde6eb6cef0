//! Unit tests of the read path.
use std::fs;
use std::path::Path;

use krabka_protocol::Message;

use super::*;
use crate::{Log, Options};

/// The thread's read calls and bytes read so far (`/proc/thread-self/io`).
fn thread_reads() -> (u64, u64) {
    let io = fs::read_to_string("/proc/thread-self/io").unwrap();
    let field = |name: &str| -> u64 {
        let line = io.lines().find(|l| l.starts_with(name)).unwrap();
        line[name.len()..].trim().parse().unwrap()
    };
    (field("syscr:"), field("rchar:"))
}

/// A log of 4 MiB segments of batches of 100 records of `len`-byte values, seqs in
/// order; the value of seq `s` starts with its bytes.
fn batched_log(dir: &Path, batches: u64, len: usize) -> Log {
    let opts = Options {
        max_bytes: 4 << 20,
        ..Options::default()
    };
    let log = Log::open(dir, opts).unwrap();
    for b in 0..batches {
        let msgs: Vec<Message> = (0..100u64)
            .map(|i| {
                let mut v = (b * 100 + i + 1).to_be_bytes().to_vec();
                v.resize(len, 7);
                Message::new(v)
            })
            .collect();
        log.append_batch(&msgs).unwrap();
    }
    log
}

#[test]
fn a_sequential_reader_reads_each_byte_once_in_about_one_read_a_call() {
    let dir = tempfile::tempdir().unwrap();
    // 100 batches of about 100 KiB: two closed segments and the active one.
    let log = batched_log(dir.path(), 100, 1000);
    let file_bytes: u64 = log.segments().iter().map(|s| s.size).sum();
    assert!(log.segments().len() >= 3);
    let (calls_before, bytes_before) = thread_reads();
    let (mut seq, mut calls) = (1u64, 0u64);
    // 1,050 records a call: every call but the last stops inside a batch.
    while seq <= log.last_seq() {
        let got = log.read(seq, 1050).unwrap();
        assert!(!got.is_empty(), "nothing read at seq {seq}");
        for (i, r) in got.iter().enumerate() {
            assert_eq!(r.seq, seq + i as u64);
            assert_eq!(r.message.value[..8], r.seq.to_be_bytes());
        }
        seq += got.len() as u64;
        calls += 1;
    }
    assert_eq!(seq, 10_001);
    let (calls_after, bytes_after) = thread_reads();
    // Less what reading the figures itself costs.
    let (calls_again, bytes_again) = thread_reads();
    let (own_calls, own_bytes) = (calls_again - calls_after, bytes_again - bytes_after);
    let read_calls = calls_after - calls_before - own_calls;
    let read_bytes = bytes_after - bytes_before - own_bytes;
    // No byte is read twice (a batch cut by a chunk, or one a call stopped inside); the
    // figures' own size may differ by a digit or two between readings.
    assert!(
        read_bytes.abs_diff(file_bytes) < 16,
        "{read_bytes} bytes read of {file_bytes}, in {read_calls} read calls"
    );
    // One read a call, and one more where a call crosses into the next segment.
    assert!(
        read_calls <= calls + 2,
        "{read_calls} read calls for {calls} reads"
    );
}

#[test]
fn a_read_that_does_not_continue_the_last_one_reads_from_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let log = batched_log(dir.path(), 20, 100);
    // Leaves the rest of the batch of seqs 1..=100 over.
    assert_eq!(log.read(1, 50).unwrap().len(), 50);
    // Not where it stopped: the leftover bytes are not used, and the records are right.
    let got = log.read(1_234, 3).unwrap();
    let seqs: Vec<u64> = got.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [1_234, 1_235, 1_236]);
    assert_eq!(got[0].message.value[..8], 1_234u64.to_be_bytes());
    // Going back is not continuing either.
    let got = log.read(10, 2).unwrap();
    assert_eq!(got[1].message.value[..8], 11u64.to_be_bytes());
    // Continuing where the last read stopped uses what it left, with the same records.
    let got = log.read(12, 200).unwrap();
    assert_eq!(got.len(), 200);
    assert!(
        got.iter()
            .enumerate()
            .all(|(i, r)| r.seq == 12 + i as u64 && r.message.value[..8] == r.seq.to_be_bytes())
    );
}

/// The segments whose descriptors are open, by the first byte of their files.
fn open_in(cache: &FdCache) -> Vec<u8> {
    let mut v: Vec<u8> = cache
        .clock
        .lock()
        .open_files()
        .iter()
        .map(|f| fs::read(&f.log_path).unwrap()[0])
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn fd_cache_keeps_at_most_cap_files_and_closes_one_not_used_since_the_hand_passed() {
    let dir = tempfile::tempdir().unwrap();
    let segs: Vec<Arc<SegFile>> = (1..=5u8)
        .map(|b| {
            let seg = crate::layout::seg_file(dir.path(), u64::from(b));
            fs::write(&seg.log_path, [b]).unwrap();
            seg
        })
        .collect();
    let cache = FdCache::new(3);
    for seg in &segs[..3] {
        cache.get(seg).unwrap();
    }
    // 1 is used again, so 2 is the first one not used since it was opened when 4 comes in.
    let one = cache.get(&segs[0]).unwrap();
    cache.get(&segs[3]).unwrap();
    assert_eq!(cache.len(), 3);
    assert_eq!(open_in(&cache), vec![1, 3, 4]);
    assert!(
        segs[1].read_fd.file.read().is_none(),
        "2's descriptor closed"
    );
    // A hit returns the same open file.
    assert!(Arc::ptr_eq(&one, &cache.get(&segs[0]).unwrap()));
    // 1 was used again since the hand passed it, 3 was not: 3 goes for 5.
    cache.get(&segs[4]).unwrap();
    assert_eq!(open_in(&cache), vec![1, 4, 5]);
    cache.remove(&segs[0]);
    assert_eq!(cache.len(), 2);
    assert!(
        segs[0].read_fd.file.read().is_none(),
        "1's descriptor closed"
    );
    // The file handed out before stays readable by its holder.
    let mut byte = [0u8; 1];
    std::os::unix::fs::FileExt::read_exact_at(&*one, &mut byte, 0).unwrap();
    assert_eq!(byte, [1]);
    // A missing file is an I/O error, and nothing is cached for it.
    let missing = crate::layout::seg_file(dir.path(), 9);
    assert!(matches!(cache.get(&missing), Err(Error::Io { .. })));
    assert_eq!(cache.len(), 2);
}

/// Many readers of more segments than the cache holds, each read checked: the bound holds
/// whatever the interleaving, and every read gets its segment's own file.
#[test]
fn fd_cache_stays_within_its_cap_under_concurrent_readers_of_more_segments() {
    let dir = tempfile::tempdir().unwrap();
    let segs: Vec<Arc<SegFile>> = (1..=12u8)
        .map(|b| {
            let seg = crate::layout::seg_file(dir.path(), u64::from(b));
            fs::write(&seg.log_path, [b]).unwrap();
            seg
        })
        .collect();
    let cache = FdCache::new(4);
    std::thread::scope(|s| {
        for t in 0..4usize {
            let (cache, segs) = (&cache, &segs);
            s.spawn(move || {
                for i in 0..2_000usize {
                    let k = (i * 7 + t * 5) % segs.len();
                    let f = cache.get(&segs[k]).unwrap();
                    let mut byte = [0u8; 1];
                    std::os::unix::fs::FileExt::read_exact_at(&*f, &mut byte, 0).unwrap();
                    assert_eq!(usize::from(byte[0]), k + 1);
                }
            });
        }
    });
    assert!(cache.len() <= 4, "{} open", cache.len());
    let held = segs
        .iter()
        .filter(|s| s.read_fd.file.read().is_some())
        .count();
    assert_eq!(
        held,
        cache.len(),
        "slots holding a descriptor = the clock's"
    );
}

/// A point read of a log of like-sized single appends reads one span, from the index entry at
/// or before the record to the end of the record's batch (the least a reader stepping from
/// the index reads), in one read call: no byte past the record's batch, none twice.
#[test]
fn a_point_read_of_like_sized_appends_reads_from_its_index_entry_to_its_batch_end() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        max_bytes: 256 << 10,
        ..Options::default()
    };
    let log = Log::open(dir.path(), opts).unwrap();
    for i in 1..=6_000u64 {
        let mut v = i.to_be_bytes().to_vec();
        v.resize(300, 7);
        log.append(&Message::new(v).with_timestamp(i as i64))
            .unwrap();
    }
    // Every segment closed, each with its `.index`.
    log.roll().unwrap();
    let segments: Vec<_> = log.segments().into_iter().filter(|s| !s.active).collect();
    assert!(segments.len() >= 3, "{} closed segments", segments.len());
    let batch = segments[0].size / (segments[0].last_seq + 1 - segments[0].base_seq);
    let (mut calls, mut bytes, mut expected, mut reads) = (0u64, 0u64, 0u64, 0u64);
    for seg in &segments {
        let index = fs::read(&seg.index_path).unwrap();
        // Opens the file (a read of the descriptor cache's miss costs no data read, but
        // keeps the figures below to reads of records).
        log.read(seg.base_seq, 1).unwrap();
        for seq in (seg.base_seq..=seg.last_seq).step_by(7) {
            let floor = crate::index::lookup_position(&index, seq).unwrap();
            let end = (seq - seg.base_seq + 1) * batch;
            let (c0, b0) = thread_reads();
            let got = log.read(seq, 1).unwrap();
            let (c1, b1) = thread_reads();
            let (c2, b2) = thread_reads();
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].message.value[..8], seq.to_be_bytes());
            // Less what reading the figures costs.
            calls += (c1 - c0) - (c2 - c1);
            bytes += (b1 - b0).saturating_sub(b2 - b1);
            expected += end - floor;
            reads += 1;
        }
    }
    assert_eq!(calls, reads, "read calls for {reads} point reads");
    // The figures' own size may differ by a digit between readings.
    assert!(
        bytes.abs_diff(expected) <= 2 * reads,
        "{bytes} bytes read, the spans hold {expected}"
    );
}

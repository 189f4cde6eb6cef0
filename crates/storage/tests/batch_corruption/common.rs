//! The log every case damages, where its batches are, and the checks every case shares: reads
//! through `Log::read` and `LogReader::poll` that must be exact up to the damage and then fail
//! naming the file and the byte.

use std::fs;
use std::ops::{Range, RangeInclusive};
use std::path::{Path, PathBuf};

use krabka_protocol::Message;
use krabka_storage::segment::{self, QUARANTINE_DIR};
use krabka_storage::view::LogView;
use krabka_storage::{Compression, Error, Log, Options, Record, RecoveryMode, SyncPolicy};

/// The last seq of the log [`build`] writes.
pub const LAST: u64 = 406;

pub fn opts(mode: RecoveryMode) -> Options {
    Options {
        max_bytes: 1 << 20,
        sync: SyncPolicy::Never,
        index_interval_bytes: 512,
        recovery: mode,
        ..Options::default()
    }
}

/// The message of `seq`: a key, a timestamp that is never 0, and a header on every third.
pub fn msg(seq: u64) -> Message {
    let m = Message::new(format!("value-{seq}-{}", "x".repeat((seq % 13) as usize)))
        .with_key(format!("k{seq}"))
        .with_timestamp(1_000_000 + seq as i64 * 7);
    if seq.is_multiple_of(3) {
        m.with_header("h", format!("{seq}"))
    } else {
        m
    }
}

pub fn msgs(seqs: RangeInclusive<u64>) -> Vec<Message> {
    seqs.map(msg).collect()
}

/// One batch of a segment file, as an intact file holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub path: PathBuf,
    pub position: u64,
    pub len: u64,
    pub first: u64,
    pub last: u64,
}

impl Batch {
    pub fn end(&self) -> u64 {
        self.position + self.len
    }

    pub fn seqs(&self) -> RangeInclusive<u64> {
        self.first..=self.last
    }

    pub fn range(&self) -> Range<usize> {
        self.position as usize..self.end() as usize
    }
}

/// The batches of the intact segment file at `path`, walked by their headers.
pub fn batches(path: &Path) -> Vec<Batch> {
    let bytes = fs::read(path).unwrap();
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < bytes.len() {
        if bytes[pos..].iter().all(|&b| b == 0) {
            // The preallocated space of an active segment (`Options::preallocate`).
            break;
        }
        let (first, last, len) = segment::peek_batch(&bytes[pos..]).expect("an intact batch");
        out.push(Batch {
            path: path.to_path_buf(),
            position: pos as u64,
            len: len as u64,
            first,
            last,
        });
        pos += len;
    }
    out
}

/// The log every case starts from, still open (so reads meet damage done under it), and its
/// two segments' batches:
///
/// - closed segment 1: batches of seqs 1, 2, 3..=102 (append_batch of 100), 103,
///   104..=203 (100), 204;
/// - active segment 205: batches of seqs 205, 206..=305 (100), 306, 307..=406 (100).
pub struct Built {
    pub log: Log,
    pub closed: Vec<Batch>,
    pub active: Vec<Batch>,
}

pub fn build(dir: &Path) -> Built {
    build_with(dir, Compression::None)
}

/// [`build`] with every batch compressed with `compression`.
pub fn build_with(dir: &Path, compression: Compression) -> Built {
    let opts = Options {
        compression,
        ..opts(RecoveryMode::TolerateTornTail)
    };
    let log = Log::open(dir, opts).unwrap();
    assert_eq!(log.append(&msg(1)).unwrap(), 1);
    assert_eq!(log.append(&msg(2)).unwrap(), 2);
    assert_eq!(log.append_batch(&msgs(3..=102)).unwrap(), 3..=102);
    assert_eq!(log.append(&msg(103)).unwrap(), 103);
    assert_eq!(log.append_batch(&msgs(104..=203)).unwrap(), 104..=203);
    assert_eq!(log.append(&msg(204)).unwrap(), 204);
    log.roll().unwrap();
    assert_eq!(log.append(&msg(205)).unwrap(), 205);
    assert_eq!(log.append_batch(&msgs(206..=305)).unwrap(), 206..=305);
    assert_eq!(log.append(&msg(306)).unwrap(), 306);
    assert_eq!(log.append_batch(&msgs(307..=406)).unwrap(), 307..=LAST);
    let segs = log.segments();
    assert_eq!(segs.len(), 2, "{segs:?}");
    let closed = batches(&segs[0].log_path);
    let active = batches(&segs[1].log_path);
    let shape = |b: &[Batch]| b.iter().map(|b| (b.first, b.last)).collect::<Vec<_>>();
    assert_eq!(
        shape(&closed),
        [(1, 1), (2, 2), (3, 102), (103, 103), (104, 203), (204, 204)]
    );
    assert_eq!(
        shape(&active),
        [(205, 205), (206, 305), (306, 306), (307, 406)]
    );
    Built {
        log,
        closed,
        active,
    }
}

/// Asserts that `records` are exactly the records of `seqs`, in order.
#[track_caller]
pub fn assert_exact(records: &[Record], seqs: RangeInclusive<u64>, case: &str) {
    let got: Vec<u64> = records.iter().map(|r| r.seq).collect();
    let want: Vec<u64> = seqs.collect();
    assert_eq!(got, want, "{case}: seqs");
    for r in records {
        assert_eq!(r.message, msg(r.seq), "{case}: record {}", r.seq);
    }
}

/// Asserts that `e`'s message names `path` and `byte {position}`.
#[track_caller]
pub fn assert_names(e: &Error, path: &Path, position: u64, case: &str) {
    let text = e.to_string();
    assert!(
        text.contains(&path.display().to_string()) && text.contains(&format!("byte {position}")),
        "{case}: {text} does not name {} and byte {position}",
        path.display()
    );
}

/// Reads from `from` on in reads of 64 records until a read fails or returns nothing: the
/// records, and the failure.
pub fn read_on(log: &Log, from: u64) -> (Vec<Record>, Option<Error>) {
    let mut out = Vec::new();
    let mut seq = from;
    for _ in 0..1000 {
        match log.read(seq, 64) {
            Ok(r) if r.is_empty() => return (out, None),
            Ok(r) => {
                seq = r.last().unwrap().seq + 1;
                out.extend(r);
            }
            Err(e) => return (out, Some(e)),
        }
    }
    panic!("read from {from} does not end");
}

/// [`read_on`] through a read-only view of `dir`.
pub fn poll_on(dir: &Path, from: u64) -> (Vec<Record>, Option<Error>, Option<u64>) {
    let mut reader = LogView::new(dir).reader(from);
    let mut out = Vec::new();
    for _ in 0..1000 {
        match reader.poll(64) {
            Ok(r) if r.is_empty() => {
                let tail = reader.incomplete_tail().map(|t| t.position);
                return (out, None, tail);
            }
            Ok(r) => out.extend(r),
            Err(e) => return (out, Some(e), None),
        }
    }
    panic!("poll from {from} does not end");
}

/// Reads every seq of `seqs` one at a time (a point read each, from any index entry): each is
/// exactly its record, or a typed error naming `path`. Returns the seqs that read.
pub fn point_reads(log: &Log, seqs: RangeInclusive<u64>, path: &Path, case: &str) -> Vec<u64> {
    let mut ok = Vec::new();
    for seq in seqs {
        match log.read(seq, 1) {
            Ok(r) => {
                assert_eq!(r.len(), 1, "{case}: read {seq}");
                assert_eq!((r[0].seq, &r[0].message), (seq, &msg(seq)), "{case}");
                ok.push(seq);
            }
            Err(e @ Error::Corrupt { .. }) => {
                assert!(
                    e.to_string().contains(&path.display().to_string()),
                    "{case}: read {seq}: {e}"
                );
            }
            Err(e) => panic!("{case}: read {seq}: {e}"),
        }
    }
    ok
}

/// Copies the regular files of `from` into a new directory.
pub fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// Every file of `dir` (quarantine included) with its bytes, sorted.
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                let b = fs::read(&p).unwrap();
                out.push((p, b));
            }
        }
    }
    out.sort();
    out
}

/// Whether `dir` has a quarantine directory.
pub fn has_quarantine(dir: &Path) -> bool {
    dir.join(QUARANTINE_DIR).exists()
}

/// Recomputes the CRC-32C of the batch at the start of `batch` (over bytes 21 to its end).
pub fn recrc(batch: &mut [u8]) {
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// Rewrites the batch `b` of its file with `edit` applied to its bytes; `edit` may change its
/// length (the batchLength field is set to match) and the CRC is recomputed.
pub fn rewrite_batch(b: &Batch, edit: impl FnOnce(&mut Vec<u8>)) {
    let mut file = fs::read(&b.path).unwrap();
    let mut batch = file[b.range()].to_vec();
    edit(&mut batch);
    let len = i32::try_from(batch.len() - 12).unwrap();
    batch[8..12].copy_from_slice(&len.to_be_bytes());
    recrc(&mut batch);
    file.splice(b.range(), batch);
    fs::write(&b.path, file).unwrap();
}

/// Reads the records of seqs `1..=LAST` of an opened log: each reads exactly, or is in a hole
/// (`Error::Quarantined`); returns the seqs in holes.
pub fn holes_of(log: &Log, case: &str) -> Vec<u64> {
    let mut lost = Vec::new();
    let mut seq = 1;
    while seq <= LAST.min(log.last_seq()) {
        match log.read(seq, 64) {
            Ok(r) => {
                assert!(!r.is_empty(), "{case}: empty read at {seq}");
                for (i, rec) in r.iter().enumerate() {
                    assert_eq!(rec.seq, seq + i as u64, "{case}");
                    assert_eq!(
                        rec.message,
                        msg(rec.seq),
                        "{case}: record {}: {}",
                        rec.seq,
                        log.recovery_report()
                    );
                }
                seq += r.len() as u64;
            }
            Err(Error::Quarantined {
                first_seq,
                last_seq,
                ..
            }) => {
                assert_eq!(first_seq, seq, "{case}");
                lost.extend(first_seq..=last_seq);
                seq = last_seq + 1;
            }
            Err(e) => panic!("{case}: read {seq}: {e}"),
        }
    }
    lost
}

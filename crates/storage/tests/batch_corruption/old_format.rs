//! Segments in krabka's old per-record frame format (written by hand: little-endian `u32`
//! length of what follows the CRC, CRC-32 of those bytes, little-endian `u64` seq, the message
//! as `Message::encode` writes it): every open refuses them with `Error::OldFormat` naming the
//! file, in every recovery mode, and changes nothing (no quarantine, no cut, no index).

use std::fs;
use std::path::{Path, PathBuf};

use krabka_storage::segment::{self, QUARANTINE_DIR, verify_segment};
use krabka_storage::view::LogView;
use krabka_storage::{Error, LOCK_FILE_NAME, Log};

use super::common::{msg, opts, snapshot};
use super::engine::MODES;

/// One frame of the old format.
fn old_frame(seq: u64) -> Vec<u8> {
    let mut body = seq.to_le_bytes().to_vec();
    msg(seq).encode(&mut body);
    let mut out = (body.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Writes the segment file of seqs `seqs` in the old format (or, `new`, in batches of one);
/// returns its path.
fn segment_file(dir: &Path, seqs: std::ops::RangeInclusive<u64>, new: bool) -> PathBuf {
    let path = dir.join(segment::segment_file_name(*seqs.start(), "log"));
    let mut bytes = Vec::new();
    for seq in seqs {
        if new {
            segment::encode_batch_of_one(seq, &msg(seq), &mut bytes).unwrap();
        } else {
            bytes.extend(old_frame(seq));
        }
    }
    fs::write(&path, bytes).unwrap();
    path
}

/// Every file but the lock file that open creates.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    snapshot(dir)
        .into_iter()
        .filter(|(p, _)| !p.ends_with(LOCK_FILE_NAME))
        .collect()
}

/// A directory made by `make`, which returns the old-format file an open must name.
fn check(what: &str, make: impl Fn(&Path) -> PathBuf) {
    for mode in MODES {
        let case = format!("{what}, open {mode:?}");
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let old = make(dir);
        let before = files(dir);
        match Log::open(dir, opts(mode)) {
            Err(e @ Error::OldFormat { .. }) => {
                assert!(
                    e.to_string().contains(&old.display().to_string()),
                    "{case}: {e}"
                );
                let Error::OldFormat { path } = e else {
                    unreachable!()
                };
                assert_eq!(path, old, "{case}");
            }
            other => panic!(
                "{case}: {:?}",
                other.map(|l| l.recovery_report().to_string())
            ),
        }
        assert_eq!(files(dir), before, "{case}: files changed");
        assert!(!dir.join(QUARANTINE_DIR).exists(), "{case}");
    }
    // Verification and a read-only view name the file too.
    let tmp = tempfile::tempdir().unwrap();
    let old = make(tmp.path());
    match verify_segment(&old) {
        Err(Error::OldFormat { path }) => assert_eq!(path, old, "{what}"),
        other => panic!("{what}: verify: {other:?}"),
    }
    // The read-only reader decodes the old format: every record it hands out is the one
    // written under that seq, and it stops at damage naming the file, both formats and the byte.
    let before = files(tmp.path());
    let mut reader = LogView::new(tmp.path()).reader(1);
    let mut got = Vec::new();
    let end = loop {
        match reader.poll(7) {
            Ok(r) if r.is_empty() => break None,
            Ok(r) => got.extend(r),
            Err(e) => break Some(e),
        }
        assert!(got.len() <= 20, "{what}: read past the log");
    };
    for r in &got {
        assert_eq!(r.message, msg(r.seq), "{what}: seq {}", r.seq);
    }
    assert_eq!(
        got.iter().map(|r| r.seq).collect::<Vec<_>>(),
        (1..=got.len() as u64).collect::<Vec<_>>(),
        "{what}"
    );
    match end {
        None => {}
        Some(e @ Error::OldFormatDamaged { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains(&old.display().to_string())
                    && text.contains(segment::OLD_FORMAT_NAME)
                    && text.contains(segment::FORMAT_NAME),
                "{what}: {text}"
            );
        }
        Some(other) => panic!("{what}: poll: {other:?}"),
    }
    assert_eq!(files(tmp.path()), before, "{what}: the read changed files");
}

#[test]
fn an_old_format_segment_is_refused_by_every_open_and_left_unchanged() {
    check("one old segment", |dir| segment_file(dir, 1..=20, false));
}

#[test]
fn old_format_closed_and_active_segments_are_refused_naming_the_first() {
    check("two old segments", |dir| {
        let first = segment_file(dir, 1..=10, false);
        segment_file(dir, 11..=20, false);
        first
    });
}

#[test]
fn an_old_format_segment_with_a_torn_last_frame_is_refused_not_cut() {
    check("one old segment, torn", |dir| {
        let path = segment_file(dir, 1..=20, false);
        let len = fs::metadata(&path).unwrap().len();
        krabka_storage::testkit::set_len(&path, len - 5).unwrap();
        path
    });
}

#[test]
fn an_old_format_segment_among_new_ones_is_refused() {
    check("an old closed segment before a new active one", |dir| {
        let old = segment_file(dir, 1..=10, false);
        segment_file(dir, 11..=20, true);
        old
    });
    check("a new closed segment before an old active one", |dir| {
        segment_file(dir, 1..=10, true);
        segment_file(dir, 11..=20, false)
    });
}

/// An old-format segment whose first frame is damaged (a flipped byte of its message, so its
/// CRC-32 fails) and whose 19 other batches are intact: still recognised (its length, message
/// layout and the next batch say so), never cut as a torn tail at byte 0.
#[test]
fn an_old_format_segment_with_a_damaged_first_frame_is_refused_not_cut() {
    check("one old segment, first frame damaged", |dir| {
        let path = segment_file(dir, 1..=20, false);
        krabka_storage::testkit::xor_byte(&path, 30, 0x5a).unwrap();
        path
    });
}

/// One bit flipped in each field of an old-format segment's first frame (length, CRC, seq,
/// version, flags, timestamp, key length, key, value length, value, header count): the file is
/// recognised as the old format whatever that field now says, by every open (which changes
/// nothing), by verification and by the reader; both alone and with 19 batches after it.
#[test]
fn a_bit_flipped_in_any_field_of_an_old_first_frame_leaves_it_recognised() {
    // Offsets in the first frame of `old_frame(1)`: msg(1) has a key `k1`, no header.
    let fields = [
        ("length", 0),
        ("length, high byte", 3),
        ("CRC", 5),
        ("seq", 8),
        ("seq, high byte", 15),
        ("version", 16),
        ("flags", 17),
        ("timestamp", 20),
        ("key length", 26),
        ("key", 30),
        ("value length", 32),
        ("value", 37),
    ];
    for (field, at) in fields {
        for (batches, last) in [("one batch", 1), ("twenty batches", 20)] {
            for bit in [0u8, 7] {
                check(
                    &format!("{field} (byte {at}, bit {bit}), {batches}"),
                    |dir| {
                        let path = segment_file(dir, 1..=last, false);
                        krabka_storage::testkit::xor_byte(&path, at, 1 << bit).unwrap();
                        path
                    },
                );
            }
        }
    }
}

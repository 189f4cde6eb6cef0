//! The clean-shutdown marker: what lets an open skip the scan of the active segment after a
//! clean [`Log::close`](crate::Log::close), as Kafka skips log recovery after a clean shutdown.
//!
//! `close` syncs every record, writes the active segment's `.index` and `.timeindex` (synced),
//! stamps the segment file's modification time and syncs it, and then writes this marker
//! (synced, renamed into place, directory synced), and last sets the directory's modification
//! time to the one the marker names (a second in the past) and syncs it. The marker names the
//! active segment's base seq, its exact length and last seq, the file's inode and modification
//! time as `close` left them, every closed segment's seqs, length, largest timestamp and index
//! size, and the directory's modification time; it ends with a CRC.
//!
//! Open trusts it only when it is intact, the recovery mode is not
//! [`Repair`](crate::RecoveryMode::Repair), and it describes the segment files exactly (see
//! `recovery::trusted`). Anything else (a missing, damaged or stale marker) means the full
//! recovery, as without a marker; open changes nothing, and the first write removes such a
//! marker. A write to the file after `close` changes its modification time, and a created,
//! removed or renamed entry the directory's: the stamps are set a second in the past, so the
//! kernel's clock at any later change is past them, whatever the granularity of file times.
//!
//! A trusted marker stays until the log first changes its files: before the first append, roll
//! or [`Log::start_at`](crate::Log::start_at) writes a byte, the marker and the active
//! segment's index files are removed and the directory is synced, so a crash after an append
//! never finds a marker that no longer describes the file.

use std::fs::{File, Metadata};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::fsutil::{self, IoResultExt};
use crate::{CLEAN_SHUTDOWN_FILE_NAME, Error};

/// The temporary file the marker is written to before it is renamed into place.
pub(crate) const CLEAN_SHUTDOWN_TMP: &str = "clean-shutdown.tmp";

const MAGIC: [u8; 4] = *b"KCLN";
const VERSION: u8 = 3;
/// Magic, version (and 3 zero bytes), then the eleven `u64` fields of the active segment and
/// the directory.
const HEADER_LEN: usize = 8 + 11 * 8;
/// One closed segment: five `u64` fields.
const CLOSED_LEN: usize = 5 * 8;
/// The most closed segments a marker describes (a larger marker is not read): 40 MB.
const MAX_CLOSED: usize = 1 << 20;
/// `last_index_pos` when the active segment has no index entry.
const NO_ENTRY: u64 = u64::MAX;

/// What a clean close recorded about the log: the active segment, and every closed segment, so
/// that an open which trusts the marker reads no index file (they are loaded at first use).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CleanShutdown {
    pub(crate) base_seq: u64,
    /// Length of the `.log` file.
    pub(crate) log_len: u64,
    pub(crate) last_seq: u64,
    pub(crate) inode: u64,
    /// Modification time of the `.log` file: seconds and nanoseconds since the epoch.
    pub(crate) mtime: (i64, i64),
    /// The largest timestamp in the active segment.
    pub(crate) max_timestamp: i64,
    /// Position of the active segment's last index entry (`None` when it has none).
    pub(crate) last_index_pos: Option<u64>,
    /// The closed segments, oldest first (holes left out).
    pub(crate) closed: Vec<ClosedSegment>,
    /// The modification time the close gave the log directory (seconds, nanoseconds): while it
    /// holds, no file was created, removed or renamed in the directory since.
    pub(crate) dir_mtime: (i64, i64),
}

/// What a clean close recorded about one closed segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClosedSegment {
    pub(crate) base_seq: u64,
    pub(crate) last_seq: u64,
    /// Length of its `.log`.
    pub(crate) size: u64,
    pub(crate) max_timestamp: i64,
    /// Total length of its `.index` and `.timeindex`.
    pub(crate) index_bytes: u64,
}

/// What the marker file holds.
#[derive(Debug)]
pub(crate) enum Marker {
    /// No marker file.
    Absent,
    /// A marker file that cannot be read or is damaged: ignored.
    Unusable,
    Intact(CleanShutdown),
}

impl CleanShutdown {
    /// The marker for the segment `base_seq` whose file's metadata is `meta`, with no closed
    /// segment and no index entry yet.
    pub(crate) fn describe(base_seq: u64, last_seq: u64, meta: &Metadata) -> Self {
        Self {
            base_seq,
            log_len: meta.len(),
            last_seq,
            inode: meta.ino(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            max_timestamp: i64::MIN,
            last_index_pos: None,
            closed: Vec::new(),
            dir_mtime: (0, 0),
        }
    }

    /// Whether the directory `meta` still has the modification time the close gave it.
    pub(crate) fn dir_unchanged(&self, meta: &Metadata) -> bool {
        self.dir_mtime == (meta.mtime(), meta.mtime_nsec())
    }

    /// Whether it describes segment `base` whose file's metadata is `meta` now.
    pub(crate) fn matches(&self, base: u64, meta: &Metadata) -> bool {
        self.base_seq == base
            && self.log_len == meta.len()
            && self.inode == meta.ino()
            && self.mtime == (meta.mtime(), meta.mtime_nsec())
    }

    fn encode(&self) -> Vec<u8> {
        let mut buf = Vec::with_capacity(HEADER_LEN + CLOSED_LEN * self.closed.len() + 4);
        buf.extend_from_slice(&MAGIC);
        buf.extend_from_slice(&[VERSION, 0, 0, 0]);
        let words = [
            self.base_seq,
            self.log_len,
            self.last_seq,
            self.inode,
            self.mtime.0 as u64,
            self.mtime.1 as u64,
            self.max_timestamp as u64,
            self.last_index_pos.unwrap_or(NO_ENTRY),
            self.closed.len() as u64,
            self.dir_mtime.0 as u64,
            self.dir_mtime.1 as u64,
        ];
        words_into(&mut buf, &words);
        for c in &self.closed {
            words_into(
                &mut buf,
                &[
                    c.base_seq,
                    c.last_seq,
                    c.size,
                    c.max_timestamp as u64,
                    c.index_bytes,
                ],
            );
        }
        let crc = crc32fast::hash(&buf);
        buf.extend_from_slice(&crc.to_le_bytes());
        buf
    }

    fn decode(buf: &[u8]) -> Option<Self> {
        if buf.len() < HEADER_LEN + 4
            || buf.get(..4)? != MAGIC
            || buf.get(4..8)? != [VERSION, 0, 0, 0]
        {
            return None;
        }
        let body_len = buf.len() - 4;
        let crc = u32::from_le_bytes(buf.get(body_len..)?.try_into().ok()?);
        if crc32fast::hash(buf.get(..body_len)?) != crc {
            return None;
        }
        let word = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(buf.get(at..at + 8)?.try_into().ok()?))
        };
        let head = |i: usize| word(8 + 8 * i);
        let count = usize::try_from(head(8)?).ok()?;
        if count > MAX_CLOSED || body_len != HEADER_LEN + CLOSED_LEN * count {
            return None;
        }
        let closed = (0..count)
            .map(|i| {
                let at = HEADER_LEN + CLOSED_LEN * i;
                Some(ClosedSegment {
                    base_seq: word(at)?,
                    last_seq: word(at + 8)?,
                    size: word(at + 16)?,
                    max_timestamp: word(at + 24)? as i64,
                    index_bytes: word(at + 32)?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        let last_index_pos = head(7)?;
        Some(Self {
            base_seq: head(0)?,
            log_len: head(1)?,
            last_seq: head(2)?,
            inode: head(3)?,
            mtime: (head(4)? as i64, head(5)? as i64),
            max_timestamp: head(6)? as i64,
            last_index_pos: (last_index_pos != NO_ENTRY).then_some(last_index_pos),
            closed,
            dir_mtime: (head(9)? as i64, head(10)? as i64),
        })
    }
}

fn words_into(buf: &mut Vec<u8>, words: &[u64]) {
    for w in words {
        buf.extend_from_slice(&w.to_le_bytes());
    }
}

/// Reads the marker of the log in `dir`. Never fails: a marker that cannot be read is
/// [`Marker::Unusable`], which recovery treats like no marker.
pub(crate) fn read_clean_shutdown(dir: &Path) -> Marker {
    let limit = (HEADER_LEN + CLOSED_LEN * MAX_CLOSED + 4) as u64;
    let read = File::open(dir.join(CLEAN_SHUTDOWN_FILE_NAME)).and_then(|f| {
        let mut buf = Vec::new();
        f.take(limit + 1).read_to_end(&mut buf).map(|_| buf)
    });
    match read {
        Ok(buf) => CleanShutdown::decode(&buf).map_or(Marker::Unusable, Marker::Intact),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Marker::Absent,
        Err(_) => Marker::Unusable,
    }
}

/// Writes the marker through a synced temporary file renamed into place, then syncs `dir`.
pub(crate) fn write_clean_shutdown(dir: &Path, marker: &CleanShutdown) -> Result<(), Error> {
    let tmp = dir.join(CLEAN_SHUTDOWN_TMP);
    let path = dir.join(CLEAN_SHUTDOWN_FILE_NAME);
    fsutil::write_atomic_named(&path, &tmp, &marker.encode())?;
    // Last: give the directory the modification time the marker names (a second in the past,
    // so any later change of an entry moves it). Best effort: if it does not hold, the next
    // open lists the directory, as it would without it.
    let (secs, nanos) = marker.dir_mtime;
    let at = u64::try_from(secs)
        .ok()
        .zip(u32::try_from(nanos).ok())
        .map(|(s, n)| SystemTime::UNIX_EPOCH + Duration::new(s, n));
    if let Some(at) = at
        && File::open(dir).and_then(|d| d.set_modified(at)).is_ok()
    {
        fsutil::fsync_dir(dir).at(dir)?;
    }
    Ok(())
}

/// The time a clean close stamps on the files and the directory it describes: a second before
/// now (see the module documentation), as seconds and nanoseconds since the epoch.
pub(crate) fn stamp_time() -> SystemTime {
    SystemTime::now()
        .checked_sub(Duration::from_secs(1))
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// `at` as seconds and nanoseconds since the epoch (as file metadata gives them).
pub(crate) fn epoch_parts(at: SystemTime) -> (i64, i64) {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or((0, 0), |d| {
            (
                i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                i64::from(d.subsec_nanos()),
            )
        })
}

/// Removes the marker (when there is one) without syncing the directory.
pub(crate) fn remove_clean_shutdown(dir: &Path) -> Result<(), Error> {
    let path = dir.join(CLEAN_SHUTDOWN_FILE_NAME);
    fsutil::remove_if_exists(&path).at(&path).map(drop)
}

/// Sets the modification time of a segment file to a second before now (see the module
/// documentation), so that any later write changes it.
pub(crate) fn stamp(file: &File, path: &Path) -> Result<(), Error> {
    file.set_modified(stamp_time()).at(path)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn sample() -> CleanShutdown {
        CleanShutdown {
            base_seq: 7,
            log_len: 4096,
            last_seq: 90,
            inode: 1234,
            mtime: (1_700_000_000, 123_456_789),
            dir_mtime: (1_700_000_001, 5),
            max_timestamp: -5,
            last_index_pos: Some(4000),
            closed: vec![
                ClosedSegment {
                    base_seq: 1,
                    last_seq: 3,
                    size: 300,
                    max_timestamp: 17,
                    index_bytes: 96,
                },
                ClosedSegment {
                    base_seq: 4,
                    last_seq: 6,
                    size: 310,
                    max_timestamp: i64::MIN,
                    index_bytes: 96,
                },
            ],
        }
    }

    #[test]
    fn round_trips_and_every_flipped_byte_is_detected() {
        let bytes = sample().encode();
        assert_eq!(bytes.len(), HEADER_LEN + 2 * CLOSED_LEN + 4);
        assert_eq!(CleanShutdown::decode(&bytes), Some(sample()));
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x20;
            assert_eq!(CleanShutdown::decode(&b), None, "byte {i}");
        }
        for len in 0..bytes.len() {
            assert_eq!(CleanShutdown::decode(&bytes[..len]), None, "{len} bytes");
        }
        let mut none = sample();
        none.closed.clear();
        none.last_index_pos = None;
        assert_eq!(CleanShutdown::decode(&none.encode()), Some(none));
    }

    #[test]
    fn a_missing_or_garbage_marker_is_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(read_clean_shutdown(dir.path()), Marker::Absent));
        fs::write(dir.path().join(CLEAN_SHUTDOWN_FILE_NAME), b"junk").unwrap();
        assert!(matches!(read_clean_shutdown(dir.path()), Marker::Unusable));
        fs::remove_file(dir.path().join(CLEAN_SHUTDOWN_FILE_NAME)).unwrap();
        fs::create_dir(dir.path().join(CLEAN_SHUTDOWN_FILE_NAME)).unwrap();
        assert!(matches!(read_clean_shutdown(dir.path()), Marker::Unusable));
        write_clean_shutdown(dir.path(), &sample()).unwrap_err();
    }
}

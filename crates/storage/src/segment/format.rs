//! Telling the two segment formats apart: a batch's bytes that fail its checks but read as a
//! frame of krabka's old per-record format are named as such, not as damage of a batch.
//!
//! This sits above both formats ([`super::batch`] knows nothing of the old one, [`super::old`]
//! nothing of batches), so that each stays one-way.

use std::io::Read;
use std::path::Path;

use bytes::Bytes;

use super::batch::{FORMAT_NAME, Parsed, parse_v2_batch};
use super::old::{OLD_FORMAT_NAME, is_old_frame};
use crate::Error;

/// [`parse_v2_batch`] that names bytes of the old format for what they are: a batch's checks
/// fail on them, and the reason says which format they are in.
pub(crate) fn parse_batch(buf: &Bytes) -> Parsed {
    match parse_v2_batch(buf) {
        Parsed::Bad(_) if is_old_frame(buf, None) => Parsed::Bad(old_frame_reason()),
        other => other,
    }
}

/// The reason given for bytes of the old format where a batch was expected.
pub(crate) fn old_frame_reason() -> String {
    format!("a record frame of {OLD_FORMAT_NAME}, not {FORMAT_NAME}")
}

/// Whether the file at `path` is in krabka's old per-record format: it starts with an old
/// frame (by the signals [`Error::OldFormat`] is judged on, so a damaged first frame still
/// counts) and not with a record batch. `base`, when known, is the seq the file must start
/// with (its segment's base). Reads at most 1 MiB of its start.
///
/// ```
/// use krabka_storage::segment::{encode_batch_of_one, is_old_format_file};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("00000000000000000001.log");
/// let mut buf = Vec::new();
/// encode_batch_of_one(1, &krabka_protocol::Message::new("v"), &mut buf)?;
/// std::fs::write(&path, &buf)?;
/// assert!(!is_old_format_file(&path, Some(1))?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`Error::Io`] when the file cannot be read.
pub fn is_old_format_file(path: &Path, base: Option<u64>) -> Result<bool, Error> {
    let mut buf = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(1 << 20).read_to_end(&mut buf))
        .map_err(|e| Error::io(path, e))?;
    let bytes = Bytes::from(buf);
    Ok(!matches!(parse_v2_batch(&bytes), Parsed::Batch(_)) && is_old_frame(&bytes, base))
}

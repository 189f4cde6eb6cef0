//! File damage for attack tests (feature `testkit`): the byte flips, cuts, growths and
//! deletions a failing disk or a hostile user inflicts on the files of a log directory, shared
//! by the attack tests of the storage, tiering and CLI crates.
//!
//! ```
//! use krabka_storage::testkit::{Damage, damage};
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("f");
//! std::fs::write(&path, b"abcd")?;
//! damage(&path, Damage::TruncateOne)?;
//! assert_eq!(std::fs::read(&path)?, b"abc");
//! damage(&path, Damage::FlipFirst)?;
//! assert_eq!(std::fs::read(&path)?[0], b'a' ^ 0x5a);
//! # Ok::<(), std::io::Error>(())
//! ```

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// One damage to one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Damage {
    /// XOR the first byte with `0x5a`.
    FlipFirst,
    /// XOR the byte at half the length with `0x5a`.
    FlipMiddle,
    /// XOR the last byte with `0x5a`.
    FlipLast,
    /// Cut the last byte.
    TruncateOne,
    /// Cut the second half.
    TruncateHalf,
    /// Grow by 100 zero bytes (as a crash after a size change but before the data can).
    ExtendZeros,
    /// Append 77 bytes of `0xa7`.
    ExtendGarbage,
    /// Remove the file.
    Delete,
}

impl Damage {
    /// Every damage, in declaration order.
    pub const ALL: [Damage; 8] = [
        Damage::FlipFirst,
        Damage::FlipMiddle,
        Damage::FlipLast,
        Damage::TruncateOne,
        Damage::TruncateHalf,
        Damage::ExtendZeros,
        Damage::ExtendGarbage,
        Damage::Delete,
    ];
}

/// Applies `d` to the file at `path`.
///
/// # Errors
/// The file cannot be opened, read, written or removed. On an empty file every flip and
/// [`Damage::TruncateOne`] fail ([`io::ErrorKind::InvalidInput`] or
/// [`io::ErrorKind::UnexpectedEof`]); [`Damage::TruncateHalf`] leaves it as it is.
pub fn damage(path: &Path, d: Damage) -> io::Result<()> {
    if d == Damage::Delete {
        return fs::remove_file(path);
    }
    let f = OpenOptions::new().read(true).write(true).open(path)?;
    let len = f.metadata()?.len();
    let last = len.checked_sub(1).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is empty", path.display()),
        )
    });
    let flip = |at: u64| xor_byte(path, at, 0x5a);
    match d {
        Damage::FlipFirst => flip(0),
        Damage::FlipMiddle => flip(len / 2),
        Damage::FlipLast => flip(last?),
        Damage::TruncateOne => f.set_len(last?),
        Damage::TruncateHalf => f.set_len(len / 2),
        Damage::ExtendZeros => f.set_len(len + 100),
        Damage::ExtendGarbage => f.write_all_at(&[0xa7; 77], len),
        Damage::Delete => Ok(()),
    }
}

/// XORs the byte at `at` of the file at `path` with `mask`.
///
/// # Errors
/// The file cannot be opened, or has no byte at `at`.
pub fn xor_byte(path: &Path, at: u64, mask: u8) -> io::Result<()> {
    let f = OpenOptions::new().read(true).write(true).open(path)?;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at)?;
    f.write_all_at(&[b[0] ^ mask], at)
}

/// Sets the length of the file at `path` (cuts it, or grows it with zeros).
///
/// # Errors
/// The file cannot be opened or resized.
pub fn set_len(path: &Path, len: u64) -> io::Result<()> {
    OpenOptions::new().write(true).open(path)?.set_len(len)
}

//! The framing helpers the small checksummed objects of the remote tier share: the ownership
//! records ([`crate::ownership`]) and the partition head ([`crate::head`]).

use crate::error::RemoteStorageError;

/// `len` as a `u32` length field (saturating: no object written here comes near it).
pub(crate) fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// Makes the [`RemoteStorageError::Corrupt`] of one object from the reason.
pub(crate) type Corrupt<'a> = dyn Fn(String) -> RemoteStorageError + 'a;

/// A [`Corrupt`] naming `location` and prefixing each reason with `what` the object is.
pub(crate) fn corrupt_at<'a>(
    location: &'a str,
    what: &'a str,
) -> impl Fn(String) -> RemoteStorageError + 'a {
    move |reason| RemoteStorageError::Corrupt {
        location: location.to_owned(),
        reason: format!("{what}: {reason}"),
    }
}

/// Reads a body field by field, each error naming the field and the byte it starts at.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Where `buf` starts in the object, for the byte offsets errors name.
    base: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self::at(buf, 0)
    }

    /// A reader at the start of `buf`, which starts at byte `base` of the object.
    pub(crate) fn at(buf: &'a [u8], base: usize) -> Self {
        Self { buf, pos: 0, base }
    }

    /// How many bytes are left to read.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// The object's byte offset of the next byte to read.
    pub(crate) fn offset(&self) -> usize {
        self.base + self.pos
    }

    /// The next `n` bytes, the `field`.
    pub(crate) fn take(
        &mut self,
        n: usize,
        field: &str,
        corrupt: &Corrupt<'_>,
    ) -> Result<&'a [u8], RemoteStorageError> {
        let out = self
            .buf
            .get(self.pos..)
            .and_then(|rest| rest.get(..n))
            .ok_or_else(|| corrupt(format!("truncated at its {field} (byte {})", self.offset())))?;
        self.pos += n;
        Ok(out)
    }

    /// The next `N` bytes, the `field`.
    pub(crate) fn array<const N: usize>(
        &mut self,
        field: &str,
        corrupt: &Corrupt<'_>,
    ) -> Result<[u8; N], RemoteStorageError> {
        let bytes = self.take(N, field, corrupt)?;
        <[u8; N]>::try_from(bytes).map_err(|_| corrupt(format!("truncated at its {field}")))
    }

    /// An error unless every byte was read.
    pub(crate) fn end(&self, corrupt: &Corrupt<'_>) -> Result<(), RemoteStorageError> {
        let left = self.remaining();
        if left == 0 {
            Ok(())
        } else {
            Err(corrupt(format!("{left} trailing bytes")))
        }
    }
}

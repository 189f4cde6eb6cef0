//! What a conditional read of an ownership store found: the answer of
//! [`OwnershipStore::read_if_changed`](super::OwnershipStore::read_if_changed), which the
//! partition head ([`crate::head`]) is read through.

/// What [`OwnershipStore::read_if_changed`](super::OwnershipStore::read_if_changed) found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConditionalRead {
    /// The object is still at the version the caller knows; nothing was read.
    Unchanged,
    /// There is no object under the key.
    Absent,
    /// The object, read whole, and its version (pass it as `known` next time).
    Changed {
        /// Its bytes.
        bytes: Vec<u8>,
        /// Its version: an opaque string (S3: the ETag as returned; a filesystem: device,
        /// inode, size and modification time).
        version: String,
    },
}

//! The operations on a chain: create-only writes, bounded reads, the listing, and the fence
//! that closes a chain another writer created.

use uuid::Uuid;

use super::format::{MAX_TAIL_OBJECT_LEN, TailKind, TailObject};
use crate::error::RemoteStorageError;
use crate::layout;
use crate::ownership::{ConditionalRead, OwnershipStore};

/// The most objects [`list_numbers`] accepts under one chain (8 bytes each in memory): far
/// above what a chain holds while its records wait for a finished segment.
pub const MAX_CHAIN_OBJECTS: usize = 1 << 22;

/// The most numbers [`close_chain`] tries upward (each found taken by an object that appeared
/// since its listing) before it gives up with a retriable error: a writer still creating
/// objects faster than the fencer climbs.
pub const MAX_CLOSE_TRIES: u32 = 1000;

/// How often [`write_object`] creates again when its create was refused but the key reads
/// absent (S3's 409: a delete of the key raced the create).
const MAX_WRITE_TRIES: u32 = 3;

/// What [`write_object`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteOutcome {
    /// This call created the object.
    Created,
    /// The object was there with exactly these bytes: an earlier attempt of ours created it
    /// (a retry after a lost answer). As good as `Created`.
    AlreadyIdentical,
    /// Another object is under the key (someone else's, or a fence): the chain is closed to
    /// this writer, which acknowledges nothing more through it.
    Taken {
        /// The object found; `None` when it does not decode (damaged, or over the size limit).
        found: Option<TailObject>,
    },
}

/// How a chain was closed: what [`close_chain`] found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClosedChain {
    /// The chain.
    pub chain: Uuid,
    /// The number of the fence that closes it: nothing of the chain is at or above it but that
    /// fence.
    pub fence: u64,
    /// The incarnation that wrote the fence.
    pub fenced_by: Uuid,
    /// Whether this call wrote it (`false`: a fence was there already, written by another
    /// fencer or by an earlier call).
    pub wrote_fence: bool,
    /// The numbers of the objects below the fence, ascending: those listed and those met while
    /// climbing to the fence. Numbers garbage collection already deleted are not among them.
    /// Every object of the chain's writer that will ever exist is here.
    pub below: Vec<u64>,
}

/// Writes `object` under its key ([`TailObject::key`]), create-only
/// ([`OwnershipStore::create_if_absent`]). When the key is taken, reads it back (bounded by
/// [`MAX_TAIL_OBJECT_LEN`]): the same bytes are a retry of ours
/// ([`WriteOutcome::AlreadyIdentical`]), anything else closes the chain to this writer
/// ([`WriteOutcome::Taken`]).
///
/// # Errors
/// [`RemoteStorageError::InvalidArgument`] for number 0 or an object over
/// [`MAX_TAIL_OBJECT_LEN`] bytes; a backend error (retriable ones may be retried with the same
/// object); [`RemoteStorageError::Retriable`] when the key kept reading absent after a refused
/// create.
pub fn write_object(
    store: &dyn OwnershipStore,
    object: &TailObject,
) -> Result<WriteOutcome, RemoteStorageError> {
    let key = object.key();
    if object.number() == 0 {
        return Err(RemoteStorageError::invalid_argument(format!(
            "tail object {key}: numbers start at 1"
        )));
    }
    let bytes = object.encode();
    if bytes.len() > MAX_TAIL_OBJECT_LEN {
        return Err(RemoteStorageError::invalid_argument(format!(
            "tail object {key}: {} bytes, over the {MAX_TAIL_OBJECT_LEN}-byte limit",
            bytes.len()
        )));
    }
    for _ in 0..MAX_WRITE_TRIES {
        if store.create_if_absent(&key, &bytes)? {
            return Ok(WriteOutcome::Created);
        }
        match read_raw(store, &key)? {
            Raw::Absent => {}
            Raw::Bytes(found) if found == bytes => return Ok(WriteOutcome::AlreadyIdentical),
            Raw::Bytes(found) => {
                let found = TailObject::decode_owned(found, &key).ok();
                return Ok(WriteOutcome::Taken { found });
            }
            Raw::Damaged(_) => return Ok(WriteOutcome::Taken { found: None }),
        }
    }
    Err(RemoteStorageError::Retriable {
        operation: "create tail object".to_owned(),
        location: key,
        message: format!(
            "the create was refused {MAX_WRITE_TRIES} times yet the key reads absent each time"
        ),
        source: None,
    })
}

/// Reads object `number` of chain `chain`, bounded by [`MAX_TAIL_OBJECT_LEN`] (one
/// [`OwnershipStore::read_if_changed`] without a known version); `None` when there is none.
///
/// # Errors
/// [`RemoteStorageError::Corrupt`] naming the key for an object over the limit, one that does
/// not decode, or one whose chain or number is not its key's; a backend error.
pub fn read_object(
    store: &dyn OwnershipStore,
    chain: Uuid,
    number: u64,
) -> Result<Option<TailObject>, RemoteStorageError> {
    let key = layout::tail_object_key(chain, number);
    match read_raw(store, &key)? {
        Raw::Absent => Ok(None),
        Raw::Damaged(e) => Err(e),
        Raw::Bytes(bytes) => {
            let object = TailObject::decode_owned(bytes, &key)?;
            if object.chain() != chain || object.number() != number {
                return Err(RemoteStorageError::Corrupt {
                    location: key,
                    reason: format!(
                        "tail object: it says it is number {} of chain {}",
                        object.number(),
                        object.chain()
                    ),
                });
            }
            Ok(Some(object))
        }
    }
}

/// The numbers of the objects of chain `chain`, ascending. Names that are not object numbers
/// (temporary files of interrupted writes, anything else) are skipped.
///
/// # Errors
/// [`RemoteStorageError::Corrupt`] naming the chain directory when it holds more than
/// [`MAX_CHAIN_OBJECTS`] objects; a backend error.
pub fn list_numbers(
    store: &dyn OwnershipStore,
    chain: Uuid,
) -> Result<Vec<u64>, RemoteStorageError> {
    let dir = layout::tail_chain_dir(chain);
    let prefix = format!("{dir}/");
    let mut numbers = Vec::new();
    store.list_partition(&dir, &mut |object| {
        let name = object.key.strip_prefix(&prefix).unwrap_or(&object.key);
        if let Some(n) = layout::parse_tail_object_name(name) {
            if numbers.len() >= MAX_CHAIN_OBJECTS {
                return Err(RemoteStorageError::Corrupt {
                    location: dir.clone(),
                    reason: format!("tail chain: more than {MAX_CHAIN_OBJECTS} objects"),
                });
            }
            numbers.push(n);
        }
        Ok(())
    })?;
    numbers.sort_unstable();
    numbers.dedup();
    Ok(numbers)
}

/// Closes chain `chain`, which the caller (writer incarnation `fencer`) did not create: lists
/// it and, unless its highest object is a fence already, creates a fence at the first number
/// above the highest, climbing past each object that appears there meanwhile (a data object of
/// the chain's writer, adopted: it is below the fence) and stopping at a fence someone else
/// wrote. Once it returns, the chain's writer can create nothing more in it: its next create
/// meets the fence. At most [`MAX_CLOSE_TRIES`] numbers are tried.
///
/// # Errors
/// [`RemoteStorageError::Retriable`] after [`MAX_CLOSE_TRIES`] numbers, each taken; as
/// [`list_numbers`]; a backend error.
pub fn close_chain(
    store: &dyn OwnershipStore,
    chain: Uuid,
    fencer: Uuid,
    now_ms: i64,
) -> Result<ClosedChain, RemoteStorageError> {
    let mut below = list_numbers(store, chain)?;
    let dir = layout::tail_chain_dir(chain);
    let overflow = || RemoteStorageError::Corrupt {
        location: dir.clone(),
        reason: "tail chain: an object numbered u64::MAX leaves no number for a fence".to_owned(),
    };
    let mut next = 1;
    if let Some(&highest) = below.last() {
        match read_object(store, chain, highest) {
            Ok(Some(found)) if found.kind() == TailKind::Fence => {
                below.pop();
                return Ok(ClosedChain {
                    chain,
                    fence: highest,
                    fenced_by: found.incarnation(),
                    wrote_fence: false,
                    below,
                });
            }
            // A data object, one deleted since the listing, or a damaged one: the fence goes
            // above it either way.
            Ok(_) | Err(RemoteStorageError::Corrupt { .. }) => {}
            Err(e) => return Err(e),
        }
        next = highest.checked_add(1).ok_or_else(overflow)?;
    }
    let first = next;
    for _ in 0..MAX_CLOSE_TRIES {
        let fence = TailObject::fence(chain, next, fencer, now_ms);
        let key = fence.key();
        let bytes = fence.encode();
        if store.create_if_absent(&key, &bytes)? {
            return Ok(closed_by_us(chain, next, fencer, below));
        }
        match read_raw(store, &key)? {
            // Refused, then gone (a delete raced the create): try the same number again.
            Raw::Absent => continue,
            // Our own create, answered "exists" on a retry after a lost answer.
            Raw::Bytes(found) if found == bytes => {
                return Ok(closed_by_us(chain, next, fencer, below));
            }
            Raw::Bytes(found) => {
                if let Ok(object) = TailObject::decode_owned(found, &key)
                    && object.kind() == TailKind::Fence
                {
                    return Ok(ClosedChain {
                        chain,
                        fence: next,
                        fenced_by: object.incarnation(),
                        wrote_fence: false,
                        below,
                    });
                }
            }
            // Damaged: not a fence we can rely on; fence above it.
            Raw::Damaged(_) => {}
        }
        below.push(next);
        next = next.checked_add(1).ok_or_else(overflow)?;
    }
    Err(RemoteStorageError::Retriable {
        operation: "close tail chain".to_owned(),
        location: dir,
        message: format!(
            "{MAX_CLOSE_TRIES} fence attempts from number {first} met objects up to {}: the \
             chain's writer is still creating objects",
            next.saturating_sub(1)
        ),
        source: None,
    })
}

fn closed_by_us(chain: Uuid, fence: u64, fencer: Uuid, below: Vec<u64>) -> ClosedChain {
    ClosedChain {
        chain,
        fence,
        fenced_by: fencer,
        wrote_fence: true,
        below,
    }
}

/// What a bounded read of a key found.
enum Raw {
    Absent,
    Bytes(Vec<u8>),
    /// Over [`MAX_TAIL_OBJECT_LEN`]: [`RemoteStorageError::Corrupt`] naming the key.
    Damaged(RemoteStorageError),
}

fn read_raw(store: &dyn OwnershipStore, key: &str) -> Result<Raw, RemoteStorageError> {
    match store.read_if_changed(key, None, MAX_TAIL_OBJECT_LEN) {
        Ok(ConditionalRead::Absent) => Ok(Raw::Absent),
        Ok(ConditionalRead::Changed { bytes, .. }) => Ok(Raw::Bytes(bytes)),
        Ok(ConditionalRead::Unchanged) => Err(RemoteStorageError::Backend {
            operation: "read tail object".to_owned(),
            location: key.to_owned(),
            message: "a read without a known version answered \"unchanged\"".to_owned(),
            source: None,
        }),
        Err(e @ RemoteStorageError::Corrupt { .. }) => Ok(Raw::Damaged(e)),
        Err(e) => Err(e),
    }
}

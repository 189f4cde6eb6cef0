//! **Tail objects**: small immutable objects a writer uploads while a segment is still active,
//! each holding new whole Kafka v2 record batches of one or more partitions, so that an
//! acknowledged record outlives the local disk before its segment is finished and copied.
//!
//! Tail objects form **chains**. A chain belongs to one writer incarnation and has a random id;
//! its objects are numbered 1, 2, 3, ... contiguously, under
//! `_tail-<chain id as 32 lowercase hex>/<number as 20 digits>` beside the partition
//! directories ([`layout::tail_object_key`](crate::layout::tail_object_key)). Every object is
//! written **create-only** ([`write_object`], through
//! [`OwnershipStore::create_if_absent`](crate::ownership::OwnershipStore::create_if_absent)),
//! number `n + 1` only after `n` succeeded. A new writer closes a chain it did not create with a
//! **fence** ([`close_chain`]): an object of kind [`TailKind::Fence`] at the first free number,
//! so the old writer's next create fails and everything below the fence is adopted.
//!
//! ```text
//! object: magic "KTAL" | version u8 (=1) | kind u8 (1 data, 2 fence) | 2 zero bytes
//!         | chain id [16] | number u64 | writer incarnation [16] | written ms i64
//!         | entry count u32
//!         | count × entry
//!         | header crc32 u32 (of every byte before it)
//!         | data: each entry's bytes, in entry order, no gaps, no overlap
//! entry:  topic id [16] | partition i32 | writer epoch u64 | first seq u64 | last seq u64
//!         | max timestamp i64 | data offset u64 (from the first data byte) | data length u32
//!         | data crc32 u32
//! ```
//! All integers little-endian; specified in `docs/format.md` ("Tail object"). A fence has no
//! entries and no data. [`TailObject::decode`] checks the header; each entry's data CRC is
//! checked when its bytes are taken ([`TailObject::entry_data`]), so a damaged entry costs only
//! its own seqs. The batches inside are checked by their readers (Kafka CRC-32C, base offsets
//! equal to seqs).

mod chain;
mod format;

pub use chain::{
    ClosedChain, MAX_CHAIN_OBJECTS, MAX_CLOSE_TRIES, WriteOutcome, close_chain, list_numbers,
    read_object, write_object,
};
pub use format::{
    MAX_TAIL_OBJECT_LEN, TAIL_MAGIC, TAIL_VERSION, TailEntry, TailEntryHeader, TailKind, TailObject,
};

#[cfg(test)]
mod tests;

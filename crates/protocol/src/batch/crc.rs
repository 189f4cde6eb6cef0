//! CRC-32C (Castagnoli), the checksum of a v2 batch: the one implementation every writer and
//! reader of batches in krabka uses.

use crc_fast::{CrcAlgorithm, Digest};

/// The CRC-32C of `bytes` (Kafka's batch CRC is this over `attributes` to the batch's end).
///
/// ```
/// assert_eq!(krabka_protocol::batch::crc32c(b"123456789"), 0xE306_9283);
/// ```
pub fn crc32c(bytes: &[u8]) -> u32 {
    // A CRC-32 fits 32 bits; crc-fast returns every width in a u64.
    crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

/// A CRC-32C computed over bytes given in parts (a batch read in chunks, say).
///
/// ```
/// use krabka_protocol::batch::{crc32c, Crc32c};
///
/// let mut crc = Crc32c::new();
/// crc.update(b"12345");
/// crc.update(b"6789");
/// assert_eq!(crc.finish(), crc32c(b"123456789"));
/// ```
#[derive(Clone)]
pub struct Crc32c(Digest);

impl Crc32c {
    /// The CRC of no bytes yet.
    pub fn new() -> Self {
        Crc32c(Digest::new(CrcAlgorithm::Crc32Iscsi))
    }

    /// Adds `bytes` after those given so far.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The CRC-32C of every byte given so far.
    pub fn finish(&self) -> u32 {
        self.0.finalize() as u32
    }
}

impl Default for Crc32c {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Crc32c {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Crc32c").field(&self.finish()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_a_second_implementation_at_every_length_and_split() {
        let bytes: Vec<u8> = (0..70_000u32).map(|i| (i * 131 + i / 7) as u8).collect();
        let lengths = (0..300).chain([511, 512, 513, 4095, 4096, 4097, 65_536, 70_000]);
        for len in lengths {
            let part = &bytes[..len];
            let expected = crc32c::crc32c(part);
            assert_eq!(crc32c(part), expected, "length {len}");
            let split = len / 3;
            let mut crc = Crc32c::new();
            crc.update(&part[..split]);
            crc.update(&part[split..]);
            assert_eq!(crc.finish(), expected, "length {len} split at {split}");
        }
        // Unaligned starts.
        for start in 1..64 {
            assert_eq!(crc32c(&bytes[start..]), crc32c::crc32c(&bytes[start..]));
        }
    }
}

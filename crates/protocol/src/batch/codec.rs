//! The compression codecs of the records section, each behind its cargo feature.
//!
//! Decompression is bounded: output past the caller's limit is [`BatchError::TooLarge`] and is
//! never allocated (the output buffer grows by doubling but never past the limit). On top of the
//! output, a decoder keeps its own working state, set by the stream's header and capped here:
//! LZ4 two blocks of the frame's block size (4 MiB at most in the frame format), zstd a window
//! of at most 2^27 bytes, or 2^24 when the limit is smaller.

use super::{BatchError, Compression};

/// Compresses a records section with `codec` as Kafka writes it.
pub(crate) fn compress(codec: Compression, data: &[u8]) -> Result<Vec<u8>, BatchError> {
    match codec {
        Compression::None => Ok(data.to_vec()),
        #[cfg(feature = "gzip")]
        Compression::Gzip => gzip::compress(data),
        #[cfg(feature = "snappy")]
        Compression::Snappy => snappy::compress(data),
        #[cfg(feature = "lz4")]
        Compression::Lz4 => lz4::compress(data),
        #[cfg(feature = "zstd")]
        Compression::Zstd => zstd::compress(data),
        #[allow(unreachable_patterns)]
        other => Err(BatchError::CodecDisabled { codec: other }),
    }
}

/// Decompresses a records section, refusing output past `limit` bytes.
pub(crate) fn decompress(
    codec: Compression,
    data: &[u8],
    limit: usize,
) -> Result<Vec<u8>, BatchError> {
    if data.is_empty() && codec != Compression::None {
        return Err(BatchError::Decompress {
            codec,
            reason: "no compressed bytes".to_owned(),
        });
    }
    match codec {
        Compression::None => {
            if data.len() > limit {
                return Err(BatchError::TooLarge { limit });
            }
            Ok(data.to_vec())
        }
        #[cfg(feature = "gzip")]
        Compression::Gzip => gzip::decompress(data, limit),
        #[cfg(feature = "snappy")]
        Compression::Snappy => snappy::decompress(data, limit),
        #[cfg(feature = "lz4")]
        Compression::Lz4 => lz4::decompress(data, limit),
        #[cfg(feature = "zstd")]
        Compression::Zstd => zstd::decompress(data, limit),
        #[allow(unreachable_patterns)]
        other => Err(BatchError::CodecDisabled { codec: other }),
    }
}

/// Makes room for `extra` more bytes in `out` without letting its capacity pass `limit`
/// (the caller has checked that `out.len() + extra <= limit`).
#[cfg(any(
    feature = "gzip",
    feature = "snappy",
    feature = "lz4",
    feature = "zstd"
))]
fn grow(out: &mut Vec<u8>, extra: usize, limit: usize) {
    let needed = out.len() + extra;
    if needed > out.capacity() {
        let target = needed
            .max(out.capacity().saturating_mul(2))
            .max(8192)
            .min(limit);
        out.reserve_exact(target.max(needed) - out.len());
    }
}

/// Reads `reader` to its end into a buffer of at most `limit` bytes.
#[cfg(any(feature = "gzip", feature = "zstd"))]
fn read_bounded(
    mut reader: impl std::io::Read,
    codec: Compression,
    limit: usize,
) -> Result<Vec<u8>, BatchError> {
    use std::io::ErrorKind;
    let mut out = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(BatchError::Decompress {
                    codec,
                    reason: e.to_string(),
                });
            }
        };
        if n > limit - out.len() {
            return Err(BatchError::TooLarge { limit });
        }
        grow(&mut out, n, limit);
        out.extend_from_slice(chunk.get(..n).unwrap_or_default());
    }
}

#[cfg(any(
    feature = "gzip",
    feature = "snappy",
    feature = "lz4",
    feature = "zstd"
))]
fn compress_error(codec: Compression, e: impl std::fmt::Display) -> BatchError {
    BatchError::Compress {
        codec,
        reason: e.to_string(),
    }
}

#[cfg(feature = "gzip")]
mod gzip {
    use std::io::Write;

    use super::{BatchError, Compression, compress_error, read_bounded};

    /// Gzip at the default level (6), as Java's `GZIPOutputStream` writes it.
    pub(super) fn compress(data: &[u8]) -> Result<Vec<u8>, BatchError> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(data)
            .and_then(|()| enc.finish())
            .map_err(|e| compress_error(Compression::Gzip, e))
    }

    /// Every gzip member in turn (Java's `GZIPInputStream` also reads concatenated members);
    /// each member's CRC-32 and length trailer is checked.
    pub(super) fn decompress(data: &[u8], limit: usize) -> Result<Vec<u8>, BatchError> {
        read_bounded(
            flate2::read::MultiGzDecoder::new(data),
            Compression::Gzip,
            limit,
        )
    }
}

#[cfg(feature = "snappy")]
mod snappy {
    use super::{BatchError, Compression, compress_error, grow};

    /// The xerial stream header: magic, version 1, compatible version 1.
    const XERIAL_HEADER: [u8; 16] = *b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";
    /// The magic that tells a xerial stream from a plain snappy block.
    const XERIAL_MAGIC: [u8; 8] = *b"\x82SNAPPY\x00";
    /// Uncompressed bytes per block, xerial's default (as Kafka's Java client writes).
    const XERIAL_BLOCK: usize = 32 * 1024;

    fn error(reason: impl std::fmt::Display) -> BatchError {
        BatchError::Decompress {
            codec: Compression::Snappy,
            reason: reason.to_string(),
        }
    }

    /// The xerial framing: the 16-byte header, then per 32 KiB of input a big-endian `u32`
    /// length and one raw snappy block.
    pub(super) fn compress(data: &[u8]) -> Result<Vec<u8>, BatchError> {
        let mut out = Vec::with_capacity(XERIAL_HEADER.len() + snap::raw::max_compress_len(0));
        out.extend_from_slice(&XERIAL_HEADER);
        let mut enc = snap::raw::Encoder::new();
        for block in data.chunks(XERIAL_BLOCK) {
            let compressed = enc
                .compress_vec(block)
                .map_err(|e| compress_error(Compression::Snappy, e))?;
            let len = u32::try_from(compressed.len())
                .map_err(|e| compress_error(Compression::Snappy, e))?;
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(&compressed);
        }
        Ok(out)
    }

    /// A xerial stream (by its magic) or else one plain snappy block, as xerial's
    /// `SnappyInputStream` reads them. Each block's declared length is checked against the
    /// limit before anything is allocated for it.
    pub(super) fn decompress(data: &[u8], limit: usize) -> Result<Vec<u8>, BatchError> {
        let mut dec = snap::raw::Decoder::new();
        let mut out = Vec::new();
        let mut block = |input: &[u8], out: &mut Vec<u8>| -> Result<(), BatchError> {
            let len = snap::raw::decompress_len(input).map_err(error)?;
            if len > limit - out.len() {
                return Err(BatchError::TooLarge { limit });
            }
            grow(out, len, limit);
            let start = out.len();
            out.resize(start + len, 0);
            let written = dec
                .decompress(input, out.get_mut(start..).unwrap_or_default())
                .map_err(error)?;
            if written != len {
                return Err(error(format!(
                    "block declares {len} bytes, holds {written}"
                )));
            }
            Ok(())
        };
        if !data.starts_with(&XERIAL_MAGIC) {
            block(data, &mut out)?;
            return Ok(out);
        }
        let mut pos = XERIAL_HEADER.len();
        if data.len() < pos {
            return Err(error("xerial header truncated"));
        }
        while pos < data.len() {
            let len_bytes = data
                .get(pos..pos + 4)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .ok_or_else(|| error(format!("block length truncated at {pos}")))?;
            let len = u32::from_be_bytes(len_bytes) as usize;
            pos += 4;
            let input = data
                .get(pos..)
                .and_then(|rest| rest.get(..len))
                .ok_or_else(|| error(format!("block of {len} bytes at {pos} truncated")))?;
            block(input, &mut out)?;
            pos += len;
        }
        Ok(out)
    }
}

#[cfg(feature = "lz4")]
mod lz4 {
    use std::io::{Read, Write};

    use lz4_flex::frame::{BlockMode, BlockSize, FrameDecoder, FrameEncoder, FrameInfo};

    use super::{BatchError, Compression, compress_error, grow};

    /// The LZ4 frame format with independent 64 KiB blocks and no checksums, as Kafka's
    /// `Lz4BlockOutputStream` writes it (Kafka reads neither dependent blocks nor a broken
    /// header checksum in v2 batches; the KIP-57 checksum quirk is of magic 0 and 1 only).
    pub(super) fn compress(data: &[u8]) -> Result<Vec<u8>, BatchError> {
        let info = FrameInfo::new()
            .block_size(BlockSize::Max64KB)
            .block_mode(BlockMode::Independent);
        let mut enc = FrameEncoder::with_frame_info(info, Vec::new());
        enc.write_all(data)
            .map_err(|e| compress_error(Compression::Lz4, e))?;
        enc.finish()
            .map_err(|e| compress_error(Compression::Lz4, e))
    }

    /// The input, noting whether the decoder ever asked for bytes past its end: the frame
    /// decoder reports a frame cut short as a plain end of stream, and this tells the two apart.
    struct Input<'a> {
        rest: &'a [u8],
        starved: bool,
    }

    impl Read for Input<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.rest.is_empty() && !buf.is_empty() {
                self.starved = true;
            }
            self.rest.read(buf)
        }
    }

    fn error(reason: impl std::fmt::Display) -> BatchError {
        BatchError::Decompress {
            codec: Compression::Lz4,
            reason: reason.to_string(),
        }
    }

    /// Any valid LZ4 frame (content size, checksums and linked blocks included), and frames
    /// concatenated; a frame without its end mark is an error, and so are bytes after the last
    /// frame that are not a frame.
    pub(super) fn decompress(data: &[u8], limit: usize) -> Result<Vec<u8>, BatchError> {
        let mut dec = FrameDecoder::new(Input {
            rest: data,
            starved: false,
        });
        let mut out = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            let n = match dec.read(&mut chunk) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(error(e)),
            };
            if n == 0 {
                let input = dec.get_ref();
                if input.starved {
                    return Err(error("frame cut short"));
                }
                if input.rest.is_empty() {
                    return Ok(out);
                }
                // The end mark of a frame, and another frame follows.
                continue;
            }
            if n > limit - out.len() {
                return Err(BatchError::TooLarge { limit });
            }
            grow(&mut out, n, limit);
            out.extend_from_slice(chunk.get(..n).unwrap_or_default());
        }
    }
}

#[cfg(feature = "zstd")]
mod zstd {
    use super::{BatchError, Compression, compress_error, read_bounded};

    /// Level 3, the zstd default and Kafka's.
    pub(super) fn compress(data: &[u8]) -> Result<Vec<u8>, BatchError> {
        ::zstd::bulk::compress(data, 3).map_err(|e| compress_error(Compression::Zstd, e))
    }

    /// Every frame in turn; the window a frame may ask for is capped (see the module docs).
    pub(super) fn decompress(data: &[u8], limit: usize) -> Result<Vec<u8>, BatchError> {
        let error = |e: std::io::Error| BatchError::Decompress {
            codec: Compression::Zstd,
            reason: e.to_string(),
        };
        let mut dec = ::zstd::stream::read::Decoder::with_buffer(data).map_err(error)?;
        let needed_bits = usize::BITS - limit.saturating_sub(1).leading_zeros();
        dec.window_log_max(needed_bits.clamp(24, 27))
            .map_err(error)?;
        read_bounded(dec, Compression::Zstd, limit)
    }
}

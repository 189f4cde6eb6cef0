//! Checking what the store kept against what was uploaded: from the upload's own response
//! when its ETag vouches for the bytes, else with a HeadObject.

use krabka_remote_storage::RemoteStorageError;

use super::S3RemoteStorage;

/// What the store said about an object it just stored (a PutObject or CompleteMultipartUpload
/// response): its ETag and server-side encryption.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Reported<'a> {
    pub etag: Option<&'a str>,
    pub server_side_encryption: Option<&'a str>,
    pub sse_customer_algorithm: Option<&'a str>,
}

impl S3RemoteStorage {
    /// Verifies an upload of `len` bytes whose MD5-derived ETag should be `expected_etag`.
    ///
    /// When the upload's response carries an MD5-derived ETag ([`etag_check`]), comparing it
    /// is the whole check: equal MD5s (of the object, or of each part for a multipart ETag)
    /// mean equal bytes and so the same size, and no HeadObject is sent. Otherwise (SSE-KMS,
    /// SSE-C, an opaque or missing ETag) [`verify_with_head`](Self::verify_with_head) checks
    /// the stored size.
    pub(super) async fn verify_upload(
        &self,
        key: &str,
        len: u64,
        expected_etag: &str,
        reported: Reported<'_>,
    ) -> Result<(), RemoteStorageError> {
        let check = etag_check(
            reported.etag,
            reported.server_side_encryption,
            reported.sse_customer_algorithm,
        );
        match check {
            EtagCheck::Compare(etag) => self.compare_etag(key, etag, expected_etag),
            EtagCheck::Skip(why) => {
                tracing::trace!(key, why, "upload response not conclusive; HeadObject");
                self.verify_with_head(key, len, expected_etag).await
            }
        }
    }

    /// Checks the stored object's size with a HeadObject, and its ETag when [`etag_check`]
    /// says it is derived from MD5 (not under SSE-KMS or SSE-C). The bytes themselves were
    /// already checked by the store against the Content-MD5 of each request.
    pub(super) async fn verify_with_head(
        &self,
        key: &str,
        len: u64,
        expected_etag: &str,
    ) -> Result<(), RemoteStorageError> {
        let head = self.head(key, None).await?;
        let stored = head.content_length().unwrap_or(-1);
        if u64::try_from(stored).ok() != Some(len) {
            return Err(RemoteStorageError::Corrupt {
                location: self.location(key),
                reason: format!("stored {stored} bytes, uploaded {len}"),
            });
        }
        let check = etag_check(
            head.e_tag(),
            head.server_side_encryption().map(|s| s.as_str()),
            head.sse_customer_algorithm(),
        );
        match check {
            EtagCheck::Compare(etag) => self.compare_etag(key, etag, expected_etag),
            EtagCheck::Skip(why) => {
                tracing::trace!(key, why, "stored ETag not compared");
                Ok(())
            }
        }
    }

    fn compare_etag(
        &self,
        key: &str,
        etag: &str,
        expected: &str,
    ) -> Result<(), RemoteStorageError> {
        if etag.eq_ignore_ascii_case(expected) {
            Ok(())
        } else {
            Err(RemoteStorageError::Corrupt {
                location: self.location(key),
                reason: format!("stored ETag {etag}, expected {expected}"),
            })
        }
    }
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether a stored object's ETag can be compared with the MD5-derived one a copy expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EtagCheck<'a> {
    /// Compare: the ETag (quotes trimmed) is MD5-derived.
    Compare(&'a str),
    /// Do not compare, for this reason.
    Skip(&'static str),
}

/// Decides from an upload or HeadObject response whether its ETag is MD5-derived.
///
/// Under SSE-KMS (`aws:kms`, `aws:kms:dsse`) and SSE-C (a customer algorithm is reported) S3's
/// ETags, single-part and multipart alike, are not the MD5 of the data, so they are skipped; so
/// is an ETag of neither MD5 form (other stores). Plain and SSE-S3 (`AES256`) objects are
/// compared. Skipping loses nothing the store did not already check: every PutObject and
/// UploadPart carries a Content-MD5 the store verifies, and the size is always checked.
fn etag_check<'a>(
    etag: Option<&'a str>,
    server_side_encryption: Option<&str>,
    sse_customer_algorithm: Option<&str>,
) -> EtagCheck<'a> {
    if sse_customer_algorithm.is_some_and(|a| !a.is_empty()) {
        return EtagCheck::Skip("SSE-C: the ETag is not the MD5 of the data");
    }
    if server_side_encryption.is_some_and(|s| s.starts_with("aws:kms")) {
        return EtagCheck::Skip("SSE-KMS: the ETag is not the MD5 of the data");
    }
    let Some(etag) = etag else {
        return EtagCheck::Skip("no ETag reported");
    };
    let etag = etag.trim_matches('"');
    if looks_like_md5_etag(etag) {
        EtagCheck::Compare(etag)
    } else {
        EtagCheck::Skip("the ETag is not of an MD5 form")
    }
}

/// `<32 hex>` (PutObject) or `<32 hex>-<parts>` (multipart): the forms S3 derives from MD5.
fn looks_like_md5_etag(etag: &str) -> bool {
    let (digest, parts) = match etag.split_once('-') {
        Some((d, p)) => (d, Some(p)),
        None => (etag, None),
    };
    digest.len() == 32
        && digest.bytes().all(|b| b.is_ascii_hexdigit())
        && parts.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_etag_forms_are_recognised() {
        assert!(looks_like_md5_etag("9e107d9d372bb6826bd81d3542a419d6"));
        assert!(looks_like_md5_etag("9e107d9d372bb6826bd81d3542a419d6-3"));
        assert!(!looks_like_md5_etag("9e107d9d372bb6826bd81d3542a419d6-"));
        assert!(!looks_like_md5_etag("opaque-etag"));
        assert_eq!(hex(&[0, 15, 255]), "000fff");
    }

    #[test]
    fn etag_is_compared_only_when_md5_derived() {
        let md5 = "\"9e107d9d372bb6826bd81d3542a419d6\"";
        let multi = "\"9e107d9d372bb6826bd81d3542a419d6-3\"";
        // Plain and SSE-S3: compared, quotes trimmed, both forms.
        for sse in [None, Some("AES256")] {
            assert_eq!(
                etag_check(Some(md5), sse, None),
                EtagCheck::Compare("9e107d9d372bb6826bd81d3542a419d6")
            );
            assert_eq!(
                etag_check(Some(multi), sse, None),
                EtagCheck::Compare("9e107d9d372bb6826bd81d3542a419d6-3")
            );
        }
        // SSE-KMS (and dual-layer KMS) and SSE-C: never compared, whatever the ETag looks like.
        for etag in [md5, multi] {
            for sse in ["aws:kms", "aws:kms:dsse"] {
                assert!(matches!(
                    etag_check(Some(etag), Some(sse), None),
                    EtagCheck::Skip(_)
                ));
            }
            assert!(matches!(
                etag_check(Some(etag), None, Some("AES256")),
                EtagCheck::Skip(_)
            ));
            assert!(matches!(
                etag_check(Some(etag), Some("AES256"), Some("AES256")),
                EtagCheck::Skip(_)
            ));
        }
        // Opaque or missing ETags: skipped.
        assert!(matches!(
            etag_check(Some("\"opaque\""), None, None),
            EtagCheck::Skip(_)
        ));
        assert!(matches!(etag_check(None, None, None), EtagCheck::Skip(_)));
        // An empty customer algorithm is no SSE-C.
        assert!(matches!(
            etag_check(Some(md5), None, Some("")),
            EtagCheck::Compare(_)
        ));
    }
}

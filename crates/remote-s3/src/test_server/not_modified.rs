//! GetObject with `If-None-Match`, which s3s-fs 0.14.1 ignores: answered 304 Not Modified, as
//! AWS S3 and Ceph RGW do, when the object's ETag matches.

use s3s::dto::{GetObjectInput, GetObjectOutput};
use s3s::{S3, S3Request, S3Response, S3Result};

/// s3s-fs's GetObject, then a 304 (and no body) when the request's `If-None-Match` is `*` or
/// matches the object's ETag (weak comparison, as RFC 9110 asks for this header). A missing
/// object stays a 404.
pub(super) async fn get_object(
    fs: &s3s_fs::FileSystem,
    mut r: S3Request<GetObjectInput>,
) -> S3Result<S3Response<GetObjectOutput>> {
    let condition = r.input.if_none_match.take();
    let out = fs.get_object(r).await?;
    let matches = condition.is_some_and(|c| match c.as_etag() {
        None => true,
        Some(wanted) => out
            .output
            .e_tag
            .as_ref()
            .is_some_and(|e| e.weak_cmp(wanted)),
    });
    if matches {
        return Err(s3s::s3_error!(NotModified));
    }
    Ok(out)
}

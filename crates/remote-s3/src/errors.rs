//! Mapping SDK errors onto [`RemoteStorageError`] kinds callers act on.

use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use krabka_remote_storage::{RemoteLogSegmentId, RemoteStorageError};

/// What a failed request was about, for the error it becomes.
pub(crate) struct Context<'a> {
    /// The S3 operation, e.g. `"GetObject"`.
    pub operation: &'static str,
    /// Bucket name.
    pub bucket: &'a str,
    /// Endpoint as shown to users.
    pub endpoint: &'a str,
    /// The object key (or bucket) involved.
    pub key: &'a str,
    /// The segment, when a missing key means a missing segment.
    pub segment: Option<&'a RemoteLogSegmentId>,
}

/// The kind of a failure, decided from the HTTP status and the S3 error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    NotFound,
    NoBucket,
    Denied,
    Transient,
    Permanent,
}

/// Classifies a response by HTTP status and S3 error code.
pub(crate) fn classify(status: Option<u16>, code: Option<&str>) -> Kind {
    match code {
        Some("NoSuchBucket") => return Kind::NoBucket,
        Some("NoSuchKey" | "NotFound" | "NoSuchUpload") => return Kind::NotFound,
        Some(
            "AccessDenied"
            | "InvalidAccessKeyId"
            | "SignatureDoesNotMatch"
            | "AllAccessDisabled"
            | "ExpiredToken"
            | "InvalidToken",
        ) => return Kind::Denied,
        Some(
            "SlowDown"
            | "Throttling"
            | "ThrottlingException"
            | "RequestTimeout"
            | "RequestTimeTooSkewed"
            | "InternalError"
            | "ServiceUnavailable",
        ) => return Kind::Transient,
        _ => {}
    }
    match status {
        Some(404) => Kind::NotFound,
        Some(401 | 403) => Kind::Denied,
        Some(408 | 429) => Kind::Transient,
        Some(s) if s >= 500 => Kind::Transient,
        None => Kind::Transient,
        Some(_) => Kind::Permanent,
    }
}

/// Maps an SDK error. Retries already happened inside the SDK; what is left is final for this
/// call.
pub(crate) fn map_sdk<E, R>(err: SdkError<E, R>, cx: &Context<'_>) -> RemoteStorageError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + HttpStatus + Send + Sync + 'static,
{
    let message = DisplayErrorContext(&err).to_string();
    let kind = kind_of(&err);
    from_kind(kind, cx, message, Some(Box::new(err)))
}

/// The kind of an SDK error: from the response's status and code when the store answered.
pub(crate) fn kind_of<E, R>(err: &SdkError<E, R>) -> Kind
where
    E: ProvideErrorMetadata,
    R: HttpStatus,
{
    match err {
        SdkError::ServiceError(_) | SdkError::ResponseError(_) => {
            classify(status_of(err), err.code())
        }
        // Timeouts and connection failures: transient by nature.
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) => Kind::Transient,
        SdkError::ConstructionFailure(_) => Kind::Permanent,
        _ => Kind::Permanent,
    }
}

/// The HTTP status of the store's answer, when it answered.
pub(crate) fn status_of<E, R: HttpStatus>(err: &SdkError<E, R>) -> Option<u16> {
    err.raw_response().map(HttpStatus::status_code)
}

/// Builds the error of `kind`.
pub(crate) fn from_kind(
    kind: Kind,
    cx: &Context<'_>,
    message: String,
    source: Option<krabka_remote_storage::BoxError>,
) -> RemoteStorageError {
    match (kind, cx.segment) {
        (Kind::NotFound, Some(segment)) => RemoteStorageError::SegmentNotFound {
            segment: segment.clone(),
            what: cx.key.to_owned(),
        },
        (Kind::NoBucket, _) => RemoteStorageError::StoreUnavailable {
            bucket: cx.bucket.to_owned(),
            endpoint: cx.endpoint.to_owned(),
            message: format!("{}: bucket does not exist: {message}", cx.operation),
        },
        (Kind::Denied, _) => RemoteStorageError::AccessDenied {
            bucket: cx.bucket.to_owned(),
            endpoint: cx.endpoint.to_owned(),
            message: format!("{} of `{}`: {message}", cx.operation, cx.key),
        },
        (Kind::Transient, _) => RemoteStorageError::Retriable {
            operation: cx.operation.to_owned(),
            location: format!("s3://{}/{}", cx.bucket, cx.key),
            message,
            source,
        },
        (Kind::NotFound | Kind::Permanent, _) => RemoteStorageError::Backend {
            operation: cx.operation.to_owned(),
            location: format!("s3://{}/{}", cx.bucket, cx.key),
            message,
            source,
        },
    }
}

/// The HTTP status of a raw response.
pub(crate) trait HttpStatus {
    /// The status code.
    fn status_code(&self) -> u16;
}

impl HttpStatus for aws_sdk_s3::config::http::HttpResponse {
    fn status_code(&self) -> u16 {
        self.status().as_u16()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_codes_map_to_kinds() {
        assert_eq!(classify(Some(404), None), Kind::NotFound);
        assert_eq!(classify(Some(404), Some("NoSuchBucket")), Kind::NoBucket);
        assert_eq!(classify(Some(403), None), Kind::Denied);
        assert_eq!(
            classify(Some(400), Some("InvalidAccessKeyId")),
            Kind::Denied
        );
        assert_eq!(classify(Some(503), Some("SlowDown")), Kind::Transient);
        assert_eq!(classify(Some(500), None), Kind::Transient);
        assert_eq!(classify(Some(429), None), Kind::Transient);
        assert_eq!(classify(Some(400), Some("InvalidRange")), Kind::Permanent);
    }
}

//! The SDK client, set up the way every S3-compatible store here accepts (see the crate docs).

use aws_sdk_s3::Client;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
    retry::RetryConfig, timeout::TimeoutConfig,
};
use krabka_remote_storage::RemoteStorageError;

use crate::config::{S3Config, S3Credentials};

/// The client for `config`: rustls on ring, an explicit region, checksums only where an
/// operation requires them (Content-MD5 is sent instead), the configured retries and timeouts.
pub(super) async fn build_client(config: &S3Config) -> Result<Client, RemoteStorageError> {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let mut b = aws_sdk_s3::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(config.region.clone()))
        .http_client(http.clone())
        .force_path_style(config.force_path_style)
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
        .retry_config(RetryConfig::standard().with_max_attempts(config.max_attempts))
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(config.connect_timeout)
                .operation_attempt_timeout(config.attempt_timeout)
                .operation_timeout(config.operation_timeout)
                .build(),
        );
    if let Some(endpoint) = &config.endpoint_url {
        b = b.endpoint_url(endpoint);
    }
    match &config.credentials {
        S3Credentials::Static {
            access_key_id,
            secret_access_key,
            session_token,
        } => {
            b = b.credentials_provider(Credentials::new(
                access_key_id,
                secret_access_key,
                session_token.clone(),
                None,
                "krabka-static",
            ));
        }
        S3Credentials::DefaultChain => {
            #[cfg(feature = "default-credentials")]
            {
                let shared = aws_config::defaults(BehaviorVersion::latest())
                    .region(Region::new(config.region.clone()))
                    .http_client(http)
                    .load()
                    .await;
                if let Some(provider) = shared.credentials_provider() {
                    b = b.credentials_provider(provider);
                }
            }
            #[cfg(not(feature = "default-credentials"))]
            {
                drop(http);
                return Err(RemoteStorageError::invalid_argument(
                    "the default AWS credential chain needs the `default-credentials` feature; \
                     configure S3Credentials::Static instead",
                ));
            }
        }
    }
    Ok(Client::from_conf(b.build()))
}

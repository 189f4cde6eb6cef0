//! S3 backend of the krabka RemoteStorageManager SPI on aws-sdk-s3: multipart uploads, ranged reads, careful error mapping.

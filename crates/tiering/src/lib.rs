//! One log across a local disk tier and a remote tier (S3 or filesystem): copy, retention, transparent reads, caching.

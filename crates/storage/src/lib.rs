//! Crash-safe append-only segment log with sparse offset and time indexes, recovery and retention.

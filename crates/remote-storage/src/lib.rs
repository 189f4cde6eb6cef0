//! The RemoteStorageManager SPI for tiered log storage (KIP-405 style), its data model, metadata managers and a backend conformance kit.

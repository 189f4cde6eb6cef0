//! Filesystem backend of the krabka RemoteStorageManager SPI: atomic, fsynced segment copies with ranged reads.

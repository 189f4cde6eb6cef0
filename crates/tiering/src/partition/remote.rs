//! [`RemoteTier`]: one connection to a partition directory's remote tier, serving both as the
//! SPI backend segments are copied to and read from (always through the transforming layer)
//! and as the store of the ownership records and listings.

use std::path::Path;
use std::sync::Arc;

use krabka_remote_storage::RemoteStorageManager;
use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_transform::{TransformConfig, Transforming};

use crate::error::Error;

/// A remote tier, connected once: the backend (a filesystem directory, an S3 bucket and
/// prefix, or any store implementing both [`RemoteStorageManager`] and [`OwnershipStore`]), the
/// transforming layer over it, and the location a binding records.
///
/// Segments go through the transforming layer whatever its config: with none it copies them as
/// they are and still reads the compressed or encrypted segments a bucket may hold (each
/// records its transform). Ownership records, heads and listings go to the backend itself.
#[derive(Clone)]
pub struct RemoteTier {
    location: String,
    store: Arc<dyn OwnershipStore>,
    segments: Arc<Transforming>,
    instrumented: Option<Arc<dyn RemoteStorageManager>>,
}

impl std::fmt::Debug for RemoteTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteTier")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl RemoteTier {
    /// The remote tier at `location` (as a binding records it: stable across runs and
    /// machines, e.g. `s3://bucket/prefix` or `fs:///absolute/path`) reached through
    /// `backend`, its segments transformed as `transform` says.
    pub fn new<B>(backend: Arc<B>, location: impl Into<String>, transform: TransformConfig) -> Self
    where
        B: RemoteStorageManager + OwnershipStore + 'static,
    {
        let store: Arc<dyn OwnershipStore> = backend.clone();
        let rsm: Arc<dyn RemoteStorageManager> = backend;
        Self {
            location: location.into(),
            store,
            segments: Arc::new(Transforming::new(rsm, transform)),
            instrumented: None,
        }
    }

    /// The filesystem remote tier in `root`, created when missing only if `create`. Its
    /// location is `fs://` and the absolute path with every symlink resolved, so a relative
    /// path from another working directory names the same remote.
    ///
    /// # Errors
    /// [`OwnershipError::RemoteUnusable`](crate::OwnershipError::RemoteUnusable) when `root` is missing (and not to be created), cannot be
    /// resolved, or is refused by the backend (a file, the filesystem root).
    #[cfg(feature = "fs")]
    pub fn fs(root: &Path, create: bool, transform: TransformConfig) -> Result<Self, Error> {
        let unusable = |reason: String| {
            Error::Ownership(crate::error::OwnershipError::RemoteUnusable {
                remote: format!("fs://{}", root.display()),
                reason,
            })
        };
        if !create && !root.is_dir() {
            return Err(unusable("the directory does not exist".to_owned()));
        }
        let backend = crate::fs::FsRemoteStorage::new(root.to_path_buf())
            .map_err(|e| unusable(e.to_string()))?;
        let abs = std::fs::canonicalize(root)
            .map_err(|e| unusable(format!("cannot resolve the directory: {e}")))?;
        Ok(Self::new(
            Arc::new(backend),
            format!("fs://{}", abs.display()),
            transform,
        ))
    }

    /// The same remote with every segment call made through `wrap` (e.g.
    /// [`Instrumented`](crate::Instrumented)) around the transforming layer.
    #[must_use]
    pub fn wrapped(
        mut self,
        wrap: impl FnOnce(Arc<dyn RemoteStorageManager>) -> Arc<dyn RemoteStorageManager>,
    ) -> Self {
        let inner: Arc<dyn RemoteStorageManager> = self.segments.clone();
        self.instrumented = Some(wrap(inner));
        self
    }

    /// The location a binding records.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The store of ownership records, heads and listings (the backend itself).
    pub fn store(&self) -> Arc<dyn OwnershipStore> {
        Arc::clone(&self.store)
    }

    /// The SPI backend segments are copied to and read from.
    pub fn segments(&self) -> Arc<dyn RemoteStorageManager> {
        match &self.instrumented {
            Some(wrapped) => Arc::clone(wrapped),
            None => self.segments.clone(),
        }
    }

    /// The transforming layer over the backend.
    pub fn transforming(&self) -> Arc<Transforming> {
        Arc::clone(&self.segments)
    }
}

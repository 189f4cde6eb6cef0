//! The directory a `demo` or `bench` runs in: a given new-or-empty one, or a temporary one
//! removed at the end.

use std::path::{Path, PathBuf};

use crate::error::{CliError, Result};

/// A working directory; see the module docs.
#[derive(Debug)]
pub struct WorkDir {
    path: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

impl WorkDir {
    /// Uses `dir` (created when missing; refused when it holds anything) or a fresh temporary
    /// directory.
    ///
    /// # Errors
    /// When `dir` is not empty or cannot be created.
    pub fn new(dir: Option<&Path>) -> Result<Self> {
        match dir {
            Some(dir) => {
                if dir.exists() {
                    let mut entries = std::fs::read_dir(dir)
                        .map_err(|e| CliError::at("cannot use directory", dir, e))?;
                    if entries.next().is_some() {
                        return Err(CliError::new(format!(
                            "directory {} is not empty",
                            dir.display()
                        ))
                        .hint(
                            "pass a new or empty directory, or leave out --dir for a temporary one",
                        ));
                    }
                }
                std::fs::create_dir_all(dir)
                    .map_err(|e| CliError::at("cannot create directory", dir, e))?;
                Ok(Self {
                    path: dir.to_path_buf(),
                    _temp: None,
                })
            }
            None => {
                let temp = tempfile::Builder::new()
                    .prefix("krabka-")
                    .tempdir()
                    .map_err(|e| {
                        CliError::new(format!("cannot create a temporary directory: {e}"))
                            .hint("set TMPDIR to a writable directory or pass --dir")
                    })?;
                Ok(Self {
                    path: temp.path().to_path_buf(),
                    _temp: Some(temp),
                })
            }
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether it is removed at the end.
    pub fn is_temporary(&self) -> bool {
        self._temp.is_some()
    }

    /// Removes a temporary directory now (a given one is kept) and says what happened to the
    /// directory, e.g. `removed the temporary directory /tmp/krabka-x`.
    pub fn finish(self) -> String {
        let path = self.path.display().to_string();
        match self._temp {
            Some(temp) => match temp.close() {
                Ok(()) => format!("removed the temporary directory {path}"),
                Err(e) => format!("could not remove the temporary directory {path}: {e}"),
            },
            None => format!("its files are in {path}"),
        }
    }
}

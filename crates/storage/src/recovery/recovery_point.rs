//! What recovery does with the recovery point (`layout::recovery_point`): every seq up to it
//! was synced, so finding fewer is damage; a repair moves a damaged file aside.

use std::fs;

use super::Recoverer;
use crate::fsutil::{self, IoResultExt};
use crate::layout::recovery_point::read_recovery_point;
use crate::{Error, QuarantinedPiece, RECOVERY_POINT_FILE_NAME, RecoveryMode};

impl Recoverer<'_> {
    /// The recovery point of the log (0 when there is none). A repair moves a damaged
    /// recovery point file aside and goes by the segment files alone.
    pub(super) fn read_point(&mut self) -> Result<u64, Error> {
        match read_recovery_point(self.dir) {
            Ok(point) => Ok(point.unwrap_or(0)),
            Err(e) if self.opts.recovery == RecoveryMode::Repair => {
                let path = self.dir.join(RECOVERY_POINT_FILE_NAME);
                let to = self.free_name(RECOVERY_POINT_FILE_NAME)?;
                fs::rename(&path, &to).map_err(|e| Error::io(&path, e))?;
                let qdir = self.quarantine_dir()?;
                fsutil::fsync_dir(&qdir).at(&qdir)?;
                fsutil::fsync_dir(self.dir).at(self.dir)?;
                self.report.quarantined.push(QuarantinedPiece {
                    from: path,
                    position: 0,
                    bytes: 0,
                    to,
                    seqs: None,
                    reason: e.to_string(),
                });
                Ok(0)
            }
            Err(e) => Err(e),
        }
    }
}

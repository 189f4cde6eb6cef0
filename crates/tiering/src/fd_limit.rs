//! The process's file descriptor limit, which an error on running out of descriptors names
//! ([`Error::TooManyOpenFiles`](crate::Error::TooManyOpenFiles)).

use rustix::io::Errno;
use rustix::process::{Resource, getrlimit};

/// The process's soft `RLIMIT_NOFILE` (`getrlimit`, on every Unix); `None` when it is
/// unlimited. Takes no descriptor, so it answers also when the process has none left.
pub fn open_files_limit() -> Option<u64> {
    getrlimit(Resource::Nofile).current
}

/// Whether `e` says the process (`EMFILE`) or the system (`ENFILE`) is out of file
/// descriptors.
pub(crate) fn is_fd_exhaustion(e: &std::io::Error) -> bool {
    matches!(Errno::from_io_error(e), Some(Errno::MFILE | Errno::NFILE))
}

/// `EMFILE` as an I/O error, for an exhaustion reported without an OS error code.
pub(crate) fn emfile() -> std::io::Error {
    std::io::Error::from_raw_os_error(Errno::MFILE.raw_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_the_soft_rlimit_and_emfile_is_exhaustion() {
        let limit = getrlimit(Resource::Nofile);
        assert_eq!(open_files_limit(), limit.current);
        assert!(is_fd_exhaustion(&emfile()));
        assert!(is_fd_exhaustion(&std::io::Error::from_raw_os_error(
            Errno::NFILE.raw_os_error()
        )));
        assert!(!is_fd_exhaustion(&std::io::Error::from_raw_os_error(
            Errno::NOENT.raw_os_error()
        )));
        assert!(!is_fd_exhaustion(&std::io::Error::other("no code")));
    }
}

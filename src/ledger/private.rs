//! The ledger's files are evidence and hold what every event and plan said: nobody but the
//! gateway's own user may read them. sled creates its files with the process's umask (0644 on
//! most systems) and offers no mode of its own, and the umask cannot be set without `unsafe`,
//! so the ledger makes its **directory** 0700 before sled opens it (whatever sled writes there
//! later is out of other users' reach) and narrows every file already there to 0600, directories
//! to 0700.

use std::io;
use std::path::Path;

/// Create `dir` (and its parents) if needed, with mode 0700 for the directories this creates.
pub(crate) fn create_private_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir_all(dir)
    }
}

/// Make `dir` 0700 and everything in it owner-only (files 0600, directories 0700), recursively.
pub(crate) fn restrict_to_owner(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                restrict_to_owner(&entry.path())?;
            } else if kind.is_file() {
                std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o600))?;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

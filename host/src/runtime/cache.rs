//! Compiled components cached on disk by content digest and engine settings.
//!
//! Compiling a component takes tens to hundreds of milliseconds; loading precompiled bytes
//! takes well under one. The file name carries the engine's compatibility hash, so a host
//! with other settings or another wasmtime never loads an artifact it cannot run.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

/// A directory of `<digest>-<engine hash>.cwasm` files.
pub(super) struct DiskCache {
    dir: PathBuf,
    engine_tag: String,
}

impl DiskCache {
    pub(super) fn new(dir: &Path, engine: &Engine) -> Self {
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Self {
            dir: dir.to_path_buf(),
            engine_tag: format!("{:016x}", hasher.finish()),
        }
    }

    fn path(&self, digest_hex: &str) -> PathBuf {
        self.dir
            .join(format!("{digest_hex}-{}.cwasm", self.engine_tag))
    }

    /// The cached compilation of `digest_hex`, if there is a usable one.
    pub(super) fn load(&self, engine: &Engine, digest_hex: &str) -> Option<Component> {
        use std::os::unix::fs::OpenOptionsExt;
        use std::os::unix::io::AsRawFd;
        let path = self.path(digest_hex);
        // Opened first, never through a symbolic link, and checked as opened: what is
        // checked is what is loaded, with no gap for a swap between the two.
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(path = %path.display(), "not loading a compiled component: {e} (a symbolic link is never followed); compiling instead");
                return None;
            }
        };
        // A compiled component is native code: load it only from a directory (and a file)
        // that this host's user owns and nobody else may write.
        let checked = trusted(&self.dir).and_then(|()| {
            let meta = file
                .metadata()
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            if !meta.is_file() {
                return Err(format!("{} is not a regular file", path.display()));
            }
            trusted_meta(&path, &meta)
        });
        if let Err(why) = checked {
            tracing::warn!(path = %path.display(), "not loading a compiled component: {why}; compiling instead");
            return None;
        }
        // The open file itself, by its descriptor: the kernel resolves this to the inode
        // checked above whatever happens to the name meanwhile.
        let opened = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        // SAFETY: the file was written by `store` below from `Component::serialize` of a
        // component whose bytes hash to `digest_hex`, under an engine with the same
        // compatibility hash; the cache directory and the opened file belong to this host.
        let loaded = unsafe { Component::deserialize_file(engine, &opened) };
        drop(file);
        match loaded {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(path = %path.display(), "ignoring unusable compiled component: {e}");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Deletes the compilation of `digest_hex`, if there is one.
    pub(super) fn remove(&self, digest_hex: &str) {
        let _ = std::fs::remove_file(self.path(digest_hex));
    }

    /// Writes the compilation atomically (temp file, then rename); failures only cost speed.
    pub(super) fn store(&self, digest_hex: &str, component: &Component) {
        let result = (|| -> std::io::Result<()> {
            std::fs::create_dir_all(&self.dir)?;
            let bytes = component.serialize().map_err(std::io::Error::other)?;
            let path = self.path(digest_hex);
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = result {
            tracing::warn!(dir = %self.dir.display(), "could not cache compiled component: {e}");
        }
    }
}

/// Whether `path` is owned by this process's user and writable by nobody else.
pub(super) fn trusted(path: &Path) -> Result<(), String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    trusted_meta(path, &meta)
}

/// [`trusted`] for metadata already read (of an open file).
fn trusted_meta(path: &Path, meta: &std::fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(format!(
            "{} belongs to user {}, not to this host's user {me}",
            path.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is writable by its group or by others (mode {:o}); `chmod go-w` it",
            path.display(),
            meta.mode() & 0o777
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn only_a_directory_no_one_else_may_write_is_trusted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(trusted(dir.path()), Ok(()));
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let why = trusted(dir.path()).unwrap_err();
        assert!(why.contains("writable by its group or by others"), "{why}");
        assert!(trusted(&dir.path().join("missing")).is_err());
    }

    /// A cached artifact reached through a symbolic link is never loaded (whatever the
    /// link points at), and a real one is.
    #[test]
    fn a_symbolic_link_in_the_cache_is_never_followed() {
        let engine = Engine::default();
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let cache = DiskCache::new(dir.path(), &engine);
        let component = Component::new(&engine, wasm_encoder::Component::new().finish()).unwrap();
        cache.store("real", &component);
        assert!(cache.load(&engine, "real").is_some());
        std::os::unix::fs::symlink(cache.path("real"), cache.path("linked")).unwrap();
        assert!(cache.load(&engine, "linked").is_none());
        assert!(cache.load(&engine, "missing").is_none());
    }
}

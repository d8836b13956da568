//! NVIDIA runtime files that Debian does not package (cuDNN) live in a folder of
//! tinyperf's own (`/usr/lib/tinyperf/nvidia`), which only tinyperf's unit puts on the
//! library path. So that `tinyperf` started from a shell finds them too, each library
//! there is opened once by its full path before any binding asks for it by name: the
//! loader then answers a later `dlopen("libcudnn.so.9")` with the copy already loaded, and
//! cuDNN finds its own parts beside itself.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The folder, unless `TINYPERF_NVIDIA_LIBRARY_DIR` names another.
pub const DEFAULT_FOLDER: &str = "/usr/lib/tinyperf/nvidia";

/// The libraries opened ahead: the entry points of what the folder holds, not the
/// per-engine parts cuDNN opens itself when it needs them.
const PRELOADED: &[&str] = &["libcudnn.so.9"];

fn folder() -> PathBuf {
    std::env::var_os("TINYPERF_NVIDIA_LIBRARY_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_FOLDER))
}

/// Opens the folder's libraries once per process; the files that loaded.
pub fn preload() -> &'static [PathBuf] {
    static LOADED: OnceLock<Vec<PathBuf>> = OnceLock::new();
    LOADED.get_or_init(|| preload_from(&folder()))
}

fn preload_from(folder: &Path) -> Vec<PathBuf> {
    let mut loaded = Vec::new();
    for name in PRELOADED {
        let path = folder.join(name);
        if !path.exists() {
            continue;
        }
        // SAFETY: opening a library runs only its own initialisers.
        match unsafe { libloading::Library::new(&path) } {
            Ok(library) => {
                // Kept for the life of the process, as the bindings keep theirs.
                std::mem::forget(library);
                loaded.push(path);
            }
            Err(error) => tracing::warn!(path = %path.display(), %error, "cannot load"),
        }
    }
    loaded
}

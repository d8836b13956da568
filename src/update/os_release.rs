//! `os-release(5)`: which OS this is, and for an image, its id and version.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The files looked at, in order, below the root: the first that exists is read.
pub const PLACES: &[&str] = &["usr/lib/os-release", "etc/os-release"];

/// The assignments of an os-release file, with the file they came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OsRelease {
    /// The file read.
    pub path: PathBuf,
    /// Every `KEY=value`, unquoted.
    pub fields: BTreeMap<String, String>,
}

impl OsRelease {
    /// Reads the first of [`PLACES`] under `root` that exists; `None` when neither does
    /// or the one found cannot be read.
    pub fn read(root: &Path) -> Option<OsRelease> {
        PLACES.iter().find_map(|place| {
            let path = root.join(place);
            let text = std::fs::read_to_string(&path).ok()?;
            Some(OsRelease {
                fields: crate::inventory::os_release::parse(&text),
                path,
            })
        })
    }

    /// The value of `key`, when it is set and not empty.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usr_lib_comes_before_etc() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("usr/lib")).unwrap();
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        assert!(OsRelease::read(root.path()).is_none());
        std::fs::write(root.path().join("etc/os-release"), "ID=debian\n").unwrap();
        assert_eq!(
            OsRelease::read(root.path()).unwrap().get("ID"),
            Some("debian")
        );
        std::fs::write(root.path().join("usr/lib/os-release"), "ID=tinybox\n").unwrap();
        let release = OsRelease::read(root.path()).unwrap();
        assert_eq!(release.get("ID"), Some("tinybox"));
        assert!(release.path.ends_with("usr/lib/os-release"));
    }
}

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
                fields: parse(&text),
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

/// The assignments in os-release text: `KEY=value`, the value bare, in double quotes
/// (with `\` escapes) or in single quotes; comments, blank lines and lines that are
/// not assignments are skipped.
pub fn parse(text: &str) -> BTreeMap<String, String> {
    let mut fields = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        fields.insert(key.to_string(), unquote(value.trim()));
    }
    fields
}

fn unquote(value: &str) -> String {
    let bytes = value.as_bytes();
    if bytes.len() >= 2 && bytes[0] == b'\'' && bytes[bytes.len() - 1] == b'\'' {
        return value[1..value.len() - 1].to_string();
    }
    if bytes.len() >= 2 && bytes[0] == b'"' && bytes[bytes.len() - 1] == b'"' {
        let mut out = String::new();
        let mut chars = value[1..value.len() - 1].chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                if let Some(next) = chars.next() {
                    out.push(next);
                }
            } else {
                out.push(c);
            }
        }
        return out;
    }
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_are_read_bare_and_quoted() {
        let fields = parse(
            "# comment\nNAME=\"tinybox OS\"\nIMAGE_ID=tinybox\nIMAGE_VERSION='20261205.1130'\n\
             PRETTY_NAME=\"say \\\"hi\\\"\"\nnot an assignment\n=x\nBAD KEY=1\n",
        );
        assert_eq!(fields["NAME"], "tinybox OS");
        assert_eq!(fields["IMAGE_ID"], "tinybox");
        assert_eq!(fields["IMAGE_VERSION"], "20261205.1130");
        assert_eq!(fields["PRETTY_NAME"], "say \"hi\"");
        assert_eq!(fields.len(), 4);
    }

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

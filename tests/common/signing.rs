//! Signed update folders for the update tests: a throwaway OpenPGP key made with real
//! gpg, and folders laid out as `image/build.sh` writes them (`SHA256SUMS`, its
//! detached signature, each version's three files with small stand-in contents).

use std::path::Path;
use std::process::{Command, Output};

/// The partition UUIDs in the stand-in files' names.
pub const UUID_R: &str = "0b6a2b1f-9e0d-4c7b-8a6f-3e2d1c0b9a8f";
/// The verity partition's.
pub const UUID_V: &str = "7e6d5c4b-3a2f-1e0d-9c8b-7a6f5e4d3c2b";

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A throwaway signing key in a gpg home of its own.
pub struct SigningKey {
    home: tempfile::TempDir,
}

impl SigningKey {
    pub fn new() -> SigningKey {
        let home = tempfile::Builder::new()
            .prefix("gpg")
            .tempdir_in("/tmp")
            .unwrap();
        let key = SigningKey { home };
        key.gpg(&[
            "--quick-generate-key",
            "tinybox updates test key <updates@tinybox.invalid>",
            "ed25519",
            "sign",
            "never",
        ]);
        key
    }

    fn gpg(&self, args: &[&str]) -> Vec<u8> {
        let out = Command::new("gpg")
            .arg("--homedir")
            .arg(self.home.path())
            .args(["--batch", "--pinentry-mode", "loopback", "--passphrase", ""])
            .args(args)
            .output()
            .expect("gpg runs");
        assert!(out.status.success(), "gpg {args:?}: {}", text(&out));
        out.stdout
    }

    /// The public key, as the image carries it (`import-pubring.gpg`).
    pub fn export_to(&self, path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, self.gpg(&["--export"])).unwrap();
    }

    /// Signs `folder/SHA256SUMS` into `SHA256SUMS.gpg`.
    pub fn sign(&self, folder: &Path) {
        let sums = folder.join("SHA256SUMS");
        let sig = folder.join("SHA256SUMS.gpg");
        let _ = std::fs::remove_file(&sig);
        self.gpg(&[
            "--detach-sign",
            "--output",
            sig.to_str().unwrap(),
            sums.to_str().unwrap(),
        ]);
    }
}

impl Drop for SigningKey {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf")
            .arg("--homedir")
            .arg(self.home.path())
            .args(["--kill", "all"])
            .output();
    }
}

/// Writes a version's three update files into `folder` (small stand-in contents) and
/// lists every file of the folder in SHA256SUMS.
pub fn add_version(folder: &Path, version: &str) {
    std::fs::create_dir_all(folder).unwrap();
    for (name, body) in [
        (format!("tinybox_{version}_{UUID_R}.root.raw.xz"), "root"),
        (
            format!("tinybox_{version}_{UUID_V}.root-verity.raw.xz"),
            "hashes",
        ),
        (format!("tinybox_{version}.efi"), "uki"),
    ] {
        std::fs::write(folder.join(name), format!("{body} of {version}\n")).unwrap();
    }
    write_sums(folder);
}

pub fn write_sums(folder: &Path) {
    let out = Command::new("sh")
        .arg("-c")
        .arg("ls | grep -v '^SHA256SUMS' | xargs sha256sum > SHA256SUMS")
        .current_dir(folder)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

/// A folder offering `version`, signed by `key`.
pub fn signed_folder(key: &SigningKey, version: &str) -> tempfile::TempDir {
    let folder = tempfile::tempdir().unwrap();
    add_version(folder.path(), version);
    key.sign(folder.path());
    folder
}

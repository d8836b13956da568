//! Where updates come from and what they offer: a static HTTP(S) folder or a local
//! one (a USB stick), holding `SHA256SUMS`, its detached signature `SHA256SUMS.gpg`,
//! and per version `tinybox_V_<uuid>.root.raw.xz`, `tinybox_V_<uuid>.root-verity.raw.xz`
//! and `tinybox_V.efi`. The list is believed only once its signature verifies with
//! the keyring the image carries, and a version is offered only when all three of its
//! files are listed.

use std::cmp::Ordering;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Serialize;

use super::error::UpdateError;

/// The largest `SHA256SUMS` or signature read.
const LIST_LIMIT: u64 = 1 << 20;
/// How long one small fetch may take.
const FETCH_TIMEOUT_S: u32 = 60;

/// The keyring systemd-sysupdate reads, and its override in `/etc`.
pub const VENDOR_KEYRING: &str = "usr/lib/systemd/import-pubring.gpg";
/// The override of [`VENDOR_KEYRING`]; it replaces it, it is not merged.
pub const LOCAL_KEYRING: &str = "etc/systemd/import-pubring.gpg";

/// An update source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// An `http://` or `https://` folder; the text ends with `/`.
    Url(String),
    /// A local folder.
    Folder(PathBuf),
}

impl Source {
    /// Reads `update_url` (or `--source`): a URL, or an absolute folder.
    pub fn parse(text: &str) -> Result<Source, UpdateError> {
        let text = text.trim();
        if text.starts_with("http://") || text.starts_with("https://") {
            if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(UpdateError::BadSource(text.into()));
            }
            let mut url = text.to_string();
            if !url.ends_with('/') {
                url.push('/');
            }
            Ok(Source::Url(url))
        } else if text.starts_with('/') {
            Ok(Source::Folder(PathBuf::from(text)))
        } else {
            Err(UpdateError::BadSource(text.into()))
        }
    }

    /// The source in words (its URL or folder).
    pub fn describe(&self) -> String {
        match self {
            Source::Url(url) => url.clone(),
            Source::Folder(path) => path.display().to_string(),
        }
    }

    /// Where file `name` is, as a URL or path.
    pub fn locate(&self, name: &str) -> String {
        match self {
            Source::Url(url) => format!("{url}{name}"),
            Source::Folder(path) => path.join(name).display().to_string(),
        }
    }

    /// Fetches file `name`, at most `limit` bytes. `Ok(None)` when the source has no
    /// such file (HTTP 404, or no file in the folder).
    pub fn fetch(&self, name: &str, limit: u64) -> Result<Option<Vec<u8>>, UpdateError> {
        let what = self.locate(name);
        match self {
            Source::Folder(path) => {
                let file = match std::fs::File::open(path.join(name)) {
                    Ok(f) => f,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => {
                        return Err(UpdateError::Fetch {
                            what,
                            why: e.to_string(),
                        })
                    }
                };
                let mut bytes = Vec::new();
                file.take(limit + 1)
                    .read_to_end(&mut bytes)
                    .map_err(|e| UpdateError::Fetch {
                        what: what.clone(),
                        why: e.to_string(),
                    })?;
                if bytes.len() as u64 > limit {
                    return Err(UpdateError::Fetch {
                        what,
                        why: format!("larger than {limit} bytes"),
                    });
                }
                Ok(Some(bytes))
            }
            Source::Url(_) => curl_get(&what, limit),
        }
    }

    /// The size of file `name` in bytes, when the source says it.
    pub fn size(&self, name: &str) -> Option<u64> {
        match self {
            Source::Folder(path) => std::fs::metadata(path.join(name)).ok().map(|m| m.len()),
            Source::Url(_) => curl_size(&self.locate(name)),
        }
    }
}

/// `curl` fetches for the HTTP(S) source: it speaks TLS with the system's CAs, follows
/// redirects, and its limits keep a hostile server from filling memory.
fn curl_get(url: &str, limit: u64) -> Result<Option<Vec<u8>>, UpdateError> {
    let output = Command::new("curl")
        .args(["-sSL", "--proto", "=http,https", "--max-time"])
        .arg(FETCH_TIMEOUT_S.to_string())
        .arg("--max-filesize")
        .arg(limit.to_string())
        .args(["-w", "\n%{http_code}", "-o", "-", url])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| UpdateError::Fetch {
            what: url.into(),
            why: format!("cannot run curl: {e}"),
        })?;
    let mut body = output.stdout;
    let cut = body.iter().rposition(|&b| b == b'\n').unwrap_or(0);
    let code: u32 = String::from_utf8_lossy(&body[cut..])
        .trim()
        .parse()
        .unwrap_or(0);
    body.truncate(cut);
    if !output.status.success() {
        let why = String::from_utf8_lossy(&output.stderr).trim().to_string();
        return Err(UpdateError::Fetch {
            what: url.into(),
            why: if why.is_empty() {
                format!("curl exited with {}", output.status)
            } else {
                why
            },
        });
    }
    match code {
        200 => Ok(Some(body)),
        404 | 410 => Ok(None),
        other => Err(UpdateError::Fetch {
            what: url.into(),
            why: format!("HTTP status {other}"),
        }),
    }
}

fn curl_size(url: &str) -> Option<u64> {
    let output = Command::new("curl")
        .args(["-sSIL", "--proto", "=http,https", "--max-time", "30", url])
        .stdin(Stdio::null())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .rev()
        .filter_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<u64>().ok())?
        })
        .next()
}

/// One line of `SHA256SUMS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The file's name.
    pub name: String,
    /// Its sha256, lower-case hex.
    pub sha256: String,
}

/// Reads `SHA256SUMS`: `HEX  NAME` or `HEX *NAME` per line; blank lines are skipped.
pub fn parse_sums(text: &str) -> Result<Vec<Listed>, String> {
    let mut listed = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = || {
            format!(
                "line {}: {:?}",
                number + 1,
                line.chars().take(120).collect::<String>()
            )
        };
        let (hash, rest) = line.split_once(' ').ok_or_else(bad)?;
        let name = rest
            .strip_prefix(' ')
            .or_else(|| rest.strip_prefix('*'))
            .ok_or_else(bad)?;
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(bad());
        }
        listed.push(Listed {
            name: name.to_string(),
            sha256: hash.to_ascii_lowercase(),
        });
    }
    Ok(listed)
}

/// The three files of one version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OfferedVersion {
    /// The version.
    pub version: String,
    /// Its root filesystem's file.
    pub root: String,
    /// Its verity hash partition's file.
    pub verity: String,
    /// Its UKI's file.
    pub uki: String,
}

impl OfferedVersion {
    /// Its three file names, root first and the UKI last.
    pub fn files(&self) -> [&str; 3] {
        [&self.root, &self.verity, &self.uki]
    }
}

/// The versions a list offers whole, newest first, and for each version with some
/// files missing, what it lacks.
pub fn offered(listed: &[Listed]) -> (Vec<OfferedVersion>, Vec<(String, String)>) {
    use std::collections::BTreeMap;
    #[derive(Default)]
    struct Parts {
        root: Option<String>,
        verity: Option<String>,
        uki: Option<String>,
    }
    let mut versions: BTreeMap<String, Parts> = BTreeMap::new();
    for file in listed {
        let Some(stem) = file.name.strip_prefix("tinybox_") else {
            continue;
        };
        if let Some(version) = stem.strip_suffix(".efi") {
            if !version.contains(['_', '+', '-']) && !version.is_empty() {
                versions.entry(version.into()).or_default().uki = Some(file.name.clone());
            }
            continue;
        }
        for (suffix, is_root) in [(".root.raw.xz", true), (".root-verity.raw.xz", false)] {
            if let Some(rest) = stem.strip_suffix(suffix) {
                if let Some((version, uuid)) = rest.split_once('_') {
                    if !version.is_empty() && uuid.len() == 36 {
                        let parts = versions.entry(version.into()).or_default();
                        if is_root {
                            parts.root = Some(file.name.clone());
                        } else {
                            parts.verity = Some(file.name.clone());
                        }
                    }
                }
            }
        }
    }
    let mut whole = Vec::new();
    let mut partial = Vec::new();
    for (version, parts) in versions {
        match (parts.root, parts.verity, parts.uki) {
            (Some(root), Some(verity), Some(uki)) => whole.push(OfferedVersion {
                version,
                root,
                verity,
                uki,
            }),
            (root, verity, uki) => {
                let missing: Vec<&str> = [
                    (root.is_none(), "the root filesystem (.root.raw.xz)"),
                    (verity.is_none(), "the verity hashes (.root-verity.raw.xz)"),
                    (uki.is_none(), "the UKI (.efi)"),
                ]
                .iter()
                .filter(|(absent, _)| *absent)
                .map(|(_, what)| *what)
                .collect();
                partial.push((version, format!("missing {}", missing.join(" and "))));
            }
        }
    }
    whole.sort_by(|a, b| compare_versions(&b.version, &a.version));
    (whole, partial)
}

/// Orders versions as systemd does (`strverscmp_improved`, simplified to what image
/// versions use): runs of digits compare as numbers, `~` sorts before anything, other
/// characters by their code.
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (Some(b'~'), Some(b'~')) => {
                a = &a[1..];
                b = &b[1..];
                continue;
            }
            (Some(b'~'), _) => return Ordering::Less,
            (_, Some(b'~')) => return Ordering::Greater,
            (None, _) => return Ordering::Less,
            (_, None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let da = a.iter().take_while(|c| c.is_ascii_digit()).count();
                let db = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let na = trim_zeros(&a[..da]);
                let nb = trim_zeros(&b[..db]);
                let order = na.len().cmp(&nb.len()).then_with(|| na.cmp(nb));
                if order != Ordering::Equal {
                    return order;
                }
                a = &a[da..];
                b = &b[db..];
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                a = &a[1..];
                b = &b[1..];
            }
        }
    }
}

fn trim_zeros(digits: &[u8]) -> &[u8] {
    let zeros = digits.iter().take_while(|&&d| d == b'0').count();
    &digits[zeros..]
}

/// The keyring that vouches for updates below `root`: `/etc`'s when present, else
/// the image's.
pub fn keyring(root: &Path) -> PathBuf {
    let local = root.join(LOCAL_KEYRING);
    if local.exists() {
        local
    } else {
        root.join(VENDOR_KEYRING)
    }
}

/// A source's list, once its signature verified.
#[derive(Debug, Clone)]
pub struct VerifiedList {
    /// What `SHA256SUMS` lists.
    pub listed: Vec<Listed>,
    /// The versions offered whole, newest first.
    pub versions: Vec<OfferedVersion>,
    /// Versions with files missing, and what they lack.
    pub partial: Vec<(String, String)>,
}

impl VerifiedList {
    /// The sha256 `SHA256SUMS` lists for `name`.
    pub fn sha256_of(&self, name: &str) -> Option<&str> {
        self.listed
            .iter()
            .find(|l| l.name == name)
            .map(|l| l.sha256.as_str())
    }
}

/// Fetches `SHA256SUMS` and `SHA256SUMS.gpg`, checks the signature with `gpgv` against
/// `keyring`, and reads the list. Unsigned, wrongly signed and malformed lists are
/// refused.
pub fn read_verified(source: &Source, keyring: &Path) -> Result<VerifiedList, UpdateError> {
    if !keyring.is_file() {
        return Err(UpdateError::NoKeyring(keyring.to_path_buf()));
    }
    let sums = source
        .fetch("SHA256SUMS", LIST_LIMIT)?
        .ok_or_else(|| UpdateError::Fetch {
            what: source.locate("SHA256SUMS"),
            why: "not there (is this an update folder?)".into(),
        })?;
    let signature = source
        .fetch("SHA256SUMS.gpg", LIST_LIMIT)?
        .ok_or_else(|| UpdateError::Unsigned(source.locate("SHA256SUMS.gpg")))?;
    verify_signature(&sums, &signature, keyring).map_err(|why| UpdateError::BadSignature {
        source_name: source.describe(),
        keyring: keyring.to_path_buf(),
        why,
    })?;
    let text = String::from_utf8(sums).map_err(|_| UpdateError::BadList {
        source_name: source.describe(),
        why: "not UTF-8 text".into(),
    })?;
    let listed = parse_sums(&text).map_err(|why| UpdateError::BadList {
        source_name: source.describe(),
        why,
    })?;
    let (versions, partial) = offered(&listed);
    Ok(VerifiedList {
        listed,
        versions,
        partial,
    })
}

/// `gpgv --keyring KEYRING SIG DATA`; the reason gpgv gives when it does not verify.
pub fn verify_signature(data: &[u8], signature: &[u8], keyring: &Path) -> Result<(), String> {
    let dir = ScratchDir::new().map_err(|e| format!("cannot make a folder for gpgv: {e}"))?;
    let data_path = dir.0.join("SHA256SUMS");
    let sig_path = dir.0.join("SHA256SUMS.gpg");
    std::fs::write(&data_path, data).map_err(|e| e.to_string())?;
    std::fs::write(&sig_path, signature).map_err(|e| e.to_string())?;
    let output = Command::new("gpgv")
        .arg("--homedir")
        .arg(&dir.0)
        .arg("--keyring")
        .arg(keyring)
        .arg(&sig_path)
        .arg(&data_path)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run gpgv: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&output.stderr);
    let reason = said
        .lines()
        .map(|l| l.trim_start_matches("gpgv: ").trim())
        .filter(|l| !l.is_empty() && !l.starts_with("Signature made") && !l.starts_with("using "))
        .collect::<Vec<_>>()
        .join("; ");
    Err(if reason.is_empty() {
        format!("gpgv exited with {}", output.status)
    } else {
        reason
    })
}

/// A private folder under the temporary folder, removed when dropped.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new() -> std::io::Result<ScratchDir> {
        use std::os::unix::fs::DirBuilderExt;
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|e| std::io::Error::other(e.to_string()))?;
        let path = std::env::temp_dir().join(format!("tinyperf-{}", hex(&random)));
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(ScratchDir(path))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The sha256 of a local file, by coreutils' `sha256sum` (streamed, and as fast as
/// the machine's sha extensions allow).
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let output = Command::new("sha256sum")
        .arg("--")
        .arg(path)
        .stdin(Stdio::null())
        .output()?;
    if !output.status.success() {
        return Err(std::io::Error::other(
            String::from_utf8_lossy(&output.stderr).trim().to_string(),
        ));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let hash = text.split_whitespace().next().unwrap_or_default();
    if hash.len() != 64 {
        return Err(std::io::Error::other(format!("sha256sum said {text:?}")));
    }
    Ok(hash.to_string())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID_R: &str = "0b6a2b1f-9e0d-4c7b-8a6f-3e2d1c0b9a8f";
    const UUID_V: &str = "7e6d5c4b-3a2f-1e0d-9c8b-7a6f5e4d3c2b";

    fn line(name: &str) -> String {
        format!("{}  {name}\n", "ab".repeat(32))
    }

    #[test]
    fn sources_are_urls_or_absolute_folders() {
        assert_eq!(
            Source::parse("https://updates.example/green").unwrap(),
            Source::Url("https://updates.example/green/".into())
        );
        assert_eq!(
            Source::parse("/media/usb/").unwrap(),
            Source::Folder("/media/usb/".into())
        );
        for bad in ["ftp://x/", "updates", "", "http://a b/"] {
            assert!(
                matches!(Source::parse(bad), Err(UpdateError::BadSource(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn whole_versions_are_offered_newest_first_and_partial_ones_say_what_they_lack() {
        let text = [
            line(&format!("tinybox_1_{UUID_R}.root.raw.xz")),
            line(&format!("tinybox_1_{UUID_V}.root-verity.raw.xz")),
            line("tinybox_1.efi"),
            line(&format!("tinybox_10_{UUID_R}.root.raw.xz")),
            line(&format!("tinybox_10_{UUID_V}.root-verity.raw.xz")),
            line("tinybox_10.efi"),
            line(&format!("tinybox_11_{UUID_R}.root.raw.xz")),
            line(&format!("tinybox_11_{UUID_V}.root-verity.raw.xz")),
            line("README.txt"),
        ]
        .concat();
        let listed = parse_sums(&text).unwrap();
        let (whole, partial) = offered(&listed);
        let names: Vec<&str> = whole.iter().map(|v| v.version.as_str()).collect();
        assert_eq!(names, ["10", "1"]);
        assert_eq!(whole[0].uki, "tinybox_10.efi");
        assert_eq!(
            partial,
            [("11".to_string(), "missing the UKI (.efi)".to_string())]
        );
    }

    #[test]
    fn malformed_lists_name_their_line() {
        let err = parse_sums("xyz  tinybox_1.efi\n").unwrap_err();
        assert!(err.contains("line 1"), "{err}");
        assert!(parse_sums(&format!("{}  ../etc/passwd\n", "a".repeat(64))).is_err());
        assert!(parse_sums(&format!("{} *tinybox_1.efi\n", "A".repeat(64))).is_ok());
    }

    #[test]
    fn versions_compare_as_systemd_orders_them() {
        use Ordering::*;
        for (a, b, order) in [
            ("20261205.120000", "20261205.120001", Less),
            ("9", "10", Less),
            ("1.10", "1.9", Greater),
            ("2~rc1", "2", Less),
            ("007", "7", Equal),
            ("2a", "2", Greater),
        ] {
            assert_eq!(compare_versions(a, b), order, "{a} vs {b}");
        }
    }

    #[test]
    fn a_folder_source_reads_files_and_says_when_one_is_absent() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("SHA256SUMS"), "x").unwrap();
        let source = Source::Folder(dir.path().into());
        assert_eq!(source.fetch("SHA256SUMS", 10).unwrap().unwrap(), b"x");
        assert_eq!(source.fetch("SHA256SUMS.gpg", 10).unwrap(), None);
        assert_eq!(source.size("SHA256SUMS"), Some(1));
        std::fs::write(dir.path().join("big"), vec![0u8; 100]).unwrap();
        assert!(source.fetch("big", 10).is_err());
    }
}

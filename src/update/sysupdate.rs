//! Driving systemd-sysupdate: its transfer definitions rendered from the image's
//! templates for the configured source, and `systemd-sysupdate update VERSION` run with
//! a notification socket of ours, on which it reports how far along it is
//! (`X_SYSUPDATE_PROGRESS=`, percent of the whole update).

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::error::UpdateError;
use super::source::Source;

/// The templates, below the root.
pub const TEMPLATES_DIR: &str = "usr/lib/tinyperf/sysupdate.d";
/// The binary, below the root.
pub const SYSUPDATE: &str = "usr/lib/systemd/systemd-sysupdate";
/// How many of systemd-sysupdate's last log lines an error quotes.
const ERROR_LINES: usize = 4;

/// Fills a template's `@SOURCE_TYPE@`, `@SOURCE_PATH@` and `@VERIFY@` for `source`: an
/// HTTP(S) source is `url-file` and verified by systemd-sysupdate itself; a folder is
/// `regular-file`, which it cannot verify, so tinyperf checks its files first.
pub fn render(template: &str, source: &Source) -> String {
    let (kind, path, verify) = match source {
        Source::Url(url) => ("url-file", url.clone(), "yes"),
        Source::Folder(folder) => ("regular-file", folder.display().to_string(), "no"),
    };
    template
        .replace("@SOURCE_TYPE@", kind)
        .replace("@SOURCE_PATH@", &path)
        .replace("@VERIFY@", verify)
}

/// Renders every `*.transfer.in` of `templates` into `out` as `*.transfer`, replacing
/// what was there. Returns the files written.
pub fn write_definitions(
    templates: &Path,
    out: &Path,
    source: &Source,
) -> Result<Vec<PathBuf>, UpdateError> {
    let io = |what: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| UpdateError::Io { what, path, source }
    };
    let mut names: Vec<String> = std::fs::read_dir(templates)
        .map_err(io("cannot read the transfer templates in", templates))?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".transfer.in"))
        .collect();
    names.sort();
    if names.is_empty() {
        return Err(UpdateError::NotAnImage(format!(
            "no transfer templates (*.transfer.in) in {}",
            templates.display()
        )));
    }
    if out.exists() {
        std::fs::remove_dir_all(out).map_err(io("cannot clear", out))?;
    }
    std::fs::create_dir_all(out).map_err(io("cannot create", out))?;
    let mut written = Vec::new();
    for name in names {
        let from = templates.join(&name);
        let text = std::fs::read_to_string(&from).map_err(io("cannot read", &from))?;
        let to = out.join(name.trim_end_matches(".in"));
        std::fs::write(&to, render(&text, source)).map_err(io("cannot write", &to))?;
        written.push(to);
    }
    Ok(written)
}

/// Runs `sysupdate --definitions=DEFINITIONS update VERSION`, calling `progress` with
/// the percentage it last reported, at each report and at least four times a second.
/// Fails with the last lines it logged.
pub fn update(
    sysupdate: &Path,
    definitions: &Path,
    version: &str,
    mut progress: impl FnMut(u32),
) -> Result<(), UpdateError> {
    let socket_dir = definitions.with_extension("notify");
    let _ = std::fs::remove_dir_all(&socket_dir);
    std::fs::create_dir_all(&socket_dir).map_err(|source| UpdateError::Io {
        what: "cannot create",
        path: socket_dir.clone(),
        source,
    })?;
    let socket_path = socket_dir.join("notify");
    let socket = UnixDatagram::bind(&socket_path).map_err(|source| UpdateError::Io {
        what: "cannot bind a notification socket at",
        path: socket_path.clone(),
        source,
    })?;
    socket
        .set_read_timeout(Some(Duration::from_millis(250)))
        .map_err(|e| UpdateError::Sysupdate(e.to_string()))?;
    let mut child = Command::new(sysupdate)
        .arg(format!("--definitions={}", definitions.display()))
        .args(["--no-pager", "update", version])
        .env("NOTIFY_SOCKET", &socket_path)
        .env("SYSTEMD_LOG_LEVEL", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| UpdateError::Sysupdate(format!("cannot run {}: {e}", sysupdate.display())))?;
    let tail = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let readers: Vec<_> = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|stream| {
        let tail = tail.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                tracing::info!(target: "systemd-sysupdate", "{line}");
                let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                tail.push(line);
                if tail.len() > 50 {
                    tail.remove(0);
                }
            }
        })
    })
    .collect();
    let mut buffer = [0u8; 4096];
    let mut percent = 0;
    let status = loop {
        // Called on each notification and on each quiet read timeout alike, so the
        // caller can renew its state while a large file downloads between percents.
        if let Ok(n) = socket.recv(&mut buffer) {
            if let Some(p) = parse_progress(&String::from_utf8_lossy(&buffer[..n])) {
                percent = p;
            }
        }
        progress(percent);
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => return Err(UpdateError::Sysupdate(e.to_string())),
        }
    };
    for reader in readers {
        let _ = reader.join();
    }
    let _ = std::fs::remove_dir_all(&socket_dir);
    if status.success() {
        progress(100);
        return Ok(());
    }
    let tail = tail.lock().unwrap_or_else(|e| e.into_inner());
    let said: Vec<&str> = tail
        .iter()
        .map(String::as_str)
        .filter(|l| !l.trim().is_empty())
        .collect();
    let last = &said[said.len().saturating_sub(ERROR_LINES)..];
    Err(UpdateError::Sysupdate(format!(
        "{status}{}",
        if last.is_empty() {
            String::new()
        } else {
            format!(": {}", last.join(" / "))
        }
    )))
}

/// The overall percentage in one notification (`X_SYSUPDATE_PROGRESS=42`).
pub fn parse_progress(message: &str) -> Option<u32> {
    message
        .lines()
        .find_map(|l| l.strip_prefix("X_SYSUPDATE_PROGRESS="))
        .and_then(|v| v.trim().trim_end_matches('%').parse().ok())
        .filter(|&p: &u32| p <= 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/systemd/sysupdate.d");

    #[test]
    fn templates_render_for_a_url_and_for_a_folder() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("defs");
        let url = Source::parse("http://10.0.2.100/v2").unwrap();
        let written = write_definitions(Path::new(TEMPLATES), &out, &url).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "10-root-verity.transfer",
                "20-root.transfer",
                "90-uki.transfer"
            ]
        );
        let uki = std::fs::read_to_string(&written[2]).unwrap();
        assert!(
            uki.contains("Type=url-file\nPath=http://10.0.2.100/v2/\n"),
            "{uki}"
        );
        assert!(uki.contains("Verify=yes") && uki.contains("TriesLeft=3"));
        assert!(!uki.contains('@') || !uki.contains("@SOURCE"));

        let folder = Source::parse("/media/usb").unwrap();
        write_definitions(Path::new(TEMPLATES), &out, &folder).unwrap();
        let root = std::fs::read_to_string(out.join("20-root.transfer")).unwrap();
        assert!(
            root.contains("Type=regular-file\nPath=/media/usb\n") && root.contains("Verify=no")
        );
    }

    #[test]
    fn progress_notifications_parse() {
        assert_eq!(
            parse_progress("X_SYSUPDATE_PROGRESS=42\nX_SYSUPDATE_TRANSFERS_LEFT=2"),
            Some(42)
        );
        assert_eq!(parse_progress("STATUS=Updating"), None);
        assert_eq!(parse_progress("X_SYSUPDATE_PROGRESS=420"), None);
    }

    #[test]
    fn a_failing_stand_in_for_sysupdate_is_an_error_with_its_last_words() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("sysupdate-stand-in");
        std::fs::write(
            &fake,
            "#!/bin/sh\necho 'Transfer 1/3 is 10% complete' >&2\necho 'Failed to verify SHA256SUMS' >&2\nexit 1\n",
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let err = update(&fake, &dir.path().join("defs"), "2", |_| {}).unwrap_err();
        assert!(
            err.to_string().contains("Failed to verify SHA256SUMS"),
            "{err}"
        );
    }
}

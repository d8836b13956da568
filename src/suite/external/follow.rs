//! Reading what the benchmark writes while it runs: its stdout and stderr line by line
//! (bounded, whatever bytes they hold), and the MLLOG file it appends to, from where the
//! file ended when the run started, so that an earlier run's lines in the same file are
//! never taken for this run's.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;

/// A line longer than this is cut there; the rest up to its newline is dropped.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Which of the command's streams a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// Sends each line of `reader` (without its end: `\n`, or `\r` too when `carriage_ends`
/// is set, as a progress bar redraws its line) until it ends or the receiver is gone.
pub fn forward_lines(
    reader: impl Read,
    stream: Stream,
    carriage_ends: bool,
    to: Sender<(Stream, String)>,
) {
    let mut reader = BufReader::new(reader);
    let mut line: Vec<u8> = Vec::new();
    let mut cut = false;
    loop {
        let buffer = match reader.fill_buf() {
            Ok([]) => break,
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let end = buffer
            .iter()
            .position(|&b| b == b'\n' || (carriage_ends && b == b'\r'));
        let piece = &buffer[..end.unwrap_or(buffer.len())];
        let room = MAX_LINE_BYTES.saturating_sub(line.len());
        if piece.len() > room {
            cut = true;
        }
        if !cut || room > 0 {
            line.extend_from_slice(&piece[..piece.len().min(room)]);
        }
        let used = end.map_or(buffer.len(), |e| e + 1);
        reader.consume(used);
        if end.is_some() {
            let text = String::from_utf8_lossy(&line).into_owned();
            line.clear();
            cut = false;
            if !(carriage_ends && text.is_empty()) && to.send((stream, text)).is_err() {
                return;
            }
        }
    }
    if !line.is_empty() {
        let _ = to.send((stream, String::from_utf8_lossy(&line).into_owned()));
    }
}

/// Follows a file the benchmark appends its MLLOG to.
#[derive(Debug)]
pub struct FileFollower {
    path: PathBuf,
    offset: u64,
    identity: Option<(u64, u64)>,
    partial: Vec<u8>,
    /// Bytes the file held before the run started, never read.
    pub skipped_bytes: u64,
}

impl FileFollower {
    /// Starts following `path` from where it ends now (from its start when it does not
    /// exist yet).
    pub fn from_end(path: &Path) -> FileFollower {
        let meta = std::fs::metadata(path).ok();
        let skipped = meta.as_ref().map_or(0, |m| m.len());
        FileFollower {
            path: path.to_path_buf(),
            offset: skipped,
            identity: meta.map(|m| (m.dev(), m.ino())),
            partial: Vec::new(),
            skipped_bytes: skipped,
        }
    }

    /// The file being followed.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole lines written since the last call. A file replaced by another (a new
    /// inode) or truncated below what was read is read again from its start.
    pub fn new_lines(&mut self) -> Vec<String> {
        let Ok(mut file) = File::open(&self.path) else {
            return Vec::new();
        };
        let Ok(meta) = file.metadata() else {
            return Vec::new();
        };
        let identity = Some((meta.dev(), meta.ino()));
        if identity != self.identity || meta.len() < self.offset {
            self.identity = identity;
            self.offset = 0;
            self.partial.clear();
        }
        if meta.len() == self.offset || file.seek(SeekFrom::Start(self.offset)).is_err() {
            return Vec::new();
        }
        let mut bytes = Vec::new();
        if file.read_to_end(&mut bytes).is_err() {
            return Vec::new();
        }
        self.offset += bytes.len() as u64;
        self.partial.extend_from_slice(&bytes);
        let Some(last_newline) = self.partial.iter().rposition(|&b| b == b'\n') else {
            // No whole line yet; a runaway one is cut so it cannot grow without end.
            self.partial.truncate(MAX_LINE_BYTES);
            return Vec::new();
        };
        let rest = self.partial.split_off(last_newline + 1);
        let whole = std::mem::replace(&mut self.partial, rest);
        whole[..whole.len() - 1]
            .split(|&b| b == b'\n')
            .map(|l| String::from_utf8_lossy(&l[..l.len().min(MAX_LINE_BYTES)]).into_owned())
            .collect()
    }

    /// What is left without a newline once the benchmark has ended.
    pub fn rest(&mut self) -> Option<String> {
        let mut lines = self.new_lines();
        if !self.partial.is_empty() {
            lines.push(String::from_utf8_lossy(&std::mem::take(&mut self.partial)).into_owned());
        }
        (!lines.is_empty()).then(|| lines.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{self, OpenOptions};
    use std::io::Write;
    use std::sync::mpsc;

    fn append(path: &Path, text: &str) {
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn what_the_file_held_before_the_start_is_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("result_42.txt");
        append(&path, "old run line 1\nold run line 2\n");
        let mut follow = FileFollower::from_end(&path);
        assert_eq!(follow.skipped_bytes, 30);
        assert!(follow.new_lines().is_empty());
        append(&path, "new 1\nnew");
        assert_eq!(follow.new_lines(), ["new 1"]);
        append(&path, " 2\n");
        assert_eq!(follow.new_lines(), ["new 2"]);
    }

    #[test]
    fn a_replaced_or_truncated_file_is_read_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.txt");
        let mut follow = FileFollower::from_end(&path);
        append(&path, "a\nb\n");
        assert_eq!(follow.new_lines(), ["a", "b"]);
        // Replaced: written to a new file and renamed over the old one.
        let tmp = dir.path().join("log.tmp");
        fs::write(&tmp, "c\nd\ne\n").unwrap();
        fs::rename(&tmp, &path).unwrap();
        assert_eq!(follow.new_lines(), ["c", "d", "e"]);
        // Truncated in place.
        fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        append(&path, "f\n");
        assert_eq!(follow.new_lines(), ["f"]);
        append(&path, "tail");
        assert_eq!(follow.rest().as_deref(), Some("tail"));
    }

    #[test]
    fn streams_split_at_newlines_and_carriage_returns_bounded_and_lossy() {
        let (tx, rx) = mpsc::channel();
        let mut input = b"one\r\ntwo\n\xff bad\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', MAX_LINE_BYTES + 10));
        input.extend(b"\nbar 10%\rbar 20%\rlast");
        forward_lines(&input[..], Stream::Stderr, true, tx);
        let lines: Vec<String> = rx.try_iter().map(|(_, l)| l).collect();
        assert_eq!(lines[..3], ["one", "two", "\u{fffd} bad"]);
        assert_eq!(lines[3].len(), MAX_LINE_BYTES);
        assert_eq!(lines[4..], ["bar 10%", "bar 20%", "last"]);
        // Without carriage ends a '\r' stays inside the line, as MLLOG readers keep it.
        let (tx, rx) = mpsc::channel();
        forward_lines(&b"a\rb\nc"[..], Stream::Stdout, false, tx);
        let lines: Vec<String> = rx.try_iter().map(|(_, l)| l).collect();
        assert_eq!(lines, ["a\rb", "c"]);
    }
}

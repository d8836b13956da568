//! The kernel's log as records: `/dev/kmsg` (every record since boot that the ring still
//! holds, or `ROOT/dev/kmsg` as a plain file of the same records), and a log as people
//! paste it: `dmesg` in any of its time shapes (`[  12.345678]`, `-T`, `-H`, `-x`),
//! syslog and `journalctl` lines (only the kernel's are kept), `journalctl -o json`, console
//! and pstore lines with their `<3>` level, or bare messages.

use std::io::Read;
use std::path::Path;

/// One message of the kernel's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The record's sequence number (`/dev/kmsg`), or its line number in a pasted log.
    pub seq: u64,
    /// When it was logged, in microseconds since boot, where the log says.
    pub usec: Option<u64>,
    /// The wall-clock time as the log printed it (`dmesg -T`, syslog, the journal).
    pub wall_time: Option<String>,
    /// The message, without its header or time.
    pub text: String,
}

/// The records in `data` (a `/dev/kmsg` dump: `prio,seq,usec,flags[,…];text` followed by
/// continuation lines ` KEY=value` that are not part of the text), in order; malformed
/// lines and continuation lines are left out.
pub fn parse_records(data: &str) -> Vec<Record> {
    data.lines()
        .filter(|line| !line.starts_with(' '))
        .filter_map(|line| {
            let (seq, usec, text) = kmsg_header(line)?;
            Some(Record {
                seq,
                usec: Some(usec),
                wall_time: None,
                text: text.to_string(),
            })
        })
        .collect()
}

/// Reads every record: a plain file under another root, else the kernel's ring, read
/// without blocking until it is drained. `Err` says why it could not be read.
pub fn read_records(root: &Path) -> Result<Vec<Record>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = root.join("dev/kmsg");
    // Never blocking: the kernel's ring ends with EAGAIN, and a fixture that is a pipe
    // with no writer must not hang the check that reads it.
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && root != Path::new("/") => {
            return Ok(Vec::new())
        }
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let mut data = Vec::new();
    // Each read of /dev/kmsg returns one record; a plain file reads in pieces.
    let mut buffer = vec![0u8; 8192];
    loop {
        match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => data.extend_from_slice(&buffer[..n]),
            // A record overwritten while being read; the next read goes on.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
    Ok(parse_records(&String::from_utf8_lossy(&data)))
}

/// The kernel's records in a log as a person pasted it, whatever its shape, line by line:
/// a line from another program of a syslog or journal (`systemd[1]: …`) is left out, a
/// line in no shape known is taken whole as a message.
pub fn parse_pasted(text: &str) -> Vec<Record> {
    let mut records = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if let Some(record) = pasted_line(line, number as u64 + 1) {
            records.push(record);
        }
    }
    records
}

fn pasted_line(line: &str, number: u64) -> Option<Record> {
    let mut record = Record {
        seq: number,
        usec: None,
        wall_time: None,
        text: String::new(),
    };
    let trimmed = line.trim();
    if trimmed.starts_with('{') {
        return journal_json(trimmed, number);
    }
    let mut rest = trimmed;
    // A `/dev/kmsg` dump's continuation lines carry the device, not the message.
    if line.starts_with(' ') && is_kmsg_property(trimmed) {
        return None;
    }
    // Shapes nest (a syslog line holding a dmesg time, a console line's level before its
    // time): strip the outermost until none is left.
    for _ in 0..6 {
        if let Some((seq, usec, text)) = kmsg_header(rest) {
            record.seq = seq;
            record.usec = Some(usec);
            rest = text;
        } else if let Some(text) = console_level(rest) {
            rest = text;
        } else if let Some(text) = dmesg_facility(rest) {
            rest = text;
        } else if let Some((wall, tag, text)) = syslog_prefix(rest) {
            if tag != "kernel" {
                return None;
            }
            record.wall_time.get_or_insert(wall.to_string());
            rest = text;
        } else if let Some((time, text)) = bracketed_time(rest) {
            match time {
                Time::SinceBoot(usec) => record.usec = Some(usec),
                Time::Wall(wall) => record.wall_time = Some(wall.to_string()),
                Time::Relative => {}
            }
            rest = caller_id(text).unwrap_or(text);
            // `journalctl -o short-monotonic`: the host and the tag follow the time.
            if let Some(text) = host_and_kernel_tag(rest) {
                rest = text;
            }
        } else if let Some(text) = rest.strip_prefix("kernel: ") {
            rest = text;
        } else {
            break;
        }
    }
    let text = rest.trim();
    if text.is_empty() {
        return None;
    }
    record.text = text.to_string();
    Some(record)
}

/// `6,1234,56789012,-;text` → (seq, usec, text).
fn kmsg_header(line: &str) -> Option<(u64, u64, &str)> {
    let (header, text) = line.split_once(';')?;
    let mut fields = header.split(',');
    let priority = fields.next()?;
    if priority.is_empty() || !priority.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seq = fields.next()?.parse().ok()?;
    let usec = fields.next()?.parse().ok()?;
    fields.next()?;
    Some((seq, usec, text))
}

fn is_kmsg_property(text: &str) -> bool {
    text.split_once('=')
        .is_some_and(|(key, _)| !key.is_empty() && key.bytes().all(|b| b.is_ascii_uppercase()))
}

/// `<3>text`, as consoles, pstore and `dmesg -r` print a record's level.
fn console_level(line: &str) -> Option<&str> {
    let inside = line.strip_prefix('<')?;
    let (level, text) = inside.split_once('>')?;
    (!level.is_empty() && level.len() <= 3 && level.bytes().all(|b| b.is_ascii_digit()))
        .then_some(text)
}

/// `kern  :err   : text`, as `dmesg -x` prints facility and level, or `10.0.0.5: kern:
/// warning: text`, as Talos's `talosctl dmesg` prints a node's.
fn dmesg_facility(line: &str) -> Option<&str> {
    facility_and_level(line).or_else(|| {
        let (node, rest) = line.split_once(": ")?;
        (!node.contains(' '))
            .then(|| facility_and_level(rest))
            .flatten()
    })
}

fn facility_and_level(line: &str) -> Option<&str> {
    const FACILITIES: &[&str] = &["kern", "user", "daemon", "syslog", "auth"];
    let (facility, rest) = line.split_once(':')?;
    if !FACILITIES.contains(&facility.trim_end()) {
        return None;
    }
    let (level, text) = rest.split_once(':')?;
    let level = level.trim();
    (!level.is_empty() && level.bytes().all(|b| b.is_ascii_lowercase()))
        .then(|| text.strip_prefix(' ').unwrap_or(text))
}

/// `Jan  5 14:03:11 host kernel: text` (syslog, `journalctl`), with fractions of a second
/// (`-o short-precise`), or an ISO time (`2024-01-05T14:03:11.123+01:00 host kernel:`,
/// `-o short-iso`) → (time as printed, the tag without its pid, the text).
fn syslog_prefix(line: &str) -> Option<(&str, &str, &str)> {
    let time_end = month_day_time_end(line).or_else(|| iso_time_end(line))?;
    let (time, rest) = line.split_at(time_end);
    let rest = rest.strip_prefix(' ')?;
    // A log copied from a syslog file without its host (`Feb  2 08:03:20 kernel: …`).
    if let Some(text) = rest.strip_prefix("kernel: ") {
        return Some((time, "kernel", text));
    }
    let (_host, rest) = rest.split_once(' ')?;
    let (tag, text) = rest
        .split_once(": ")
        .or_else(|| rest.strip_suffix(':').map(|tag| (tag, "")))?;
    if tag.contains(' ') || tag.is_empty() {
        return None;
    }
    let tag = tag.split_once('[').map_or(tag, |(name, _)| name);
    Some((time, tag, text))
}

/// The end of a leading `Mmm dd hh:mm:ss[.ffffff]`, the month in any language the box
/// was set to (`kwi 15 07:56:59`).
fn month_day_time_end(line: &str) -> Option<usize> {
    let (month, _) = line.split_once(' ')?;
    let letters = month.trim_end_matches('.').chars().count();
    if !(3..=5).contains(&letters) || !month.trim_end_matches('.').chars().all(char::is_alphabetic)
    {
        return None;
    }
    let rest = line[month.len() + 1..].trim_start_matches(' ');
    let offset = line.len() - rest.len();
    let (day, after) = rest.split_once(' ')?;
    if day.is_empty() || day.len() > 2 || !day.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let clock_len = after
        .bytes()
        .take_while(|b| b.is_ascii_digit() || *b == b':' || *b == b'.')
        .count();
    let clock = &after[..clock_len];
    (clock.matches(':').count() == 2).then_some(offset + day.len() + 1 + clock_len)
}

/// The end of a leading `YYYY-MM-DDThh:mm:ss[.f][zone]` (or with a space for the `T`
/// only when a time follows).
fn iso_time_end(line: &str) -> Option<usize> {
    let bytes = line.as_bytes();
    let date_ok = bytes.len() > 19
        && bytes[..4].iter().all(u8::is_ascii_digit)
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && bytes[10] == b'T'
        && bytes[13] == b':';
    if !date_ok {
        return None;
    }
    let len = line
        .bytes()
        .take_while(|b| !b.is_ascii_whitespace())
        .count();
    Some(len)
}

enum Time<'a> {
    SinceBoot(u64),
    Wall(&'a str),
    Relative,
}

/// `[  123.456789] `, `[Mon Jan  5 14:03:11 2024] ` (`dmesg -T`), `[Jan 5 14:03] ` and
/// `[  +0.000123] ` (`dmesg -H`). A bracket that is part of a message (`[drm] …`,
/// `[drm:amdgpu_job_timedout [amdgpu]]`, `[Hardware Error]: …`) is none of these.
fn bracketed_time(line: &str) -> Option<(Time<'_>, &str)> {
    let inside_and_rest = line.strip_prefix('[')?;
    let (inside, rest) = inside_and_rest.split_once(']')?;
    let rest = rest.strip_prefix(' ').unwrap_or(rest);
    let trimmed = inside.trim();
    if let Some(relative) = trimmed.strip_prefix('+') {
        return relative.parse::<f64>().ok().map(|_| (Time::Relative, rest));
    }
    if trimmed.bytes().all(|b| b.is_ascii_digit() || b == b'.') && trimmed.contains('.') {
        let seconds: f64 = trimmed.parse().ok()?;
        return Some((Time::SinceBoot((seconds * 1e6).round() as u64), rest));
    }
    if iso_time_end(trimmed) == Some(trimmed.len()) {
        let rest = rest.strip_prefix(": ").unwrap_or(rest);
        return Some((Time::Wall(trimmed), rest));
    }
    let starts_with_name = trimmed
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_uppercase());
    let has_clock = trimmed.contains(':') && trimmed.bytes().any(|b| b.is_ascii_digit());
    (starts_with_name && has_clock && month_in(trimmed)).then_some((Time::Wall(trimmed), rest))
}

fn month_in(text: &str) -> bool {
    [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .any(|m| text.contains(m))
}

/// `[  T511] text` or `[    C3] text`: the task or CPU that logged the record, printed
/// after its time by kernels built with `CONFIG_PRINTK_CALLER`.
fn caller_id(line: &str) -> Option<&str> {
    let (inside, rest) = line.strip_prefix('[')?.split_once(']')?;
    let id = inside.trim_start();
    let digits = id.strip_prefix('T').or_else(|| id.strip_prefix('C'))?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| rest.strip_prefix(' ').unwrap_or(rest))
}

/// `host kernel: text` after a `journalctl -o short-monotonic` time.
fn host_and_kernel_tag(line: &str) -> Option<&str> {
    let (host, rest) = line.split_once(' ')?;
    if host.is_empty() || host.contains(':') {
        return None;
    }
    rest.strip_prefix("kernel: ")
}

/// One line of `journalctl -o json`: the kernel's own entries (`_TRANSPORT=kernel`, or
/// `SYSLOG_IDENTIFIER=kernel`), with their time since boot and wall time.
fn journal_json(line: &str, number: u64) -> Option<Record> {
    let entry: serde_json::Value = serde_json::from_str(line).ok()?;
    let field = |name: &str| entry.get(name).and_then(serde_json::Value::as_str);
    let from_kernel =
        field("_TRANSPORT") == Some("kernel") || field("SYSLOG_IDENTIFIER") == Some("kernel");
    if !from_kernel {
        return None;
    }
    let text = field("MESSAGE")?.trim().to_string();
    let usec = field("_SOURCE_MONOTONIC_TIMESTAMP")
        .or_else(|| field("__MONOTONIC_TIMESTAMP"))
        .and_then(|t| t.parse().ok());
    let wall_time = field("__REALTIME_TIMESTAMP")
        .and_then(|t| t.parse::<i64>().ok())
        .and_then(chrono::DateTime::from_timestamp_micros)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string());
    let seq = field("__SEQNUM")
        .and_then(|t| t.parse().ok())
        .unwrap_or(number);
    (!text.is_empty()).then_some(Record {
        seq,
        usec,
        wall_time,
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> Record {
        let records = parse_pasted(line);
        assert_eq!(records.len(), 1, "{line}: {records:?}");
        records.into_iter().next().unwrap()
    }

    #[test]
    fn every_time_shape_leaves_the_message_alone() {
        let message = "NVRM: Xid (PCI:0000:41:00): 79, pid=1, GPU has fallen off the bus.";
        for shape in [
            format!("[ 1843.308145] {message}"),
            format!("<4>[ 1843.308145] {message}"),
            format!("kern  :warn  : [ 1843.308145] {message}"),
            format!("[Mon Jan  5 14:03:11 2024] {message}"),
            format!("[Jan 5 14:03] {message}"),
            format!("[  +0.000123] {message}"),
            format!("Jan  5 14:03:11 box kernel: {message}"),
            format!("Jan 05 14:03:11.123456 box kernel: {message}"),
            format!("kwi 15 07:56:59 testowy kernel: {message}"),
            format!("фев 12 00:48:02 kernel: {message}"),
            format!("jan. 29 20:50:17 kevin kernel: {message}"),
            format!("[   24.235980][  T511] {message}"),
            format!("[    2.078028] kernel: {message}"),
            format!("192.168.2.205: kern:     err: [2023-12-14T11:16:10.461245972Z]: {message}"),
            format!("Jan  5 14:03:11 box kernel: [ 1843.308145] {message}"),
            format!("2024-01-05T14:03:11.123456+01:00 box kernel: {message}"),
            format!("[ 1843.308145] box kernel: {message}"),
            format!("4,512,1843308145,-;{message}"),
            message.to_string(),
        ] {
            assert_eq!(one(&shape).text, message, "{shape}");
        }
    }

    #[test]
    fn times_are_kept_as_the_log_gives_them() {
        assert_eq!(one("[ 1843.308145] x").usec, Some(1_843_308_145));
        assert_eq!(
            one("[Mon Jan  5 14:03:11 2024] x").wall_time.as_deref(),
            Some("Mon Jan  5 14:03:11 2024")
        );
        let syslog = one("Jan  5 14:03:11 box kernel: [  12.5] x");
        assert_eq!(syslog.wall_time.as_deref(), Some("Jan  5 14:03:11"));
        assert_eq!(syslog.usec, Some(12_500_000));
    }

    #[test]
    fn brackets_that_belong_to_the_message_stay() {
        for text in [
            "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout",
            "[drm] GPU reset begin!",
            "[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 0",
        ] {
            assert_eq!(one(&format!("[   5.1] {text}")).text, text);
        }
    }

    #[test]
    fn other_programs_in_a_syslog_are_left_out() {
        let records = parse_pasted(
            "Feb 14 05:03:41 gpu-1 systemd[1]: Started systemd-journald.service.\n\
             Feb 14 05:03:41 gpu-1 kernel: mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link INIT\n",
        );
        assert_eq!(records.len(), 1);
        assert!(records[0].text.starts_with("mlx5_core"));
    }

    #[test]
    fn journal_json_keeps_the_kernels_entries() {
        let records = parse_pasted(
            r#"{"_TRANSPORT":"kernel","MESSAGE":"NVRM: Xid (PCI:0000:41:00): 79, x","_SOURCE_MONOTONIC_TIMESTAMP":"812000000","__REALTIME_TIMESTAMP":"1700000000000000"}
{"_TRANSPORT":"journal","MESSAGE":"not the kernel"}"#,
        );
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].usec, Some(812_000_000));
        assert_eq!(
            records[0].wall_time.as_deref(),
            Some("2023-11-14 22:13:20 UTC")
        );
    }

    #[test]
    fn a_kmsg_dump_pasted_keeps_its_numbers_and_drops_its_properties() {
        let records = parse_pasted("3,77,1000,-;amdgpu 0000:03:00.0: x\n SUBSYSTEM=pci\n");
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].seq, 77);
    }

    #[test]
    fn garbage_and_truncated_records_are_skipped() {
        assert!(parse_records("no header here\n4,x,1,-;text\n4,1\n").is_empty());
    }
}

//! The agent process's own figures under the names every Prometheus client library uses
//! (`process_*`), read from /proc/self.

use std::sync::OnceLock;

use procfs::process::Process;

use super::exposition::{Exposition, Kind};

pub struct ProcessFigures {
    pub resident_memory_bytes: u64,
    pub cpu_seconds: f64,
    pub open_fds: Option<usize>,
    pub start_time_seconds: f64,
}

/// None, with a warning, when /proc cannot be read.
pub fn read() -> Option<ProcessFigures> {
    match read_proc() {
        Ok(figures) => Some(figures),
        Err(e) => {
            tracing::warn!("cannot read /proc/self for the process metrics: {e}");
            None
        }
    }
}

fn read_proc() -> procfs::ProcResult<ProcessFigures> {
    let me = Process::myself()?;
    let stat = me.stat()?;
    let ticks = procfs::ticks_per_second() as f64;
    let start_time_seconds = start_time(stat.starttime, ticks)?;
    Ok(ProcessFigures {
        resident_memory_bytes: stat.rss * procfs::page_size(),
        cpu_seconds: (stat.utime + stat.stime) as f64 / ticks,
        open_fds: me.fd_count().ok(),
        start_time_seconds,
    })
}

/// The start time never changes, so boot time is read once.
fn start_time(start_ticks: u64, ticks: f64) -> procfs::ProcResult<f64> {
    static START: OnceLock<f64> = OnceLock::new();
    if let Some(start) = START.get() {
        return Ok(*start);
    }
    let start = procfs::boot_time_secs()? as f64 + start_ticks as f64 / ticks;
    Ok(*START.get_or_init(|| start))
}

pub fn render(out: &mut Exposition, figures: &ProcessFigures) {
    out.single(
        "process_resident_memory_bytes",
        Kind::Gauge,
        "Resident memory size in bytes.",
        figures.resident_memory_bytes as f64,
    );
    out.single(
        "process_cpu_seconds_total",
        Kind::Counter,
        "Total user and system CPU time spent in seconds.",
        figures.cpu_seconds,
    );
    if let Some(fds) = figures.open_fds {
        out.single(
            "process_open_fds",
            Kind::Gauge,
            "Number of open file descriptors.",
            fds as f64,
        );
    }
    out.single(
        "process_start_time_seconds",
        Kind::Gauge,
        "Start time of the process since unix epoch in seconds.",
        figures.start_time_seconds,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_fds_and_a_past_start() {
        let figures = read().expect("/proc/self is readable");
        assert!(figures.resident_memory_bytes > 1024 * 1024);
        assert!(figures.open_fds.unwrap() >= 3);
        let now = chrono::Utc::now().timestamp() as f64;
        assert!(figures.start_time_seconds <= now + 1.0);
        assert!(figures.start_time_seconds > now - 86_400.0 * 365.0);
    }
}

//! `tinyperf box record`: the box's birth record and what changed since, printed.

use std::fmt::Write as _;

use anyhow::Context;
use serde_json::json;

use super::args::{BoxCommand, BoxRecordArgs};
use super::printable::printable;
use crate::inventory::birth::{self, BirthRecord, BoxView};
use crate::inventory::smbios::MemoryDevice;

/// Runs a `tinyperf box` command; its exit status.
pub fn main(command: &BoxCommand) -> anyhow::Result<i32> {
    match command {
        BoxCommand::Record(args) => record(args),
    }
}

fn record(args: &BoxRecordArgs) -> anyhow::Result<i32> {
    let bmc = if args.no_bmc {
        Err("BMC identity not read: --no-bmc".to_string())
    } else {
        birth::read_bmc()
    };
    let view =
        birth::compare(&args.root, &args.state_dir, bmc).context("cannot read the box's record")?;
    let saved = if args.save {
        Some(birth::save(&args.state_dir, &view.current).context("cannot write the box's record")?)
    } else {
        None
    };
    if args.json {
        let out = json!({
            "record": view.record,
            "changes": view.changes,
            "current": view.current,
            "path": view.path,
            "saved": saved.is_some(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", render(&view));
        if let Some(path) = &saved {
            println!(
                "\nsaved the box as it is now as its record: {}",
                path.display()
            );
        }
    }
    Ok(i32::from(saved.is_none() && !view.changes.is_empty()))
}

/// The record (or the box now, without one) and the changes, for people.
pub fn render(view: &BoxView) -> String {
    let mut out = String::new();
    let serial = view
        .current
        .baseboard_serial
        .as_deref()
        .unwrap_or("unknown");
    let _ = writeln!(out, "box {}", printable(serial));
    let shown = match &view.record {
        Some(record) => {
            let _ = writeln!(
                out,
                "record   {} (written {} by tinyperf {})",
                view.path.display(),
                record.recorded_at.format("%Y-%m-%d %H:%M:%S UTC"),
                printable(&record.tinyperf_version)
            );
            record
        }
        None => {
            let _ = writeln!(
                out,
                "record   none yet at {} (--save writes it); the box now:",
                view.path.display()
            );
            &view.current
        }
    };
    describe(&mut out, shown);
    if view.record.is_some() {
        if view.changes.is_empty() {
            let _ = writeln!(out, "\nno change since the record");
        } else {
            let _ = writeln!(out, "\nchanged since the record ({}):", view.changes.len());
            for change in &view.changes {
                let _ = writeln!(out, "  {}", printable(&change.message));
            }
        }
    }
    for note in &view.current.notes {
        let _ = writeln!(out, "note: {}", printable(note));
    }
    out
}

fn describe(out: &mut String, r: &BirthRecord) {
    let opt = |v: &Option<String>| printable(v.as_deref().unwrap_or("—")).into_owned();
    let f = &r.firmware;
    let _ = writeln!(
        out,
        "system   {} {} (serial {}, UUID {})",
        opt(&f.system.manufacturer),
        opt(&f.system.product),
        opt(&f.system.serial),
        opt(&f.system.uuid)
    );
    let _ = writeln!(
        out,
        "board    {} {} {} (serial {})",
        opt(&f.baseboard.manufacturer),
        opt(&f.baseboard.product),
        opt(&f.baseboard.version),
        opt(&f.baseboard.serial)
    );
    let _ = writeln!(
        out,
        "BIOS     {} {} ({})",
        opt(&f.bios.vendor),
        opt(&f.bios.version),
        opt(&f.bios.release_date)
    );
    for cpu in &f.processors {
        let cores = cpu
            .cores
            .map(|c| format!(", {c} cores"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "CPU      {}: {}{cores}",
            opt(&cpu.socket),
            opt(&cpu.version)
        );
    }
    match &f.dimms {
        Some(dimms) => {
            let installed = dimms.iter().filter(|d| d.installed).count();
            let _ = writeln!(out, "memory   {installed} of {} slots filled", dimms.len());
            for d in dimms {
                let _ = writeln!(out, "  {}", dimm_line(d));
            }
        }
        None => {
            let _ = writeln!(out, "memory   not read (no SMBIOS tables)");
        }
    }
    for g in &r.gpus {
        let _ = writeln!(
            out,
            "GPU      {} {} (VBIOS {}, serial {}, UUID {})",
            g.address,
            printable(&g.model),
            opt(&g.vbios),
            opt(&g.serial),
            opt(&g.uuid)
        );
    }
    for d in &r.nvme {
        let _ = writeln!(
            out,
            "NVMe     {} {} (serial {}, firmware {})",
            d.address.as_deref().unwrap_or(&d.name),
            opt(&d.model),
            opt(&d.serial),
            opt(&d.firmware)
        );
    }
    let _ = writeln!(out, "PCI      {} functions", r.pci_devices.len());
    if let Some(bmc) = r.bmc.as_ref().and_then(|b| b.as_object()) {
        let field = |k: &str| bmc.get(k).and_then(|v| v.as_str()).unwrap_or("—");
        let _ = writeln!(
            out,
            "BMC      {} firmware {}",
            printable(field("manufacturer_name")),
            printable(field("firmware_revision"))
        );
    }
    if let Some(os) = &r.os {
        let _ = writeln!(
            out,
            "OS       {} (image {} {})",
            opt(&os.pretty_name),
            opt(&os.image_id),
            opt(&os.image_version)
        );
    }
}

fn dimm_line(d: &MemoryDevice) -> String {
    let slot = printable(d.locator.as_deref().unwrap_or("?")).into_owned();
    if !d.installed {
        return format!("{slot:<14} empty");
    }
    let size = d
        .size_bytes
        .map_or_else(|| "? GiB".to_string(), |b| format!("{} GiB", b >> 30));
    let speed = d
        .configured_speed_mts
        .or(d.speed_mts)
        .map(|s| format!(" {s} MT/s"))
        .unwrap_or_default();
    let opt = |v: &Option<String>| printable(v.as_deref().unwrap_or("—")).into_owned();
    format!(
        "{slot:<14} {size}{speed} {} {} (serial {})",
        opt(&d.manufacturer),
        opt(&d.part_number),
        opt(&d.serial)
    )
}

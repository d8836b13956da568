//! The image's status read from trees on disk laid out as the kernel lays them out.

use std::path::Path;

use super::fixture::{self, ImageLayout, SlotContent};
use super::status::{self, Extras, ImageStatus};

const A: &str = "20261205.1130";
const B: &str = "20261120.0900";

fn read(root: &Path) -> ImageStatus {
    status::read(root, Extras::default())
}

#[test]
fn booted_a_with_b_empty() {
    let root = tempfile::tempdir().unwrap();
    fixture::image(
        root.path(),
        ImageLayout {
            a: SlotContent::Version(A),
            b: SlotContent::Empty,
            booted: 'a',
            verity: true,
        },
    );
    let status = read(root.path());
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["image"], true);
    assert_eq!(json["image_id"], "tinybox");
    assert_eq!(json["version"], A);
    assert_eq!(json["slot"], "a");
    assert_eq!(json["verity"], "verified");
    assert_eq!(json["roothash"], fixture::ROOT_HASH);
    assert_eq!(json["other_version"], "");
    assert_eq!(json["factory_reset_pending"], false);
    assert_eq!(json["factory_reset_boot"], false);
    assert!(json.get("message").is_none());
    assert!(json.get("notes").is_none(), "{json}");
    assert_eq!(
        json["slots"],
        serde_json::json!([
            {"slot": "a", "version": A, "state": "booted", "root_partition": "vda3", "hash_partition": "vda2"},
            {"slot": "b", "version": "", "state": "empty", "root_partition": "vda5", "hash_partition": "vda4"},
        ])
    );
    let state = &json["state_partition"];
    assert_eq!(state["device"], "vda6");
    assert!(state["size_bytes"].as_u64().unwrap() > 0);
    assert!(state["free_bytes"].as_u64().unwrap() <= state["size_bytes"].as_u64().unwrap());
    assert_eq!(status.headline(), format!("OS {A} · slot A · verified"));
    // What is written is read back as it was.
    let back: ImageStatus = serde_json::from_value(json).unwrap();
    assert_eq!(back, status);
}

#[test]
fn booted_b_with_a_installed() {
    let root = tempfile::tempdir().unwrap();
    fixture::image(
        root.path(),
        ImageLayout {
            a: SlotContent::Version(B),
            b: SlotContent::Version(A),
            booted: 'b',
            verity: true,
        },
    );
    let os = read(root.path()).os.unwrap();
    assert_eq!((os.version.as_str(), os.slot.as_str()), (A, "b"));
    assert_eq!(os.other_version, B);
    assert_eq!(os.slots[0].state, "installed");
    assert_eq!(os.slots[0].version, B);
    assert_eq!(os.slots[1].state, "booted");
    assert_eq!(
        (
            os.slots[1].root_partition.as_str(),
            os.slots[1].hash_partition.as_str()
        ),
        ("vda5", "vda4")
    );
    assert_eq!(os.verity, "verified");
}

#[test]
fn no_verity_device_means_verity_off_and_the_slot_told_by_version() {
    let root = tempfile::tempdir().unwrap();
    fixture::image(
        root.path(),
        ImageLayout {
            a: SlotContent::Version(A),
            b: SlotContent::Version(B),
            booted: 'a',
            verity: false,
        },
    );
    let os = read(root.path()).os.unwrap();
    assert_eq!(os.verity, "off");
    assert_eq!(os.roothash, "");
    assert_eq!(os.slot, "a");
    assert_eq!(os.other_version, B);
    assert!(
        os.notes
            .iter()
            .any(|n| n.contains("no device-mapper device named root")),
        "{:?}",
        os.notes
    );
    assert!(read(root.path()).headline().ends_with("not verified"));
}

#[test]
fn a_verity_device_not_mounted_at_root_or_without_its_hash_is_off() {
    let root = tempfile::tempdir().unwrap();
    let layout = ImageLayout {
        a: SlotContent::Version(A),
        b: SlotContent::Empty,
        booted: 'a',
        verity: true,
    };
    fixture::image(root.path(), layout);
    fixture::write(root.path(), "proc/cmdline", "quiet\n");
    let os = read(root.path()).os.unwrap();
    assert_eq!((os.verity.as_str(), os.slot.as_str()), ("off", "a"));
    assert!(
        os.notes.iter().any(|n| n.contains("roothash")),
        "{:?}",
        os.notes
    );

    fixture::image(root.path(), layout);
    fixture::mountinfo(root.path(), "254:3", "/dev/vda3", "erofs", true);
    let os = read(root.path()).os.unwrap();
    assert_eq!(os.verity, "off");
    assert!(
        os.notes
            .iter()
            .any(|n| n.contains("not from the verity device")),
        "{:?}",
        os.notes
    );

    fixture::image(root.path(), layout);
    fixture::write(
        root.path(),
        "sys/devices/virtual/block/dm-0/dm/uuid",
        "CRYPT-LUKS2-x\n",
    );
    assert_eq!(read(root.path()).os.unwrap().verity, "off");
}

#[test]
fn not_an_image_says_why() {
    let root = tempfile::tempdir().unwrap();
    let status = read(root.path());
    assert!(!status.image);
    assert!(status.message.as_deref().unwrap().contains("no os-release"));
    assert_eq!(status.version(), "");
    fixture::debian(root.path());
    let status = read(root.path());
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json.as_object().unwrap().len(), 2, "{json}");
    assert_eq!(json["image"], false);
    assert!(json["message"]
        .as_str()
        .unwrap()
        .starts_with("not a tinybox OS image ("));
    assert!(json["message"].as_str().unwrap().contains("no IMAGE_ID"));
    assert_eq!(status.headline(), json["message"].as_str().unwrap());
    fixture::os_release(root.path(), "debian-cloud", "1");
    let message = read(root.path()).message.unwrap();
    assert!(message.contains("IMAGE_ID=\"debian-cloud\""), "{message}");
}

#[test]
fn missing_and_garbled_pieces_give_a_partial_answer() {
    // An image's os-release and nothing else: no sysfs, no cmdline, no mountinfo.
    let root = tempfile::tempdir().unwrap();
    fixture::os_release(root.path(), "tinybox", A);
    let os = read(root.path()).os.unwrap();
    assert_eq!(os.version, A);
    assert_eq!((os.slot.as_str(), os.verity.as_str()), ("", "off"));
    assert!(os.slots.is_empty());
    assert_eq!(os.state_partition, None);
    for needle in ["proc/cmdline", "sys/class/block", "no partition named var"] {
        assert!(
            os.notes.iter().any(|n| n.contains(needle)),
            "{needle}: {:?}",
            os.notes
        );
    }
    assert!(read(root.path()).headline().contains("slot unknown"));

    // A whole image with garbled pieces.
    fixture::image(
        root.path(),
        ImageLayout {
            a: SlotContent::Version(A),
            b: SlotContent::Version(B),
            booted: 'a',
            verity: true,
        },
    );
    let disk = "sys/devices/pci0000:00/0000:00:04.0/virtio2/block/vda";
    // Slot B's root partition lost its number, its hash partition is renamed.
    fixture::write(
        root.path(),
        &format!("{disk}/vda5/uevent"),
        "DEVTYPE=partition\nPARTN=five\n",
    );
    fixture::write(
        root.path(),
        &format!("{disk}/vda4/uevent"),
        "DEVTYPE=partition\nPARTN=4\nDEVNAME=vda4\nPARTNAME=tinybox_\u{fffd}_v\n",
    );
    fixture::write(root.path(), "proc/self/mountinfo", "\u{0}\u{1} garbage\n");
    fixture::write(root.path(), "proc/cmdline", "roothash=\"unterminated");
    std::fs::remove_dir_all(root.path().join("var")).unwrap();
    let os = read(root.path()).os.unwrap();
    assert_eq!(os.slot, "a");
    assert_eq!(os.slots.len(), 2);
    assert_eq!(os.slots[1].state, "incomplete");
    assert_eq!(os.verity, "off");
    let state = os.state_partition.clone().unwrap();
    assert_eq!((state.device.as_str(), state.size_bytes), ("vda6", None));
    for needle in [
        "PARTN=\"five\"",
        "only partition vda4",
        "mounts nothing at /",
        "cannot measure",
    ] {
        assert!(
            os.notes.iter().any(|n| n.contains(needle)),
            "{needle}: {:?}",
            os.notes
        );
    }
}

#[test]
fn a_pending_factory_reset_is_seen_in_the_request_file_and_the_next_boot() {
    let root = tempfile::tempdir().unwrap();
    fixture::image(
        root.path(),
        ImageLayout {
            a: SlotContent::Version(A),
            b: SlotContent::Empty,
            booted: 'a',
            verity: true,
        },
    );
    let state = tempfile::tempdir().unwrap();
    let request = super::reset::request_path(state.path());
    let pending = |root: &Path| {
        status::read(
            root,
            Extras {
                reset_request: Some(&request),
                state_dir: None,
            },
        )
        .os
        .unwrap()
        .factory_reset_pending
    };
    assert!(!pending(root.path()));
    super::reset::write_request(state.path(), "test").unwrap();
    assert!(pending(root.path()));
    std::fs::remove_file(&request).unwrap();
    fixture::efi_variable(
        root.path(),
        "LoaderEntryOneShot",
        &format!("tinybox_{A}.efi@factory-reset"),
    );
    assert!(pending(root.path()));
    fixture::write(
        root.path(),
        "proc/cmdline",
        format!("roothash={} systemd.factory_reset=1", fixture::ROOT_HASH),
    );
    assert!(read(root.path()).os.unwrap().factory_reset_boot);
}

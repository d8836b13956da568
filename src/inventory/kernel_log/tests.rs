use super::*;

fn events(text: &str, gpus: &[&str]) -> Vec<KernelEvent> {
    let gpus: Vec<PciAddress> = gpus.iter().map(|g| PciAddress::parse(g).unwrap()).collect();
    gpu_events(&parse_pasted(text), &gpus)
}

fn address(text: &str) -> Option<PciAddress> {
    PciAddress::parse(text)
}

#[test]
fn reads_an_xid_and_classifies_it_from_the_driver_table() {
    let found = gpu_events(
        &parse_records(
            "4,2001,812345678,-;NVRM: Xid (PCI:0000:21:00): 13, pid=4242, name=python3, \
             Graphics Exception\n",
        ),
        &[address("0000:21:00.0").unwrap()],
    );
    assert_eq!(found.len(), 1);
    let event = &found[0];
    assert!(event.known_gpu);
    assert_eq!(event.class, MessageClass::Application);
    assert!(!event.serious);
    assert!(matches!(event.kind, KernelEventKind::Xid { code: 13, .. }));
    assert_eq!(event.seq, 2001);
    assert!((event.seconds_since_boot.unwrap() - 812.345678).abs() < 1e-9);
}

#[test]
fn reads_the_mig_form_and_the_old_form_without_pci() {
    let found = events(
        "NVRM: Xid (PCI:0000:61:00 GPU-I:01 GPU-CI:00): 94, pid=77, name=t, x\n\
         NVRM: Xid (0000:03:00): 31, Ch 00000010, engmask 00000101\n",
        &["0000:61:00.0"],
    );
    assert!(matches!(
        found[0].kind,
        KernelEventKind::Xid { code: 94, .. }
    ));
    assert_eq!(found[0].address, address("0000:61:00.0"));
    assert!(matches!(
        found[1].kind,
        KernelEventKind::Xid { code: 31, .. }
    ));
    assert_eq!(found[1].address, address("0000:03:00.0"));
}

#[test]
fn fallen_off_the_bus_over_several_records_and_without_an_xid() {
    let found = events(
        "[ 1843.308145] NVRM: The NVIDIA GPU 0000:81:00.0\n\
         \x20              NVRM: (PCI ID: 10de:2684) installed in this system has\n\
         \x20              NVRM: fallen off the bus and is not responding to commands.\n\
         [   49.261458] NVRM: GPU at 0000:01:00.0 has fallen off the bus.\n\
         NVRM: GPU 0000:41:00.0: GPU has fallen off the bus.\n",
        &["0000:81:00.0", "0000:41:00.0"],
    );
    let addresses: Vec<String> = found.iter().map(KernelEvent::subject).collect();
    assert_eq!(
        addresses,
        ["0000:81:00.0", "0000:01:00.0", "0000:41:00.0"],
        "{found:?}"
    );
    assert!(found
        .iter()
        .all(|e| e.kind == KernelEventKind::FallenOffTheBus && e.serious));
}

#[test]
fn amdgpu_ring_timeouts_and_resets_are_serious_its_boot_lines_are_nothing() {
    let found = events(
        "amdgpu 0000:43:00.0: amdgpu: SMU is initialized successfully!\n\
         amdgpu 0000:43:00.0: amdgpu: ring gfx_0.0.0 uses VM inv eng 0 on hub 0\n\
         amdgpu 0000:43:00.0: [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring \
         gfx_0.0.0 timeout, signaled seq=1, emitted seq=3\n\
         amdgpu 0000:43:00.0: amdgpu: GPU reset begin!\n\
         amdgpu 0000:43:00.0: amdgpu: GPU reset(2) succeeded!\n",
        &["0000:43:00.0"],
    );
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(
        found[0].kind,
        KernelEventKind::RingTimeout {
            ring: Some("gfx_0.0.0".into())
        }
    );
    assert_eq!(found[1].kind, KernelEventKind::GpuReset);
}

#[test]
fn a_timeout_without_an_address_takes_the_gpu_its_neighbours_name() {
    let found = events(
        "[  500.1] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring sdma0 timeout, signaled seq=9, emitted seq=11\n\
         [  500.2] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* Process information: process  pid 0 thread  pid 0\n\
         [  500.3] amdgpu 0000:0c:00.0: amdgpu: GPU reset begin!\n",
        &["0000:0c:00.0"],
    );
    assert_eq!(found[0].address, address("0000:0c:00.0"));
    assert!(found[0].attributed && found[0].known_gpu);
    assert!(found[0].describe().contains("neighbouring"));
}

#[test]
fn a_timeout_that_nothing_names_is_reported_for_a_gpu_not_identified() {
    let found = events(
        "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, signaled seq=1, emitted seq=2\n",
        &["0000:0c:00.0"],
    );
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].address, None);
    assert!(found[0].serious);
    assert_eq!(found[0].subject(), NOT_IDENTIFIED);
}

#[test]
fn a_ring_that_recovered_is_still_a_ring_that_hung() {
    let found = events(
        "amdgpu 0000:03:00.0: amdgpu: Ring gfx_0.0.0 reset succeeded\n\
         amdgpu 0000:03:00.0: [drm] device wedged, but recovered through reset\n\
         amdgpu 0000:03:00.0: amdgpu: ring gfx_0.0.0 timeout, but soft recovered\n",
        &["0000:03:00.0"],
    );
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found
        .iter()
        .all(|e| matches!(e.kind, KernelEventKind::RingReset { .. }) && e.serious));
}

#[test]
fn gpus_that_never_came_up_name_the_cause() {
    let found = events(
        "NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:742)\n\
         NVRM: GPU 0000:01:00.0: rm_init_adapter failed, device minor number 0\n\
         NVRM: The NVIDIA probe routine failed for 1 device(s).\n\
         amdgpu 0000:0c:00.0: amdgpu: psp gfx command LOAD_IP_FW(0x6) failed and response status is (0xFFFF0007)\n\
         [drm:amdgpu_device_init [amdgpu]] *ERROR* hw_init of IP block <psp> failed -22\n\
         amdgpu 0000:0c:00.0: amdgpu: amdgpu_device_ip_init failed\n\
         amdgpu 0000:0c:00.0: amdgpu: Fatal error during GPU init\n",
        &["0000:01:00.0", "0000:0c:00.0"],
    );
    let kinds: Vec<(&str, String)> = found.iter().map(|e| (e.kind.name(), e.subject())).collect();
    assert!(
        kinds.contains(&("init_failure", "0000:01:00.0".into())),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&("firmware_load", "0000:0c:00.0".into())),
        "{kinds:?}"
    );
    assert!(found.iter().any(|e| matches!(&e.kind,
        KernelEventKind::InitFailure { cause } if cause.contains("hw_init of IP block <psp> failed"))));
    assert!(
        found.iter().all(|e| e.serious && e.address.is_some()),
        "{found:?}"
    );
}

#[test]
fn smu_and_mes_hangs_in_both_spellings() {
    let found = events(
        "amdgpu 0000:03:00.0: amdgpu: SMU: I'm not done with your previous command: SMN_C2PMSG_66:0x0000000D\n\
         amdgpu 0000:03:00.0: amdgpu: Failed to export SMU metrics table!\n\
         [drm:mes_v11_0_submit_pkt_and_poll_completion.constprop.0 [amdgpu]] *ERROR* MES failed to response msg=3\n\
         [drm:amdgpu_mes_add_hw_queue [amdgpu]] *ERROR* failed to add hardware queue to MES, doorbell=0x1002\n\
         amdgpu 0000:03:00.0: amdgpu: MES failed to respond to msg=MISC (WAIT_REG_MEM)\n",
        &["0000:03:00.0"],
    );
    let kinds: Vec<&str> = found.iter().map(|e| e.kind.name()).collect();
    assert_eq!(
        kinds,
        ["smu_hang", "smu_hang", "mes_hang", "mes_hang", "mes_hang"]
    );
    assert!(found.iter().all(|e| e.address == address("0000:03:00.0")));
}

#[test]
fn aer_names_the_failing_device_and_the_port_that_reported_it() {
    let found = events(
        "[ 100.1] pcieport 0000:00:01.1: AER: Uncorrected (Fatal) error received: 0000:01:00.0\n\
         [ 100.1] nvidia 0000:01:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)\n\
         [ 100.1] nvidia 0000:01:00.0:   device [10de:2684] error status/mask=00000020/00000000\n\
         [ 100.1] nvidia 0000:01:00.0:    [ 5] SDES                   (First)\n\
         [ 100.2] pcieport 0000:00:01.1: AER: can't recover (no error_detected callback)\n",
        &["0000:01:00.0"],
    );
    assert_eq!(found.len(), 1, "{found:?}");
    let event = &found[0];
    assert_eq!(event.address, address("0000:01:00.0"));
    assert!(event.serious && event.known_gpu);
    let KernelEventKind::Aer {
        severity,
        layer,
        errors,
        reported_by,
        recovery_failed,
    } = &event.kind
    else {
        panic!("{event:?}")
    };
    assert_eq!(*severity, AerSeverity::Fatal);
    assert_eq!(layer.as_deref(), Some("Transaction Layer"));
    assert_eq!(errors, &["SDES"]);
    assert_eq!(*reported_by, address("0000:00:01.1"));
    assert!(recovery_failed);
    assert!(event.describe().contains("reported by 0000:00:01.1"));
}

#[test]
fn corrected_and_correctable_are_one_class_in_old_and_new_words() {
    let found = events(
        "pcieport 0000:00:1c.5: AER: Corrected error received: 0000:00:1c.5\n\
         pcieport 0000:00:1c.5: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)\n\
         pcieport 0000:00:1c.5:    [ 0] RxErr\n\
         pcieport 0000:00:01.1: AER: Correctable error message received from 0000:01:00.0\n\
         nvidia 0000:01:00.0: PCIe Bus Error: severity=Correctable, type=Data Link Layer, (Transmitter ID)\n\
         nvidia 0000:01:00.0:    [ 7] BadDLLP\n\
         pcieport 0000:00:03.1: AER: Multiple Uncorrected (Non-Fatal) error received: 0000:0a:00.0\n",
        &["0000:01:00.0"],
    );
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found[..2]
        .iter()
        .all(|e| e.class == MessageClass::Correctable));
    assert_eq!(found[0].address, address("0000:00:1c.5"));
    assert!(
        matches!(&found[1].kind, KernelEventKind::Aer { errors, reported_by, .. }
        if errors == &["BadDLLP"] && *reported_by == address("0000:00:01.1"))
    );
    assert!(matches!(
        found[2].kind,
        KernelEventKind::Aer {
            severity: AerSeverity::NonFatal,
            ..
        }
    ));
    assert_eq!(found[2].address, address("0000:0a:00.0"));
    assert!(found[2].serious);
}

#[test]
fn xid_45_keeps_the_xid_that_caused_it() {
    let found = events(
        "NVRM: Xid (PCI:0000:41:00): 48, pid=9, name=python3, DBE (0x1,0x0)\n\
         NVRM: Xid (PCI:0000:41:00): 45, pid=9, name=python3, Ch 00000008\n",
        &["0000:41:00.0"],
    );
    assert!(matches!(
        found[1].kind,
        KernelEventKind::Xid {
            code: 45,
            caused_by: Some(48),
            ..
        }
    ));
    assert!(found[1].describe().contains("caused by previous Xid 48"));
}

#[test]
fn xid_45_takes_the_cause_its_own_line_names_first() {
    let found = events(
        "NVRM: Xid (PCI:0000:41:00): 13, pid=9, name=python3, Graphics Exception\n\
         NVRM: Xid (PCI:0000:41:00): 45, pid=9, name=python3, Ch 00000002 caused by previous Xid 149\n",
        &["0000:41:00.0"],
    );
    assert!(matches!(
        found[1].kind,
        KernelEventKind::Xid {
            code: 45,
            caused_by: Some(149),
            ..
        }
    ));
}

#[test]
fn an_event_for_an_address_that_is_no_gpu_here_says_so() {
    let found = events(
        "NVRM: Xid (PCI:0000:f1:00): 48, pid=9, name=g, DBE\n",
        &["0000:21:00.0"],
    );
    assert!(!found[0].known_gpu);
    assert!(found[0].serious);
    assert!(found[0].describe().contains("no GPU at that address"));
}

#[test]
fn a_pipe_with_no_writer_reads_as_empty_instead_of_hanging() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join("dev")).unwrap();
    let fifo = root.path().join("dev/kmsg");
    nix::unistd::mkfifo(
        &fifo,
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )
    .unwrap();
    assert_eq!(read_records(root.path()), Ok(Vec::new()));
}

/// Every corpus log cut, spliced and sprinkled with stray bytes at random: whatever a
/// paste or a damaged journal holds, the reader and the judgement finish without a panic.
#[test]
fn damaged_logs_never_panic_the_reader_or_the_judgement() {
    let corpus =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kernel-logs");
    let mut lines: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(corpus).unwrap().flatten() {
        if entry.path().extension().is_some_and(|e| e == "log") {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            lines.extend(text.lines().map(str::to_string));
        }
    }
    assert!(lines.len() > 500, "{} corpus lines", lines.len());
    // xorshift64*: the same damage on every run.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    const STRAY: &[&str] = &[
        "[",
        "]",
        ":",
        ";",
        ",",
        " ",
        "\u{1b}[2J",
        "é",
        "0000:",
        "<3>",
        "\t",
        "{",
        "фев",
    ];
    for _ in 0..5000 {
        let mut text = String::new();
        for _ in 0..(next() % 40) {
            let line = &lines[(next() % lines.len() as u64) as usize];
            let chars: Vec<char> = line.chars().collect();
            let cut = (next() as usize) % (chars.len() + 1);
            let start = (next() as usize) % (cut + 1);
            let mut damaged: String = chars[start..cut].iter().collect();
            if next() % 3 == 0 {
                let at = damaged
                    .char_indices()
                    .map(|(i, _)| i)
                    .nth((next() as usize) % (damaged.chars().count() + 1))
                    .unwrap_or(damaged.len());
                damaged.insert_str(at, STRAY[(next() % STRAY.len() as u64) as usize]);
            }
            text.push_str(&damaged);
            text.push('\n');
        }
        let records = parse_pasted(&text);
        let gpus = [address("0000:01:00.0").unwrap()];
        for event in gpu_events(&records, &gpus) {
            let _ = event.describe();
        }
        let _ = parse_records(&text);
    }
}

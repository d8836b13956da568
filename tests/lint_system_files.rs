//! scripts/lint-system-files.sh against the real system files (they pass) and against
//! copies with one deliberate fault each (the lint fails and names the file).
//!
//! The lint runs the real tools: systemd-analyze, systemd-sysusers, systemd-tmpfiles,
//! dbus-daemon, dbus-send and udevadm (apt packages systemd, dbus-daemon, dbus-bin, udev).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const UNIT: &str = "systemd/tinyperf.service";
const SYSUSERS: &str = "systemd/tinyperf.sysusers.conf";
const TMPFILES: &str = "systemd/tinyperf.tmpfiles.conf";
const POLICY: &str = "systemd/org.tinyperf.Agent1.conf";
const ACTIVATION: &str = "systemd/org.tinyperf.Agent1.service";
const RULES: &str = "udev/70-tinyperf.rules";

/// Stand-ins used only while this tree lacks the D-Bus files, so that the D-Bus part of
/// the lint is exercised all the same; the real files replace them once present.
const SAMPLE_POLICY: &str = r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <policy context="default">
    <deny own="org.tinyperf.Agent1"/>
    <allow send_destination="org.tinyperf.Agent1" send_interface="org.tinyperf.Agent1" send_member="GetRun"/>
  </policy>
  <policy user="root">
    <allow own="org.tinyperf.Agent1"/>
  </policy>
</busconfig>
"#;
const SAMPLE_ACTIVATION: &str = "[D-BUS Service]
Name=org.tinyperf.Agent1
Exec=/usr/bin/tinyperf agent
User=root
SystemdService=tinyperf.service
";

fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn lint(source: &Path) -> Output {
    Command::new("bash")
        .arg(repository().join("scripts/lint-system-files.sh"))
        .arg("--source")
        .arg(source)
        .arg(env!("CARGO_BIN_EXE_tinyperf"))
        .output()
        .expect("bash runs")
}

fn describe(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A copy of the system files, with samples for the D-Bus files this tree lacks.
struct SourceTree {
    dir: tempfile::TempDir,
}

impl SourceTree {
    fn copy() -> SourceTree {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("systemd")).unwrap();
        std::fs::create_dir_all(dir.path().join("udev")).unwrap();
        for file in [UNIT, SYSUSERS, TMPFILES, RULES] {
            std::fs::copy(repository().join(file), dir.path().join(file))
                .unwrap_or_else(|e| panic!("{file}: {e}"));
        }
        for (file, sample) in [(POLICY, SAMPLE_POLICY), (ACTIVATION, SAMPLE_ACTIVATION)] {
            let real = repository().join(file);
            let text = std::fs::read_to_string(&real).unwrap_or_else(|_| sample.to_string());
            std::fs::write(dir.path().join(file), text).unwrap();
        }
        SourceTree { dir }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// Replaces `from` by `to` on the first line of `file` that is not a comment and
    /// holds it; `from` must be there, so the fault is real.
    fn break_file(&self, file: &str, from: &str, to: &str) -> &SourceTree {
        let path = self.path(file);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut replaced = false;
        let lines: Vec<String> = text
            .lines()
            .map(|line| {
                let is_comment = line.trim_start().starts_with('#');
                if !replaced && !is_comment && line.contains(from) {
                    replaced = true;
                    line.replacen(from, to, 1)
                } else {
                    line.to_string()
                }
            })
            .collect();
        assert!(
            replaced,
            "{file} no longer contains {from:?} outside comments"
        );
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        self
    }

    fn remove_lines_starting_with(&self, file: &str, prefixes: &[&str]) -> &SourceTree {
        let path = self.path(file);
        let text = std::fs::read_to_string(&path).unwrap();
        for prefix in prefixes {
            assert!(
                text.lines().any(|l| l.starts_with(prefix)),
                "{file} has no line starting with {prefix:?}"
            );
        }
        let kept: Vec<&str> = text
            .lines()
            .filter(|line| !prefixes.iter().any(|p| line.starts_with(p)))
            .collect();
        std::fs::write(&path, kept.join("\n") + "\n").unwrap();
        self
    }

    fn write(&self, file: &str, text: &str) -> &SourceTree {
        std::fs::write(self.path(file), text).unwrap();
        self
    }

    /// The lint fails (status 1), naming `file`, with `detail` somewhere in its report.
    fn assert_lint_fails_on(&self, file: &str, detail: &str) {
        let output = lint(self.dir.path());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
        assert!(
            stderr.contains(&format!("FAIL  {file}")),
            "no failure named {file}:\n{}",
            describe(&output)
        );
        assert!(
            stderr.contains(detail),
            "no {detail:?} in the report:\n{}",
            describe(&output)
        );
        let failures = stderr.lines().filter(|l| l.starts_with("FAIL")).count();
        assert_eq!(
            failures,
            1,
            "only {file} was broken:\n{}",
            describe(&output)
        );
    }
}

#[test]
fn the_real_system_files_pass() {
    let output = Command::new("bash")
        .arg(repository().join("scripts/lint-system-files.sh"))
        .arg(env!("CARGO_BIN_EXE_tinyperf"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    for file in [UNIT, SYSUSERS, RULES] {
        assert!(
            stdout.contains(&format!("ok    {file}")),
            "{file} not checked:\n{stdout}"
        );
    }
    for file in [POLICY, ACTIVATION] {
        if repository().join(file).exists() {
            assert!(
                stdout.contains(&format!("ok    {file}")),
                "{file} not checked:\n{stdout}"
            );
        }
    }
}

#[test]
fn the_system_files_with_the_dbus_files_or_their_samples_pass() {
    let tree = SourceTree::copy();
    let output = lint(tree.dir.path());
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    for file in [UNIT, SYSUSERS, POLICY, ACTIVATION, RULES] {
        assert!(
            stdout.contains(&format!("ok    {file}")),
            "{file} not checked:\n{stdout}"
        );
    }
}

#[test]
fn the_lint_refuses_to_run_without_the_binary() {
    let tree = SourceTree::copy();
    let output = Command::new("bash")
        .arg(repository().join("scripts/lint-system-files.sh"))
        .arg("--source")
        .arg(tree.dir.path())
        .arg(tree.path("no-such-binary"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("build tinyperf first"));
}

#[test]
fn a_unit_with_an_unknown_key_fails_although_systemd_only_warns() {
    SourceTree::copy()
        .break_file(UNIT, "Restart=on-failure", "Restrat=on-failure")
        .assert_lint_fails_on(UNIT, "Unknown key 'Restrat'");
}

#[test]
fn a_unit_with_a_bad_value_fails() {
    SourceTree::copy()
        .break_file(UNIT, "KillMode=mixed", "KillMode=mixd")
        .assert_lint_fails_on(UNIT, "kill mode");
}

#[test]
fn a_unit_whose_binary_is_missing_fails() {
    SourceTree::copy()
        .break_file(
            UNIT,
            "ExecStart=/usr/bin/tinyperf agent",
            "ExecStart=/usr/bin/tinyperf-missing agent",
        )
        .assert_lint_fails_on(UNIT, "is not executable");
}

#[test]
fn a_unit_stripped_of_its_sandbox_fails_on_exposure() {
    SourceTree::copy()
        .remove_lines_starting_with(
            UNIT,
            &[
                "ProtectSystem=",
                "ProtectHome=",
                "PrivateTmp=",
                "ProtectKernelTunables=",
                "RestrictNamespaces=",
                "DevicePolicy=",
                "DeviceAllow=",
            ],
        )
        .assert_lint_fails_on(UNIT, "exposure above 3.0");
}

#[test]
fn a_sysusers_line_of_unknown_type_fails() {
    SourceTree::copy()
        .break_file(SYSUSERS, "u tinyperf -", "x tinyperf -")
        .assert_lint_fails_on(SYSUSERS, "Unknown command type 'x'");
}

#[test]
fn a_sysusers_file_without_the_tinyperf_group_fails() {
    SourceTree::copy()
        .break_file(SYSUSERS, "u tinyperf -", "u tinyperf-agent -")
        .assert_lint_fails_on(SYSUSERS, "does not create group tinyperf");
}

#[test]
fn a_sysusers_file_with_the_group_but_not_the_user_fails() {
    SourceTree::copy()
        .break_file(
            SYSUSERS,
            "u tinyperf - \"tinyperf benchmark agent\" /var/lib/tinyperf /usr/sbin/nologin",
            "g tinyperf -",
        )
        .assert_lint_fails_on(SYSUSERS, "does not create user tinyperf");
}

#[test]
fn a_unit_that_runs_the_agent_as_root_fails() {
    SourceTree::copy()
        .remove_lines_starting_with(UNIT, &["User=", "Group="])
        .assert_lint_fails_on(UNIT, "does not run the agent as user and group tinyperf");
}

#[test]
fn a_unit_that_keeps_roots_capabilities_fails_on_exposure() {
    SourceTree::copy()
        .remove_lines_starting_with(UNIT, &["CapabilityBoundingSet=", "SystemCallFilter="])
        .assert_lint_fails_on(UNIT, "exposure above 3.0");
}

#[test]
fn a_tmpfiles_entry_that_leaves_the_token_to_root_fails() {
    SourceTree::copy()
        .break_file(
            TMPFILES,
            "z /etc/tinyperf/token 0640 root tinyperf -",
            "z /etc/tinyperf/token 0600 root root -",
        )
        .assert_lint_fails_on(TMPFILES, "not 640 group tinyperf");
}

#[test]
fn a_tmpfiles_entry_of_unknown_type_fails() {
    SourceTree::copy()
        .break_file(
            TMPFILES,
            "d /var/lib/systemd/pstore",
            "Y /var/lib/systemd/pstore",
        )
        .assert_lint_fails_on(TMPFILES, "systemd-tmpfiles");
}

#[test]
fn a_policy_with_an_invalid_attribute_fails() {
    SourceTree::copy()
        .break_file(POLICY, "send_member=", "send_memberx=")
        .assert_lint_fails_on(POLICY, "send_memberx");
}

#[test]
fn a_policy_that_is_not_well_formed_xml_fails() {
    SourceTree::copy()
        .break_file(POLICY, "</busconfig>", "</busconfig")
        .assert_lint_fails_on(POLICY, "refused the configuration");
}

#[test]
fn a_policy_both_default_and_per_user_fails() {
    SourceTree::copy()
        .break_file(
            POLICY,
            "<policy context=\"default\">",
            "<policy context=\"default\" user=\"root\">",
        )
        .assert_lint_fails_on(POLICY, "exactly one of");
}

#[test]
fn an_activation_file_for_another_name_fails() {
    SourceTree::copy()
        .break_file(
            ACTIVATION,
            "Name=org.tinyperf.Agent1",
            "Name=org.tinyperf.Agent2",
        )
        .assert_lint_fails_on(ACTIVATION, "not list org.tinyperf.Agent1 as activatable");
}

#[test]
fn an_activation_file_without_exec_fails() {
    let tree = SourceTree::copy();
    let text = std::fs::read_to_string(tree.path(ACTIVATION)).unwrap();
    let without_exec: String = text
        .lines()
        .filter(|l| !l.starts_with("Exec="))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(text, without_exec, "the activation file has an Exec= line");
    tree.write(ACTIVATION, &without_exec)
        .assert_lint_fails_on(ACTIVATION, "activatable");
}

#[test]
fn an_activation_file_for_another_unit_fails() {
    SourceTree::copy()
        .break_file(
            ACTIVATION,
            "SystemdService=tinyperf.service",
            "SystemdService=tinyperf-agent.service",
        )
        .assert_lint_fails_on(ACTIVATION, "expected tinyperf.service");
}

#[test]
fn udev_rules_missing_a_comma_fail() {
    SourceTree::copy()
        .break_file(
            RULES,
            "KERNEL==\"renderD*\", GROUP",
            "KERNEL==\"renderD*\" GROUP",
        )
        .assert_lint_fails_on(RULES, "separated by commas");
}

#[test]
fn udev_rules_with_an_unterminated_string_fail() {
    SourceTree::copy()
        .break_file(RULES, "MODE=\"0660\"", "MODE=\"0660")
        .assert_lint_fails_on(RULES, "separated by commas");
}

#[test]
fn udev_rules_with_an_assignment_to_a_match_key_fail_in_udevadm() {
    SourceTree::copy()
        .break_file(RULES, "SUBSYSTEM==\"kfd\"", "SUBSYSTEM=\"kfd\"")
        .assert_lint_fails_on(RULES, "Invalid operator for SUBSYSTEM");
}

#[test]
fn udev_rules_with_an_unknown_key_fail_in_udevadm() {
    SourceTree::copy()
        .break_file(RULES, "SUBSYSTEM==\"kfd\"", "SUBSYSTEMZ==\"kfd\"")
        .assert_lint_fails_on(RULES, "Invalid key 'SUBSYSTEMZ'");
}

#[test]
fn udev_rules_naming_an_unknown_group_fail_in_udevadm() {
    SourceTree::copy()
        .break_file(RULES, "GROUP=\"video\"", "GROUP=\"no-such-group-here\"")
        .assert_lint_fails_on(RULES, "Unknown group 'no-such-group-here'");
}

//! What the status page says of the OS image beyond its header line: the newest
//! version the box rejected and why, an OS update on its way, and a version on trial.

use chrono::{DateTime, Utc};

use super::text::bytes_text;
use crate::update::status::{OsImage, Rejection};

/// The page's OS image part; empty parts are left out of the page.
pub(super) struct ImagePart {
    /// The newest rejection, in one line.
    pub rejection: Option<String>,
    /// How many older rejections there are besides it.
    pub older_rejections: usize,
    /// An OS update being fetched, written, or offered.
    pub update: Option<UpdateLine>,
    /// The running version, while it is on trial.
    pub on_trial: Option<String>,
}

/// An OS update as the page shows it.
pub(super) struct UpdateLine {
    /// `checking`, `downloading`, `written`, `rejected` (the update was refused) or
    /// `available`, for the page's script.
    pub state: String,
    /// The update in words.
    pub text: String,
    /// Bytes done and in all, for the progress bar; `None` when the size is unknown or
    /// nothing is being fetched.
    pub bytes: Option<(u64, u64)>,
}

impl ImagePart {
    /// Whether there is anything to show.
    pub fn is_empty(&self) -> bool {
        self.rejection.is_none() && self.update.is_none() && self.on_trial.is_none()
    }
}

pub(super) fn part(os: &OsImage) -> ImagePart {
    ImagePart {
        rejection: os.rejections.first().map(|r| rejection_line(r, &os.version)),
        older_rejections: os.rejections.len().saturating_sub(1),
        update: os.update.as_ref().and_then(|u| {
            let version = if u.version.is_empty() {
                "a new version"
            } else {
                u.version.as_str()
            };
            let sized = (u.total_bytes > 0).then_some((u.done_bytes.min(u.total_bytes), u.total_bytes));
            match u.state.as_str() {
                "checking" => Some(UpdateLine {
                    state: "checking".into(),
                    text: "Checking the update source for a newer OS version.".into(),
                    bytes: None,
                }),
                "downloading" => Some(UpdateLine {
                    state: "downloading".into(),
                    text: match sized {
                        Some((done, total)) => format!(
                            "Downloading OS {version}: {} of {} ({:.0} %).",
                            bytes_text(done as f64),
                            bytes_text(total as f64),
                            done as f64 * 100.0 / total as f64
                        ),
                        None => format!(
                            "Downloading OS {version}: {} so far.",
                            bytes_text(u.done_bytes as f64)
                        ),
                    },
                    bytes: sized,
                }),
                "written" => {
                    let pending = if u.pending_version.is_empty() {
                        version
                    } else {
                        u.pending_version.as_str()
                    };
                    Some(UpdateLine {
                        state: "written".into(),
                        text: format!(
                            "OS {pending} is written to the other slot and starts at the next boot, on trial."
                        ),
                        bytes: sized,
                    })
                }
                "rejected" => Some(UpdateLine {
                    state: "rejected".into(),
                    text: if u.message.is_empty() {
                        format!("The update to OS {version} was refused.")
                    } else {
                        format!("The update to OS {version} was refused: {}", u.message)
                    },
                    bytes: None,
                }),
                _ if !u.available.is_empty() => Some(UpdateLine {
                    state: "available".into(),
                    text: format!("OS {} is available.", u.available),
                    bytes: None,
                }),
                _ => None,
            }
        }),
        on_trial: os.on_trial.then(|| {
            if os.version.is_empty() {
                "(no version)".to_string()
            } else {
                os.version.clone()
            }
        }),
    }
}

/// `20261207.0900 rejected 2026-12-07 09:12 UTC: training img/s 4,410 vs 5,220 on
/// 20261206.0900, 0.84 < 0.95 — the box went back to 20261206.0900`.
fn rejection_line(r: &Rejection, running: &str) -> String {
    let prefix = format!("{} rejected: ", r.version);
    let why = r.reason.strip_prefix(&prefix).unwrap_or(&r.reason);
    let when = r.at.map(when_text).unwrap_or_default();
    let back = match r.previous_version.as_deref() {
        Some(previous) if !previous.is_empty() => format!(" — the box went back to {previous}"),
        _ if !running.is_empty() && running != r.version => {
            format!(" — the box went back to {running}")
        }
        _ => String::new(),
    };
    format!("{} rejected{when}: {why}{back}", r.version)
}

fn when_text(at: DateTime<Utc>) -> String {
    format!(" {}", at.format("%Y-%m-%d %H:%M UTC"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::update::gate::GateCheck;
    use crate::update::progress::UpdateProgress;

    fn os() -> OsImage {
        let root = tempfile::tempdir().unwrap();
        crate::update::fixture::image(
            root.path(),
            crate::update::fixture::ImageLayout {
                a: crate::update::fixture::SlotContent::Version("20261206.0900"),
                b: crate::update::fixture::SlotContent::Version("20261207.0900"),
                booted: 'a',
                verity: true,
            },
        );
        crate::update::status::read(root.path(), Default::default())
            .os
            .unwrap()
    }

    fn rejection(version: &str, previous: Option<&str>) -> Rejection {
        Rejection {
            version: version.into(),
            at: Some(
                DateTime::parse_from_rfc3339("2026-12-07T09:12:31Z")
                    .unwrap()
                    .with_timezone(&Utc),
            ),
            reason: format!(
                "{version} rejected: training img/s 4,410 vs 5,220 on 20261206.0900, 0.84 < 0.95"
            ),
            previous_version: previous.map(String::from),
            failed_checks: vec![GateCheck {
                name: "training img/s".into(),
                expected: "≥ 0.95 × 5,220".into(),
                found: "4,410".into(),
                result: "fail".into(),
                ratio: Some(0.84),
                previous_value: Some(5220.0),
            }],
        }
    }

    #[test]
    fn the_newest_rejection_names_its_version_time_reason_and_where_the_box_went() {
        let mut os = os();
        assert!(part(&os).is_empty());
        os.rejections = vec![
            rejection("20261207.0900", Some("20261206.0900")),
            rejection("20261201.0900", None),
        ];
        let p = part(&os);
        assert_eq!(
            p.rejection.as_deref(),
            Some(
                "20261207.0900 rejected 2026-12-07 09:12 UTC: training img/s 4,410 vs 5,220 \
                 on 20261206.0900, 0.84 < 0.95 — the box went back to 20261206.0900"
            )
        );
        assert_eq!(p.older_rejections, 1);
        // Without a time or the version it was held against, the running one is where
        // the box went back to.
        os.rejections = vec![Rejection {
            at: None,
            reason: "its boot entry ran out of tries".into(),
            ..rejection("20261207.0900", None)
        }];
        assert_eq!(
            part(&os).rejection.as_deref(),
            Some(
                "20261207.0900 rejected: its boot entry ran out of tries — the box went back to 20261206.0900"
            )
        );
    }

    #[test]
    fn an_update_shows_its_state_and_bytes_and_a_trial_is_told() {
        let mut os = os();
        let mut update = UpdateProgress::idle();
        update.state = "downloading".into();
        update.version = "20261208.0900".into();
        update.done_bytes = 768 << 20;
        update.total_bytes = 2 << 30;
        os.update = Some(update.clone());
        let line = part(&os).update.unwrap();
        assert_eq!(line.state, "downloading");
        assert_eq!(
            line.text,
            "Downloading OS 20261208.0900: 768 MiB of 2 GiB (38 %)."
        );
        assert_eq!(line.bytes, Some((768 << 20, 2 << 30)));

        update.total_bytes = 0;
        os.update = Some(update.clone());
        let line = part(&os).update.unwrap();
        assert_eq!(line.text, "Downloading OS 20261208.0900: 768 MiB so far.");
        assert_eq!(line.bytes, None);

        update.state = "written".into();
        update.pending_version = "20261208.0900".into();
        os.update = Some(update.clone());
        assert!(part(&os)
            .update
            .unwrap()
            .text
            .starts_with("OS 20261208.0900 is written to the other slot"));

        update.state = "rejected".into();
        update.message = "SHA256SUMS.gpg does not verify".into();
        os.update = Some(update.clone());
        let line = part(&os).update.unwrap();
        assert_eq!(line.state, "rejected");
        assert_eq!(
            line.text,
            "The update to OS 20261208.0900 was refused: SHA256SUMS.gpg does not verify"
        );

        update.state = "idle".into();
        os.update = Some(update.clone());
        assert!(part(&os).update.is_none());
        update.available = "20261209.0900".into();
        os.update = Some(update);
        assert_eq!(
            part(&os).update.unwrap().text,
            "OS 20261209.0900 is available."
        );

        os.on_trial = true;
        assert_eq!(part(&os).on_trial.as_deref(), Some("20261206.0900"));
    }
}

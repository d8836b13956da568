//! The kernel command line (`proc/cmdline`): the verity root hash and the factory-reset
//! switch the boot loader passed.

/// The words of a kernel command line as the kernel splits them: at spaces, except
/// inside double quotes, which are dropped.
pub fn words(cmdline: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in cmdline.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(word);
    }
    words
}

/// What the image cares about on the command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cmdline {
    /// `roothash=`: the verity root hash the initrd checked the root against.
    pub roothash: Option<String>,
    /// `systemd.factory_reset=1` (or `yes`, `true`, `on`): this boot erases the state
    /// partition.
    pub factory_reset: bool,
}

impl Cmdline {
    /// Reads the command line's text; the last of repeated keys wins, as for the kernel.
    pub fn parse(text: &str) -> Cmdline {
        let mut cmdline = Cmdline::default();
        for word in words(text) {
            let (key, value) = word.split_once('=').unwrap_or((word.as_str(), ""));
            match key {
                "roothash" => {
                    cmdline.roothash = Some(value.to_string()).filter(|v| is_hex(v));
                }
                "systemd.factory_reset" => {
                    cmdline.factory_reset = matches!(value, "" | "1" | "yes" | "true" | "on");
                }
                _ => {}
            }
        }
        cmdline
    }
}

fn is_hex(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_at_spaces_outside_quotes() {
        assert_eq!(
            words("a=1  b=\"two words\" c\n"),
            ["a=1", "b=two words", "c"]
        );
        assert_eq!(words("x=\"\""), ["x="]);
        assert!(words("  ").is_empty());
    }

    #[test]
    fn root_hash_and_factory_reset_are_read() {
        let hash = "3f".repeat(32);
        let cmdline = Cmdline::parse(&format!(
            "BOOT_IMAGE=/x roothash={hash} systemd.factory_reset=1 quiet"
        ));
        assert_eq!(cmdline.roothash.as_deref(), Some(hash.as_str()));
        assert!(cmdline.factory_reset);
        let plain = Cmdline::parse("root=/dev/vda2 systemd.factory_reset=0 roothash=zz");
        assert_eq!(plain, Cmdline::default());
    }
}

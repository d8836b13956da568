//! The pieces a kernel message names its device with: `driver 0000:41:00.0: …` at its
//! start, or an address anywhere in it (`PCI:0000:41:00`, `0000:41:00.0,`).

use crate::inventory::pci::PciAddress;

/// `0000:41:00` (an Xid's device, function 0), `PCI:0000:41:00`, or a full `0000:41:00.0`,
/// with the punctuation a message puts after it.
pub fn parse_address(text: &str) -> Option<PciAddress> {
    let text = text
        .trim_start_matches('(')
        .trim_start_matches("PCI:")
        .trim_end_matches([':', '.', ',', ')', ';', '!']);
    // A domain of four or eight digits, as the kernel and NVML print it: `14:03:11` is a
    // time, not a device.
    let domain_len = text.split(':').next().map_or(0, str::len);
    if domain_len != 4 && domain_len != 8 {
        return None;
    }
    PciAddress::parse(text).or_else(|| {
        // Only the full `domain:bus:device` form takes a function 0; `41:00` is no address.
        (text.matches(':').count() == 2)
            .then(|| PciAddress::parse(&format!("{text}.0")))
            .flatten()
    })
}

/// `amdgpu 0000:43:00.0: rest` or `0000:43:00.0: rest` → (driver, address, rest).
pub fn device_prefix(text: &str) -> Option<(&str, PciAddress, &str)> {
    let (first, rest) = text.split_once(' ')?;
    if first.ends_with(':') {
        if let Some(address) = PciAddress::parse(first.trim_end_matches(':')) {
            return Some(("", address, rest.trim_start()));
        }
    }
    let (second, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    let address = PciAddress::parse(second.strip_suffix(':')?)?;
    Some((first, address, rest.trim_start()))
}

/// The first PCI address anywhere in `text`.
pub fn first_address(text: &str) -> Option<PciAddress> {
    text.split(|c: char| c.is_whitespace() || c == '=' || c == '[' || c == ']')
        .find_map(parse_address)
}

/// The word after `marker` in `text` (`ring gfx_0.0.0 timeout` → `gfx_0.0.0`), without a
/// trailing comma or colon.
pub fn word_after<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    let (_, after) = text.split_once(marker)?;
    after
        .split_whitespace()
        .next()
        .map(|w| w.trim_end_matches([',', ':', '!', '.']))
        .filter(|w| !w.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_in_every_spelling_the_drivers_use() {
        let gpu = PciAddress::parse("0000:41:00.0").unwrap();
        for text in [
            "0000:41:00",
            "PCI:0000:41:00",
            "0000:41:00.0:",
            "(PCI:0000:41:00)",
            "0000:41:00.0,",
        ] {
            assert_eq!(parse_address(text), Some(gpu), "{text}");
        }
        assert_eq!(parse_address("41:00"), None);
        assert_eq!(parse_address("14:03:11"), None);
    }

    #[test]
    fn a_device_prefix_with_and_without_its_driver() {
        let (driver, address, rest) =
            device_prefix("pcieport 0000:00:01.1: AER: Corrected error received").unwrap();
        assert_eq!(
            (driver, address.to_string().as_str(), rest),
            ("pcieport", "0000:00:01.1", "AER: Corrected error received")
        );
        let (driver, _, rest) = device_prefix("0000:01:00.0: [ 0] RxErr").unwrap();
        assert_eq!((driver, rest), ("", "[ 0] RxErr"));
        assert!(device_prefix("NVRM: GPU at PCI:0000:01:00: GPU-1").is_none());
    }
}

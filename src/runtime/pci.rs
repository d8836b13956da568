//! PCI addresses as the runtimes spell them, turned into the sysfs spelling.

/// Turns `0000:0A:00.0` (CUDA, HIP), `00000000:0a:00.0` (NVML) or `0a:00.0` into the
/// sysfs form `0000:0a:00.0`. `None` when the text is not a PCI address.
pub fn normalise_pci_address(text: &str) -> Option<String> {
    let text = text.trim_matches(|c: char| c.is_whitespace() || c == '\0');
    let (rest, function) = text.rsplit_once('.')?;
    let mut parts = rest.rsplit(':');
    let device = parts.next()?;
    let bus = parts.next()?;
    let domain = parts.next().unwrap_or("0");
    if parts.next().is_some() {
        return None;
    }
    let domain = parse_hex(domain, 8, 0xffff)?;
    let bus = parse_hex(bus, 2, 0xff)?;
    let device = parse_hex(device, 2, 0x1f)?;
    let function = parse_hex(function, 1, 0x7)?;
    Some(format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}"))
}

fn parse_hex(field: &str, max_digits: usize, max_value: u32) -> Option<u32> {
    if field.is_empty() || field.len() > max_digits {
        return None;
    }
    u32::from_str_radix(field, 16)
        .ok()
        .filter(|value| *value <= max_value)
}

#[cfg(test)]
mod tests {
    use super::normalise_pci_address;

    #[test]
    fn lowercases_the_cuda_spelling() {
        assert_eq!(
            normalise_pci_address("0000:0A:00.0").as_deref(),
            Some("0000:0a:00.0")
        );
    }

    #[test]
    fn shortens_the_eight_digit_nvml_domain() {
        assert_eq!(
            normalise_pci_address("00000000:C1:00.0\0").as_deref(),
            Some("0000:c1:00.0")
        );
    }

    #[test]
    fn adds_the_domain_when_missing() {
        assert_eq!(
            normalise_pci_address("03:00.1").as_deref(),
            Some("0000:03:00.1")
        );
    }

    #[test]
    fn keeps_a_nonzero_domain() {
        assert_eq!(
            normalise_pci_address("0001:81:1f.7").as_deref(),
            Some("0001:81:1f.7")
        );
    }

    #[test]
    fn rejects_what_is_not_an_address() {
        for text in [
            "",
            "gpu0",
            "0000:01:00",
            "0000:01:20.0",
            "0000:01:00.8",
            "0000:100:00.0",
            "1:0000:01:00.0",
            "0000:0g:00.0",
            "000100000:01:00.0",
        ] {
            assert_eq!(normalise_pci_address(text), None, "{text:?}");
        }
    }
}

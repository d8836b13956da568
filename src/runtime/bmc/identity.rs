//! Who the BMC and the board say they are: `ipmitool mc info` (the controller: device id,
//! firmware, manufacturer, IPMI version) and `ipmitool fru print 0` (the board's and the
//! product's makers, names and serial numbers).

use std::path::Path;

use serde::Serialize;

use super::BmcError;

/// The BMC's and the board's identity; a field the BMC does not report is `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BmcIdentity {
    /// `Device ID` of `mc info`.
    pub device_id: Option<String>,
    /// `Device Revision` of `mc info`.
    pub device_revision: Option<String>,
    /// `Firmware Revision` of `mc info` (ipmitool prints major.minor only).
    pub firmware_revision: Option<String>,
    /// `IPMI Version` of `mc info`.
    pub ipmi_version: Option<String>,
    /// `Manufacturer ID` of `mc info` (the IANA number).
    pub manufacturer_id: Option<String>,
    /// `Manufacturer Name` of `mc info`.
    pub manufacturer_name: Option<String>,
    /// `Product ID` of `mc info`.
    pub product_id: Option<String>,
    /// `Product Name` of `mc info`.
    pub product_name: Option<String>,
    /// `Board Mfg` of the FRU.
    pub board_mfg: Option<String>,
    /// `Board Product` of the FRU.
    pub board_product: Option<String>,
    /// `Board Serial` of the FRU.
    pub board_serial: Option<String>,
    /// `Board Part Number` of the FRU.
    pub board_part_number: Option<String>,
    /// `Board Mfg Date` of the FRU.
    pub board_mfg_date: Option<String>,
    /// `Product Manufacturer` of the FRU.
    pub product_manufacturer: Option<String>,
    /// `Product Name` of the FRU.
    pub fru_product_name: Option<String>,
    /// `Product Part Number` of the FRU.
    pub product_part_number: Option<String>,
    /// `Product Serial` of the FRU.
    pub product_serial: Option<String>,
    /// `Chassis Serial` of the FRU.
    pub chassis_serial: Option<String>,
    /// Why the FRU was not read, when it was not.
    pub fru_unreadable: Option<String>,
}

/// `Key : Value` pairs of ipmitool's listing layout, trimmed; continuation lines (those
/// without a colon) and empty values are skipped.
fn pairs(text: &str) -> impl Iterator<Item = (String, String)> + '_ {
    text.lines().filter_map(|line| {
        let (key, value) = line.split_once(':')?;
        let value = value.trim();
        if value.is_empty() {
            return None;
        }
        Some((key.trim().to_ascii_lowercase(), value.to_string()))
    })
}

/// Fills the controller's fields from `ipmitool mc info` output.
pub fn parse_mc_info(text: &str, into: &mut BmcIdentity) {
    for (key, value) in pairs(text) {
        let slot = match key.as_str() {
            "device id" => &mut into.device_id,
            "device revision" => &mut into.device_revision,
            "firmware revision" => &mut into.firmware_revision,
            "ipmi version" => &mut into.ipmi_version,
            "manufacturer id" => &mut into.manufacturer_id,
            "manufacturer name" => &mut into.manufacturer_name,
            "product id" => &mut into.product_id,
            "product name" => &mut into.product_name,
            _ => continue,
        };
        slot.get_or_insert(value);
    }
}

/// Fills the board's and product's fields from `ipmitool fru print 0` output; the spelled-out
/// names some tools print (`Board Manufacturer`, `Board Serial Number`) count as well. The
/// first device's values win when the output lists more than one.
pub fn parse_fru(text: &str, into: &mut BmcIdentity) {
    for (key, value) in pairs(text) {
        let slot = match key.as_str() {
            "board mfg" | "board manufacturer" => &mut into.board_mfg,
            "board product" | "board product name" => &mut into.board_product,
            "board serial" | "board serial number" => &mut into.board_serial,
            "board part number" => &mut into.board_part_number,
            "board mfg date" | "board manufacturing date" => &mut into.board_mfg_date,
            "product manufacturer" | "product manufacturer name" => &mut into.product_manufacturer,
            "product name" => &mut into.fru_product_name,
            "product part number" => &mut into.product_part_number,
            "product serial" | "product serial number" => &mut into.product_serial,
            "chassis serial" | "chassis serial number" => &mut into.chassis_serial,
            _ => continue,
        };
        slot.get_or_insert(value);
    }
}

/// Asks the BMC behind `ipmitool` who it is. `mc info` must answer; a FRU that cannot be
/// read leaves the board's fields empty and says why in `fru_unreadable`.
pub fn read(ipmitool: &Path) -> Result<BmcIdentity, BmcError> {
    let mut identity = BmcIdentity::default();
    parse_mc_info(&super::run(ipmitool, &["mc", "info"])?, &mut identity);
    match super::run(ipmitool, &["fru", "print", "0"]) {
        Ok(text) => parse_fru(&text, &mut identity),
        Err(why) => identity.fru_unreadable = Some(why.to_string()),
    }
    Ok(identity)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_controller_and_skips_its_lists() {
        let mut id = BmcIdentity::default();
        parse_mc_info(
            "Device ID                 : 32\nFirmware Revision         : 3.10\nIPMI Version              : 2.0\nManufacturer ID           : 10876\nManufacturer Name         : Supermicro\nProduct Name              : Unknown (0x1B54)\nAdditional Device Support :\n    Sensor Device\nAux Firmware Rev Info     : \n    0x00\n",
            &mut id,
        );
        assert_eq!(id.device_id.as_deref(), Some("32"));
        assert_eq!(id.firmware_revision.as_deref(), Some("3.10"));
        assert_eq!(id.manufacturer_name.as_deref(), Some("Supermicro"));
        assert_eq!(id.product_name.as_deref(), Some("Unknown (0x1B54)"));
        assert_eq!(id.board_mfg, None);
    }

    #[test]
    fn reads_both_spellings_of_the_fru_and_keeps_the_first_device() {
        let mut id = BmcIdentity::default();
        parse_fru(
            "FRU Device Description : Builtin FRU Device (ID 0)\n Board Mfg Date        : Mon Jan  1 00:00:00 1996\n Board Mfg             : ASRockRack\n Board Product         : ROMED8-2T\n Board Serial          : ABC\n Product Serial        : XYZ\n\nFRU Device Description : PSU (ID 1)\n Board Mfg             : Other\n",
            &mut id,
        );
        assert_eq!(id.board_mfg.as_deref(), Some("ASRockRack"));
        assert_eq!(
            id.board_mfg_date.as_deref(),
            Some("Mon Jan  1 00:00:00 1996")
        );
        let mut spelled = BmcIdentity::default();
        parse_fru(
            "Board Manufacturer: ASRockRack\nBoard Serial Number: 215850710000008\nProduct Serial Number: F5S0R8000584\n",
            &mut spelled,
        );
        assert_eq!(spelled.board_mfg.as_deref(), Some("ASRockRack"));
        assert_eq!(spelled.board_serial.as_deref(), Some("215850710000008"));
        assert_eq!(spelled.product_serial.as_deref(), Some("F5S0R8000584"));
    }

    #[test]
    fn serialises_for_the_birth_record() {
        let id = BmcIdentity {
            manufacturer_name: Some("ASRock Rack".into()),
            ..BmcIdentity::default()
        };
        let json = serde_json::to_value(&id).unwrap();
        assert_eq!(json["manufacturer_name"], "ASRock Rack");
        assert!(json["board_serial"].is_null());
    }
}

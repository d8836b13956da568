//! NVIDIA Xid codes as the driver names them (`nverror.h` of the open kernel modules and
//! NVIDIA's Xid catalog), with what each means for a health check. DCGM's own labels
//! disagree with the driver for several codes (38/39/42, 54–58, 60–62); these follow the
//! driver.

use serde::Serialize;

/// What an Xid says about the GPU that logged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum XidClass {
    /// The GPU stopped answering: it is gone until a reset or power cycle.
    Lost,
    /// The hardware failed (uncorrectable memory error, firmware halt): reset, then RMA.
    Hardware,
    /// Memory was repaired (a row remapped, a page retired) or an error contained: the GPU
    /// needs a reset before it can be trusted again.
    MemoryRepair,
    /// Errors the hardware corrected, at a rate worth knowing (single-bit ECC errors).
    Correctable,
    /// An uncorrectable memory error the GPU contained to the program that met it: the
    /// program is stopped, the GPU goes on (its row is remapped at the next reset).
    Contained,
    /// Usually the program's fault (a bad address, a killed channel); a GPU that logs it
    /// under tinyperf's own known-good kernels is suspect.
    Application,
}

impl XidClass {
    /// Whether the GPU cannot be trusted until it is reset or replaced.
    pub fn is_serious(self) -> bool {
        matches!(
            self,
            XidClass::Lost | XidClass::Hardware | XidClass::MemoryRepair
        )
    }
}

/// (code, the driver's name, class).
pub const XIDS: &[(u32, &str, XidClass)] = &[
    (
        8,
        "ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY (GPU stopped processing)",
        XidClass::Application,
    ),
    (
        13,
        "ROBUST_CHANNEL_GR_EXCEPTION (Graphics Engine Exception)",
        XidClass::Application,
    ),
    (
        31,
        "FIFO_ERROR_MMU_ERR_FLT (GPU memory page fault)",
        XidClass::Application,
    ),
    (
        32,
        "PBDMA_PUSHBUFFER_CRC_MISMATCH (invalid or corrupted push buffer stream)",
        XidClass::Hardware,
    ),
    (
        38,
        "ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD (FECS error)",
        XidClass::Application,
    ),
    (
        43,
        "RESETCHANNEL_VERIF_ERROR (GPU stopped processing)",
        XidClass::Application,
    ),
    (
        45,
        "PREEMPTIVE_REMOVAL (preemptive cleanup, due to a previous error)",
        XidClass::Application,
    ),
    (48, "GPU_ECC_DBE (double bit ECC error)", XidClass::Hardware),
    (
        61,
        "PMU_BREAKPOINT (internal micro-controller breakpoint)",
        XidClass::Hardware,
    ),
    (
        62,
        "PMU_HALT_ERROR (internal micro-controller halt)",
        XidClass::Hardware,
    ),
    (
        63,
        "INFOROM_DRAM_RETIREMENT_EVENT (row remapping or page retirement recorded)",
        XidClass::MemoryRepair,
    ),
    (
        64,
        "INFOROM_DRAM_RETIREMENT_FAILURE (row remapping or page retirement failed)",
        XidClass::Hardware,
    ),
    (
        69,
        "ROBUST_CHANNEL_GR_CLASS_ERROR (graphics engine class error)",
        XidClass::Application,
    ),
    (74, "NVLINK_ERROR", XidClass::Hardware),
    (79, "GPU_HAS_FALLEN_OFF_THE_BUS", XidClass::Lost),
    (
        92,
        "EXCESSIVE_SBE_INTERRUPTS (high single-bit ECC error rate)",
        XidClass::Correctable,
    ),
    (
        94,
        "ROBUST_CHANNEL_CONTAINED_ERROR (contained ECC error)",
        XidClass::Contained,
    ),
    (
        95,
        "ROBUST_CHANNEL_UNCONTAINED_ERROR (uncontained ECC error)",
        XidClass::Hardware,
    ),
    (
        109,
        "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR (context switch timeout)",
        XidClass::Application,
    ),
    (
        119,
        "GSP_RPC_TIMEOUT (GSP firmware did not answer)",
        XidClass::Hardware,
    ),
    (120, "GSP_ERROR (GSP firmware error)", XidClass::Hardware),
    (
        154,
        "GPU_RECOVERY_ACTION_CHANGED (the driver asks for a reset or reboot)",
        XidClass::Hardware,
    ),
];

/// The driver's name and the class of `code`; an Xid the table does not know is taken
/// as a hardware error, since it cannot be shown harmless.
pub fn classify(code: u32) -> (&'static str, XidClass) {
    XIDS.iter()
        .find(|(c, ..)| *c == code)
        .map(|(_, name, class)| (*name, *class))
        .unwrap_or(("not in tinyperf's Xid table", XidClass::Hardware))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_each_code_is_there_once() {
        assert!(XIDS.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn a_lost_gpu_a_double_bit_error_and_a_remapped_row_are_serious_a_page_fault_is_not() {
        assert!(classify(79).1.is_serious());
        assert!(classify(48).1.is_serious());
        assert!(!classify(31).1.is_serious());
        assert!(classify(63).1.is_serious());
        assert!(!classify(92).1.is_serious());
        assert!(!classify(94).1.is_serious());
        assert_eq!(classify(9999).1, XidClass::Hardware);
    }
}

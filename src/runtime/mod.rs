//! GPU runtimes opened at run time: CUDA (cudarc), HIP (rocmrc), NVML.
//! (Placeholder interface: the probe is not implemented yet.)

use serde::Serialize;

#[derive(Debug, Clone, Default, Serialize)]
pub struct RuntimeReport {
    pub findings: Vec<String>,
}

pub fn probe() -> RuntimeReport {
    RuntimeReport {
        findings: vec!["runtime probe not implemented".into()],
    }
}

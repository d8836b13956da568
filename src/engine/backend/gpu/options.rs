//! The GPU backend's speed switches, read from the environment once when a backend is
//! made. Every one is off (today's behaviour) unless set: none has been timed on a GPU
//! yet, so none is the default.
//!
//! | variable | values | effect |
//! |---|---|---|
//! | `TINYPERF_CONV` | `auto` (default), `dnn`, `implicit`, `im2col` | how non-pointwise convolutions run |
//! | `TINYPERF_FUSED_BN` | `1` | batch norm + residual add + ReLU as one kernel each way |
//! | `TINYPERF_MULTI_TENSOR_OPT` | `1` | the optimizer's norms and updates in one launch each for all parameters |
//! | `TINYPERF_GPU_GRAPH` | `1` | not implemented: a warning says so, and steps run launch by launch |

/// How the backend runs a convolution that is not a plain GEMM (anything but 1×1 at
/// stride 1, which is one GEMM whatever is chosen).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvAlgorithm {
    /// The DNN library when the driver has one, else im2col + GEMM.
    Auto,
    /// The DNN library (im2col + GEMM, with a warning, when the driver has none).
    Dnn,
    /// The backend's own implicit-GEMM kernels: no column matrix in memory.
    ImplicitGemm,
    /// An im2col kernel writing the column matrix, then a vendor-BLAS GEMM.
    Im2col,
}

impl ConvAlgorithm {
    fn parse(value: &str) -> Option<ConvAlgorithm> {
        match value.trim() {
            "" | "auto" => Some(ConvAlgorithm::Auto),
            "dnn" => Some(ConvAlgorithm::Dnn),
            "implicit" => Some(ConvAlgorithm::ImplicitGemm),
            "im2col" => Some(ConvAlgorithm::Im2col),
            _ => None,
        }
    }

    /// What runs on a driver that has (or lacks) a DNN library.
    pub fn resolve(self, has_dnn: bool) -> ConvPath {
        match self {
            ConvAlgorithm::Auto | ConvAlgorithm::Dnn if has_dnn => ConvPath::Dnn,
            ConvAlgorithm::Dnn => {
                tracing::warn!(
                    "TINYPERF_CONV=dnn, but the driver has no DNN library: convolutions use \
                     im2col + GEMM"
                );
                ConvPath::Im2col
            }
            ConvAlgorithm::Auto | ConvAlgorithm::Im2col => ConvPath::Im2col,
            ConvAlgorithm::ImplicitGemm => ConvPath::ImplicitGemm,
        }
    }
}

/// The convolution path a backend takes, once its driver is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvPath {
    /// Through the driver's DNN library (cuDNN).
    Dnn,
    /// The engine's implicit-GEMM kernels, which build no column buffer.
    ImplicitGemm,
    /// im2col into a bounded column buffer, then a vendor GEMM.
    Im2col,
}

/// The backend's speed switches, each off (or automatic) by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuOptions {
    /// How convolutions that are not a plain GEMM run (`TINYPERF_CONV`).
    pub conv: ConvAlgorithm,
    /// Batch norm, the residual add and ReLU fused into one kernel forward and one
    /// backward (`TINYPERF_FUSED_BN=1`).
    pub fused_bn: bool,
    /// The optimizer's norms and momentum updates of every parameter in one launch each
    /// (`TINYPERF_MULTI_TENSOR_OPT=1`).
    pub multi_tensor_optimizer: bool,
}

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions {
            conv: ConvAlgorithm::Auto,
            fused_bn: false,
            multi_tensor_optimizer: false,
        }
    }
}

impl GpuOptions {
    /// The switches as the environment sets them; a value that means nothing is named in
    /// a warning and the switch stays at its default.
    pub fn from_env() -> GpuOptions {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The switches as `lookup` reads the variables, so that tests need not set them.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> GpuOptions {
        let mut options = GpuOptions::default();
        if let Some(value) = lookup("TINYPERF_CONV") {
            match ConvAlgorithm::parse(&value) {
                Some(conv) => options.conv = conv,
                None => tracing::warn!(
                    %value,
                    "TINYPERF_CONV is auto, dnn, implicit or im2col; using auto"
                ),
            }
        }
        options.fused_bn = switch(&lookup, "TINYPERF_FUSED_BN");
        options.multi_tensor_optimizer = switch(&lookup, "TINYPERF_MULTI_TENSOR_OPT");
        if switch(&lookup, "TINYPERF_GPU_GRAPH") {
            tracing::warn!(
                "TINYPERF_GPU_GRAPH=1: a training step as a CUDA or HIP graph is not \
                 implemented; steps run launch by launch"
            );
        }
        options
    }
}

/// An on/off switch: `1` is on; unset, empty or `0` off; anything else off with a warning.
fn switch(lookup: &impl Fn(&str) -> Option<String>, name: &str) -> bool {
    match lookup(name).as_deref().map(str::trim) {
        Some("1") => true,
        None | Some("") | Some("0") => false,
        Some(value) => {
            tracing::warn!(variable = name, %value, "a switch is 1 or 0; leaving it off");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> GpuOptions {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        GpuOptions::from_lookup(|name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn every_switch_is_off_unless_set() {
        assert_eq!(options(&[]), GpuOptions::default());
        assert_eq!(GpuOptions::default().conv, ConvAlgorithm::Auto);
        assert!(!GpuOptions::default().fused_bn);
        assert!(!GpuOptions::default().multi_tensor_optimizer);
    }

    #[test]
    fn the_convolution_switch_takes_its_four_values_and_ignores_others() {
        for (value, want) in [
            ("auto", ConvAlgorithm::Auto),
            ("dnn", ConvAlgorithm::Dnn),
            ("implicit", ConvAlgorithm::ImplicitGemm),
            ("im2col", ConvAlgorithm::Im2col),
            ("cudnn", ConvAlgorithm::Auto),
        ] {
            assert_eq!(options(&[("TINYPERF_CONV", value)]).conv, want, "{value}");
        }
    }

    #[test]
    fn auto_means_the_dnn_library_when_it_loaded_else_im2col() {
        assert_eq!(ConvAlgorithm::Auto.resolve(true), ConvPath::Dnn);
        assert_eq!(ConvAlgorithm::Auto.resolve(false), ConvPath::Im2col);
        assert_eq!(ConvAlgorithm::Dnn.resolve(false), ConvPath::Im2col);
        assert_eq!(ConvAlgorithm::Im2col.resolve(true), ConvPath::Im2col);
        assert_eq!(
            ConvAlgorithm::ImplicitGemm.resolve(true),
            ConvPath::ImplicitGemm
        );
    }

    #[test]
    fn on_off_switches_are_on_only_for_one() {
        assert!(options(&[("TINYPERF_FUSED_BN", "1")]).fused_bn);
        assert!(options(&[("TINYPERF_MULTI_TENSOR_OPT", "1")]).multi_tensor_optimizer);
        for off in ["0", "", "yes", "true"] {
            assert!(!options(&[("TINYPERF_FUSED_BN", off)]).fused_bn, "{off}");
        }
    }
}

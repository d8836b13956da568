//! What a run logs before its first epoch: the submission and the hyperparameters, and
//! the closed-division rules (ruleset 4.0.0) that constrain them.

use super::keys;

/// `submission_division`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Division {
    /// The reference model with a constrained recipe, so results compare across systems.
    Closed,
    /// Any model and recipe.
    Open,
}

impl Division {
    /// The value `submission_division` logs: `closed` or `open`.
    pub fn as_str(self) -> &'static str {
        match self {
            Division::Closed => keys::CLOSED,
            Division::Open => keys::OPEN,
        }
    }

    /// How long model initialisation may take before the clock must start.
    pub fn max_init_ms(self) -> u64 {
        match self {
            Division::Closed => 30 * 60 * 1000,
            Division::Open => 4 * 60 * 60 * 1000,
        }
    }
}

/// `submission_status`, as the compliance checker accepts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmissionStatus {
    /// Available for purchase or rent on premises (`onprem`).
    OnPremise,
    /// Available to rent in a cloud (`cloud`).
    Cloud,
    /// Not yet available, to be by the next round (`preview`).
    Preview,
    /// Research, development or internal (`research`).
    Research,
}

impl SubmissionStatus {
    /// The value `submission_status` logs.
    pub fn as_str(self) -> &'static str {
        match self {
            SubmissionStatus::OnPremise => keys::ONPREM,
            SubmissionStatus::Cloud => keys::CLOUD,
            SubmissionStatus::Preview => keys::PREVIEW,
            SubmissionStatus::Research => keys::RESEARCH,
        }
    }
}

/// The `submission_*` keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submission {
    /// The submitting organisation (`submission_org`).
    pub org: String,
    /// The system's name; the system description's `system_name` is the same.
    pub platform: String,
    /// The rules the run is logged under.
    pub division: Division,
    /// The system's availability category.
    pub status: SubmissionStatus,
    /// Always `resnet` for this engine; the checker loads its rules by this name.
    pub benchmark: String,
}

/// The organisation tinyperf submits as unless told another.
pub const SUBMITTER: &str = "tinycorp";

impl Submission {
    /// A closed-division, on-premise ResNet submission by `org` on `platform`.
    pub fn resnet(org: &str, platform: &str) -> Submission {
        Submission {
            org: org.to_string(),
            platform: platform.to_string(),
            division: Division::Closed,
            status: SubmissionStatus::OnPremise,
            benchmark: keys::RESNET.to_string(),
        }
    }
}

/// The hyperparameters a ResNet run logs after `run_start`. Learning rates, momentum,
/// weight decay and epsilon belong to the LARS optimizer.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    /// The seed the run's randomness derives from.
    pub seed: u64,
    /// Images per optimizer step, over all devices.
    pub global_batch_size: u64,
    /// Images in the training set (1,281,167 for ImageNet).
    pub train_samples: u64,
    /// Images in the evaluation set (50,000 for ImageNet).
    pub eval_samples: u64,
    /// Batches whose gradients are summed before each optimizer step (1: none).
    pub gradient_accumulation_steps: u64,
    /// Peak learning rate, reached at the end of warmup.
    pub base_learning_rate: f64,
    /// Learning rate the polynomial decay ends at (0.0001 in the closed division).
    pub end_learning_rate: f64,
    /// Epochs of linear warmup from zero to the base learning rate.
    pub warmup_epochs: f64,
    /// The length of the polynomial decay, as the recipe counts it.
    pub decay_steps: u64,
    /// Power of the polynomial decay (2 in the closed division).
    pub poly_power: f64,
    /// Momentum coefficient (0.9 in the closed division below a global batch of 32768).
    pub momentum: f64,
    /// Weight decay coefficient (0.0001·2^N in the closed division).
    pub weight_decay: f64,
    /// LARS ε in the trust ratio's denominator (0 in the closed division).
    pub epsilon: f64,
    /// Images each batch-norm layer computes its statistics over.
    pub bn_span: u64,
}

impl RunConfig {
    /// The v4.0 tinybox recipe: batch 1536, LR 7.2, 2 warmup epochs, 37 planned epochs.
    pub fn tinybox_v4_0(seed: u64) -> RunConfig {
        RunConfig {
            seed,
            global_batch_size: 1536,
            train_samples: 1_281_167,
            eval_samples: 50_000,
            gradient_accumulation_steps: 1,
            base_learning_rate: 7.2,
            end_learning_rate: 1e-4,
            warmup_epochs: 2.0,
            decay_steps: 37,
            poly_power: 2.0,
            momentum: 0.9,
            weight_decay: 2e-4,
            epsilon: 0.0,
            bn_span: 256,
        }
    }

    /// Values no run can log: zero counts, non-finite or negative rates.
    pub fn invalid_values(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let counts = [
            (keys::GLOBAL_BATCH_SIZE, self.global_batch_size),
            (keys::TRAIN_SAMPLES, self.train_samples),
            (keys::EVAL_SAMPLES, self.eval_samples),
            (
                keys::GRADIENT_ACCUMULATION_STEPS,
                self.gradient_accumulation_steps,
            ),
            (keys::MODEL_BN_SPAN, self.bn_span),
        ];
        for (key, value) in counts {
            if value == 0 {
                problems.push(format!("{key} must be greater than 0"));
            }
        }
        let rates = [
            (keys::LARS_OPT_BASE_LEARNING_RATE, self.base_learning_rate),
            (keys::LARS_OPT_END_LR, self.end_learning_rate),
            (
                keys::LARS_OPT_LEARNING_RATE_WARMUP_EPOCHS,
                self.warmup_epochs,
            ),
            (keys::LARS_OPT_LR_DECAY_POLY_POWER, self.poly_power),
            (keys::LARS_OPT_MOMENTUM, self.momentum),
            (keys::LARS_OPT_WEIGHT_DECAY, self.weight_decay),
            (keys::LARS_EPSILON, self.epsilon),
        ];
        for (key, value) in rates {
            if !value.is_finite() || value < 0.0 {
                problems.push(format!("{key} must be a finite number ≥ 0, not {value}"));
            }
        }
        if self.momentum >= 1.0 {
            problems.push(format!(
                "{} must be below 1, not {}",
                keys::LARS_OPT_MOMENTUM,
                self.momentum
            ));
        }
        problems
    }

    /// Where the configuration departs from the closed-division ResNet rules: the
    /// values the compliance checker tests, and the momentum the rules fix below a
    /// batch of 32k. Empty when a closed submission may use it.
    pub fn closed_division_violations(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.end_learning_rate != 1e-4 {
            problems.push(format!(
                "{} must be 0.0001, not {}",
                keys::LARS_OPT_END_LR,
                self.end_learning_rate
            ));
        }
        if self.poly_power != 2.0 {
            problems.push(format!(
                "{} must be 2, not {}",
                keys::LARS_OPT_LR_DECAY_POLY_POWER,
                self.poly_power
            ));
        }
        if self.epsilon != 0.0 {
            problems.push(format!(
                "{} must be 0, not {}",
                keys::LARS_EPSILON,
                self.epsilon
            ));
        }
        if !is_weight_decay_power_of_two(self.weight_decay) {
            problems.push(format!(
                "{} must be 0.0001·2^N for an integer N, not {}",
                keys::LARS_OPT_WEIGHT_DECAY,
                self.weight_decay
            ));
        }
        if self.global_batch_size < 32 * 1024 && self.momentum != 0.9 {
            problems.push(format!(
                "{} must be 0.9 below a global batch of 32768, not {}",
                keys::LARS_OPT_MOMENTUM,
                self.momentum
            ));
        }
        problems
    }
}

/// The checker's test: `log2(wd / 0.0001)` within 1e-5 of an integer.
fn is_weight_decay_power_of_two(weight_decay: f64) -> bool {
    if !(weight_decay.is_finite() && weight_decay > 0.0) {
        return false;
    }
    let exponent = (weight_decay / 1e-4).log2();
    (exponent.round() - exponent).abs() < 1e-5
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tinybox_recipe_is_closed_division() {
        let config = RunConfig::tinybox_v4_0(7);
        assert!(config.invalid_values().is_empty());
        assert!(config.closed_division_violations().is_empty());
    }

    #[test]
    fn each_fixed_hyperparameter_is_checked() {
        let base = RunConfig::tinybox_v4_0(7);
        type Change = fn(&mut RunConfig);
        let cases: [(&str, Change); 5] = [
            (keys::LARS_OPT_END_LR, |c| c.end_learning_rate = 1e-3),
            (keys::LARS_OPT_LR_DECAY_POLY_POWER, |c| c.poly_power = 1.0),
            (keys::LARS_EPSILON, |c| c.epsilon = 1e-9),
            (keys::LARS_OPT_WEIGHT_DECAY, |c| c.weight_decay = 3e-4),
            (keys::LARS_OPT_MOMENTUM, |c| c.momentum = 0.95),
        ];
        for (key, change) in cases {
            let mut config = base.clone();
            change(&mut config);
            let violations = config.closed_division_violations();
            assert_eq!(violations.len(), 1, "{key}: {violations:?}");
            assert!(violations[0].starts_with(key), "{violations:?}");
        }
    }

    #[test]
    fn weight_decay_may_be_any_power_of_two_times_1e4() {
        for wd in [5e-5, 1e-4, 2e-4, 4e-4, 8e-4, 1.6e-3, 2.5e-5] {
            assert!(is_weight_decay_power_of_two(wd), "{wd}");
        }
        for wd in [0.0, 3e-4, 1.5e-4, f64::NAN, -2e-4] {
            assert!(!is_weight_decay_power_of_two(wd), "{wd}");
        }
    }

    #[test]
    fn momentum_is_free_for_huge_batches() {
        let mut config = RunConfig::tinybox_v4_0(7);
        config.global_batch_size = 65536;
        config.momentum = 0.94;
        assert!(config.closed_division_violations().is_empty());
    }

    #[test]
    fn zero_counts_and_bad_rates_are_invalid() {
        let mut config = RunConfig::tinybox_v4_0(7);
        config.global_batch_size = 0;
        config.base_learning_rate = f64::NAN;
        config.momentum = 1.0;
        let problems = config.invalid_values();
        assert_eq!(problems.len(), 3, "{problems:?}");
    }
}

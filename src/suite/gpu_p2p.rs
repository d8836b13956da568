//! The `gpu-p2p` stage of `acceptance`: copy bandwidth between every ordered pair of
//! GPUs, as a matrix, each copy checked for correct data.

use super::options::{self, TRANSFER_MIB};
use super::stage::{StageContext, StageReport};
use crate::record::{Check, StageResult, Verdict};
use crate::suite::gpu_devices::open_gpus_or_finish;

/// The stage's name, as the plan, its events and its result carry it.
pub const NAME: &str = "gpu-p2p";
const REPEATS: usize = 5;

/// Runs the stage: times a `transfer_mib` copy between every ordered pair of GPUs, checks
/// each copy's data, and fails when any pair's copy fails; skips on the CPU or with one
/// GPU.
pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    let mut report = StageReport::new(NAME);
    let bytes = (options::number(ctx.options(), TRANSFER_MIB, 256.0) as usize) << 20;
    let backends = open_gpus_or_finish!(ctx, report);
    let n = backends.len();
    if n < 2 {
        return report.finish_as(
            Verdict::Skip,
            Some(format!("{n} GPU: no pair to copy between")),
        );
    }
    let mut matrix = vec![vec![None::<f64>; n]; n];
    let pairs = n * (n - 1);
    let mut done = 0;
    for (i, from) in backends.iter().enumerate() {
        for (j, to) in backends.iter().enumerate() {
            if i == j {
                continue;
            }
            if ctx.cancelled() {
                return report.finish_as(Verdict::Skip, Some("cancelled".into()));
            }
            ctx.progress(
                done as f64 / pairs as f64,
                Some(format!("GPU {i} → GPU {j}")),
            );
            done += 1;
            match from
                .driver()
                .peer_copy_gbps(to.driver().as_ref(), bytes, REPEATS)
            {
                Ok(gbps) => {
                    report.metric(&format!("gpu{i}_to_gpu{j}_gbps"), gbps, "GB/s");
                    matrix[i][j] = Some(gbps);
                }
                Err(e) => report.checks.push(Check {
                    name: format!("copy GPU {i} → GPU {j}"),
                    subject: from.driver().info().pci_address.clone(),
                    expected: "correct data".into(),
                    found: e.to_string(),
                    verdict: Verdict::Fail,
                }),
            }
        }
    }
    let measured: Vec<f64> = matrix.iter().flatten().flatten().copied().collect();
    if let Some(min) = measured.iter().copied().reduce(f64::min) {
        report.metric("min_pair_gbps", min, "GB/s");
        report.checks.push(Check {
            name: "every pair copies correct data".into(),
            subject: None,
            expected: format!("{pairs} pairs"),
            found: format!("{} pairs", measured.len()),
            verdict: Verdict::pass_if(measured.len() == pairs),
        });
    }
    let rows: Vec<String> = matrix
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let cells: Vec<String> = row
                .iter()
                .map(|c| c.map_or("   -  ".into(), |g| format!("{g:6.1}")))
                .collect();
            format!("GPU {i}: {}", cells.join(" "))
        })
        .collect();
    ctx.progress(1.0, None);
    report.finish(Some(format!(
        "peer copies, GB/s (row → column): {}",
        rows.join("; ")
    )))
}

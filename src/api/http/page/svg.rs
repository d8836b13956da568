//! Figures drawn on the server as SVG line charts, so a page shows its series without
//! JavaScript. The points are numbers only; labels go through the template's escaping.

/// Plot area of every figure, in SVG user units: its width…
const WIDTH: f64 = 480.0;
/// …and its height.
const HEIGHT: f64 = 140.0;
/// The most points one polyline keeps; longer series are thinned evenly.
const MAX_POINTS: usize = 240;

/// One series: its label and its (x, y) values.
pub struct Series {
    /// What the line is of (a GPU, `train`, `eval`, …).
    pub label: String,
    /// The points, in the order they were taken.
    pub values: Vec<(f64, f64)>,
}

/// Adds `point` to the series labelled `label` in `series`, starting that series
/// after the others when there is none yet.
pub fn add_point(series: &mut Vec<Series>, label: String, point: (f64, f64)) {
    match series.iter_mut().find(|s| s.label == label) {
        Some(s) => s.values.push(point),
        None => series.push(Series {
            label,
            values: vec![point],
        }),
    }
}

/// A figure ready for the template.
pub struct SvgFigure {
    /// The caption.
    pub title: String,
    /// The unit of the y values, or empty for none.
    pub unit: String,
    /// Plot width, in SVG user units.
    pub width: f64,
    /// Plot height, in SVG user units.
    pub height: f64,
    /// A line per series.
    pub lines: Vec<SvgLine>,
    /// The lowest y of the scale, as text.
    pub y_min: String,
    /// The highest y of the scale, as text.
    pub y_max: String,
    /// The lowest x of the scale, as text.
    pub x_min: String,
    /// The highest x of the scale, as text.
    pub x_max: String,
    /// Values in all the series; a figure with none says so instead of drawing.
    pub points: usize,
}

/// One series of a figure, scaled into its plot.
pub struct SvgLine {
    /// The series' label.
    pub label: String,
    /// `x,y x,y …` in the plot's coordinates.
    pub points: String,
    /// Which of the palette's colours (`s0`…`s7`) the line takes.
    pub class: String,
    /// The newest value, as text.
    pub last: String,
}

/// Scales every series into one plot. Non-finite values are left out.
pub fn figure(title: &str, unit: &str, series: Vec<Series>) -> SvgFigure {
    let finite = |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite();
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .filter(finite)
        .collect();
    let (x0, x1) = bounds(all.iter().map(|p| p.0));
    let (y0, y1) = bounds(all.iter().map(|p| p.1));
    let lines = series
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let values: Vec<(f64, f64)> = s.values.iter().copied().filter(finite).collect();
            let step = values.len().div_ceil(MAX_POINTS).max(1);
            let mut kept: Vec<(f64, f64)> = values.iter().step_by(step).copied().collect();
            if let (Some(last), Some(kept_last)) = (values.last(), kept.last()) {
                if last != kept_last {
                    kept.push(*last);
                }
            }
            let points = kept
                .iter()
                .map(|&(x, y)| {
                    let px = (x - x0) / (x1 - x0) * WIDTH;
                    let py = HEIGHT - (y - y0) / (y1 - y0) * HEIGHT;
                    format!("{px:.1},{py:.1}")
                })
                .collect::<Vec<_>>()
                .join(" ");
            SvgLine {
                label: s.label.clone(),
                points,
                class: format!("s{}", i % 8),
                last: values
                    .last()
                    .map(|v| super::text::number(v.1))
                    .unwrap_or_else(|| "—".into()),
            }
        })
        .collect();
    SvgFigure {
        title: title.to_string(),
        unit: unit.to_string(),
        width: WIDTH,
        height: HEIGHT,
        lines,
        y_min: super::text::number(y0),
        y_max: super::text::number(y1),
        x_min: super::text::number(x0),
        x_max: super::text::number(x1),
        points: all.len(),
    }
}

/// The range of the values, widened when they are all equal so the scale divides.
fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    if hi - lo < 1e-12 {
        let pad = if lo.abs() > 1e-12 {
            lo.abs() * 0.05
        } else {
            1.0
        };
        return (lo - pad, hi + pad);
    }
    (lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_are_scaled_into_the_plot() {
        let fig = figure(
            "power",
            "W",
            vec![
                Series {
                    label: "gpu0".into(),
                    values: vec![(0.0, 100.0), (1.0, 300.0), (2.0, f64::NAN)],
                },
                Series {
                    label: "gpu1".into(),
                    values: vec![(0.0, 200.0), (2.0, 200.0)],
                },
            ],
        );
        assert_eq!(fig.points, 4);
        assert_eq!(fig.lines[0].points, "0.0,140.0 240.0,0.0");
        assert_eq!(fig.lines[1].points, "0.0,70.0 480.0,70.0");
        assert_eq!(fig.lines[0].last, "300");
        assert_eq!((fig.y_min.as_str(), fig.y_max.as_str()), ("100", "300"));
        assert_eq!(fig.lines[1].class, "s1");
    }

    #[test]
    fn long_series_are_thinned_but_keep_their_last_point() {
        let values: Vec<(f64, f64)> = (0..1001).map(|i| (i as f64, i as f64)).collect();
        let fig = figure(
            "x",
            "",
            vec![Series {
                label: "a".into(),
                values,
            }],
        );
        let kept = fig.lines[0].points.split(' ').count();
        assert!(kept <= MAX_POINTS + 1, "{kept}");
        assert!(fig.lines[0].points.ends_with("480.0,0.0"));
    }

    #[test]
    fn an_empty_or_flat_figure_still_has_a_scale() {
        let fig = figure("x", "", vec![]);
        assert_eq!(fig.points, 0);
        let flat = figure(
            "x",
            "",
            vec![Series {
                label: "a".into(),
                values: vec![(0.0, 5.0), (1.0, 5.0)],
            }],
        );
        assert_eq!(flat.lines[0].points, "0.0,70.0 480.0,70.0");
    }
}

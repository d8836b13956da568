//! The generated dataset: real JPEG files in the ImageNet folder layout whose classes
//! differ by shape, fill texture and colour family, drawn at a random position, size
//! and angle over a random background with noise and clutter.
//!
//! Class k takes the (shape, texture, hue family) combination number `7k mod 72`, so
//! neighbouring classes differ in several attributes at once while several classes
//! share each hue family: the mean colour alone cannot tell them apart.
//!
//! Files are encoded with the `jpeg-encoder` crate: pure Rust, no dependencies, and
//! only the encoder is needed (decoding goes through libjpeg-turbo).

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::DataError;
use super::rng::SampleRng;

const SHAPES: [&str; 6] = ["circle", "square", "triangle", "cross", "ring", "diamond"];
const TEXTURES: [&str; 3] = ["solid", "stripes", "checker"];
/// Hue family centres in degrees: red, green, blue, yellow.
const HUES: [(&str, f64); 4] = [
    ("red", 0.0),
    ("green", 120.0),
    ("blue", 230.0),
    ("yellow", 55.0),
];
const COMBINATIONS: usize = SHAPES.len() * TEXTURES.len() * HUES.len();
const SYNTH_STREAM: u64 = 3;
/// Written last into a finished dataset; its presence means the dataset is complete.
pub const SPEC_FILE: &str = "synth.json";

/// What to generate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SynthSpec {
    /// Number of classes, at most 72 (the distinct looks).
    pub classes: usize,
    /// Train images per class.
    pub per_class: usize,
    /// Validation images per class.
    pub val_per_class: usize,
    /// Side of the square images in pixels.
    pub size: usize,
    /// Seeds every image's drawing.
    pub seed: u64,
    /// JPEG quality, 1–100.
    pub quality: u8,
}

impl Default for SynthSpec {
    fn default() -> Self {
        SynthSpec {
            classes: 10,
            per_class: 300,
            val_per_class: 50,
            size: 64,
            seed: 0,
            quality: 90,
        }
    }
}

impl SynthSpec {
    /// Errors unless the class count, the image counts, the size (16–2048) and the quality
    /// (1–100) are in range.
    pub fn validate(&self) -> Result<(), DataError> {
        let bad = |m: String| Err(DataError::InvalidSpec(m));
        if self.classes == 0 || self.classes > COMBINATIONS {
            return bad(format!(
                "classes must be in 1..={COMBINATIONS}, not {}",
                self.classes
            ));
        }
        if self.per_class == 0 || self.val_per_class == 0 {
            return bad("each class needs at least one train and one val image".into());
        }
        if !(16..=2048).contains(&self.size) {
            return bad(format!(
                "image size must be in 16..=2048, not {}",
                self.size
            ));
        }
        if !(1..=100).contains(&self.quality) {
            return bad(format!(
                "JPEG quality must be in 1..=100, not {}",
                self.quality
            ));
        }
        Ok(())
    }

    /// A folder name that identifies the spec, for caching generated sets side by side.
    pub fn folder_name(&self) -> String {
        format!(
            "synth-c{}-n{}-v{}-s{}-q{}-seed{}",
            self.classes, self.per_class, self.val_per_class, self.size, self.quality, self.seed
        )
    }

    /// The folder name of class `k`: sorted order is class order.
    pub fn class_name(k: usize) -> String {
        let (shape, texture, hue) = class_look(k);
        format!(
            "c{k:03}-{}-{}-{}",
            SHAPES[shape], TEXTURES[texture], HUES[hue].0
        )
    }
}

fn class_look(k: usize) -> (usize, usize, usize) {
    let combo = (k * 7) % COMBINATIONS;
    let shape = combo % SHAPES.len();
    let texture = (combo / SHAPES.len()) % TEXTURES.len();
    let hue = combo / (SHAPES.len() * TEXTURES.len());
    (shape, texture, hue)
}

/// What a generation wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SynthSummary {
    /// The dataset folder written.
    pub root: PathBuf,
    /// Images written under `train/`.
    pub train_images: usize,
    /// Images written under `val/`.
    pub val_images: usize,
    /// Bytes of JPEG data written, over both splits.
    pub bytes: u64,
}

/// Generate the dataset at `dir`, which must not exist yet (or be an empty folder).
/// Everything is written into a temporary sibling first and renamed into place, so
/// `dir` is either absent or complete.
pub fn write_synth_dataset(dir: &Path, spec: &SynthSpec) -> Result<SynthSummary, DataError> {
    spec.validate()?;
    if let Ok(mut entries) = fs::read_dir(dir) {
        if entries.next().is_some() {
            return Err(DataError::InvalidSpec(format!(
                "{} already exists and is not empty",
                dir.display()
            )));
        }
        fs::remove_dir(dir).map_err(|e| DataError::io(dir, e))?;
    }
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).map_err(|e| DataError::io(&parent, e))?;
    let name = dir
        .file_name()
        .map_or_else(|| "synth".into(), |n| n.to_string_lossy().into_owned());
    let tmp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).map_err(|e| DataError::io(&tmp, e))?;
    }
    let result = generate_into(&tmp, spec).and_then(|mut summary| {
        fs::rename(&tmp, dir).map_err(|e| DataError::io(dir, e))?;
        summary.root = dir.to_path_buf();
        Ok(summary)
    });
    if result.is_err() {
        // Best effort: the temporary folder is ours and useless after a failure.
        let _ = fs::remove_dir_all(&tmp);
    }
    result
}

/// The generated dataset for `spec` under `cache_dir`, generating it on first use.
/// Returns the dataset root (holding train/ and val/).
pub fn ensure_synth_dataset(cache_dir: &Path, spec: &SynthSpec) -> Result<PathBuf, DataError> {
    spec.validate()?;
    let root = cache_dir.join(spec.folder_name());
    if is_complete(&root, spec) {
        return Ok(root);
    }
    if root.exists() {
        // A folder without a matching spec file is not ours to trust; replace it.
        fs::remove_dir_all(&root).map_err(|e| DataError::io(&root, e))?;
    }
    match write_synth_dataset(&root, spec) {
        Ok(_) => Ok(root),
        // Another process may have finished the same dataset first.
        Err(_) if is_complete(&root, spec) => Ok(root),
        Err(e) => Err(e),
    }
}

fn is_complete(root: &Path, spec: &SynthSpec) -> bool {
    fs::read(root.join(SPEC_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice::<SynthSpec>(&b).ok())
        .is_some_and(|found| &found == spec)
}

fn generate_into(root: &Path, spec: &SynthSpec) -> Result<SynthSummary, DataError> {
    let jobs: Vec<(&'static str, usize, usize)> = (0..spec.classes)
        .flat_map(|k| [("train", k, spec.per_class), ("val", k, spec.val_per_class)])
        .collect();
    for (split, k, _) in &jobs {
        let d = root.join(split).join(SynthSpec::class_name(*k));
        fs::create_dir_all(&d).map_err(|e| DataError::io(&d, e))?;
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(jobs.len());
    let results: Vec<Result<u64, DataError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let jobs = &jobs;
                scope.spawn(move || {
                    let mut bytes = 0;
                    for (split, k, count) in jobs.iter().skip(t).step_by(threads) {
                        bytes += write_class(root, spec, split, *k, *count)?;
                    }
                    Ok(bytes)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(DataError::InvalidSpec(
                        "image generator thread panicked".into(),
                    ))
                })
            })
            .collect()
    });
    let mut bytes = 0;
    for r in results {
        bytes += r?;
    }
    let spec_path = root.join(SPEC_FILE);
    let json =
        serde_json::to_vec_pretty(spec).map_err(|e| DataError::InvalidSpec(e.to_string()))?;
    fs::write(&spec_path, json).map_err(|e| DataError::io(&spec_path, e))?;
    Ok(SynthSummary {
        root: root.to_path_buf(),
        train_images: spec.classes * spec.per_class,
        val_images: spec.classes * spec.val_per_class,
        bytes,
    })
}

fn write_class(
    root: &Path,
    spec: &SynthSpec,
    split: &str,
    k: usize,
    count: usize,
) -> Result<u64, DataError> {
    let split_id = u64::from(split == "val");
    let dir = root.join(split).join(SynthSpec::class_name(k));
    let mut bytes = 0;
    for i in 0..count {
        let mut rng = SampleRng::derive(
            spec.seed,
            SYNTH_STREAM,
            split_id,
            ((k as u64) << 32) | i as u64,
        );
        let pixels = render(k, spec.size, &mut rng);
        let path = dir.join(format!("{split}_{k:03}_{i:05}.JPEG"));
        let jpeg = encode_jpeg(&pixels, spec.size, spec.size, spec.quality).map_err(|message| {
            DataError::Encode {
                path: path.clone(),
                message,
            }
        })?;
        bytes += jpeg.len() as u64;
        fs::write(&path, jpeg).map_err(|e| DataError::io(&path, e))?;
    }
    Ok(bytes)
}

/// Encode 8-bit RGB pixels as a baseline JPEG.
pub fn encode_jpeg(
    pixels: &[u8],
    width: usize,
    height: usize,
    quality: u8,
) -> Result<Vec<u8>, String> {
    let w = u16::try_from(width).map_err(|_| format!("width {width} is too large"))?;
    let h = u16::try_from(height).map_err(|_| format!("height {height} is too large"))?;
    let mut out = Vec::new();
    jpeg_encoder::Encoder::new(&mut out, quality)
        .encode(pixels, w, h, jpeg_encoder::ColorType::Rgb)
        .map_err(|e| e.to_string())?;
    Ok(out)
}

fn hsv(hue_deg: f64, s: f64, v: f64) -> [f64; 3] {
    let h = hue_deg.rem_euclid(360.0) / 60.0;
    let c = v * s;
    let x = c * (1.0 - (h % 2.0 - 1.0).abs());
    let (r, g, b) = match h as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = v - c;
    [(r + m) * 255.0, (g + m) * 255.0, (b + m) * 255.0]
}

fn inside_shape(shape: usize, u: f64, v: f64) -> bool {
    match shape {
        0 => u * u + v * v <= 1.0,
        1 => u.abs().max(v.abs()) <= 0.8,
        2 => v <= 0.55 && u.abs() * 3f64.sqrt() <= v + 1.0,
        3 => (u.abs() <= 0.3 && v.abs() <= 1.0) || (v.abs() <= 0.3 && u.abs() <= 1.0),
        4 => {
            let r2 = u * u + v * v;
            (0.3..=1.0).contains(&r2)
        }
        _ => u.abs() + v.abs() <= 1.0,
    }
}

/// Draw one image of class `k`.
fn render(k: usize, size: usize, rng: &mut SampleRng) -> Vec<u8> {
    let (shape, texture, hue) = class_look(k);
    let sz = size as f64;
    let bg_a = hsv(
        rng.uniform(0.0, 360.0),
        rng.uniform(0.0, 0.6),
        rng.uniform(0.25, 0.95),
    );
    let bg_b = hsv(
        rng.uniform(0.0, 360.0),
        rng.uniform(0.0, 0.6),
        rng.uniform(0.25, 0.95),
    );
    let bg_angle = rng.uniform(0.0, std::f64::consts::TAU);
    let fg = hsv(
        HUES[hue].1 + rng.uniform(-20.0, 20.0),
        rng.uniform(0.55, 1.0),
        rng.uniform(0.55, 1.0),
    );
    let radius = sz * rng.uniform(0.22, 0.4);
    let cx = rng.uniform(radius, sz - radius);
    let cy = rng.uniform(radius, sz - radius);
    // Squares and diamonds stay apart: a square turns at most 15 degrees.
    let angle = rng.uniform(-15f64.to_radians(), 15f64.to_radians());
    let (sin, cos) = angle.sin_cos();
    let period = (sz / 16.0 * rng.uniform(0.8, 1.6)).max(2.0);
    let phase = rng.uniform(0.0, period * 2.0);
    let noise = rng.uniform(4.0, 16.0);
    let clutter: Vec<([f64; 3], f64, f64, f64)> = (0..2 + rng.below(4))
        .map(|_| {
            let c = hsv(
                rng.uniform(0.0, 360.0),
                rng.uniform(0.3, 1.0),
                rng.uniform(0.3, 1.0),
            );
            (
                c,
                rng.uniform(0.0, sz),
                rng.uniform(0.0, sz),
                sz * rng.uniform(0.03, 0.08),
            )
        })
        .collect();
    let mut pixels = Vec::with_capacity(size * size * 3);
    for y in 0..size {
        for x in 0..size {
            let (fx, fy) = (x as f64 + 0.5, y as f64 + 0.5);
            let t = ((fx * bg_angle.cos() + fy * bg_angle.sin()) / sz).clamp(-1.0, 1.0) * 0.5 + 0.5;
            let mut c = [0.0; 3];
            for ch in 0..3 {
                c[ch] = bg_a[ch] * (1.0 - t) + bg_b[ch] * t;
            }
            for (colour, px, py, r) in &clutter {
                if (fx - px).powi(2) + (fy - py).powi(2) <= r * r {
                    c = *colour;
                }
            }
            let (dx, dy) = ((fx - cx) / radius, (fy - cy) / radius);
            let (u, v) = (dx * cos + dy * sin, -dx * sin + dy * cos);
            if inside_shape(shape, u, v) {
                let dark = match texture {
                    0 => false,
                    1 => (((fx + fy + phase) / period) as i64) % 2 == 1,
                    _ => {
                        ((((fx + phase) / period) as i64) + (((fy + phase) / period) as i64)) % 2
                            == 1
                    }
                };
                let f = if dark { 0.4 } else { 1.0 };
                for ch in 0..3 {
                    c[ch] = fg[ch] * f;
                }
            }
            for value in c {
                pixels.push((value + noise * rng.normalish()).round().clamp(0.0, 255.0) as u8);
            }
        }
    }
    pixels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_looks_are_distinct_and_names_sort_in_class_order() {
        let mut looks: Vec<_> = (0..COMBINATIONS).map(class_look).collect();
        looks.sort_unstable();
        looks.dedup();
        assert_eq!(looks.len(), COMBINATIONS);
        let names: Vec<String> = (0..COMBINATIONS).map(SynthSpec::class_name).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
    }

    #[test]
    fn rendering_is_deterministic_per_stream() {
        let a = render(3, 32, &mut SampleRng::derive(1, SYNTH_STREAM, 0, 5));
        let b = render(3, 32, &mut SampleRng::derive(1, SYNTH_STREAM, 0, 5));
        let c = render(3, 32, &mut SampleRng::derive(1, SYNTH_STREAM, 0, 6));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 32 * 32 * 3);
    }

    #[test]
    fn invalid_specs_are_refused() {
        for spec in [
            SynthSpec {
                classes: 0,
                ..SynthSpec::default()
            },
            SynthSpec {
                classes: 73,
                ..SynthSpec::default()
            },
            SynthSpec {
                size: 8,
                ..SynthSpec::default()
            },
            SynthSpec {
                val_per_class: 0,
                ..SynthSpec::default()
            },
            SynthSpec {
                quality: 0,
                ..SynthSpec::default()
            },
        ] {
            assert!(
                matches!(spec.validate(), Err(DataError::InvalidSpec(_))),
                "{spec:?}"
            );
        }
    }
}

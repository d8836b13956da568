//! Image transforms: the training random resized crop with horizontal flip, the
//! evaluation resize and centre crop, and mean subtraction, all producing f32 HWC.
//!
//! Resizing is bilinear with antialiasing: a triangle filter whose support widens with
//! the downscale factor, normalised over the taps that fall inside the source region
//! (the way Pillow's BILINEAR resize works), in two separable passes.

use std::cell::RefCell;

use super::decode::{decode_jpeg_region_with, recycle_pixels, DecodeError, RgbImage, ScaledRegion};
use super::rng::SampleRng;

/// Per-channel mean subtracted from every pixel (RGB, 0–255 scale); no division by std.
pub const MEAN_RGB: [f32; 3] = [123.68, 116.78, 103.94];

/// A rectangle of source pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CropRect {
    /// Left edge, in source pixels from the image's left.
    pub x: usize,
    /// Top edge, in source pixels from the image's top.
    pub y: usize,
    /// Width in source pixels.
    pub width: usize,
    /// Height in source pixels.
    pub height: usize,
}

/// The crop and flip chosen for one training sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CropChoice {
    /// The source region that is resized to the output.
    pub rect: CropRect,
    /// True when no random attempt fitted and the centre crop was used.
    pub fallback: bool,
    /// Whether the crop is mirrored left to right.
    pub flip: bool,
}

/// Random resized crop (the torchvision algorithm), horizontal flip, resize to a square.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainTransform {
    /// Output side in pixels.
    pub size: usize,
    /// Range of the crop's area as a fraction of the image's.
    pub scale: (f64, f64),
    /// Range of the crop's aspect ratio (width / height), sampled log-uniformly.
    pub ratio: (f64, f64),
    /// Random attempts before falling back to a centre crop.
    pub attempts: u32,
    /// Chance, in [0, 1], that a sample is flipped horizontally.
    pub flip_probability: f64,
}

impl Default for TrainTransform {
    fn default() -> Self {
        TrainTransform {
            size: 224,
            scale: (0.10, 1.0),
            ratio: (3.0 / 4.0, 4.0 / 3.0),
            attempts: 100,
            flip_probability: 0.5,
        }
    }
}

impl TrainTransform {
    /// The default transform (scale 0.10–1, ratio 3/4–4/3, 100 attempts, flip half the time)
    /// with output side `size`.
    pub fn with_size(size: usize) -> Self {
        TrainTransform {
            size,
            ..TrainTransform::default()
        }
    }

    /// Choose the crop rectangle for a width×height image, then the flip.
    pub fn choose(&self, width: usize, height: usize, rng: &mut SampleRng) -> CropChoice {
        let (rect, fallback) = self.choose_rect(width, height, rng);
        let flip = rng.chance(self.flip_probability);
        CropChoice {
            rect,
            fallback,
            flip,
        }
    }

    fn choose_rect(&self, width: usize, height: usize, rng: &mut SampleRng) -> (CropRect, bool) {
        let area = (width * height) as f64;
        let (log_lo, log_hi) = (self.ratio.0.ln(), self.ratio.1.ln());
        for _ in 0..self.attempts {
            let target_area = area * rng.uniform(self.scale.0, self.scale.1);
            let aspect = rng.uniform(log_lo, log_hi).exp();
            let w = (target_area * aspect).sqrt().round() as usize;
            let h = (target_area / aspect).sqrt().round() as usize;
            if w > 0 && h > 0 && w <= width && h <= height {
                let y = rng.below((height - h + 1) as u64) as usize;
                let x = rng.below((width - w + 1) as u64) as usize;
                return (
                    CropRect {
                        x,
                        y,
                        width: w,
                        height: h,
                    },
                    false,
                );
            }
        }
        (self.centre_fallback(width, height), true)
    }

    /// The whole image, trimmed to the nearest allowed aspect ratio, centred.
    pub fn centre_fallback(&self, width: usize, height: usize) -> CropRect {
        let in_ratio = width as f64 / height as f64;
        let (w, h) = if in_ratio < self.ratio.0 {
            (
                width,
                ((width as f64 / self.ratio.0).round() as usize).max(1),
            )
        } else if in_ratio > self.ratio.1 {
            (
                ((height as f64 * self.ratio.1).round() as usize).max(1),
                height,
            )
        } else {
            (width, height)
        };
        let (w, h) = (w.min(width), h.min(height));
        CropRect {
            x: (width - w) / 2,
            y: (height - h) / 2,
            width: w,
            height: h,
        }
    }

    /// Crop, flip and resize `image` into `out` (size×size×3, mean subtracted).
    pub fn apply(&self, image: &RgbImage, rng: &mut SampleRng, out: &mut [f32]) -> CropChoice {
        let choice = self.choose(image.width, image.height, rng);
        let r = choice.rect;
        resample(
            image,
            &Resample {
                bounds: r,
                origin: (r.x as f64, r.y as f64),
                scale: (
                    r.width as f64 / self.size as f64,
                    r.height as f64 / self.size as f64,
                ),
                out_width: self.size,
                out_height: self.size,
                flip: choice.flip,
            },
            out,
        );
        choice
    }

    /// Decode JPEG `bytes` and transform them like [`TrainTransform::apply`], with the
    /// same random choices, but choose the crop from the header's size first and decode
    /// only the part of the image it covers, downscaled in the IDCT as far as the crop
    /// stays at least the output size (see [`decode_jpeg_region`]).
    pub fn decode_and_apply(
        &self,
        bytes: &[u8],
        rng: &mut SampleRng,
        out: &mut [f32],
    ) -> Result<CropChoice, DecodeError> {
        let mut chosen = None;
        let region = decode_jpeg_region_with(bytes, self.size, self.size, |width, height| {
            let choice = self.choose(width, height, rng);
            chosen = Some(choice);
            choice.rect
        })?;
        let choice = chosen.ok_or_else(|| DecodeError::Corrupt("no crop was chosen".into()))?;
        resample(&region.image, &self.region_job(&region, choice), out);
        recycle_pixels(region.image);
        Ok(choice)
    }

    /// The resampling of `choice`'s crop out of a decoded, possibly scaled, window.
    fn region_job(&self, region: &ScaledRegion, choice: CropChoice) -> Resample {
        let r = choice.rect;
        let n = region.eighths;
        let img = &region.image;
        // The source pixels the crop touches, in window coordinates.
        let x0 = (r.x * n / 8)
            .saturating_sub(region.x)
            .min(img.width.saturating_sub(1));
        let x1 =
            (((r.x + r.width) * n).div_ceil(8).saturating_sub(region.x)).clamp(x0 + 1, img.width);
        let y0 = (r.y * n / 8)
            .saturating_sub(region.y)
            .min(img.height.saturating_sub(1));
        let y1 =
            (((r.y + r.height) * n).div_ceil(8).saturating_sub(region.y)).clamp(y0 + 1, img.height);
        let s = region.scale();
        Resample {
            bounds: CropRect {
                x: x0,
                y: y0,
                width: x1 - x0,
                height: y1 - y0,
            },
            origin: (
                r.x as f64 * s - region.x as f64,
                r.y as f64 * s - region.y as f64,
            ),
            scale: (
                r.width as f64 * s / self.size as f64,
                r.height as f64 * s / self.size as f64,
            ),
            out_width: self.size,
            out_height: self.size,
            flip: choice.flip,
        }
    }
}

/// Resize the short side to `resize`, then take the centre size×size crop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvalTransform {
    /// Output side in pixels.
    pub size: usize,
    /// Length the short side is resized to before the centre crop, in pixels.
    pub resize: usize,
}

impl EvalTransform {
    /// The reference proportions: 256 → 224, scaled for other output sizes.
    pub fn new(size: usize) -> Self {
        let resize = ((size as f64 * 256.0 / 224.0).round() as usize).max(size);
        EvalTransform { size, resize }
    }

    /// Resize `image`, centre-crop it and write it into `out` (size×size×3, HWC, mean
    /// subtracted).
    pub fn apply(&self, image: &RgbImage, out: &mut [f32]) {
        let (w, h) = (image.width as f64, image.height as f64);
        let short = w.min(h);
        let scale = short / self.resize as f64;
        // Torchvision's resize of the long side truncates toward zero.
        let resized_w = if image.width <= image.height {
            self.resize
        } else {
            (self.resize as f64 * w / h) as usize
        };
        let resized_h = if image.height < image.width {
            self.resize
        } else {
            (self.resize as f64 * h / w) as usize
        };
        let crop_x = (resized_w.saturating_sub(self.size) as f64 / 2.0).round();
        let crop_y = (resized_h.saturating_sub(self.size) as f64 / 2.0).round();
        resample(
            image,
            &Resample {
                bounds: CropRect {
                    x: 0,
                    y: 0,
                    width: image.width,
                    height: image.height,
                },
                origin: (crop_x * scale, crop_y * scale),
                scale: (w / resized_w.max(1) as f64, h / resized_h.max(1) as f64),
                out_width: self.size,
                out_height: self.size,
                flip: false,
            },
            out,
        );
    }
}

/// One resampling job: output pixel (x, y) is centred on source point
/// `origin + (x + 0.5, y + 0.5) * scale`, using only source pixels inside `bounds`.
#[derive(Debug, Clone, Copy)]
struct Resample {
    bounds: CropRect,
    origin: (f64, f64),
    scale: (f64, f64),
    out_width: usize,
    out_height: usize,
    flip: bool,
}

/// Filter taps for one axis: for output i, source indices `start[i]..start[i]+taps`
/// with weights `weights[i*taps..]` (zero-padded past the real count).
struct AxisTaps {
    start: Vec<usize>,
    count: Vec<usize>,
    taps: usize,
    weights: Vec<f32>,
}

fn axis_taps(lo: usize, hi: usize, origin: f64, scale: f64, out: usize) -> AxisTaps {
    let filter_scale = scale.max(1.0);
    let support = filter_scale;
    let taps = (support * 2.0).ceil() as usize + 2;
    let mut start = Vec::with_capacity(out);
    let mut count = Vec::with_capacity(out);
    let mut weights = vec![0f32; out * taps];
    let mut row = Vec::with_capacity(taps);
    for i in 0..out {
        let centre = origin + (i as f64 + 0.5) * scale;
        let first = ((centre - support + 0.5).floor().max(lo as f64) as usize).min(hi - 1);
        let end = ((centre + support + 0.5).floor() as usize).clamp(first + 1, hi);
        let end = end.min(first + taps);
        row.clear();
        let mut total = 0.0;
        for j in first..end {
            let t = ((j as f64 + 0.5 - centre) / filter_scale).abs();
            let w = (1.0 - t).max(0.0);
            row.push(w);
            total += w;
        }
        let dst = &mut weights[i * taps..i * taps + row.len()];
        if total > 0.0 {
            for (d, w) in dst.iter_mut().zip(&row) {
                *d = (w / total) as f32;
            }
        } else {
            // The centre sits exactly between two excluded taps: take the nearest pixel.
            dst[0] = 1.0;
        }
        start.push(first);
        count.push(row.len().max(1));
    }
    AxisTaps {
        start,
        count,
        taps,
        weights,
    }
}

thread_local! {
    static ROWS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

fn resample(image: &RgbImage, job: &Resample, out: &mut [f32]) {
    let b = job.bounds;
    let (ow, oh) = (job.out_width, job.out_height);
    assert_eq!(out.len(), ow * oh * 3, "output buffer size");
    let xt = axis_taps(b.x, b.x + b.width, job.origin.0, job.scale.0, ow);
    let yt = axis_taps(b.y, b.y + b.height, job.origin.1, job.scale.1, oh);
    let x_first = xt.start.iter().copied().min().unwrap_or(b.x);
    let x_end = (0..ow)
        .map(|i| xt.start[i] + xt.count[i])
        .max()
        .unwrap_or(b.x);
    let cols = (x_end - x_first) * 3;
    // Every output pixel reads `reach` taps, the ones past its own count weighted zero,
    // so the horizontal loop has a fixed length; the zero columns after each row keep
    // those reads in bounds.
    let reach = xt.count.iter().copied().max().unwrap_or(1);
    let stride_f = cols + reach * 3;
    let stride = image.width * 3;
    ROWS.with(|rows| {
        let mut rows = rows.borrow_mut();
        rows.clear();
        rows.resize(oh * stride_f, 0.0);
        // Vertical pass first, over contiguous spans of bytes (it vectorises), on only
        // the columns the horizontal taps can reach.
        for (oy, dst) in rows.chunks_exact_mut(stride_f).enumerate() {
            let dst = &mut dst[..cols];
            let first = yt.start[oy];
            for k in 0..yt.count[oy] {
                let w = yt.weights[oy * yt.taps + k];
                let row = (first + k) * stride;
                let src = &image.pixels[row + x_first * 3..row + x_end * 3];
                for (d, &s) in dst.iter_mut().zip(src) {
                    *d += w * f32::from(s);
                }
            }
        }
        // Horizontal pass, flip and mean subtraction.
        let pass = match reach {
            1 => horizontal::<1>,
            2 => horizontal::<2>,
            3 => horizontal::<3>,
            4 => horizontal::<4>,
            5 => horizontal::<5>,
            6 => horizontal::<6>,
            7 => horizontal::<7>,
            8 => horizontal::<8>,
            _ => horizontal_any,
        };
        for (row, out_row) in rows
            .chunks_exact(stride_f)
            .zip(out.chunks_exact_mut(ow * 3))
        {
            pass(row, &xt, x_first, job.flip, out_row);
        }
    });
}

/// One output row of the horizontal pass with exactly `T` taps per pixel.
fn horizontal<const T: usize>(
    row: &[f32],
    xt: &AxisTaps,
    x_first: usize,
    flip: bool,
    out_row: &mut [f32],
) {
    let ow = xt.start.len();
    for ox in 0..ow {
        let first = (xt.start[ox] - x_first) * 3;
        let weights = &xt.weights[ox * xt.taps..ox * xt.taps + T];
        let src = &row[first..first + T * 3];
        let (mut r, mut g, mut b) = (0f32, 0f32, 0f32);
        for k in 0..T {
            r += weights[k] * src[k * 3];
            g += weights[k] * src[k * 3 + 1];
            b += weights[k] * src[k * 3 + 2];
        }
        let dx = if flip { ow - 1 - ox } else { ox };
        store(out_row, dx, r, g, b);
    }
}

/// The horizontal pass for any tap count (large downscales).
fn horizontal_any(row: &[f32], xt: &AxisTaps, x_first: usize, flip: bool, out_row: &mut [f32]) {
    let ow = xt.start.len();
    for ox in 0..ow {
        let first = xt.start[ox] - x_first;
        let count = xt.count[ox];
        let weights = &xt.weights[ox * xt.taps..ox * xt.taps + count];
        let src = &row[first * 3..(first + count) * 3];
        let (mut r, mut g, mut b) = (0f32, 0f32, 0f32);
        for (w, p) in weights.iter().zip(src.chunks_exact(3)) {
            r += w * p[0];
            g += w * p[1];
            b += w * p[2];
        }
        let dx = if flip { ow - 1 - ox } else { ox };
        store(out_row, dx, r, g, b);
    }
}

fn store(out_row: &mut [f32], x: usize, r: f32, g: f32, b: f32) {
    let px = &mut out_row[x * 3..x * 3 + 3];
    px[0] = r - MEAN_RGB[0];
    px[1] = g - MEAN_RGB[1];
    px[2] = b - MEAN_RGB[2];
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gradient(width: usize, height: usize) -> RgbImage {
        let mut pixels = Vec::with_capacity(width * height * 3);
        for y in 0..height {
            for x in 0..width {
                pixels.extend_from_slice(&[
                    (x % 256) as u8,
                    (y % 256) as u8,
                    ((x * 7 + y * 3) % 256) as u8,
                ]);
            }
        }
        RgbImage {
            width,
            height,
            pixels,
        }
    }

    #[test]
    fn identity_resize_is_exact() {
        let img = gradient(40, 30);
        let mut out = vec![0f32; 40 * 30 * 3];
        resample(
            &img,
            &Resample {
                bounds: CropRect {
                    x: 0,
                    y: 0,
                    width: 40,
                    height: 30,
                },
                origin: (0.0, 0.0),
                scale: (1.0, 1.0),
                out_width: 40,
                out_height: 30,
                flip: false,
            },
            &mut out,
        );
        for (i, (&o, &p)) in out.iter().zip(&img.pixels).enumerate() {
            assert_eq!(o, f32::from(p) - MEAN_RGB[i % 3], "index {i}");
        }
    }

    #[test]
    fn constant_image_stays_constant_at_any_scale() {
        let img = RgbImage::filled(123, 77, [200, 10, 103]);
        let t = TrainTransform::with_size(32);
        let mut rng = SampleRng::new(3);
        let mut out = vec![0f32; 32 * 32 * 3];
        for _ in 0..20 {
            t.apply(&img, &mut rng, &mut out);
            for px in out.chunks_exact(3) {
                assert!((px[0] - (200.0 - MEAN_RGB[0])).abs() < 1e-3);
                assert!((px[1] - (10.0 - MEAN_RGB[1])).abs() < 1e-3);
                assert!((px[2] - (103.0 - MEAN_RGB[2])).abs() < 1e-3);
            }
        }
    }
}

//! JPEG bytes to 8-bit RGB pixels, with zune-jpeg (pure Rust, SIMD on x86).
//!
//! A file that is empty, not a JPEG, cut short or otherwise undecodable is an error
//! here; the loader decides what replaces it.

use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;

/// An 8-bit RGB image, rows top to bottom, pixels interleaved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RgbImage {
    pub width: usize,
    pub height: usize,
    pub pixels: Vec<u8>,
}

impl RgbImage {
    /// A width×height image of one colour.
    pub fn filled(width: usize, height: usize, rgb: [u8; 3]) -> Self {
        let mut pixels = Vec::with_capacity(width * height * 3);
        for _ in 0..width * height {
            pixels.extend_from_slice(&rgb);
        }
        RgbImage {
            width,
            height,
            pixels,
        }
    }

    pub fn pixel(&self, x: usize, y: usize) -> [u8; 3] {
        let i = (y * self.width + x) * 3;
        [self.pixels[i], self.pixels[i + 1], self.pixels[i + 2]]
    }
}

/// Why an image could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("the file is empty")]
    Empty,
    #[error("not a JPEG file (no start-of-image marker)")]
    NotJpeg,
    #[error("the JPEG data is cut short (no end-of-image marker after the last scan)")]
    Truncated,
    #[error("the JPEG is {width}x{height}, which has no pixels")]
    NoPixels { width: usize, height: usize },
    #[error("unsupported JPEG colour space {0}")]
    ColourSpace(String),
    #[error("corrupt JPEG: {0}")]
    Corrupt(String),
}

/// Decode a whole JPEG file held in memory to RGB; greyscale images come back as RGB.
pub fn decode_jpeg(bytes: &[u8]) -> Result<RgbImage, DecodeError> {
    if bytes.is_empty() {
        return Err(DecodeError::Empty);
    }
    if bytes.len() < 4 || bytes[0] != 0xFF || bytes[1] != 0xD8 {
        return Err(DecodeError::NotJpeg);
    }
    // zune-jpeg pads missing entropy data with zeros rather than failing, which would
    // feed a half-grey image into training; a complete file ends its last scan with EOI.
    if !ends_after_last_scan(bytes) {
        return Err(DecodeError::Truncated);
    }
    let options = DecoderOptions::default().jpeg_set_out_colorspace(ColorSpace::RGB);
    let mut decoder = JpegDecoder::new_with_options(ZCursor::new(bytes), options);
    decoder
        .decode_headers()
        .map_err(|e| DecodeError::Corrupt(e.to_string()))?;
    let (width, height) = decoder
        .dimensions()
        .ok_or_else(|| DecodeError::Corrupt("no frame header".into()))?;
    if width == 0 || height == 0 {
        return Err(DecodeError::NoPixels { width, height });
    }
    let colour = decoder
        .output_colorspace()
        .ok_or_else(|| DecodeError::Corrupt("no colour space".into()))?;
    let raw = decoder
        .decode()
        .map_err(|e| DecodeError::Corrupt(e.to_string()))?;
    let pixels = match colour {
        ColorSpace::RGB => raw,
        ColorSpace::Luma => raw.iter().flat_map(|&v| [v, v, v]).collect(),
        ColorSpace::RGBA => raw
            .chunks_exact(4)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect(),
        other => return Err(DecodeError::ColourSpace(format!("{other:?}"))),
    };
    if pixels.len() != width * height * 3 {
        return Err(DecodeError::Corrupt(format!(
            "decoded {} bytes for a {width}x{height} image",
            pixels.len()
        )));
    }
    Ok(RgbImage {
        width,
        height,
        pixels,
    })
}

/// Whether an EOI marker (FF D9) follows the last start-of-scan marker (FF DA).
/// Inside entropy-coded data every FF byte is followed by 00 or a restart marker, so
/// neither marker can appear there by chance.
fn ends_after_last_scan(bytes: &[u8]) -> bool {
    for i in (0..bytes.len().saturating_sub(1)).rev() {
        if bytes[i] == 0xFF {
            match bytes[i + 1] {
                0xD9 => return true,
                0xDA => return false,
                _ => {}
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_what_is_not_a_jpeg() {
        assert_eq!(decode_jpeg(&[]), Err(DecodeError::Empty));
        assert_eq!(
            decode_jpeg(b"\x89PNG\r\n\x1a\n...."),
            Err(DecodeError::NotJpeg)
        );
        assert_eq!(
            decode_jpeg(&[0xFF, 0xD8, 0xFF, 0xDA, 0x00, 0x01]),
            Err(DecodeError::Truncated)
        );
    }
}

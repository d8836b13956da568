//! JPEG bytes to 8-bit RGB pixels, with libjpeg-turbo through its TurboJPEG 3 API.
//!
//! [`decode_jpeg`] decodes a whole image exactly (accurate IDCT, smooth chroma
//! upsampling). [`decode_jpeg_region`] is the training fast path: it decodes only the
//! iMCU columns and rows that cover a crop, and lets the IDCT downscale by n/8 when the
//! crop is larger than the size it will be resized to, so most of the pixel work of a
//! random resized crop is never done.
//!
//! A file that is empty, not a JPEG, cut short or otherwise undecodable is an error
//! here; the loader decides what replaces it. libjpeg-turbo's warnings (for example
//! stray bytes before a marker, which real datasets contain) still yield the image,
//! as they do in Pillow.

use std::cell::RefCell;
use std::ffi::{c_int, CStr};
use std::ptr::NonNull;

use turbojpeg_sys as tj;

use super::augment::CropRect;

/// An 8-bit RGB image, rows top to bottom, pixels interleaved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RgbImage {
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// `width × height × 3` bytes: R, G, B of each pixel.
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

    /// The RGB value of the pixel in column `x`, row `y` (0-based, from the top left).
    pub fn pixel(&self, x: usize, y: usize) -> [u8; 3] {
        let i = (y * self.width + x) * 3;
        [self.pixels[i], self.pixels[i + 1], self.pixels[i + 2]]
    }
}

/// Why an image could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The file holds no bytes.
    #[error("the file is empty")]
    Empty,
    /// The data does not start with a JPEG start-of-image marker.
    #[error("not a JPEG file (no start-of-image marker)")]
    NotJpeg,
    /// The data ends before its last scan does (no end-of-image marker after it).
    #[error("the JPEG data is cut short (no end-of-image marker after the last scan)")]
    Truncated,
    /// The header gives a zero width or height.
    #[error("the JPEG is {width}x{height}, which has no pixels")]
    NoPixels {
        /// Width from the header, in pixels.
        width: usize,
        /// Height from the header, in pixels.
        height: usize,
    },
    /// A colour space this decoder does not turn into RGB (CMYK, say).
    #[error("unsupported JPEG colour space {0}")]
    ColourSpace(String),
    /// libjpeg-turbo rejected the data; its message, or why the image is too large.
    #[error("corrupt JPEG: {0}")]
    Corrupt(String),
    /// libjpeg-turbo could not create a decompressor instance.
    #[error("libjpeg-turbo could not start a decompressor")]
    NoDecoder,
}

/// A part of a JPEG decoded at n/8 of its full size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScaledRegion {
    /// The decoded pixels: a window of the image scaled by `eighths / 8`.
    pub image: RgbImage,
    /// The window's top-left corner in the coordinates of the whole scaled image.
    pub x: usize,
    /// The window's top row, in the coordinates of the whole scaled image.
    pub y: usize,
    /// The scale, in eighths (8 is full size).
    pub eighths: usize,
}

impl ScaledRegion {
    /// The scale factor from full-size to decoded pixel coordinates.
    pub fn scale(&self) -> f64 {
        self.eighths as f64 / 8.0
    }
}

/// The width and height of a JPEG image, from its header alone.
pub fn jpeg_size(bytes: &[u8]) -> Result<(usize, usize), DecodeError> {
    check_container(bytes)?;
    with_decompressor(|d| d.read_header(bytes).map(|h| (h.width, h.height)))
}

/// Decode a whole JPEG file held in memory to RGB; greyscale images come back as RGB.
pub fn decode_jpeg(bytes: &[u8]) -> Result<RgbImage, DecodeError> {
    check_container(bytes)?;
    with_decompressor(|d| {
        let header = d.read_header(bytes)?;
        d.decompress(bytes, &header, &Window::whole(&header), Vec::new())
    })
}

/// Decode the part of a JPEG that `crop` (full-size pixels) needs to be resized to
/// `out_width`×`out_height`: at the smallest IDCT scale of 1/8, 1/4, 1/2 or 1 that keeps
/// the crop at least that large, only the iMCU columns and the rows that cover it.
/// At full scale the pixels are exactly those of [`decode_jpeg`].
pub fn decode_jpeg_region(
    bytes: &[u8],
    crop: CropRect,
    out_width: usize,
    out_height: usize,
) -> Result<ScaledRegion, DecodeError> {
    decode_jpeg_region_with(bytes, out_width, out_height, |_, _| crop)
}

/// [`decode_jpeg_region`] with the crop chosen by `choose` from the image's width and
/// height, which it is given once the header has been read (and only then).
pub fn decode_jpeg_region_with(
    bytes: &[u8],
    out_width: usize,
    out_height: usize,
    choose: impl FnOnce(usize, usize) -> CropRect,
) -> Result<ScaledRegion, DecodeError> {
    check_container(bytes)?;
    with_decompressor(|d| {
        let header = d.read_header(bytes)?;
        let crop = choose(header.width, header.height);
        let eighths = region_eighths(crop, out_width, out_height);
        let window = Window::covering(&header, crop, eighths);
        let spare = SPARE_PIXELS.with(|spare| std::mem::take(&mut *spare.borrow_mut()));
        let image = d.decompress(bytes, &header, &window, spare)?;
        Ok(ScaledRegion {
            image,
            x: window.x,
            y: window.y,
            eighths,
        })
    })
}

/// Hands a decoded region's pixel memory back to this thread for its next decode.
pub fn recycle_pixels(image: RgbImage) {
    SPARE_PIXELS.with(|spare| *spare.borrow_mut() = image.pixels);
}

/// The smallest n of 1, 2, 4, 8 with the crop scaled by n/8 no smaller than the output.
/// Only these scales have SIMD IDCTs in libjpeg-turbo; 3/8, 5/8, 6/8 and 7/8 measured
/// slower to decode than full size, more than their smaller resize saves.
fn region_eighths(crop: CropRect, out_width: usize, out_height: usize) -> usize {
    [1, 2, 4]
        .into_iter()
        .find(|&n| crop.width * n >= out_width * 8 && crop.height * n >= out_height * 8)
        .unwrap_or(8)
}

fn check_container(bytes: &[u8]) -> Result<(), DecodeError> {
    if bytes.is_empty() {
        return Err(DecodeError::Empty);
    }
    if bytes.len() < 4 || bytes[0] != 0xFF || bytes[1] != 0xD8 {
        return Err(DecodeError::NotJpeg);
    }
    // libjpeg-turbo pads missing entropy data and only warns, which would feed a
    // half-grey image into training; a complete file ends its last scan with EOI.
    if !ends_after_last_scan(bytes) {
        return Err(DecodeError::Truncated);
    }
    Ok(())
}

/// What the header says about the image.
struct Header {
    width: usize,
    height: usize,
    /// TurboJPEG's subsampling code (`TJSAMP_*`), negative when unknown.
    subsamp: c_int,
}

/// The rectangle to decode, in the coordinates of the image scaled by `eighths / 8`.
struct Window {
    eighths: usize,
    x: usize,
    y: usize,
    width: usize,
    height: usize,
    /// Whether it is the whole scaled image (no cropping region is set).
    whole: bool,
}

/// The iMCU width in pixels for each TurboJPEG subsampling code (`tjMCUWidth` in
/// turbojpeg.h, a header-only table): 4:4:4, 4:2:2, 4:2:0, grey, 4:4:0, 4:1:1, 4:4:1.
const MCU_WIDTH: [usize; 7] = [8, 16, 16, 8, 8, 32, 8];

/// TurboJPEG's size of `dimension` scaled by `eighths / 8` (rounded up).
fn scaled(dimension: usize, eighths: usize) -> usize {
    (dimension * eighths).div_ceil(8)
}

impl Window {
    fn whole(header: &Header) -> Self {
        Window {
            eighths: 8,
            x: 0,
            y: 0,
            width: header.width,
            height: header.height,
            whole: true,
        }
    }

    /// The smallest decodable window that holds every pixel the crop touches: the
    /// left edge on an iMCU boundary (TurboJPEG requires it), the rest pixel-exact.
    fn covering(header: &Header, crop: CropRect, eighths: usize) -> Self {
        let full_width = scaled(header.width, eighths);
        let full_height = scaled(header.height, eighths);
        let mcu_width = usize::try_from(header.subsamp)
            .ok()
            .and_then(|s| MCU_WIDTH.get(s).copied());
        let Some(mcu_width) = mcu_width else {
            // No known iMCU shape: TurboJPEG cannot crop, so decode the whole scaled image.
            return Window {
                whole: true,
                ..Window::whole_scaled(full_width, full_height, eighths)
            };
        };
        let step = scaled(mcu_width, eighths).max(1);
        let x0 = (crop.x * eighths / 8).min(full_width.saturating_sub(1));
        let x0 = x0 - x0 % step;
        let x1 = ((crop.x + crop.width) * eighths)
            .div_ceil(8)
            .clamp(x0 + 1, full_width);
        let y0 = (crop.y * eighths / 8).min(full_height.saturating_sub(1));
        let y1 = ((crop.y + crop.height) * eighths)
            .div_ceil(8)
            .clamp(y0 + 1, full_height);
        Window {
            eighths,
            x: x0,
            y: y0,
            width: x1 - x0,
            height: y1 - y0,
            whole: x0 == 0 && y0 == 0 && x1 == full_width && y1 == full_height,
        }
    }

    fn whole_scaled(width: usize, height: usize, eighths: usize) -> Self {
        Window {
            eighths,
            x: 0,
            y: 0,
            width,
            height,
            whole: true,
        }
    }
}

/// One TurboJPEG decompressor; each thread keeps its own.
struct Decompressor {
    handle: NonNull<std::ffi::c_void>,
}

impl Decompressor {
    fn new() -> Result<Self, DecodeError> {
        // SAFETY: tj3Init has no preconditions; it returns null on failure.
        let raw = unsafe { tj::tj3Init(tj::TJINIT_TJINIT_DECOMPRESS as c_int) };
        NonNull::new(raw)
            .map(|handle| Decompressor { handle })
            .ok_or(DecodeError::NoDecoder)
    }

    fn error(&self) -> DecodeError {
        // SAFETY: the handle is live; tj3GetErrorStr returns a NUL-terminated string
        // owned by the handle, copied here before any other call on it.
        let message = unsafe { CStr::from_ptr(tj::tj3GetErrorStr(self.handle.as_ptr())) };
        DecodeError::Corrupt(message.to_string_lossy().trim().to_string())
    }

    /// Whether the last failure was only a warning (the image was still produced).
    fn last_was_warning(&self) -> bool {
        // SAFETY: the handle is live.
        let code = unsafe { tj::tj3GetErrorCode(self.handle.as_ptr()) };
        code == tj::TJERR_TJERR_WARNING as c_int
    }

    fn get(&self, param: tj::TJPARAM) -> c_int {
        // SAFETY: the handle is live.
        unsafe { tj::tj3Get(self.handle.as_ptr(), param as c_int) }
    }

    fn read_header(&mut self, bytes: &[u8]) -> Result<Header, DecodeError> {
        // SAFETY: the pointer and length describe `bytes`, which outlives the call.
        let status = unsafe {
            tj::tj3DecompressHeader(self.handle.as_ptr(), bytes.as_ptr(), bytes.len() as _)
        };
        if status != 0 {
            return Err(self.error());
        }
        let width = usize::try_from(self.get(tj::TJPARAM_TJPARAM_JPEGWIDTH)).unwrap_or(0);
        let height = usize::try_from(self.get(tj::TJPARAM_TJPARAM_JPEGHEIGHT)).unwrap_or(0);
        if width == 0 || height == 0 {
            return Err(DecodeError::NoPixels { width, height });
        }
        let colour = self.get(tj::TJPARAM_TJPARAM_COLORSPACE);
        if colour == tj::TJCS_TJCS_CMYK as c_int || colour == tj::TJCS_TJCS_YCCK as c_int {
            return Err(DecodeError::ColourSpace("CMYK".into()));
        }
        Ok(Header {
            width,
            height,
            subsamp: self.get(tj::TJPARAM_TJPARAM_SUBSAMP),
        })
    }

    /// Decode `window` of the image whose header was just read into RGB pixels, in
    /// `pixels`' memory when it has room (its old contents are all overwritten).
    fn decompress(
        &mut self,
        bytes: &[u8],
        header: &Header,
        window: &Window,
        mut pixels: Vec<u8>,
    ) -> Result<RgbImage, DecodeError> {
        let too_large =
            || DecodeError::Corrupt(format!("{}x{} is too large", header.width, header.height));
        let as_int = |v: usize| c_int::try_from(v).map_err(|_| too_large());
        // TurboJPEG only accepts the factors in lowest terms.
        let common = [8, 4, 2]
            .into_iter()
            .find(|d| window.eighths.is_multiple_of(*d))
            .unwrap_or(1);
        let factor = tj::tjscalingfactor {
            num: as_int(window.eighths / common)?,
            denom: as_int(8 / common)?,
        };
        // SAFETY: the handle is live and the header has been read.
        if unsafe { tj::tj3SetScalingFactor(self.handle.as_ptr(), factor) } != 0 {
            return Err(self.error());
        }
        let region = if window.whole {
            tj::tjregion {
                x: 0,
                y: 0,
                w: 0,
                h: 0,
            }
        } else {
            tj::tjregion {
                x: as_int(window.x)?,
                y: as_int(window.y)?,
                w: as_int(window.width)?,
                h: as_int(window.height)?,
            }
        };
        // SAFETY: as above; TurboJPEG checks the region against the scaled image.
        if unsafe { tj::tj3SetCroppingRegion(self.handle.as_ptr(), region) } != 0 {
            return Err(self.error());
        }
        let pitch = window.width.checked_mul(3).ok_or_else(too_large)?;
        let len = pitch.checked_mul(window.height).ok_or_else(too_large)?;
        // Growing zero-fills only the new tail and shrinking truncates: a reused buffer
        // is not cleared, since a successful decode writes every byte.
        pixels.resize(len, 0);
        let pitch = as_int(pitch)?;
        let decode = |pixels: &mut Vec<u8>| {
            // SAFETY: TurboJPEG writes `window.height` rows of `pitch` bytes (the cropping
            // region, or the whole image scaled by the factor set above, whose size
            // `scaled` computes the way TurboJPEG does), which is exactly `pixels`.
            unsafe {
                tj::tj3Decompress8(
                    self.handle.as_ptr(),
                    bytes.as_ptr(),
                    bytes.len() as _,
                    pixels.as_mut_ptr(),
                    pitch,
                    tj::TJPF_TJPF_RGB,
                )
            }
        };
        if decode(&mut pixels) != 0 {
            if !self.last_was_warning() {
                return Err(self.error());
            }
            // A damaged file can leave rows unwritten: they must read as black, not as
            // the last image's pixels, so it is decoded again into a cleared buffer.
            pixels.fill(0);
            if decode(&mut pixels) != 0 && !self.last_was_warning() {
                return Err(self.error());
            }
        }
        Ok(RgbImage {
            width: window.width,
            height: window.height,
            pixels,
        })
    }
}

impl Drop for Decompressor {
    fn drop(&mut self) {
        // SAFETY: the handle came from tj3Init and is destroyed once, here.
        unsafe { tj::tj3Destroy(self.handle.as_ptr()) }
    }
}

thread_local! {
    static DECOMPRESSOR: RefCell<Option<Decompressor>> = const { RefCell::new(None) };
    /// The pixel buffer of this thread's last decoded region, kept for the next one so
    /// each image does not fault in fresh pages.
    static SPARE_PIXELS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

fn with_decompressor<T>(
    f: impl FnOnce(&mut Decompressor) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let decompressor = match slot.as_mut() {
            Some(d) => d,
            None => slot.insert(Decompressor::new()?),
        };
        let result = f(decompressor);
        if result.is_err() {
            // A failed call can leave the instance mid-header for the next file; start
            // the next one on a fresh instance.
            *slot = None;
        }
        result
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
    fn downscales_only_by_powers_of_two_while_the_crop_covers_the_output() {
        let crop = |width, height| CropRect {
            x: 0,
            y: 0,
            width,
            height,
        };
        assert_eq!(region_eighths(crop(447, 1000), 224, 224), 8);
        assert_eq!(region_eighths(crop(448, 448), 224, 224), 4);
        assert_eq!(region_eighths(crop(900, 1000), 224, 224), 2);
        assert_eq!(region_eighths(crop(1792, 1800), 224, 224), 1);
    }

    #[test]
    fn the_window_starts_on_an_imcu_column_and_covers_the_crop() {
        let header = Header {
            width: 500,
            height: 375,
            subsamp: 2,
        };
        let crop = CropRect {
            x: 101,
            y: 37,
            width: 250,
            height: 200,
        };
        let full = Window::covering(&header, crop, 8);
        assert_eq!(
            (full.x, full.y, full.width, full.height),
            (96, 37, 255, 200)
        );
        assert!(!full.whole);
        // At 1/2 the iMCU is 8 pixels wide; the crop spans 50.5..175.5 by 18.5..118.5.
        let half = Window::covering(&header, crop, 4);
        assert_eq!(
            (half.x, half.y, half.width, half.height),
            (48, 18, 128, 101)
        );
        let unknown = Header {
            subsamp: -1,
            ..header
        };
        let whole = Window::covering(&unknown, crop, 4);
        assert!(whole.whole);
        assert_eq!((whole.width, whole.height), (250, 188));
    }

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

//! The training data pipeline: an ImageNet-style folder of JPEGs becomes batches of
//! augmented, mean-subtracted f32 images in NHWC order.
//!
//! [`dataset`] scans the folder layout, [`decode`] turns JPEG bytes into RGB pixels,
//! [`augment`] crops, flips and resizes, [`shuffle`] orders each epoch and [`loader`]
//! runs all of it on worker threads. [`synth`] writes the generated dataset that the
//! smoke suite trains on, and [`bench`] measures the pipeline.

pub mod augment;
pub mod bench;
pub mod dataset;
pub mod decode;
pub mod error;
pub mod loader;
pub mod rng;
pub mod shuffle;
pub mod synth;
pub mod synth_cache;

pub use augment::{CropRect, EvalTransform, TrainTransform, MEAN_RGB};
pub use dataset::{Dataset, Sample, Split};
pub use decode::{decode_jpeg, RgbImage};
pub use error::DataError;
pub use loader::{Batch, EpochBatches, Loader, LoaderConfig, Mode};
pub use synth::{ensure_synth_dataset, write_synth_dataset, SynthSpec};

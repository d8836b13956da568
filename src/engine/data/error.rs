//! What can go wrong with a dataset.

use std::path::PathBuf;

/// A dataset that cannot be used, or a generator that cannot write one.
///
/// A single unreadable image is not an error: the loader replaces it and counts it.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The dataset root does not exist.
    #[error("dataset folder {0} does not exist")]
    Missing(PathBuf),
    /// The dataset root exists but is not a folder.
    #[error("dataset path {0} is not a folder")]
    NotAFolder(PathBuf),
    /// The dataset root lacks `train/` or `val/`.
    #[error(
        "dataset folder {root} has no {split}/ split (expected {root}/{split}/<class>/*.JPEG)"
    )]
    NoSplit {
        /// The dataset root.
        root: PathBuf,
        /// `train` or `val`.
        split: &'static str,
    },
    /// The train split has no class sub-folders.
    #[error("split folder {0} has no class folders")]
    NoClasses(PathBuf),
    /// A split, or a split handed to a loader, holds no images.
    #[error("split folder {0} has no JPEG images (*.JPEG, *.jpg, *.jpeg)")]
    NoImages(PathBuf),
    /// `val/` has a class folder that `train/` lacks, so it has no class index.
    #[error("validation class {class:?} in {val} has no folder in the train split")]
    UnknownValClass {
        /// The folder name of the unknown class.
        class: String,
        /// The `val/` folder.
        val: PathBuf,
    },
    /// A file or folder could not be read (or, for the generator, written).
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The OS's error.
        #[source]
        source: std::io::Error,
    },
    /// A [`LoaderConfig`](super::LoaderConfig) value is out of range; the message says which.
    #[error("invalid loader configuration: {0}")]
    InvalidConfig(String),
    /// The generator cannot use its [`SynthSpec`](super::SynthSpec) or target folder (a value
    /// out of range, a folder that is not empty); the message says which.
    #[error("invalid synthetic dataset spec: {0}")]
    InvalidSpec(String),
    /// The generator could not encode one of its images.
    #[error("cannot encode JPEG {path}: {message}")]
    Encode {
        /// The image that was being written.
        path: PathBuf,
        /// The encoder's error.
        message: String,
    },
    /// The OS refused to start a loader worker thread.
    #[error("cannot start a loader thread: {0}")]
    Thread(std::io::Error),
}

impl DataError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DataError::Io {
            path: path.into(),
            source,
        }
    }
}

//! What can go wrong with a dataset.

use std::path::PathBuf;

/// A dataset that cannot be used, or a generator that cannot write one.
///
/// A single unreadable image is not an error: the loader replaces it and counts it.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("dataset folder {0} does not exist")]
    Missing(PathBuf),
    #[error("dataset path {0} is not a folder")]
    NotAFolder(PathBuf),
    #[error(
        "dataset folder {root} has no {split}/ split (expected {root}/{split}/<class>/*.JPEG)"
    )]
    NoSplit { root: PathBuf, split: &'static str },
    #[error("split folder {0} has no class folders")]
    NoClasses(PathBuf),
    #[error("split folder {0} has no JPEG images (*.JPEG, *.jpg, *.jpeg)")]
    NoImages(PathBuf),
    #[error("validation class {class:?} in {val} has no folder in the train split")]
    UnknownValClass { class: String, val: PathBuf },
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid loader configuration: {0}")]
    InvalidConfig(String),
    #[error("invalid synthetic dataset spec: {0}")]
    InvalidSpec(String),
    #[error("cannot encode JPEG {path}: {message}")]
    Encode { path: PathBuf, message: String },
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

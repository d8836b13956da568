//! The ImageNet folder layout: `ROOT/train/<class>/*.JPEG` and `ROOT/val/<class>/*.JPEG`.
//!
//! A class's index is its position in the sorted list of train/ folders; val/ uses the
//! same mapping, so a val folder that train/ lacks is an error. Files count as images
//! when their extension is JPEG, JPG or JPEG in any case; other files are ignored.

use std::fs;
use std::path::{Path, PathBuf};

use super::error::DataError;

/// One image: where it is and which class it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// The image file.
    pub path: PathBuf,
    /// Class index: the position of its class folder among the sorted train/ folders.
    pub label: u32,
}

/// The images of one split, in a fixed order (by class, then by file name).
#[derive(Debug, Clone)]
pub struct Split {
    /// The split's folder, e.g. `ROOT/train`.
    pub dir: PathBuf,
    /// Every image of the split, by class, then by file name.
    pub samples: Vec<Sample>,
    /// For each class, the indices into `samples` of its images.
    pub by_class: Vec<Vec<usize>>,
}

impl Split {
    /// Images in the split.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether the split holds no images.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}

/// A dataset in folder layout with both splits scanned.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// The dataset folder, holding `train/` and `val/`.
    pub root: PathBuf,
    /// Class names (folder names, e.g. wnids) in index order.
    pub classes: Vec<String>,
    /// The training split.
    pub train: Split,
    /// The validation split, labelled with train's class indices.
    pub val: Split,
}

impl Dataset {
    /// Scan `root`. Errors name the path: a missing or non-folder root, a missing
    /// split, a train split with no class folders, a split with no images, or a val
    /// class unknown to train.
    pub fn open(root: &Path) -> Result<Dataset, DataError> {
        let meta = fs::metadata(root).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => DataError::Missing(root.to_path_buf()),
            _ => DataError::io(root, e),
        })?;
        if !meta.is_dir() {
            return Err(DataError::NotAFolder(root.to_path_buf()));
        }
        let train_dir = split_dir(root, "train")?;
        let val_dir = split_dir(root, "val")?;
        let classes = class_folders(&train_dir)?;
        if classes.is_empty() {
            return Err(DataError::NoClasses(train_dir));
        }
        for class in class_folders(&val_dir)? {
            if classes.binary_search(&class).is_err() {
                return Err(DataError::UnknownValClass {
                    class,
                    val: val_dir,
                });
            }
        }
        let train = scan_split(&train_dir, &classes)?;
        let val = scan_split(&val_dir, &classes)?;
        Ok(Dataset {
            root: root.to_path_buf(),
            classes,
            train,
            val,
        })
    }

    /// Classes in the dataset: the train split's class folders.
    pub fn num_classes(&self) -> usize {
        self.classes.len()
    }
}

fn split_dir(root: &Path, split: &'static str) -> Result<PathBuf, DataError> {
    let dir = root.join(split);
    match fs::metadata(&dir) {
        Ok(m) if m.is_dir() => Ok(dir),
        Ok(_) => Err(DataError::NoSplit {
            root: root.to_path_buf(),
            split,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(DataError::NoSplit {
            root: root.to_path_buf(),
            split,
        }),
        Err(e) => Err(DataError::io(dir, e)),
    }
}

/// Sorted names of the sub-folders of `dir` (following symbolic links), hidden ones skipped.
fn class_folders(dir: &Path) -> Result<Vec<String>, DataError> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| DataError::io(dir, e))? {
        let entry = entry.map_err(|e| DataError::io(dir, e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        if fs::metadata(&path).map(|m| m.is_dir()).unwrap_or(false) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

pub(crate) fn is_jpeg_name(name: &str) -> bool {
    match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => {
            ext.eq_ignore_ascii_case("jpeg") || ext.eq_ignore_ascii_case("jpg")
        }
        _ => false,
    }
}

fn scan_split(dir: &Path, classes: &[String]) -> Result<Split, DataError> {
    let mut samples = Vec::new();
    let mut by_class = vec![Vec::new(); classes.len()];
    for (label, class) in classes.iter().enumerate() {
        let class_dir = dir.join(class);
        if !class_dir.is_dir() {
            continue;
        }
        let mut files = Vec::new();
        for entry in fs::read_dir(&class_dir).map_err(|e| DataError::io(&class_dir, e))? {
            let entry = entry.map_err(|e| DataError::io(&class_dir, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if !name.starts_with('.') && is_jpeg_name(name) {
                files.push(entry.path());
            }
        }
        files.sort();
        for path in files {
            by_class[label].push(samples.len());
            samples.push(Sample {
                path,
                label: label as u32,
            });
        }
    }
    if samples.is_empty() {
        return Err(DataError::NoImages(dir.to_path_buf()));
    }
    Ok(Split {
        dir: dir.to_path_buf(),
        samples,
        by_class,
    })
}

#[cfg(test)]
mod tests {
    use super::is_jpeg_name;

    #[test]
    fn jpeg_names_in_any_case() {
        for ok in ["a.JPEG", "a.jpg", "b.JpEg", "n01440764_10026.JPEG"] {
            assert!(is_jpeg_name(ok), "{ok}");
        }
        for bad in ["a.png", "jpeg", ".jpg", "a.jpeg.txt", "a"] {
            assert!(!is_jpeg_name(bad), "{bad}");
        }
    }
}

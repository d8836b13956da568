//! The data pipeline on real JPEG files written by the tests.

use std::collections::HashSet;
use std::fs;
use std::path::Path;
use std::sync::Arc;

use tinyperf::engine::data::augment::CropRect;
use tinyperf::engine::data::decode::{decode_jpeg_region, jpeg_size, DecodeError};
use tinyperf::engine::data::rng::SampleRng;
use tinyperf::engine::data::synth::{encode_jpeg, SPEC_FILE};
use tinyperf::engine::data::{
    decode_jpeg, ensure_synth_dataset, write_synth_dataset, Batch, DataError, Dataset,
    EvalTransform, Loader, LoaderConfig, RgbImage, SynthSpec, TrainTransform, MEAN_RGB,
};

fn small_spec() -> SynthSpec {
    SynthSpec {
        classes: 3,
        per_class: 7,
        val_per_class: 2,
        size: 40,
        seed: 11,
        quality: 90,
    }
}

fn synth(dir: &Path, spec: &SynthSpec) -> Dataset {
    write_synth_dataset(dir, spec).expect("generate dataset");
    Dataset::open(dir).expect("open dataset")
}

fn gradient(width: usize, height: usize) -> RgbImage {
    let mut pixels = Vec::with_capacity(width * height * 3);
    for y in 0..height {
        for x in 0..width {
            pixels.extend_from_slice(&[
                (x * 255 / width) as u8,
                (y * 255 / height) as u8,
                ((x + y) % 200) as u8,
            ]);
        }
    }
    RgbImage {
        width,
        height,
        pixels,
    }
}

fn write_jpeg(path: &Path, image: &RgbImage) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let bytes = encode_jpeg(&image.pixels, image.width, image.height, 95).unwrap();
    fs::write(path, bytes).unwrap();
}

fn train_config(batch: usize, threads: usize) -> LoaderConfig {
    LoaderConfig {
        threads,
        ..LoaderConfig::train(batch, 24, 42)
    }
}

fn epoch(loader: &Loader, e: u32) -> Vec<Batch> {
    loader.epoch(e).unwrap().collect()
}

#[test]
fn layout_maps_sorted_train_folders_to_labels_for_both_splits() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ds");
    let img = gradient(20, 16);
    // Unsorted creation order, mixed-case extensions, and files that are not images.
    for (class, file) in [
        ("n03", "a.JPEG"),
        ("n01", "b.jpg"),
        ("n01", "a.JpEg"),
        ("n02", "z.jpeg"),
    ] {
        write_jpeg(&root.join("train").join(class).join(file), &img);
    }
    fs::write(root.join("train/n01/notes.txt"), "x").unwrap();
    fs::write(root.join("train/n01/.hidden.jpg"), "x").unwrap();
    write_jpeg(&root.join("val/n03/v.JPEG"), &img);
    write_jpeg(&root.join("val/n01/v.jpg"), &img);

    let ds = Dataset::open(&root).unwrap();
    assert_eq!(ds.classes, ["n01", "n02", "n03"]);
    let train: Vec<(String, u32)> = ds
        .train
        .samples
        .iter()
        .map(|s| {
            (
                s.path.file_name().unwrap().to_string_lossy().into_owned(),
                s.label,
            )
        })
        .collect();
    assert_eq!(
        train,
        [
            ("a.JpEg".to_string(), 0),
            ("b.jpg".to_string(), 0),
            ("z.jpeg".to_string(), 1),
            ("a.JPEG".to_string(), 2)
        ]
    );
    assert_eq!(ds.train.by_class, [vec![0, 1], vec![2], vec![3]]);
    let val_labels: Vec<u32> = ds.val.samples.iter().map(|s| s.label).collect();
    assert_eq!(val_labels, [0, 2]);
}

#[test]
fn bad_dataset_folders_get_errors_that_name_them() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let err = Dataset::open(&missing).unwrap_err();
    assert!(matches!(err, DataError::Missing(_)));
    assert!(err.to_string().contains("nope"), "{err}");

    let file = tmp.path().join("file");
    fs::write(&file, "x").unwrap();
    assert!(matches!(
        Dataset::open(&file),
        Err(DataError::NotAFolder(_))
    ));

    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let err = Dataset::open(&empty).unwrap_err();
    assert!(
        matches!(err, DataError::NoSplit { split: "train", .. }),
        "{err}"
    );

    let no_val = tmp.path().join("noval");
    write_jpeg(&no_val.join("train/a/x.jpg"), &gradient(8, 8));
    let err = Dataset::open(&no_val).unwrap_err();
    assert!(
        matches!(err, DataError::NoSplit { split: "val", .. }),
        "{err}"
    );
    assert!(err.to_string().contains("val/"), "{err}");

    let no_classes = tmp.path().join("noclasses");
    fs::create_dir_all(no_classes.join("train")).unwrap();
    fs::create_dir_all(no_classes.join("val")).unwrap();
    assert!(matches!(
        Dataset::open(&no_classes),
        Err(DataError::NoClasses(_))
    ));

    let no_images = tmp.path().join("noimages");
    fs::create_dir_all(no_images.join("train/a")).unwrap();
    fs::create_dir_all(no_images.join("val/a")).unwrap();
    fs::write(no_images.join("train/a/readme.txt"), "x").unwrap();
    assert!(matches!(
        Dataset::open(&no_images),
        Err(DataError::NoImages(_))
    ));

    let empty_val = tmp.path().join("emptyval");
    write_jpeg(&empty_val.join("train/a/x.jpg"), &gradient(8, 8));
    fs::create_dir_all(empty_val.join("val/a")).unwrap();
    assert!(matches!(
        Dataset::open(&empty_val),
        Err(DataError::NoImages(_))
    ));

    let stray = tmp.path().join("stray");
    write_jpeg(&stray.join("train/a/x.jpg"), &gradient(8, 8));
    write_jpeg(&stray.join("val/b/x.jpg"), &gradient(8, 8));
    let err = Dataset::open(&stray).unwrap_err();
    assert!(
        matches!(&err, DataError::UnknownValClass { class, .. } if class == "b"),
        "{err}"
    );
}

#[test]
fn every_image_once_per_epoch_in_a_new_order_with_the_first_batch_padded() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = synth(&tmp.path().join("ds"), &small_spec());
    let n = ds.train.len();
    assert_eq!(n, 21);
    let loader = Loader::new(Arc::new(ds.train.clone()), train_config(8, 2)).unwrap();
    assert_eq!(loader.batches_per_epoch(), 3);
    assert_eq!(loader.padding_per_epoch(), 3);
    let mut orders = Vec::new();
    for e in 0..3 {
        let batches = epoch(&loader, e);
        assert_eq!(batches.len(), 3);
        assert_eq!(
            batches[0].valid,
            [false, false, false, true, true, true, true, true]
        );
        assert!(batches[1..].iter().all(|b| b.valid.iter().all(|&v| v)));
        let mut order = Vec::new();
        for (i, b) in batches.iter().enumerate() {
            assert_eq!((b.epoch, b.index, b.len()), (e, i, 8));
            assert_eq!(b.images.len(), 8 * 24 * 24 * 3);
            for j in 0..b.len() {
                let id = b.sample_ids[j];
                assert_eq!(b.labels[j], ds.train.samples[id].label);
                if b.valid[j] {
                    order.push(id);
                }
            }
        }
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "epoch {e}");
        orders.push(order);
    }
    assert_ne!(orders[0], orders[1]);
    assert_ne!(orders[1], orders[2]);
}

#[test]
fn batches_are_identical_for_a_seed_whatever_the_thread_count() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = synth(&tmp.path().join("ds"), &small_spec());
    let split = Arc::new(ds.train);
    let reference = epoch(&Loader::new(split.clone(), train_config(5, 1)).unwrap(), 1);
    for threads in [2, 3, 8] {
        let config = LoaderConfig {
            prefetch_batches: 1 + threads % 3,
            ..train_config(5, threads)
        };
        let got = epoch(&Loader::new(split.clone(), config).unwrap(), 1);
        assert!(got == reference, "{threads} threads gave different batches");
    }
    let other_seed = LoaderConfig {
        seed: 43,
        ..train_config(5, 2)
    };
    let got = epoch(&Loader::new(split.clone(), other_seed).unwrap(), 1);
    assert!(got != reference);
    // Same samples in the same epoch of another seed still carry their labels.
    let eval = epoch(&Loader::new(split, LoaderConfig::eval(5, 24)).unwrap(), 0);
    assert_eq!(eval.len(), 5);
}

#[test]
fn a_batch_larger_than_the_split_is_one_padded_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = synth(&tmp.path().join("ds"), &small_spec());
    let loader = Loader::new(Arc::new(ds.train), train_config(64, 2)).unwrap();
    let batches = epoch(&loader, 0);
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].len(), 64);
    assert_eq!(batches[0].valid_count(), 21);
    assert!(batches[0].valid[..43].iter().all(|&v| !v));
}

#[test]
fn evaluation_keeps_file_order_and_pads_the_last_batch_with_blanks() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = synth(&tmp.path().join("ds"), &small_spec());
    assert_eq!(ds.val.len(), 6);
    let loader = Loader::new(Arc::new(ds.val.clone()), LoaderConfig::eval(4, 24)).unwrap();
    let batches = epoch(&loader, 0);
    assert_eq!(batches.len(), 2);
    let ids: Vec<usize> = batches.iter().flat_map(|b| b.sample_ids.clone()).collect();
    assert_eq!(ids[..6], [0, 1, 2, 3, 4, 5]);
    assert_eq!(ids[6..], [usize::MAX, usize::MAX]);
    assert_eq!(batches[1].valid, [true, true, false, false]);
    assert!(batches[1].image(2).iter().all(|&v| v == 0.0));
    assert!(batches[1].image(1).iter().any(|&v| v != 0.0));
    // Evaluation is the same every epoch.
    assert!(epoch(&loader, 5)
        .iter()
        .zip(&batches)
        .all(|(a, b)| a.images == b.images));
}

#[test]
fn eval_transform_output_is_exactly_the_centre_of_a_known_image() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ds");
    // At 256 px on the short side the resize is the identity, so the output must be
    // the decoded pixels of the centre 224 crop, minus the mean.
    for (class, w, h) in [("a", 256, 256), ("b", 400, 256), ("c", 256, 300)] {
        write_jpeg(
            &root.join("train").join(class).join("x.jpg"),
            &gradient(w, h),
        );
        write_jpeg(&root.join("val").join(class).join("x.jpg"), &gradient(w, h));
    }
    let ds = Dataset::open(&root).unwrap();
    let loader = Loader::new(Arc::new(ds.val.clone()), LoaderConfig::eval(3, 224)).unwrap();
    let batch = epoch(&loader, 0).remove(0);
    for (i, sample) in ds.val.samples.iter().enumerate() {
        let decoded = decode_jpeg(&fs::read(&sample.path).unwrap()).unwrap();
        let x0 = (decoded.width - 224) / 2;
        let y0 = (decoded.height - 224) / 2;
        let out = batch.image(i);
        for y in 0..224 {
            for x in 0..224 {
                let p = decoded.pixel(x0 + x, y0 + y);
                for c in 0..3 {
                    let got = out[(y * 224 + x) * 3 + c];
                    let want = f32::from(p[c]) - MEAN_RGB[c];
                    assert_eq!(got, want, "image {i} at ({x},{y}) channel {c}");
                }
            }
        }
    }
}

#[test]
fn eval_resize_scales_with_the_output_size() {
    assert_eq!(EvalTransform::new(224).resize, 256);
    assert_eq!(EvalTransform::new(112).resize, 128);
    assert_eq!(EvalTransform::new(32).resize, 37);
    // Downscaling a constant image keeps it constant and mean-subtracted.
    let img = RgbImage::filled(500, 375, [10, 20, 30]);
    let mut out = vec![0f32; 32 * 32 * 3];
    EvalTransform::new(32).apply(&img, &mut out);
    for px in out.chunks_exact(3) {
        for c in 0..3 {
            let want = [10.0, 20.0, 30.0][c] - MEAN_RGB[c];
            assert!((px[c] - want).abs() < 1e-3, "{} vs {want}", px[c]);
        }
    }
}

#[test]
fn random_crops_stay_inside_the_image_and_follow_the_scale_and_ratio_ranges() {
    let t = TrainTransform::default();
    let mut rng = SampleRng::new(9);
    let mut fallbacks = 0;
    let mut flips = 0;
    for i in 0..2000 {
        let (w, h) = (50 + (i * 37) % 600, 40 + (i * 53) % 500);
        let c = t.choose(w, h, &mut rng);
        let r = c.rect;
        assert!(r.width >= 1 && r.height >= 1);
        assert!(
            r.x + r.width <= w && r.y + r.height <= h,
            "{r:?} in {w}x{h}"
        );
        if c.fallback {
            fallbacks += 1;
        } else {
            let area = (r.width * r.height) as f64 / (w * h) as f64;
            let ratio = r.width as f64 / r.height as f64;
            // Rounding to whole pixels moves both a little.
            assert!((0.09..=1.01).contains(&area), "area {area}");
            assert!((0.70..=1.40).contains(&ratio), "ratio {ratio}");
        }
        flips += usize::from(c.flip);
    }
    assert!(fallbacks < 20, "{fallbacks} fallbacks on ordinary images");
    assert!((850..1150).contains(&flips), "{flips} flips of 2000");
}

#[test]
fn extreme_aspect_ratios_fall_back_to_a_centre_crop() {
    let t = TrainTransform::default();
    let mut rng = SampleRng::new(1);
    let wide = t.choose(1000, 10, &mut rng);
    assert!(wide.fallback);
    assert_eq!(
        wide.rect,
        CropRect {
            x: 493,
            y: 0,
            width: 13,
            height: 10
        }
    );
    let tall = t.choose(10, 1000, &mut rng);
    assert!(tall.fallback);
    assert_eq!(
        tall.rect,
        CropRect {
            x: 0,
            y: 493,
            width: 10,
            height: 13
        }
    );
    assert_eq!(
        t.centre_fallback(300, 250),
        CropRect {
            x: 0,
            y: 0,
            width: 300,
            height: 250
        }
    );
    // The transform still produces a full output from such an image.
    let mut out = vec![1f32; 16 * 16 * 3];
    TrainTransform::with_size(16).apply(&gradient(1000, 10), &mut rng, &mut out);
    assert!(out.iter().all(|v| v.is_finite()));
}

#[test]
fn flip_is_an_exact_mirror_of_the_unflipped_crop() {
    let img = gradient(300, 200);
    let size = 48;
    let never = TrainTransform {
        flip_probability: 0.0,
        ..TrainTransform::with_size(size)
    };
    let always = TrainTransform {
        flip_probability: 1.0,
        ..never.clone()
    };
    for seed in 0..10 {
        let mut a = vec![0f32; size * size * 3];
        let mut b = vec![0f32; size * size * 3];
        let ca = never.apply(&img, &mut SampleRng::new(seed), &mut a);
        let cb = always.apply(&img, &mut SampleRng::new(seed), &mut b);
        assert_eq!(ca.rect, cb.rect);
        assert!(!ca.flip && cb.flip);
        assert_ne!(a, b);
        for y in 0..size {
            for x in 0..size {
                for c in 0..3 {
                    assert_eq!(
                        a[(y * size + x) * 3 + c],
                        b[(y * size + size - 1 - x) * 3 + c]
                    );
                }
            }
        }
    }
}

#[test]
fn mean_is_subtracted_per_channel_without_scaling() {
    assert_eq!(MEAN_RGB, [123.68, 116.78, 103.94]);
    let img = RgbImage::filled(64, 48, [255, 0, 128]);
    let mut out = vec![0f32; 20 * 20 * 3];
    TrainTransform::with_size(20).apply(&img, &mut SampleRng::new(0), &mut out);
    for px in out.chunks_exact(3) {
        assert!((px[0] - 131.32).abs() < 1e-3);
        assert!((px[1] + 116.78).abs() < 1e-3);
        assert!((px[2] - 24.06).abs() < 1e-3);
    }
}

#[test]
fn unreadable_images_are_replaced_counted_and_never_fatal() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ds");
    let ds = synth(&root, &small_spec());
    let class1 = ds.train.dir.join(&ds.classes[1]);
    let good = fs::read(&ds.train.samples[0].path).unwrap();
    fs::write(class1.join("zero.JPEG"), b"").unwrap();
    fs::write(class1.join("truncated.JPEG"), &good[..good.len() / 2]).unwrap();
    fs::write(class1.join("text.JPEG"), b"this is not a jpeg at all").unwrap();
    assert_eq!(decode_jpeg(b""), Err(DecodeError::Empty));
    assert_eq!(
        decode_jpeg(&good[..good.len() / 2]),
        Err(DecodeError::Truncated)
    );
    assert_eq!(
        decode_jpeg(b"this is not a jpeg at all"),
        Err(DecodeError::NotJpeg)
    );
    // A class whose only image is unreadable gets the mean image.
    let class2_only = ds.train.dir.join("z-broken");
    fs::create_dir(&class2_only).unwrap();
    fs::write(class2_only.join("bad.jpg"), b"\xff\xd8garbage").unwrap();

    let ds = Dataset::open(&root).unwrap();
    assert_eq!(ds.train.len(), 25);
    let broken: HashSet<usize> = ds
        .train
        .samples
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            let name = s.path.file_name().unwrap().to_string_lossy();
            ["zero.JPEG", "truncated.JPEG", "text.JPEG", "bad.jpg"].contains(&name.as_ref())
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(broken.len(), 4);
    let loader = Loader::new(Arc::new(ds.train.clone()), train_config(5, 3)).unwrap();
    for e in 0..2 {
        let batches = epoch(&loader, e);
        assert_eq!(batches.iter().map(Batch::valid_count).sum::<usize>(), 25);
        let replaced: usize = batches.iter().map(|b| b.replaced).sum();
        assert_eq!(replaced, 4, "epoch {e}");
        for b in &batches {
            for j in 0..b.len() {
                let id = b.sample_ids[j];
                assert_eq!(b.labels[j], ds.train.samples[id].label);
                let all_zero = b.image(j).iter().all(|&v| v == 0.0);
                let lonely = ds.train.samples[id].path.ends_with("z-broken/bad.jpg");
                assert_eq!(all_zero, lonely, "sample {id}");
            }
        }
    }
    assert_eq!(loader.unreadable_files(), 4);
    assert_eq!(loader.replacements(), 8);
}

#[test]
fn loader_configuration_mistakes_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = synth(&tmp.path().join("ds"), &small_spec());
    let split = Arc::new(ds.train);
    for config in [
        train_config(0, 1),
        train_config(4, 0),
        LoaderConfig {
            image_size: 0,
            ..train_config(4, 1)
        },
        LoaderConfig {
            prefetch_batches: 0,
            ..train_config(4, 1)
        },
        LoaderConfig {
            crop_scale: (0.0, 1.0),
            ..train_config(4, 1)
        },
        LoaderConfig {
            crop_scale: (0.8, 0.5),
            ..train_config(4, 1)
        },
    ] {
        let err = Loader::new(split.clone(), config.clone()).unwrap_err();
        assert!(matches!(err, DataError::InvalidConfig(_)), "{config:?}");
    }
}

#[test]
fn dropping_an_epoch_early_stops_its_workers() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = synth(&tmp.path().join("ds"), &small_spec());
    let loader = Loader::new(Arc::new(ds.train), train_config(2, 4)).unwrap();
    let mut batches = loader.epoch(0).unwrap();
    assert_eq!(batches.len(), 11);
    assert!(batches.next().is_some());
    drop(batches);
    assert_eq!(epoch(&loader, 0).len(), 11);
}

#[test]
fn synth_writes_decodable_jpegs_in_the_layout_deterministically() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = small_spec();
    let a = tmp.path().join("a");
    let summary = write_synth_dataset(&a, &spec).unwrap();
    assert_eq!((summary.train_images, summary.val_images), (21, 6));
    let ds = Dataset::open(&a).unwrap();
    assert_eq!(ds.num_classes(), 3);
    assert_eq!(
        ds.classes,
        (0..3).map(SynthSpec::class_name).collect::<Vec<_>>()
    );
    for split in [&ds.train, &ds.val] {
        for (label, ids) in split.by_class.iter().enumerate() {
            let want = if split.dir.ends_with("train") { 7 } else { 2 };
            assert_eq!(ids.len(), want, "class {label}");
        }
        for s in &split.samples {
            let img = decode_jpeg(&fs::read(&s.path).unwrap()).unwrap();
            assert_eq!((img.width, img.height), (40, 40));
        }
    }
    // Nothing but the dataset and its spec file is left behind.
    let mut top: Vec<String> = fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(top, ["a"]);
    assert!(a.join(SPEC_FILE).is_file());

    let b = tmp.path().join("b");
    write_synth_dataset(&b, &spec).unwrap();
    let c = tmp.path().join("c");
    write_synth_dataset(
        &c,
        &SynthSpec {
            seed: 12,
            ..spec.clone()
        },
    )
    .unwrap();
    let first = |root: &Path| {
        let ds = Dataset::open(root).unwrap();
        ds.train
            .samples
            .iter()
            .chain(&ds.val.samples)
            .map(|s| fs::read(&s.path).unwrap())
            .collect::<Vec<_>>()
    };
    assert!(first(&a) == first(&b), "same seed, different files");
    assert!(first(&a) != first(&c), "different seeds, same files");

    let err = write_synth_dataset(&a, &spec).unwrap_err();
    assert!(err.to_string().contains("not empty"), "{err}");
}

#[test]
fn ensure_synth_dataset_writes_once_and_reuses() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = small_spec();
    let root = ensure_synth_dataset(tmp.path(), &spec).unwrap();
    assert_eq!(root, tmp.path().join(spec.folder_name()));
    let marker = root.join("train").join("kept.txt");
    fs::write(&marker, "still here").unwrap();
    assert_eq!(ensure_synth_dataset(tmp.path(), &spec).unwrap(), root);
    assert!(marker.exists(), "a complete dataset was regenerated");

    // A half-written folder (no spec file) is replaced by a complete one.
    fs::remove_file(root.join(SPEC_FILE)).unwrap();
    assert_eq!(ensure_synth_dataset(tmp.path(), &spec).unwrap(), root);
    assert!(!marker.exists());
    assert_eq!(Dataset::open(&root).unwrap().train.len(), 21);

    let other = SynthSpec { classes: 2, ..spec };
    let root2 = ensure_synth_dataset(tmp.path(), &other).unwrap();
    assert_ne!(root, root2);
    assert_eq!(Dataset::open(&root2).unwrap().num_classes(), 2);
}

#[test]
fn dataset_commands_generate_check_and_refuse_bad_folders() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("gen");
    let exe = env!("CARGO_BIN_EXE_tinyperf");
    let out = std::process::Command::new(exe)
        .args(["dataset", "synth"])
        .arg(&dir)
        .args([
            "--classes",
            "4",
            "--per-class",
            "3",
            "--val-per-class",
            "1",
            "--size",
            "32",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("wrote 12 train and 4 val images"));
    let out = std::process::Command::new(exe)
        .args(["dataset", "check", "--json"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["classes"], 4);
    assert_eq!(report["train_images"], 12);
    assert_eq!(report["unreadable"].as_array().unwrap().len(), 0);

    let class = fs::read_dir(dir.join("train"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    fs::write(class.join("broken.jpg"), b"").unwrap();
    let out = std::process::Command::new(exe)
        .args(["dataset", "check"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("broken.jpg: the file is empty"));

    let out = std::process::Command::new(exe)
        .args(["dataset", "check"])
        .arg(tmp.path().join("missing"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
}

fn smooth(width: usize, height: usize) -> RgbImage {
    let mut pixels = Vec::with_capacity(width * height * 3);
    for y in 0..height {
        for x in 0..width {
            let (u, v) = (x as f64 / width as f64, y as f64 / height as f64);
            pixels.extend_from_slice(&[
                (40.0 + 170.0 * u) as u8,
                (30.0 + 190.0 * v) as u8,
                (128.0 + 100.0 * (6.0 * u).sin() * (4.0 * v).cos()) as u8,
            ]);
        }
    }
    RgbImage {
        width,
        height,
        pixels,
    }
}

/// The exact train path: decode the whole image, then crop, flip and resize it.
fn decode_whole_then_apply(t: &TrainTransform, bytes: &[u8], seed: u64, out: &mut [f32]) {
    let img = decode_jpeg(bytes).unwrap();
    t.apply(&img, &mut SampleRng::new(seed), out);
}

#[test]
fn crop_decode_at_full_scale_is_exactly_whole_decode_then_crop() {
    // Crops of a 300x200 image never reach twice 160, so no IDCT scaling happens and
    // only the crop's iMCU columns and rows are decoded, at unaligned offsets.
    let bytes = encode_jpeg(&gradient(300, 200).pixels, 300, 200, 90).unwrap();
    let t = TrainTransform::with_size(160);
    let mut whole = vec![0f32; 160 * 160 * 3];
    let mut cropped = vec![0f32; 160 * 160 * 3];
    let mut offsets = HashSet::new();
    for seed in 0..40 {
        decode_whole_then_apply(&t, &bytes, seed, &mut whole);
        let choice = t
            .decode_and_apply(&bytes, &mut SampleRng::new(seed), &mut cropped)
            .unwrap();
        offsets.insert(choice.rect.x % 16);
        let region = decode_jpeg_region(&bytes, choice.rect, 160, 160).unwrap();
        assert_eq!(region.eighths, 8);
        // Whole iMCU columns (16 px at 4:2:0) from the left, exact rows.
        assert!(region.image.width >= choice.rect.width);
        assert!(region.image.width < choice.rect.width + 16);
        assert_eq!(region.image.height, choice.rect.height);
        assert_eq!(whole, cropped, "seed {seed}");
    }
    assert!(
        offsets.len() > 4,
        "crops at MCU-unaligned offsets: {offsets:?}"
    );
}

#[test]
fn crop_decode_downscaled_in_the_idct_stays_close_to_the_exact_path() {
    let (w, h) = (640, 480);
    let bytes = encode_jpeg(&smooth(w, h).pixels, w, h, 95).unwrap();
    let t = TrainTransform::with_size(64);
    let mut whole = vec![0f32; 64 * 64 * 3];
    let mut cropped = vec![0f32; 64 * 64 * 3];
    let mut scales = HashSet::new();
    for seed in 0..30 {
        decode_whole_then_apply(&t, &bytes, seed, &mut whole);
        let choice = t
            .decode_and_apply(&bytes, &mut SampleRng::new(seed), &mut cropped)
            .unwrap();
        let region = decode_jpeg_region(&bytes, choice.rect, 64, 64).unwrap();
        scales.insert(region.eighths);
        // The decoded window holds the crop scaled by eighths/8, and not much more.
        let s = region.eighths as f64 / 8.0;
        assert!(region.image.width as f64 >= choice.rect.width as f64 * s - 1.0);
        assert!(region.image.height as f64 >= choice.rect.height as f64 * s - 1.0);
        assert!(region.image.height as f64 <= choice.rect.height as f64 * s + 2.0);
        let mean_diff = whole
            .iter()
            .zip(&cropped)
            .map(|(a, b)| (a - b).abs())
            .sum::<f32>()
            / whole.len() as f32;
        let max_diff = whole
            .iter()
            .zip(&cropped)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(mean_diff < 1.5, "seed {seed}: mean |diff| {mean_diff}");
        assert!(max_diff < 12.0, "seed {seed}: max |diff| {max_diff}");
    }
    assert!(
        scales.len() >= 2 && scales.iter().any(|&n| n < 4),
        "{scales:?}"
    );
}

#[test]
fn crop_decode_rejects_broken_files_like_whole_decode() {
    let bytes = encode_jpeg(&gradient(64, 48).pixels, 64, 48, 90).unwrap();
    let t = TrainTransform::with_size(32);
    let mut out = vec![0f32; 32 * 32 * 3];
    let mut rng = SampleRng::new(0);
    assert_eq!(
        t.decode_and_apply(&bytes[..bytes.len() / 2], &mut rng, &mut out),
        Err(DecodeError::Truncated)
    );
    assert_eq!(
        t.decode_and_apply(b"", &mut rng, &mut out),
        Err(DecodeError::Empty)
    );
    assert_eq!(
        t.decode_and_apply(b"GIF89a......", &mut rng, &mut out),
        Err(DecodeError::NotJpeg)
    );
    assert!(matches!(
        t.decode_and_apply(
            b"\xff\xd8\xff\xda\x00\x02garbage\xff\xd9",
            &mut rng,
            &mut out
        ),
        Err(DecodeError::Corrupt(_))
    ));
    assert_eq!(jpeg_size(&bytes), Ok((64, 48)));
}

//! Embeds uPlot, the status page's chart library, from its npm tarball.
//!
//! The tarball is pinned by version and by the sha512 integrity npm's registry
//! publishes for it, and is never committed: it is taken from `TINYPERF_UPLOT_TGZ`
//! when set, else from the cache `.cache/uplot-VERSION.tgz`, else downloaded from
//! registry.npmjs.org with curl into that cache. A tarball whose digest differs is
//! refused. When none can be had the build goes on without charts (the page says
//! so) unless `TINYPERF_REQUIRE_UPLOT=1`, which makes it an error.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const UPLOT_VERSION: &str = "1.6.32";
/// `npm view uplot@1.6.32 dist.integrity`.
const UPLOT_INTEGRITY: &str =
    "sha512-KIMVnG68zvu5XXUbC4LQEPnhwOxBuLyW1AHtpm6IKTXImkbLgkMy+jabjLgSLMasNuGGzQm/ep3tOkyTxpiQIw==";
/// Files taken from the tarball, and the names they get in `OUT_DIR`.
const UPLOT_FILES: &[(&str, &str)] = &[
    ("package/dist/uPlot.iife.min.js", "uplot.min.js"),
    ("package/dist/uPlot.min.css", "uplot.min.css"),
    ("package/LICENSE", "uplot.LICENSE"),
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=TINYPERF_UPLOT_TGZ");
    println!("cargo:rerun-if-env-changed=TINYPERF_REQUIRE_UPLOT");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let embedded = match uplot_files(&manifest, &out) {
        Ok(()) => true,
        Err(why) => {
            if std::env::var("TINYPERF_REQUIRE_UPLOT").as_deref() == Ok("1") {
                panic!("uPlot {UPLOT_VERSION} is required (TINYPERF_REQUIRE_UPLOT=1): {why}");
            }
            println!(
                "cargo:warning=building without uPlot, the page will have no live charts: {why}"
            );
            false
        }
    };
    let mut code = String::new();
    let _ = writeln!(code, "pub const UPLOT_VERSION: &str = {UPLOT_VERSION:?};");
    if embedded {
        let _ = writeln!(
            code,
            "pub const UPLOT: Option<UplotFiles> = Some(UplotFiles {{"
        );
        for (field, name) in [
            ("js", "uplot.min.js"),
            ("js_gzip", "uplot.min.js.gz"),
            ("css", "uplot.min.css"),
            ("license", "uplot.LICENSE"),
        ] {
            let path = out.join(name);
            let _ = writeln!(
                code,
                "    {field}: include_bytes!({:?}),",
                path.display().to_string()
            );
        }
        code.push_str("});\n");
    } else {
        code.push_str("pub const UPLOT: Option<UplotFiles> = None;\n");
    }
    std::fs::write(out.join("uplot.rs"), code).expect("OUT_DIR is writable");
}

fn uplot_files(manifest: &Path, out: &Path) -> Result<(), String> {
    let tarball = match std::env::var_os("TINYPERF_UPLOT_TGZ") {
        Some(path) => {
            let path = PathBuf::from(path);
            println!("cargo:rerun-if-changed={}", path.display());
            path
        }
        None => {
            let cached = manifest.join(format!(".cache/uplot-{UPLOT_VERSION}.tgz"));
            if verify(&cached).is_err() {
                download(&cached)?;
            }
            cached
        }
    };
    verify(&tarball)?;
    let unpack = out.join("uplot-package");
    std::fs::create_dir_all(&unpack).map_err(|e| format!("{}: {e}", unpack.display()))?;
    let mut tar = Command::new("tar");
    tar.arg("-xzf").arg(&tarball).arg("-C").arg(&unpack);
    for (member, _) in UPLOT_FILES {
        tar.arg(member);
    }
    run(&mut tar)?;
    for (member, name) in UPLOT_FILES {
        std::fs::copy(unpack.join(member), out.join(name))
            .map_err(|e| format!("{member} from {}: {e}", tarball.display()))?;
    }
    // Served to clients that take gzip: 51 KB of script becomes about 22 KB.
    let gzip = run(Command::new("gzip")
        .args(["-9", "-n", "-c"])
        .arg(out.join("uplot.min.js")))?;
    std::fs::write(out.join("uplot.min.js.gz"), gzip).map_err(|e| e.to_string())?;
    Ok(())
}

fn download(to: &Path) -> Result<(), String> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let url = format!("https://registry.npmjs.org/uplot/-/uplot-{UPLOT_VERSION}.tgz");
    let partial = to.with_extension("tgz.partial");
    run(Command::new("curl")
        .args([
            "--fail",
            "--silent",
            "--show-error",
            "--location",
            "--max-time",
            "60",
            "-o",
        ])
        .arg(&partial)
        .arg(&url))
    .map_err(|e| format!("cannot download {url}: {e}"))?;
    verify(&partial)?;
    std::fs::rename(&partial, to).map_err(|e| format!("{}: {e}", to.display()))
}

/// Checks the file's sha512 against the registry's integrity string.
fn verify(path: &Path) -> Result<(), String> {
    if !path.is_file() {
        return Err(format!("{} does not exist", path.display()));
    }
    let expected = UPLOT_INTEGRITY
        .strip_prefix("sha512-")
        .map(base64_to_hex)
        .expect("the integrity is a sha512");
    let output = run(Command::new("sha512sum").arg(path))?;
    let found = String::from_utf8_lossy(&output);
    let found = found.split_whitespace().next().unwrap_or_default();
    if found != expected {
        return Err(format!(
            "{} has sha512 {found}, not uPlot {UPLOT_VERSION}'s {expected}",
            path.display()
        ));
    }
    Ok(())
}

fn run(command: &mut Command) -> Result<Vec<u8>, String> {
    let output = command
        .output()
        .map_err(|e| format!("cannot run {:?}: {e}", command.get_program()))?;
    if !output.status.success() {
        return Err(format!(
            "{:?} failed: {}",
            command.get_program(),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(output.stdout)
}

fn base64_to_hex(text: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut count = 0;
    let mut hex = String::new();
    for c in text.bytes().filter(|&c| c != b'=') {
        let value = ALPHABET.iter().position(|&a| a == c).expect("base64") as u32;
        bits = (bits << 6) | value;
        count += 6;
        if count >= 8 {
            count -= 8;
            let _ = write!(hex, "{:02x}", (bits >> count) & 0xff);
        }
    }
    hex
}

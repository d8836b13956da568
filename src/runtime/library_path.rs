//! Which file a loaded library is: the loader's own record of the object it mapped, so a
//! report can say `/usr/lib/x86_64-linux-gnu/libnvrtc.so.12.4.127` where the code asked
//! for `libnvrtc.so.12`.

use std::ffi::{c_char, CStr};
use std::path::PathBuf;

/// The leading fields of glibc's public `struct link_map` (link.h).
#[repr(C)]
struct LinkMap {
    l_addr: usize,
    l_name: *const c_char,
}

/// The file the loader maps for `name` (opened again, which for a library already loaded
/// only counts one more user), with symbolic links resolved; `None` when it does not load
/// or the loader does not say.
pub fn loaded_path(name: &str) -> Option<PathBuf> {
    // SAFETY: opening a library runs only its own initialisers; for one already loaded
    // it returns the same object.
    let library = unsafe { libloading::os::unix::Library::new(name) }.ok()?;
    let handle = library.into_raw();
    let mut map: *const LinkMap = std::ptr::null();
    // SAFETY: RTLD_DI_LINKMAP writes one pointer to the loader's record of the object.
    let status = unsafe {
        libc::dlinfo(
            handle,
            libc::RTLD_DI_LINKMAP,
            (&mut map as *mut *const LinkMap).cast(),
        )
    };
    let text = (status == 0 && !map.is_null())
        // SAFETY: the record lives while the handle is open; the loader keeps a
        // NUL-terminated path there (possibly null for the main program).
        .then(|| unsafe { (*map).l_name })
        .filter(|name| !name.is_null())
        .map(|name| {
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        });
    // SAFETY: the handle came from `into_raw` above and is closed once, here.
    drop(unsafe { libloading::os::unix::Library::from_raw(handle) });
    let text = text.filter(|t| !t.is_empty())?;
    std::fs::canonicalize(&text)
        .ok()
        .or(Some(PathBuf::from(text)))
}

/// The version a library's file name carries after `.so.`: `libnvidia-ml.so.550.163.01`
/// → `550.163.01`.
pub fn version_from_file_name(path: &std::path::Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let (_, version) = name.split_once(".so.")?;
    (!version.is_empty()).then(|| version.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_file_behind_a_loaded_soname() {
        let path = loaded_path("libc.so.6").expect("the loader knows libc");
        assert!(path.is_absolute(), "{}", path.display());
        assert!(path.exists(), "{}", path.display());
        assert!(
            path.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("libc"),
            "{}",
            path.display()
        );
    }

    #[test]
    fn reads_the_version_after_the_soname() {
        assert_eq!(
            version_from_file_name(std::path::Path::new("/usr/lib/libnvidia-ml.so.550.163.01"))
                .as_deref(),
            Some("550.163.01")
        );
        assert_eq!(
            version_from_file_name(std::path::Path::new("libfoo.so")),
            None
        );
    }
}

//! The C boundary between fbc and a pass plugin, and the only `unsafe` code of plugin support.
//!
//! A plugin exports one data symbol, [`HEADER_SYMBOL`], a `#[repr(C)]` [`Header`]. Its first
//! [`PREFIX_LEN`] bytes (magic, plugin API version, fbc version, rustc version) are frozen for
//! every API version, so a host reads them, from the file, before it loads anything; the two
//! function pointers after them are used only once the versions match:
//!
//! - `call(request, len, &mut response) -> status` takes a JSON request (the bytes stay the
//!   host's; the plugin only reads them during the call) and fills `response` with JSON bytes the
//!   plugin allocated. Status 0 means `response` was written.
//! - `free(response)` gives those bytes back to the plugin's allocator: each side frees only what
//!   its own allocator made, so a plugin may use another allocator than fbc does.
//!
//! Nothing else crosses: no Rust type, no trait object, no allocation owned across the line.
//! That is what makes the boundary independent of the rustc version and of the layout of
//! fbc's own types (see the crate docs).

#![allow(unsafe_code)]

/// The first bytes of every descriptor.
pub const MAGIC: [u8; 8] = *b"FBCPLUG\0";

/// The version of this interface: the header layout after the prefix, and the JSON protocol.
pub const API_VERSION: u32 = 1;

/// The exported name of the descriptor.
pub const HEADER_SYMBOL: &str = "FBC_PLUGIN_HEADER";

const FBC_VERSION_BYTES: usize = 32;
const RUSTC_VERSION_BYTES: usize = 96;

/// Bytes of the frozen prefix: magic, API version, fbc version, rustc version.
pub const PREFIX_LEN: usize = 8 + 4 + FBC_VERSION_BYTES + RUSTC_VERSION_BYTES;

/// Bytes allocated by one side and handed to the other, which gives them back to be freed.
#[repr(C)]
#[derive(Debug)]
pub struct Buffer {
    pub ptr: *mut u8,
    pub len: usize,
    pub capacity: usize,
}

/// `call`: see the module docs.
pub type CallFn =
    unsafe extern "C" fn(request: *const u8, request_len: usize, response: *mut Buffer) -> i32;
/// `free`: see the module docs.
pub type FreeFn = unsafe extern "C" fn(response: Buffer);

/// The descriptor a plugin exports as [`HEADER_SYMBOL`] (made by `declare_plugin!`).
#[repr(C)]
#[derive(Debug)]
pub struct Header {
    pub magic: [u8; 8],
    pub api_version: u32,
    /// The fbc version the plugin was built against, NUL-padded.
    pub fbc_version: [u8; FBC_VERSION_BYTES],
    /// `rustc --version` of the compiler that built the plugin, NUL-padded.
    pub rustc_version: [u8; RUSTC_VERSION_BYTES],
    pub call: CallFn,
    pub free: FreeFn,
}

impl Header {
    /// The descriptor of a plugin built with this crate.
    pub const fn new(call: CallFn, free: FreeFn) -> Header {
        Header {
            magic: MAGIC,
            api_version: API_VERSION,
            fbc_version: padded(crate::FBC_VERSION),
            rustc_version: padded(crate::RUSTC_VERSION),
            call,
            free,
        }
    }
}

/// `s` in `N` bytes, cut to `N - 1` so that at least one NUL ends it.
const fn padded<const N: usize>(s: &str) -> [u8; N] {
    let bytes = s.as_bytes();
    let mut out = [0u8; N];
    let mut i = 0;
    while i < bytes.len() && i + 1 < N {
        out[i] = bytes[i];
        i += 1;
    }
    out
}

/// What a descriptor's prefix says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versions {
    pub api: u32,
    pub fbc: String,
    pub rustc: String,
}

/// Reads a descriptor's prefix; `None` when the bytes are too short or do not start with
/// [`MAGIC`]. `little_endian` is the byte order of the file the bytes come from.
pub fn read_prefix(bytes: &[u8], little_endian: bool) -> Option<Versions> {
    if bytes.len() < PREFIX_LEN || bytes[..8] != MAGIC {
        return None;
    }
    let api: [u8; 4] = bytes[8..12].try_into().ok()?;
    let text = |b: &[u8]| {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    };
    Some(Versions {
        api: if little_endian { u32::from_le_bytes(api) } else { u32::from_be_bytes(api) },
        fbc: text(&bytes[12..12 + FBC_VERSION_BYTES]),
        rustc: text(&bytes[12 + FBC_VERSION_BYTES..PREFIX_LEN]),
    })
}

/// The plugin side of `call`: hands the request bytes to `handle` and returns its answer in
/// `response`, allocated by this (the plugin's) allocator.
///
/// # Safety
/// `request` points to `request_len` readable bytes that stay unchanged during the call, and
/// `response` to writable memory for one [`Buffer`]: the contract of [`CallFn`], which the host
/// keeps (see [`Library::call`]).
pub unsafe fn guest_call(
    request: *const u8,
    request_len: usize,
    response: *mut Buffer,
    handle: impl FnOnce(&[u8]) -> Vec<u8>,
) -> i32 {
    if request.is_null() || response.is_null() {
        return 1;
    }
    // SAFETY: the caller's contract: `request_len` bytes at `request`, live for this call.
    let request = unsafe { std::slice::from_raw_parts(request, request_len) };
    let mut answer = std::mem::ManuallyDrop::new(handle(request));
    let buffer =
        Buffer { ptr: answer.as_mut_ptr(), len: answer.len(), capacity: answer.capacity() };
    // SAFETY: the caller's contract: `response` is writable; the Vec's storage now belongs to
    // the buffer, and comes back to `guest_free` to be released.
    unsafe { response.write(buffer) };
    0
}

/// The plugin side of `free`.
///
/// # Safety
/// `buffer` was written by [`guest_call`] of this plugin and not freed before.
// By value: it is the `FreeFn` argument as the C signature takes it.
#[allow(clippy::needless_pass_by_value)]
pub unsafe fn guest_free(buffer: Buffer) {
    if !buffer.ptr.is_null() {
        // SAFETY: pointer, length and capacity are those of the Vec `guest_call` gave away,
        // made by this plugin's allocator, and it is given back once.
        drop(unsafe { Vec::from_raw_parts(buffer.ptr, buffer.len, buffer.capacity) });
    }
}

/// A loaded plugin library (host side). It is never unloaded: passes made from it may live as
/// long as the process, and unloading Rust code that registered thread-local destructors is not
/// safe.
#[cfg(feature = "host")]
#[derive(Debug)]
pub struct Library {
    header: &'static Header,
}

#[cfg(feature = "host")]
impl Library {
    /// Loads the library at `path` and finds its descriptor; the caller has checked, from the
    /// file, that its prefix names this API version. Loading runs the library's initialisers,
    /// as any `dlopen` does (a Rust library built with `declare_plugin!` has none of fbc's).
    pub fn open(path: &std::path::Path) -> Result<Library, String> {
        // SAFETY: loading a shared library runs its initialisers; the file was checked to be a
        // shared library exporting an fbc descriptor of this API version, which is the trust
        // `--load-pass-plugin` asks of the user, as MLIR's and LLVM's do.
        let library = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
        let library: &'static libloading::Library = Box::leak(Box::new(library));
        // SAFETY: the symbol is the `static Header` that `declare_plugin!` exports (the file
        // check found it under this name with a matching prefix); its address is valid for as
        // long as the library stays loaded, which is forever (it is leaked above).
        let header: &'static Header = unsafe {
            let symbol = library
                .get::<*const Header>(HEADER_SYMBOL.as_bytes())
                .map_err(|e| e.to_string())?;
            &**symbol
        };
        if header.magic != MAGIC || header.api_version != API_VERSION {
            return Err("the loaded descriptor differs from the one in the file".into());
        }
        Ok(Library { header })
    }

    /// Sends one request and returns the plugin's answer, or the status it failed with.
    pub fn call(&self, request: &[u8]) -> Result<Vec<u8>, i32> {
        let mut response = Buffer { ptr: std::ptr::null_mut(), len: 0, capacity: 0 };
        // SAFETY: `call` is the plugin's function of this API version (checked in `open`);
        // `request` is a live slice for the whole call and `response` a writable Buffer: the
        // contract of `CallFn`.
        let status = unsafe { (self.header.call)(request.as_ptr(), request.len(), &mut response) };
        if status != 0 {
            return Err(status);
        }
        let answer = if response.ptr.is_null() {
            Vec::new()
        } else {
            // SAFETY: on status 0 the plugin wrote `len` initialised bytes at `ptr`, which stay
            // valid until they are handed back to `free` below.
            unsafe { std::slice::from_raw_parts(response.ptr, response.len) }.to_vec()
        };
        // SAFETY: the buffer came from this plugin's `call` and is freed once, by its `free`.
        unsafe { (self.header.free)(response) };
        Ok(answer)
    }
}

//! Pass plugins: passes built as a shared library and loaded into the stock `fbc` with
//! `--load-pass-plugin PATH` (or `FBC_PASS_PLUGINS`), as MLIR's `mlir-opt --load-pass-plugin`.
//!
//! A plugin is a `cdylib` crate with a registration function, the same one a crate that embeds
//! fbc as a library calls on `Driver::passes`:
//!
//! ```ignore
//! pub fn register(passes: &mut fbc_ir::PassRegistry) {
//!     passes.register(PassInfo::new("fold-scales", "…", vec![], |_| Ok(Box::new(FoldScales))));
//!     // Optionally, run it in every -O pipeline too, not only in `fbc opt --passes`:
//!     passes.extend_pipeline(ExtensionPoint::PipelineStart, "fold-scales");
//! }
//! fbc_plugin::declare_plugin!(register);
//! ```
//!
//! # The boundary, and why it is C and text
//!
//! Rust has no stable ABI: a `Module`, a `Box<dyn Pass>` or a `String` passed between two
//! separately compiled libraries is only sound if both were built by the same rustc, from the
//! same fbc sources, with the same features, and share one allocator; and fbc's op kinds are
//! compared by the address of a static table, which differs in each copy of fbc-dialects. A
//! plugin built a day later would be undefined behaviour rather than an error. So nothing Rust
//! crosses ([`abi`]): the plugin exports a `#[repr(C)]` descriptor and one `extern "C"` entry,
//! requests and answers are JSON bytes, and a module crosses as its canonical text (which parses
//! back to the same module: the IR contract) with a table of its source spans ([`wire`]).
//! abi_stable or stabby would let Rust types cross instead, but fbc's IR types would have to
//! become their stable mirrors, and the parse and print on each side cost little beside a pass.
//!
//! What must therefore match is what the text means: the plugin API version (the descriptor and
//! protocol) and the fbc version (the IR text). The rustc version may differ; the descriptor
//! records it so that an error can name it. The host reads the descriptor from the file before
//! it loads the library, so a mismatched plugin never runs. A panic in a plugin is caught inside
//! it and reported with the pass name; a plugin built with `panic = "abort"` cannot be caught.
//!
//! A plugin adds passes, not ops: it parses with fbc's own op registry.

pub mod abi;
#[doc(hidden)]
pub mod guest;
#[cfg(feature = "host")]
pub mod host;
pub mod wire;

/// The fbc version this crate belongs to (a plugin's descriptor records it).
pub const FBC_VERSION: &str = env!("CARGO_PKG_VERSION");

/// `rustc --version` of the compiler that built this crate.
pub const RUSTC_VERSION: &str = env!("FBC_PLUGIN_RUSTC_VERSION");

/// Makes the crate a pass plugin: exports the descriptor and the entry point through which fbc
/// asks for the passes `$register` (a `fn(&mut fbc_ir::PassRegistry)`) registers, checks their
/// options and runs them.
#[macro_export]
macro_rules! declare_plugin {
    ($register:path) => {
        #[allow(unsafe_code)]
        const _: () = {
            #[no_mangle]
            pub static FBC_PLUGIN_HEADER: $crate::abi::Header =
                $crate::abi::Header::new(fbc_plugin_call, fbc_plugin_free);

            unsafe extern "C" fn fbc_plugin_call(
                request: *const u8,
                request_len: usize,
                response: *mut $crate::abi::Buffer,
            ) -> i32 {
                let register: fn(&mut $crate::__PassRegistry) = $register;
                // SAFETY: fbc calls this through the descriptor with the arguments `CallFn`
                // documents, which is `guest_call`'s contract.
                unsafe {
                    $crate::abi::guest_call(request, request_len, response, |r| {
                        $crate::guest::handle(register, r)
                    })
                }
            }

            unsafe extern "C" fn fbc_plugin_free(response: $crate::abi::Buffer) {
                // SAFETY: fbc hands back each buffer `fbc_plugin_call` wrote, once.
                unsafe { $crate::abi::guest_free(response) }
            }
        };
    };
}

#[doc(hidden)]
pub use fbc_ir::PassRegistry as __PassRegistry;

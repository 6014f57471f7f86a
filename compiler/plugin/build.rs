//! Records the compiler this crate is built with: a plugin's descriptor names it, and the host
//! prints both when their plugin API versions differ.

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "rustc (unknown version)".into());
    println!("cargo:rustc-env=FBC_PLUGIN_RUSTC_VERSION={version}");
    println!("cargo:rerun-if-env-changed=RUSTC");
}

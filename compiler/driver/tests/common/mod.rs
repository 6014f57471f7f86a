//! Helpers shared by the command-line tests: run the built `fbc`, scratch directories.

#![allow(dead_code)] // Each test binary uses its own subset.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the `fbc` binary built for these tests.
pub fn fbc(args: &[&str]) -> Out {
    fbc_env(args, &[])
}

/// Runs the `fbc` binary built for these tests with environment variables `env` set.
pub fn fbc_env(args: &[&str], env: &[(&str, &Path)]) -> Out {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fbc"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("fbc runs");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A fresh directory for one test (per process, so parallel test binaries never share one).
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fbc-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Writes `bytes` to `dir/name` and returns the path as text.
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write");
    p.to_string_lossy().into_owned()
}

/// Generates one Llama layer's training step (`fbc gen llama3.2-1b --layers 1 --seq 8 --vocab 64
/// --lora-rank 2 --training`: its LoRA gradients and the loss, every forward and backward op kind
/// of a decoder) into `llama.fbir` of scratch directory `name`, and returns the path.
pub fn training_step(name: &str) -> PathBuf {
    let path = scratch(name).join("llama.fbir");
    let o = fbc(&[
        "gen",
        "llama3.2-1b",
        "--layers",
        "1",
        "--seq",
        "8",
        "--vocab",
        "64",
        "--lora-rank",
        "2",
        "--training",
        "-o",
        path.to_str().unwrap_or_default(),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    path
}

//! The layout of ONNX's backend tests, which fbc's conformance tests and model checks read: a
//! folder with `model.onnx` and `test_data_set_N/{input,output}_K.pb` (one `TensorProto` each, in
//! the order of the graph's inputs that are not initializers, and of its outputs).

use std::path::{Path, PathBuf};

use prost::Message as _;

use crate::host::HostTensor;
use crate::proto::{ModelProto, TensorProto};

/// One test case: the model's bytes, and the named inputs and expected outputs of data set 0.
#[derive(Debug)]
pub struct Case {
    pub dir: PathBuf,
    pub model: Vec<u8>,
    pub inputs: Vec<(String, HostTensor)>,
    pub outputs: Vec<(String, HostTensor)>,
}

fn read_tensor(path: &Path) -> Result<HostTensor, String> {
    // Named by the file alone: the case's folder is the context of every message.
    let file = path.file_name().map_or(String::new(), |f| f.to_string_lossy().into_owned());
    let bytes = std::fs::read(path).map_err(|e| format!("{file}: {e}"))?;
    let t = TensorProto::decode(&bytes[..]).map_err(|e| format!("{file}: {e}"))?;
    HostTensor::decode(&t, path.parent()).map_err(|e| format!("{file}: {e}"))
}

/// Reads the case in `dir` (its `test_data_set_0`).
pub fn load(dir: &Path) -> Result<Case, String> {
    let model = std::fs::read(dir.join("model.onnx"))
        .map_err(|e| format!("{}: {e}", dir.join("model.onnx").display()))?;
    let m = ModelProto::decode(&model[..]).map_err(|e| format!("model.onnx: {e}"))?;
    let g = m.graph.as_ref().ok_or("model.onnx has no graph")?;
    let inits: std::collections::HashSet<&str> =
        g.initializer.iter().map(|t| t.name.as_str()).collect();
    let in_names: Vec<&str> =
        g.input.iter().map(|i| i.name.as_str()).filter(|n| !inits.contains(n)).collect();
    let data = dir.join("test_data_set_0");
    let mut inputs = Vec::new();
    for (k, name) in in_names.iter().enumerate() {
        let p = data.join(format!("input_{k}.pb"));
        if p.exists() {
            inputs.push((name.to_string(), read_tensor(&p)?));
        }
    }
    let mut outputs = Vec::new();
    for (k, o) in g.output.iter().enumerate() {
        outputs.push((o.name.clone(), read_tensor(&data.join(format!("output_{k}.pb")))?));
    }
    Ok(Case { dir: dir.to_path_buf(), model, inputs, outputs })
}

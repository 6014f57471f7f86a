//! Pass plugins that misbehave, for the loader's tests (`compiler/driver/tests/plugins.rs`):
//!
//! - `explode` panics inside `run`;
//! - `reject` fails with a diagnostic at the first op of the first function (the host must
//!   report it at that op's line in the user's file);
//! - `break-types` changes the type of the first op's result without changing its users, so the
//!   module it returns does not verify;
//! - with `FBC_TEST_PLUGIN_COLLIDE=1` in the environment the plugin also registers
//!   `canonicalize`, a built-in pass's name.
//!
//! The tests also copy this library and patch its descriptor (API version, fbc version) to
//! stand for plugins built against another fbc.

use fbc_grammar::Diagnostic;
use fbc_ir::pass::{PassInfo, PassRegistry};
use fbc_ir::{Module, Pass, PassContext, Type};

fbc_plugin::declare_plugin!(register);

pub fn register(passes: &mut PassRegistry) {
    passes.register(PassInfo::new("explode", "panics inside run", vec![], |_| {
        Ok(Box::new(Misbehave::Explode))
    }));
    passes.register(PassInfo::new("reject", "fails with an error at the first op", vec![], |_| {
        Ok(Box::new(Misbehave::Reject))
    }));
    passes.register(PassInfo::new(
        "break-types",
        "returns a module that does not verify",
        vec![],
        |_| Ok(Box::new(Misbehave::BreakTypes)),
    ));
    if std::env::var_os("FBC_TEST_PLUGIN_COLLIDE").is_some() {
        passes.register(PassInfo::new("canonicalize", "a second canonicalize", vec![], |_| {
            Ok(Box::new(Misbehave::Reject))
        }));
    }
}

#[derive(Debug)]
enum Misbehave {
    Explode,
    Reject,
    BreakTypes,
}

impl Pass for Misbehave {
    fn name(&self) -> &str {
        match self {
            Misbehave::Explode => "explode",
            Misbehave::Reject => "reject",
            Misbehave::BreakTypes => "break-types",
        }
    }

    fn run(&mut self, m: &mut Module, _: &mut PassContext<'_>) -> Result<(), Vec<Diagnostic>> {
        let first = m.funcs.first().and_then(|f| f.body.first().copied());
        match self {
            Misbehave::Explode => panic!("the plugin's pass exploded"),
            Misbehave::Reject => {
                let op = first.expect("a function with an op");
                let d = m.op(op);
                Err(vec![Diagnostic::error(format!("`reject` refuses `{}`", d.name()))
                    .at(d.span)
                    .with_label("this op")])
            }
            Misbehave::BreakTypes => {
                let op = first.expect("a function with an op");
                let result = m.op(op).results[0];
                m.values[result.index()].ty = Type::tensor(vec![7], fbc_ir::ElemType::F32);
                Ok(())
            }
        }
    }
}

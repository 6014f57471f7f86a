//! The `target=NAME` option of the passes that read the hardware profile (`rtile-candidates`,
//! `rtile-select`, `global-layout`, `lower-to-memory`).
//!
//! A pipeline runs for one profile, which the driver resolves once (from `--target` or
//! `--profile`, a builtin name or a TOML file) and hands over in [`PassContext::target`]; a pass
//! reads it there. The option exists for pipelines written by hand (`fbc opt --passes
//! 'rtile-select{target=mali}'`): its name is resolved once, when the pass is created, so an
//! unknown name is a command-line error before any pass runs, and the pass never looks a name up
//! while it runs.

use fbc_ir::pass::{OptionKind, OptionSpec, PassContext, PassOptions};
use fbc_ir::Diagnostic;
use fbc_target::HardwareProfile;

/// A pass's `target` option: `None` (the default, `target=`) is the pipeline's profile.
#[derive(Debug, Clone, Default)]
pub struct TargetOption(Option<Box<HardwareProfile>>);

impl TargetOption {
    /// The option's specification, `what` saying what the pass reads from the profile.
    pub fn spec(what: &str) -> OptionSpec {
        OptionSpec::new(
            "target",
            OptionKind::Str,
            Some(""),
            &format!("builtin hardware profile {what}(default: the pipeline's)"),
        )
    }

    /// The option's value in `o`: empty, or a builtin profile name (an unknown one is an error
    /// that lists the known names).
    pub fn from_options(o: &PassOptions) -> Result<TargetOption, String> {
        TargetOption::named(o.str("target").unwrap_or(""))
    }

    /// `name` resolved: empty is the pipeline's profile.
    pub fn named(name: &str) -> Result<TargetOption, String> {
        if name.is_empty() {
            return Ok(TargetOption(None));
        }
        fbc_target::builtin(name)
            .map(|p| TargetOption(Some(Box::new(p))))
            .map_err(|e| e.to_string())
    }

    /// The profile the pass compiles for: the option's, else the pipeline's.
    pub fn profile<'s>(&'s self, cx: &PassContext<'s>) -> &'s HardwareProfile {
        self.0.as_deref().unwrap_or(cx.target)
    }
}

/// What a pass's `run` returns.
pub(crate) type PassResult = Result<(), Vec<Diagnostic>>;

/// `impl Pass` for a pass that compiles for a hardware profile: it is called `$name`, and its
/// `run` hands the type's `run_for` the profile of its `target` option
/// ([`TargetOption::profile`]), so no such pass resolves a target itself.
macro_rules! profile_pass {
    ($ty:ty, $name:expr) => {
        impl fbc_ir::Pass for $ty {
            fn name(&self) -> &str {
                $name
            }

            fn run(
                &mut self,
                m: &mut fbc_ir::Module,
                cx: &mut fbc_ir::PassContext<'_>,
            ) -> Result<(), Vec<fbc_ir::Diagnostic>> {
                let profile = self.target.profile(cx);
                self.run_for(m, cx, profile)
            }
        }
    };
}
pub(crate) use profile_pass;

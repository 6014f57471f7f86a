//! `train-step`: one optimizer step as a function, `@F_step`, built from the joint graph of
//! [`super::joint`] plus the parameter update in tensor ops (see the module docs of
//! [`super`] for the signature and the formulas).
//!
//! Why the AdamW bias correction is computed in the graph from a `step` argument rather than
//! baked in as constants: `1 - β^t` changes every step, and a constant would force recompiling
//! (or re-planning layouts for) the training graph per iteration. `1 - exp(t·ln β)` costs two
//! rank-0 ops per moment, shared by all parameters.

use fbc_dialects::kind::TensorOp as T;
use fbc_ir::pass::{OptionKind, OptionSpec, PassInfo, PassOptions, PassRegistry};
use fbc_ir::{Diagnostic, Module, Pass, PassContext, Type, Value};

use super::emit::{Emitter, OPTIMIZER};
use super::{finish, joint, new_function, resolve};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Optimizer {
    Sgd,
    AdamW,
}

/// The `train-step` pass.
#[derive(Debug, Clone)]
pub struct TrainStep {
    pub func: String,
    pub wrt: Vec<String>,
    pub optimizer: Optimizer,
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

pub(crate) fn register(registry: &mut PassRegistry) {
    registry.register(PassInfo::new(
        "train-step",
        "add @F_step: loss, gradients and an SGD or AdamW update of the wrt parameters",
        vec![
            OptionSpec::new("func", OptionKind::Str, None, "the loss function"),
            OptionSpec::new("wrt", OptionKind::List, None, "the parameters to train"),
            OptionSpec::new("optimizer", OptionKind::Str, Some("sgd"), "sgd or adamw"),
            OptionSpec::new("lr", OptionKind::Float, Some("0.001"), "learning rate"),
            OptionSpec::new("beta1", OptionKind::Float, Some("0.9"), "AdamW first-moment decay"),
            OptionSpec::new("beta2", OptionKind::Float, Some("0.999"), "AdamW second-moment decay"),
            OptionSpec::new("eps", OptionKind::Float, Some("1e-8"), "AdamW denominator epsilon"),
            OptionSpec::new(
                "weight_decay",
                OptionKind::Float,
                Some("0.0"),
                "weight decay (decoupled for AdamW)",
            ),
        ],
        |o| TrainStep::from_options(o).map(|p| Box::new(p) as Box<dyn Pass>),
    ));
}

impl TrainStep {
    fn from_options(o: &PassOptions) -> Result<TrainStep, String> {
        let optimizer = match o.str("optimizer").unwrap_or("sgd") {
            "sgd" => Optimizer::Sgd,
            "adamw" => Optimizer::AdamW,
            other => return Err(format!("`optimizer` must be sgd or adamw, found `{other}`")),
        };
        let get = |name: &str| o.float(name).unwrap_or(0.0);
        let step = TrainStep {
            func: o.str("func").unwrap_or_default().to_string(),
            wrt: o.list("wrt"),
            optimizer,
            lr: get("lr"),
            beta1: get("beta1"),
            beta2: get("beta2"),
            eps: get("eps"),
            weight_decay: get("weight_decay"),
        };
        if !step.lr.is_finite() {
            return Err(format!("`lr` must be finite, found {}", step.lr));
        }
        for (name, b) in [("beta1", step.beta1), ("beta2", step.beta2)] {
            if !(0.0..1.0).contains(&b) {
                return Err(format!("`{name}` must be in [0, 1), found {b}"));
            }
        }
        for (name, v) in [("eps", step.eps), ("weight_decay", step.weight_decay)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("`{name}` must be finite and ≥ 0, found {v}"));
            }
        }
        Ok(step)
    }
}

impl Pass for TrainStep {
    fn name(&self) -> &str {
        "train-step"
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext<'_>) -> Result<(), Vec<Diagnostic>> {
        let mut work = m.clone();
        let new_name = format!("{}_step", self.func);
        let r = resolve(&work, "train-step", &self.func, &self.wrt, &new_name)?;
        let f = work.func(r.src);
        let loss_ty = f.result_types.first().cloned().unwrap_or(Type::Unknown);
        let params: Vec<(String, Type)> = r
            .wrt
            .iter()
            .map(|&i| {
                let a = f.args[i];
                (super::arg_name(&work, a, i), work.value_type(a).clone())
            })
            .collect();
        let n = f.args.len();
        let mut extra = Vec::new();
        if self.optimizer == Optimizer::AdamW {
            for (name, ty) in &params {
                extra.push((format!("m_{name}"), ty.clone()));
                extra.push((format!("v_{name}"), ty.clone()));
            }
            extra.push(("step".to_string(), loss_ty.clone()));
        }
        let mut results = vec![loss_ty.clone()];
        results.extend(params.iter().map(|(_, t)| t.clone()));
        if self.optimizer == Optimizer::AdamW {
            results.extend(extra.iter().take(2 * params.len()).map(|(_, t)| t.clone()));
        }
        let dst = new_function(&mut work, r.src, &new_name, &extra, &results);
        let j = joint::build_joint(&mut work, cx.registry, r.src, dst, &r.wrt)?;
        let args = work.func(dst).args.clone();
        let mut e = Emitter::new(cx.registry, dst, r.ret_span, OPTIMIZER);
        let loss = *j.results.first().ok_or_else(|| {
            vec![super::emit::internal(r.ret_span, "the loss function returns nothing")]
        })?;
        let mut returned = vec![loss];
        let built = match self.optimizer {
            Optimizer::Sgd => self.sgd(&mut e, &mut work, &r.wrt, &args, &j.grads),
            Optimizer::AdamW => self.adamw(&mut e, &mut work, &r.wrt, &args[n..], &args, &j.grads),
        };
        let (new_params, moments) = built.map_err(|d| vec![d])?;
        for (&v, (name, _)) in new_params.iter().zip(&params) {
            work.set_value_name(v, format!("{name}_new"));
        }
        returned.extend(new_params);
        returned.extend(moments);
        let stats = finish(&mut work, cx.registry, dst, &returned, r.ret_span)?;
        *m = work;
        stats.record(cx, "train-step");
        cx.stats.add("train-step", "optimizer-ops", i64::try_from(e.count).unwrap_or(i64::MAX));
        Ok(())
    }
}

type Updates = (Vec<Value>, Vec<Value>);

impl TrainStep {
    /// `p·(1 - lr·wd) - lr·u`.
    fn apply(
        &self,
        e: &mut Emitter<'_>,
        m: &mut Module,
        p: Value,
        u: Value,
    ) -> Result<Value, Diagnostic> {
        let kept = if self.weight_decay == 0.0 {
            p
        } else {
            e.scale(m, p, 1.0 - self.lr * self.weight_decay)?
        };
        let step = e.scale(m, u, self.lr)?;
        e.binary(m, T::Sub, kept, step)
    }

    fn sgd(
        &self,
        e: &mut Emitter<'_>,
        m: &mut Module,
        wrt: &[usize],
        args: &[Value],
        grads: &[Value],
    ) -> Result<Updates, Diagnostic> {
        let mut out = Vec::with_capacity(wrt.len());
        for (&i, &g) in wrt.iter().zip(grads) {
            out.push(self.apply(e, m, args[i], g)?);
        }
        Ok((out, Vec::new()))
    }

    /// `1 - β^t` as a rank-0 value, or `None` when it is 1 (β = 0).
    fn correction(
        e: &mut Emitter<'_>,
        m: &mut Module,
        one: Value,
        step: Value,
        beta: f64,
    ) -> Result<Option<Value>, Diagnostic> {
        if beta == 0.0 {
            return Ok(None);
        }
        let t_ln = e.scale(m, step, beta.ln())?;
        let pow = e.unary(m, T::Exp, t_ln)?;
        Ok(Some(e.binary(m, T::Sub, one, pow)?))
    }

    /// `extra` holds `m_A, v_A, ..., step`.
    fn adamw(
        &self,
        e: &mut Emitter<'_>,
        m: &mut Module,
        wrt: &[usize],
        extra: &[Value],
        args: &[Value],
        grads: &[Value],
    ) -> Result<Updates, Diagnostic> {
        let step =
            *extra.last().ok_or_else(|| super::emit::internal(e.span, "no step argument"))?;
        let scalar = m.value_type(step).clone();
        let one = e.constant(m, 1.0, scalar.clone())?;
        let eps = e.constant(m, self.eps, scalar)?;
        let c1 = Self::correction(e, m, one, step, self.beta1)?;
        let c2 = Self::correction(e, m, one, step, self.beta2)?;
        let (mut new_params, mut moments) = (Vec::new(), Vec::new());
        for (k, (&i, &g)) in wrt.iter().zip(grads).enumerate() {
            let (m0, v0) = (extra[2 * k], extra[2 * k + 1]);
            let a = e.scale(m, m0, self.beta1)?;
            let b = e.scale(m, g, 1.0 - self.beta1)?;
            let m1 = e.binary(m, T::Add, a, b)?;
            let g2 = e.binary(m, T::Mul, g, g)?;
            let a = e.scale(m, v0, self.beta2)?;
            let b = e.scale(m, g2, 1.0 - self.beta2)?;
            let v1 = e.binary(m, T::Add, a, b)?;
            let m_hat = match c1 {
                Some(c) => e.binary(m, T::Div, m1, c)?,
                None => m1,
            };
            let v_hat = match c2 {
                Some(c) => e.binary(m, T::Div, v1, c)?,
                None => v1,
            };
            let root = e.unary(m, T::Sqrt, v_hat)?;
            let den = e.binary(m, T::Add, root, eps)?;
            let u = e.binary(m, T::Div, m_hat, den)?;
            new_params.push(self.apply(e, m, args[i], u)?);
            for (v, prefix) in [(m1, "m"), (v1, "v")] {
                if let Some(name) = m.value(args[i]).name.clone() {
                    m.set_value_name(v, format!("{prefix}_{name}_new"));
                }
            }
            moments.push(m1);
            moments.push(v1);
        }
        Ok((new_params, moments))
    }
}

//! The meaning of one `memory.launch`: compiled maps and payloads, and [`run_kernel`].

use fbc_dialects::memory::scalar::{apply_bin, apply_un, fmax_nan, round_f16};
use fbc_dialects::memory::{Combine, Kernel, MemType, Scalar, ScalarUn, ScalarValue, StorageKind};
use fbc_index::{Expr, IndexMap};
use fbc_ir::attr::BinOp;
use fbc_ir::ElemType;

use super::storage::MemData;

// ----- compiled index maps -------------------------------------------------------------------------

/// One map result, compiled: a dot product with the domain index when the expression is linear,
/// else an expression tree over dimension positions.
#[derive(Debug, Clone)]
enum CompiledExpr {
    Linear { coeffs: Vec<i64>, constant: i64 },
    Tree(Tree),
}

#[derive(Debug, Clone)]
enum Tree {
    Dim(usize),
    Const(i64),
    Neg(Box<Tree>),
    Bin(BinOp, Box<Tree>, Box<Tree>),
}

impl Tree {
    fn eval(&self, idx: &[i64]) -> Option<i64> {
        match self {
            Tree::Dim(k) => idx.get(*k).copied(),
            Tree::Const(c) => Some(*c),
            Tree::Neg(a) => a.eval(idx)?.checked_neg(),
            Tree::Bin(op, a, b) => op.apply(a.eval(idx)?, b.eval(idx)?),
        }
    }

    /// `(coeffs, constant)` when the tree is linear in the dimensions.
    fn linear(&self, rank: usize) -> Option<(Vec<i64>, i64)> {
        match self {
            Tree::Dim(k) => {
                let mut c = vec![0; rank];
                c[*k] = 1;
                Some((c, 0))
            }
            Tree::Const(v) => Some((vec![0; rank], *v)),
            Tree::Neg(a) => {
                let (c, k) = a.linear(rank)?;
                Some((c.iter().map(|x| x.checked_neg()).collect::<Option<_>>()?, k.checked_neg()?))
            }
            Tree::Bin(op @ (BinOp::Add | BinOp::Sub), a, b) => {
                let (ca, ka) = a.linear(rank)?;
                let (cb, kb) = b.linear(rank)?;
                let f = |x: i64, y: i64| {
                    if *op == BinOp::Add {
                        x.checked_add(y)
                    } else {
                        x.checked_sub(y)
                    }
                };
                let c = ca.iter().zip(&cb).map(|(&x, &y)| f(x, y)).collect::<Option<_>>()?;
                Some((c, f(ka, kb)?))
            }
            Tree::Bin(BinOp::Mul, a, b) => {
                let (ca, ka) = a.linear(rank)?;
                let (cb, kb) = b.linear(rank)?;
                // One side must be constant.
                let (c, k, s) = if ca.iter().all(|&x| x == 0) {
                    (cb, kb, ka)
                } else if cb.iter().all(|&x| x == 0) {
                    (ca, ka, kb)
                } else {
                    return None;
                };
                Some((
                    c.iter().map(|x| x.checked_mul(s)).collect::<Option<_>>()?,
                    k.checked_mul(s)?,
                ))
            }
            Tree::Bin(..) => None,
        }
    }
}

fn compile_tree(e: &Expr, dims: &[String]) -> Result<Tree, String> {
    Ok(match e {
        Expr::Var(v) => Tree::Dim(
            dims.iter().position(|d| d == v).ok_or_else(|| format!("unknown dimension `{v}`"))?,
        ),
        Expr::Const(c) => Tree::Const(*c),
        Expr::Neg(a) => Tree::Neg(Box::new(compile_tree(a, dims)?)),
        Expr::Bin(op, a, b) => {
            Tree::Bin(*op, Box::new(compile_tree(a, dims)?), Box::new(compile_tree(b, dims)?))
        }
    })
}

impl CompiledExpr {
    fn new(e: &Expr, dims: &[String]) -> Result<CompiledExpr, String> {
        let t = compile_tree(e, dims)?;
        Ok(match t.linear(dims.len()) {
            // Linear forms are evaluated with checked arithmetic too; extents are checked below.
            Some((coeffs, constant)) => CompiledExpr::Linear { coeffs, constant },
            None => CompiledExpr::Tree(t),
        })
    }

    #[inline]
    fn eval(&self, idx: &[i64]) -> Option<i64> {
        match self {
            CompiledExpr::Linear { coeffs, constant } => {
                let mut acc = *constant;
                for (&c, &i) in coeffs.iter().zip(idx) {
                    acc = acc.checked_add(c.checked_mul(i)?)?;
                }
                Some(acc)
            }
            CompiledExpr::Tree(t) => t.eval(idx),
        }
    }
}

/// An operand's map, compiled, with its storage geometry.
#[derive(Debug, Clone)]
struct OperandMap {
    results: Vec<CompiledExpr>,
    ty: MemType,
}

impl OperandMap {
    /// The element offset the map sends `idx` to; `Err` when undefined or out of storage.
    #[inline]
    fn offset(&self, idx: &[i64], k: usize) -> Result<usize, String> {
        let undefined = || format!("the map of operand {k} is undefined at {idx:?}");
        match self.ty.storage {
            StorageKind::Buffer { elems } => {
                let o = self.results[0].eval(idx).ok_or_else(undefined)?;
                if o < 0 || o as u64 >= elems {
                    return Err(format!(
                        "operand {k} ({}) accessed at element {o}, outside its {elems} elements (domain index {idx:?})",
                        self.ty
                    ));
                }
                Ok(o as usize)
            }
            StorageKind::Image { width, height } => {
                let x = self.results[0].eval(idx).ok_or_else(undefined)?;
                let y = self.results[1].eval(idx).ok_or_else(undefined)?;
                let c = self.results[2].eval(idx).ok_or_else(undefined)?;
                if x < 0 || y < 0 || !(0..4).contains(&c) || x as u64 >= width || y as u64 >= height
                {
                    return Err(format!(
                        "operand {k} ({}) accessed at texel ({x}, {y}) channel {c}, outside the image (domain index {idx:?})",
                        self.ty
                    ));
                }
                Ok(((y as u64 * width + x as u64) * 4 + c as u64) as usize)
            }
        }
    }
}

/// `m` with its symbols replaced by `values` (in order), a map of the dimensions only.
fn bind_symbols(m: &IndexMap, values: &[i64]) -> IndexMap {
    if m.symbols.is_empty() {
        return m.clone();
    }
    let subst: std::collections::HashMap<String, Expr> =
        m.symbols.iter().cloned().zip(values.iter().map(|&v| Expr::Const(v))).collect();
    IndexMap {
        dims: m.dims.clone(),
        symbols: Vec::new(),
        results: m.results.iter().map(|e| e.substitute_all(&subst)).collect(),
    }
}

fn compile_map(m: &IndexMap, ty: MemType) -> Result<OperandMap, String> {
    let results =
        m.results.iter().map(|e| CompiledExpr::new(e, &m.dims)).collect::<Result<Vec<_>, _>>()?;
    if results.len() != ty.coords() {
        return Err(format!("a map of {} results for {ty}", results.len()));
    }
    Ok(OperandMap { results, ty })
}

// ----- compiled scalar expressions -----------------------------------------------------------------

/// A stack-machine instruction of a compiled [`Scalar`].
#[derive(Debug, Clone, Copy)]
enum Instr {
    Const(ScalarValue),
    In(usize),
    /// Pops an offset.
    Load(usize),
    Dim(usize),
    Stat(usize),
    Acc,
    Un(ScalarUn),
    Bin(fbc_dialects::memory::ScalarBin),
    /// Pops a condition; jumps when it is false.
    JumpIfFalse(usize),
    Jump(usize),
}

#[derive(Debug, Clone, Default)]
struct Program {
    code: Vec<Instr>,
    max_stack: usize,
}

impl Program {
    fn new(e: &Scalar) -> Program {
        let mut p = Program::default();
        let mut depth = 0usize;
        p.emit(e, &mut depth);
        p
    }

    fn push(&mut self, i: Instr, depth: &mut usize, delta: isize) {
        self.code.push(i);
        *depth = depth.saturating_add_signed(delta);
        self.max_stack = self.max_stack.max(*depth);
    }

    fn emit(&mut self, e: &Scalar, depth: &mut usize) {
        match e {
            Scalar::Float(v) => self.push(Instr::Const(ScalarValue::F32(*v as f32)), depth, 1),
            Scalar::Int(v) => self.push(Instr::Const(ScalarValue::Int(*v)), depth, 1),
            Scalar::In(k) => self.push(Instr::In(*k), depth, 1),
            Scalar::Load(k, off) => {
                self.emit(off, depth);
                self.push(Instr::Load(*k), depth, 0);
            }
            Scalar::Dim(k) => self.push(Instr::Dim(*k), depth, 1),
            Scalar::Stat(k) => self.push(Instr::Stat(*k), depth, 1),
            Scalar::Acc => self.push(Instr::Acc, depth, 1),
            Scalar::Un(op, a) => {
                self.emit(a, depth);
                self.push(Instr::Un(*op), depth, 0);
            }
            Scalar::Bin(op, a, b) => {
                self.emit(a, depth);
                self.emit(b, depth);
                self.push(Instr::Bin(*op), depth, -1);
            }
            Scalar::Select(c, a, b) => {
                self.emit(c, depth);
                let jf = self.code.len();
                self.push(Instr::JumpIfFalse(0), depth, -1);
                let before = *depth;
                self.emit(a, depth);
                let j = self.code.len();
                self.push(Instr::Jump(0), depth, 0);
                *depth = before;
                let else_at = self.code.len();
                self.emit(b, depth);
                let end = self.code.len();
                self.code[jf] = Instr::JumpIfFalse(else_at);
                self.code[j] = Instr::Jump(end);
            }
        }
    }
}

/// Everything a point's evaluation reads.
struct Ctx<'a> {
    maps: &'a [OperandMap],
    data: &'a [&'a MemData],
    idx: &'a [i64],
    acc: ScalarValue,
    /// The row statistics computed so far (a row kernel).
    stats: &'a [f32],
    /// Per operand: whether its element offset at `idx` is `cur` (a linear buffer map, kept up
    /// to date incrementally).
    fast: &'a [bool],
    cur: &'a [i64],
}

impl Program {
    fn run(&self, cx: &Ctx<'_>, stack: &mut Vec<ScalarValue>) -> Result<ScalarValue, String> {
        stack.clear();
        let mut pc = 0;
        let pop = |s: &mut Vec<ScalarValue>| s.pop().ok_or("internal: stack underflow");
        while let Some(&i) = self.code.get(pc) {
            pc += 1;
            match i {
                Instr::Const(v) => stack.push(v),
                Instr::In(k) if cx.fast[k] => {
                    let o = cx.cur[k];
                    let v = usize::try_from(o).ok().and_then(|o| cx.data[k].get(o));
                    // Out of range: the general path builds the message.
                    let v = match v {
                        Some(v) => v,
                        None => {
                            let o = cx.maps[k].offset(cx.idx, k)?;
                            cx.data[k].get(o).ok_or("internal: offset past storage")?
                        }
                    };
                    stack.push(v);
                }
                Instr::In(k) => {
                    let o = cx.maps[k].offset(cx.idx, k)?;
                    stack.push(cx.data[k].get(o).ok_or("internal: offset past storage")?);
                }
                Instr::Load(k) => {
                    let off = match pop(stack)? {
                        ScalarValue::Int(o) => o,
                        ScalarValue::F32(_) => {
                            return Err(format!("the offset of x{k}[..] is not an integer"))
                        }
                    };
                    let v = usize::try_from(off).ok().and_then(|o| cx.data[k].get(o)).ok_or_else(
                        || {
                            format!(
                            "x{k}[{off}] is outside operand {k} ({} elements) at domain index {:?}",
                            cx.data[k].len(),
                            cx.idx
                        )
                        },
                    )?;
                    stack.push(v);
                }
                Instr::Dim(k) => stack.push(ScalarValue::Int(cx.idx[k])),
                Instr::Stat(k) => stack.push(ScalarValue::F32(
                    *cx.stats.get(k).ok_or_else(|| format!("`s{k}` read before it is computed"))?,
                )),
                Instr::Acc => stack.push(cx.acc),
                Instr::Un(op) => {
                    let a = pop(stack)?;
                    stack.push(apply_un(op, a)?);
                }
                Instr::Bin(op) => {
                    let b = pop(stack)?;
                    let a = pop(stack)?;
                    stack.push(apply_bin(op, a, b)?);
                }
                Instr::JumpIfFalse(t) => {
                    if !pop(stack)?.truth() {
                        pc = t;
                    }
                }
                Instr::Jump(t) => pc = t,
            }
        }
        Ok(pop(stack)?)
    }
}

/// The values of `k`'s symbols (element 0 of their operands), each checked against its range
/// before anything is written: outside, the launch is an error naming the symbol.
pub(crate) fn symbol_values(k: &Kernel, operands: &[&mut MemData]) -> Result<Vec<i64>, String> {
    let mut values = Vec::with_capacity(k.symbols.len());
    for (j, sym) in k.symbols.iter().enumerate() {
        let v = match operands.get(sym.operand).map(|m| &**m) {
            Some(MemData::I32(d)) => d.first().map(|&v| i64::from(v)),
            _ => None,
        }
        .ok_or_else(|| format!("kernel `{}`: symbol s{j} has no i32 element to read", k.name))?;
        if v < sym.lo || v > sym.hi {
            return Err(format!(
                "kernel `{}`: symbol s{j} (element 0 of operand {}) is {v}, outside {}..={}",
                k.name, sym.operand, sym.lo, sym.hi
            ));
        }
        values.push(v);
    }
    Ok(values)
}

/// Runs one launch with the reference semantics (see the module docs). `types` and `operands`
/// have one entry per operand, inputs then the output; only the output is written.
pub fn run_kernel(
    k: &Kernel,
    types: &[MemType],
    operands: &mut [&mut MemData],
) -> Result<(), String> {
    let n = types.len();
    if operands.len() != n || k.maps.len() != n || n == 0 {
        return Err(format!(
            "kernel `{}`: {} maps, {} types, {} operands",
            k.name,
            k.maps.len(),
            n,
            operands.len()
        ));
    }
    k.check(types).map_err(|e| format!("kernel `{}`: {e}", k.name))?;
    if k.attention.is_some() {
        return super::run_attention(k, types, operands, &mut |sk, t, ops| run_kernel(sk, t, ops));
    }
    for (i, (m, &t)) in operands.iter().zip(types).enumerate() {
        if !m.fits(t) {
            return Err(format!(
                "kernel `{}`: operand {i} holds {} elements, not a {t}",
                k.name,
                m.len()
            ));
        }
    }
    // A map that uses the symbols is then an ordinary map with their values in their places.
    let values = symbol_values(k, operands)?;
    let maps = k
        .maps
        .iter()
        .zip(types)
        .map(|(m, &t)| compile_map(&bind_symbols(m, &values), t))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("kernel `{}`: {e}", k.name))?;
    let guard = match &k.guard {
        Some(g) => Some((
            g.map
                .results
                .iter()
                .map(|e| CompiledExpr::new(e, &g.map.dims))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("kernel `{}`: {e}", k.name))?,
            g.bounds.clone(),
        )),
        None => None,
    };
    let body = Program::new(&k.body);
    let epilogue = k.epilogue.as_ref().map(Program::new);
    // A reduction's statistics (a row kernel's are `Rows::run`'s).
    let side: Vec<(Combine, Program, Option<Program>)> = if k.is_row() {
        Vec::new()
    } else {
        k.stats
            .iter()
            .map(|s| (s.combine, Program::new(&s.body), s.epilogue.as_ref().map(Program::new)))
            .collect()
    };
    let mut side_values = vec![0f32; side.len()];
    // A statistic's value depends only on the parallel indices its payloads read (through an
    // operand's map, or `dN`): it is computed once per distinct value of those and reused (a
    // normalisation moved into a product reads the row, not the output column).
    let stat_dims: Vec<usize> = (0..k.parallel_dims()).filter(|&d| k.stats_read_dim(d)).collect();
    let mut known: std::collections::HashMap<Vec<i64>, Vec<f32>> = Default::default();
    let out = n - 1;
    let np = k.parallel_dims();
    let rank = k.domain.len();
    let domain: Vec<i64> = k
        .domain
        .iter()
        .map(|&d| {
            i64::try_from(d)
                .map_err(|_| format!("kernel `{}`: domain extent {d} too large", k.name))
        })
        .collect::<Result<_, _>>()?;
    if domain[..np].contains(&0) {
        return Ok(()); // No parallel point: nothing is written.
    }
    // An empty reduction leaves every `acc` at the combine's identity.
    let empty_reduction = domain[np..].contains(&0);
    let fail = |e: String| format!("kernel `{}`: {e}", k.name);
    // Reads of the output operand see its contents before the launch.
    let reads_out = k.payloads().any(|e| reads_operand(e, out));
    let (ins, outs) = operands.split_at_mut(out);
    let out_data: &mut MemData = &mut *outs[0];
    let before = if reads_out { Some(out_data.clone()) } else { None };
    let placeholder = MemData::F32(Vec::new());
    let shared: Vec<&MemData> = ins
        .iter()
        .map(|m| &**m)
        .chain(std::iter::once(before.as_ref().unwrap_or(&placeholder)))
        .collect();
    // Linear buffer maps whose offsets cannot overflow anywhere in the domain are tracked
    // incrementally through the reduction loop.
    let lin: Vec<Option<(Vec<i64>, i64)>> =
        maps.iter().map(|m| linear_offsets(m, &domain)).collect();
    let fast: Vec<bool> = lin.iter().map(Option::is_some).collect();
    // `xA * xB` on two f32 buffers with tracked offsets: (A, B, A's data, B's data).
    let product = match &k.body {
        Scalar::Bin(fbc_dialects::memory::ScalarBin::Mul, x, y) => match (&**x, &**y) {
            (Scalar::In(a), Scalar::In(b)) if fast[*a] && fast[*b] => {
                match (shared[*a], shared[*b]) {
                    (MemData::F32(da), MemData::F32(db)) => Some((*a, *b, da, db)),
                    _ => None,
                }
            }
            _ => None,
        },
        _ => None,
    };
    let mut cur = vec![0i64; n];
    let mut rcur = vec![0i64; n];
    let mut idx = vec![0i64; rank];
    let mut ridx = vec![0i64; rank];
    let depth = body.max_stack.max(epilogue.as_ref().map_or(0, |e| e.max_stack));
    let mut stack = Vec::with_capacity(depth + 1);
    let out_int = types[out].elem == ElemType::I32;
    let out_half = types[out].is_half();
    let zero = if out_int { ScalarValue::Int(0) } else { ScalarValue::F32(0.0) };
    let store = |out_data: &mut MemData, o: usize, value: ScalarValue| -> Result<(), String> {
        match (out_data, value) {
            (MemData::F32(d), v) if out_half => d[o] = round_f16(v.as_f32()),
            (MemData::F32(d), v) => d[o] = v.as_f32(),
            (MemData::I32(d), ScalarValue::Int(v)) => d[o] = v as i32,
            (MemData::I32(_), ScalarValue::F32(_)) => {
                return Err("an f32 value for an i32 output".into())
            }
            // The verifier refuses a launch writing an i8 buffer.
            (MemData::I8(_), _) => return Err("a launch writing an i8 buffer".into()),
        }
        Ok(())
    };
    if k.is_row() {
        let rows = Rows { maps: &maps, data: &shared, fast: &fast, lin: &lin, domain: &domain, np };
        return rows.run(k, guard.as_ref(), &mut *out_data, &store, zero).map_err(fail);
    }
    loop {
        // One parallel point.
        let guarded = guard_holds(guard.as_ref(), &idx).map_err(fail)?;
        for (c, l) in cur.iter_mut().zip(&lin) {
            if let Some((coeffs, c0)) = l {
                *c = c0 + coeffs.iter().zip(&idx).map(|(a, b)| a * b).sum::<i64>();
            }
        }
        let value = if guarded {
            let acc = match k.combine {
                None => {
                    let cx = Ctx {
                        maps: &maps,
                        data: &shared,
                        idx: &idx,
                        acc: zero,
                        stats: &[],
                        fast: &fast,
                        cur: &cur,
                    };
                    body.run(&cx, &mut stack).map_err(fail)?
                }
                Some(c) => {
                    // The statistics first, then the body, each folded over the reduction in
                    // row-major order.
                    let mut acc = c.identity();
                    let key: Option<Vec<i64>> =
                        (!side.is_empty()).then(|| stat_dims.iter().map(|&d| idx[d]).collect());
                    let first = match key.as_ref().and_then(|key| known.get(key)) {
                        Some(v) => {
                            side_values.copy_from_slice(v);
                            side.len()
                        }
                        None => 0,
                    };
                    for i in first..=side.len() {
                        let (comb, prog, product) = match side.get(i) {
                            Some((sc, sbody, _)) => (*sc, sbody, None),
                            None => (c, &body, product),
                        };
                        let mut folded = comb.identity();
                        ridx[..np].copy_from_slice(&idx[..np]);
                        ridx[np..].fill(0);
                        rcur.copy_from_slice(&cur);
                        let mut more = !empty_reduction;
                        while more {
                            let cx = Ctx {
                                maps: &maps,
                                data: &shared,
                                idx: &ridx,
                                acc: zero,
                                stats: &[],
                                fast: &fast,
                                cur: &rcur,
                            };
                            // The product of two f32 buffers (a matmul) skips the stack
                            // machine; an out-of-range offset takes the general path, which
                            // reports it.
                            let product = product.and_then(|(a, b, da, db)| {
                                let x = usize::try_from(rcur[a]).ok().and_then(|o| da.get(o))?;
                                let y = usize::try_from(rcur[b]).ok().and_then(|o| db.get(o))?;
                                Some(x * y)
                            });
                            let v = match product {
                                Some(v) => v,
                                None => prog.run(&cx, &mut stack).map_err(fail)?.as_f32(),
                            };
                            folded = match comb {
                                Combine::Add => folded + v,
                                Combine::Max => fmax_nan(folded, v),
                            };
                            more = step_tracked(&mut ridx, np, &domain, &lin, &mut rcur);
                        }
                        let Some((_, _, epi)) = side.get(i) else {
                            acc = folded;
                            if let (0, Some(key)) = (first, key) {
                                known.insert(key, side_values.clone());
                            }
                            break;
                        };
                        side_values[i] = match epi {
                            Some(e) => {
                                let cx = Ctx {
                                    maps: &maps,
                                    data: &shared,
                                    idx: &idx,
                                    acc: ScalarValue::F32(folded),
                                    stats: &side_values[..i],
                                    fast: &fast,
                                    cur: &cur,
                                };
                                e.run(&cx, &mut stack).map_err(fail)?.as_f32()
                            }
                            None => folded,
                        };
                    }
                    ScalarValue::F32(acc)
                }
            };
            match &epilogue {
                Some(e) => {
                    let cx = Ctx {
                        maps: &maps,
                        data: &shared,
                        idx: &idx,
                        acc,
                        stats: &side_values,
                        fast: &fast,
                        cur: &cur,
                    };
                    e.run(&cx, &mut stack).map_err(fail)?
                }
                None => acc,
            }
        } else {
            zero
        };
        let o = maps[out].offset(&idx, out).map_err(fail)?;
        store(&mut *out_data, o, value).map_err(fail)?;
        if !step(&mut idx[..np], &domain[..np]) {
            break;
        }
    }
    Ok(())
}

/// A compiled guard: its results and their bounds.
type CompiledGuard = (Vec<CompiledExpr>, Vec<u64>);

/// Whether the guard holds at `idx` (no guard: always).
fn guard_holds(guard: Option<&CompiledGuard>, idx: &[i64]) -> Result<bool, String> {
    let Some((g, bounds)) = guard else { return Ok(true) };
    for (e, &b) in g.iter().zip(bounds) {
        let v = e.eval(idx).ok_or_else(|| format!("the guard is undefined at {idx:?}"))?;
        if v < 0 || v as u64 >= b {
            return Ok(false);
        }
    }
    Ok(true)
}

/// What a row kernel's evaluation reads (see `fbc_dialects::memory::kernel`'s module docs).
struct Rows<'a> {
    maps: &'a [OperandMap],
    data: &'a [&'a MemData],
    fast: &'a [bool],
    lin: &'a [Option<(Vec<i64>, i64)>],
    domain: &'a [i64],
    np: usize,
}

impl Rows<'_> {
    /// The tracked offsets at `idx`.
    fn offsets(&self, idx: &[i64], cur: &mut [i64]) {
        for (c, l) in cur.iter_mut().zip(self.lin) {
            if let Some((coeffs, c0)) = l {
                *c = c0 + coeffs.iter().zip(idx).map(|(a, b)| a * b).sum::<i64>();
            }
        }
    }

    /// Every parallel point: its statistics in order, each folded over the row in row-major
    /// order from the combine's identity (then its epilogue), then the body stored at every row
    /// point (zero where the guard fails).
    fn run(
        &self,
        k: &Kernel,
        guard: Option<&CompiledGuard>,
        out_data: &mut MemData,
        store: &dyn Fn(&mut MemData, usize, ScalarValue) -> Result<(), String>,
        zero: ScalarValue,
    ) -> Result<(), String> {
        let (np, rank) = (self.np, self.domain.len());
        let stats: Vec<(Combine, Program, Option<Program>)> = k
            .stats
            .iter()
            .map(|s| (s.combine, Program::new(&s.body), s.epilogue.as_ref().map(Program::new)))
            .collect();
        let body = Program::new(&k.body);
        let mut values = vec![0f32; stats.len()];
        let mut idx = vec![0i64; rank];
        let mut cur = vec![0i64; self.maps.len()];
        let mut stack = Vec::new();
        let out = k.output();
        loop {
            for (i, (c, sbody, epi)) in stats.iter().enumerate() {
                idx[np..].fill(0);
                self.offsets(&idx, &mut cur);
                let mut acc = c.identity();
                loop {
                    let cx = self.ctx(&idx, &cur, zero, &values[..i]);
                    let v = sbody.run(&cx, &mut stack)?.as_f32();
                    acc = match c {
                        Combine::Add => acc + v,
                        Combine::Max => fmax_nan(acc, v),
                    };
                    if !step_tracked(&mut idx, np, self.domain, self.lin, &mut cur) {
                        break;
                    }
                }
                values[i] = match epi {
                    Some(e) => {
                        idx[np..].fill(0);
                        self.offsets(&idx, &mut cur);
                        let cx = self.ctx(&idx, &cur, ScalarValue::F32(acc), &values[..i]);
                        e.run(&cx, &mut stack)?.as_f32()
                    }
                    None => acc,
                };
            }
            idx[np..].fill(0);
            self.offsets(&idx, &mut cur);
            loop {
                let value = if guard_holds(guard, &idx)? {
                    body.run(&self.ctx(&idx, &cur, zero, &values), &mut stack)?
                } else {
                    zero
                };
                let o = self.maps[out].offset(&idx, out)?;
                store(out_data, o, value)?;
                if !step_tracked(&mut idx, np, self.domain, self.lin, &mut cur) {
                    break;
                }
            }
            idx[np..].fill(0);
            if !step(&mut idx[..np], &self.domain[..np]) {
                return Ok(());
            }
        }
    }

    fn ctx<'c>(
        &'c self,
        idx: &'c [i64],
        cur: &'c [i64],
        acc: ScalarValue,
        stats: &'c [f32],
    ) -> Ctx<'c> {
        Ctx { maps: self.maps, data: self.data, idx, acc, stats, fast: self.fast, cur }
    }
}

/// `(coefficients, constant)` of a buffer map that is linear in the domain indices and whose
/// value cannot overflow anywhere in the domain box (so incremental updates are exact).
fn linear_offsets(m: &OperandMap, domain: &[i64]) -> Option<(Vec<i64>, i64)> {
    let (StorageKind::Buffer { .. }, [CompiledExpr::Linear { coeffs, constant }]) =
        (m.ty.storage, m.results.as_slice())
    else {
        return None;
    };
    // The extremes of a linear form over the box are sums of per-dimension extremes.
    let (mut lo, mut hi) = (*constant, *constant);
    for (&c, &e) in coeffs.iter().zip(domain) {
        let end = c.checked_mul(e.checked_sub(1)?)?;
        lo = lo.checked_add(end.min(0))?;
        hi = hi.checked_add(end.max(0))?;
    }
    Some((coeffs.clone(), *constant))
}

/// [`step`] over the reduction dimensions `np..` of `idx`, updating the tracked offsets.
#[inline]
fn step_tracked(
    idx: &mut [i64],
    np: usize,
    extents: &[i64],
    lin: &[Option<(Vec<i64>, i64)>],
    cur: &mut [i64],
) -> bool {
    for k in (np..idx.len()).rev() {
        idx[k] += 1;
        if idx[k] < extents[k] {
            for (c, l) in cur.iter_mut().zip(lin) {
                if let Some((coeffs, _)) = l {
                    *c += coeffs[k];
                }
            }
            return true;
        }
        for (c, l) in cur.iter_mut().zip(lin) {
            if let Some((coeffs, _)) = l {
                *c -= coeffs[k] * (extents[k] - 1);
            }
        }
        idx[k] = 0;
    }
    false
}

/// Whether `e` reads operand `k`.
fn reads_operand(e: &Scalar, k: usize) -> bool {
    let mut found = false;
    e.visit(&mut |s| {
        if matches!(s, Scalar::In(j) | Scalar::Load(j, _) if *j == k) {
            found = true;
        }
    });
    found
}

/// Steps a row-major index over `extents`; false (and all zeros) after the last one.
#[inline]
fn step(idx: &mut [i64], extents: &[i64]) -> bool {
    for k in (0..idx.len()).rev() {
        idx[k] += 1;
        if idx[k] < extents[k] {
            return true;
        }
        idx[k] = 0;
    }
    false
}

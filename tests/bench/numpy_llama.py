#!/usr/bin/env python3
# A NumPy (OpenBLAS, f32) reference for one Llama 3.2 1B layer's LoRA training step: the
# computation of `@loss_grad` in `fbc gen llama3.2-1b --layers 1 --seq S --vocab 512
# --lora-rank 8 --training` (docs/models.md), forward and a hand-written backward to the twelve
# LoRA matrices, with the module's arguments (names, shapes, [in, out] weights, additive
# [S, S] mask, [S, 64] RoPE tables, pre-shifted i32 labels) and its results in its order (loss,
# then d(A), d(B) of q, k, v, gate, up, down). Attention runs GQA without copying K and V to
# all heads: the 4 query heads of a K/V head are stacked as rows of one product.
#   --seq S (128)  --repeat N (5): time N steps after one warm-up, print each and the median
#   --threads T: OPENBLAS_NUM_THREADS (set before NumPy loads)
#   --check FBC: also run `FBC gen` + `FBC run --target cpu-llvm` on the same inputs and compare
#     the loss and every gradient (relative error norm ≤ --tol, 1e-3); exit 1 on a mismatch
# OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE, where set on this machine, slow OpenBLAS: time with both
# unset (tests/bench/cpu_llama.sh does); the kernel in use is printed when threadpoolctl is there.
import argparse, os, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--seq", type=int, default=128)
ap.add_argument("--repeat", type=int, default=5)
ap.add_argument("--threads", type=int)
ap.add_argument("--check", metavar="FBC")
ap.add_argument("--target", default="cpu-llvm", help="fbc's target for --check")
ap.add_argument("--tol", type=float, default=1e-3)
ap.add_argument("--seed", type=int, default=0)
args = ap.parse_args()
if args.threads:
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
import numpy as np

D, H, KV, HD, F, V, R, EPS, LORA = 2048, 32, 8, 64, 8192, 512, 8, 1e-5, 2.0
G = H // KV
f32 = np.float32
LORA_OF = [("wq", D, D), ("wk", D, KV * HD), ("wv", D, KV * HD), ("wg", D, F), ("wu", D, F),
           ("wd", F, D)]


def inputs(S, seed):
    """The arguments of @loss_grad, by name (l0_ prefixes as fbc gen names them)."""
    rng = np.random.default_rng(seed)
    n = lambda *sh, s=0.02: (rng.standard_normal(sh, dtype=f32) * f32(s)).astype(f32)
    a = {"tokens": rng.integers(0, V, (1, S), dtype=np.int32),
         "labels": rng.integers(0, V, (1, S), dtype=np.int32),
         "mask": np.triu(np.full((S, S), -1e9, f32), 1)}
    inv = 500000.0 ** (-np.arange(0, HD, 2) / HD)
    ang = np.outer(np.arange(S), inv)
    a["rope_cos"] = np.concatenate([np.cos(ang)] * 2, -1).astype(f32)
    a["rope_sin"] = np.concatenate([np.sin(ang)] * 2, -1).astype(f32)
    a["embed"] = n(V, D)
    a["l0_attn_norm"] = 1 + n(D, s=0.1)
    for w, i, o in LORA_OF[:3]:
        a[f"l0_{w}"], a[f"l0_{w}_lora_a"], a[f"l0_{w}_lora_b"] = n(i, o), n(i, R), n(R, o)
    a["l0_wo"] = n(D, D)
    a["l0_mlp_norm"] = 1 + n(D, s=0.1)
    for w, i, o in LORA_OF[3:]:
        a[f"l0_{w}"], a[f"l0_{w}_lora_a"], a[f"l0_{w}_lora_b"] = n(i, o), n(i, R), n(R, o)
    a["final_norm"] = 1 + n(D, s=0.1)
    return a


def rms(x, w):
    r = 1 / np.sqrt((x * x).mean(-1, keepdims=True) + f32(EPS))
    return x * r * w, r


def rms_grad(x, r, w, dy):  # d/dx of x·r·w, r = (mean(x²) + eps)^-½
    g = dy * w
    return r * g - x * (r * r * r) * (g * x).mean(-1, keepdims=True)


def rot_half(x):
    return np.concatenate([-x[..., HD // 2:], x[..., :HD // 2]], -1)


def step(a):
    S = a["tokens"].shape[1]
    cos, sin, mask = a["rope_cos"], a["rope_sin"], a["mask"]
    embed = a["embed"]
    W = lambda n: a[f"l0_{n}"]

    def lora(x, n):  # x·W + (x·A)·B·2, and x·A for the backward
        xa = x @ W(n + "_lora_a")
        return x @ W(n) + (xa @ W(n + "_lora_b")) * f32(LORA), xa

    # Forward. Rows are the S positions (batch 1).
    x0 = embed[a["tokens"][0]]
    h1, r1 = rms(x0, W("attn_norm"))
    q, qa = lora(h1, "wq")
    k, ka = lora(h1, "wk")
    v, va = lora(h1, "wv")
    qh = q.reshape(S, H, HD).transpose(1, 0, 2)
    kh = k.reshape(S, KV, HD).transpose(1, 0, 2)
    vh = np.ascontiguousarray(v.reshape(S, KV, HD).transpose(1, 0, 2))
    qr = (qh * cos + rot_half(qh) * sin).reshape(KV, G * S, HD)  # head kv·G + g
    kr = kh * cos + rot_half(kh) * sin
    sc = (qr @ kr.transpose(0, 2, 1)).reshape(KV, G, S, S) * f32(HD ** -0.5) + mask
    sc = np.exp(sc - sc.max(-1, keepdims=True))
    p = (sc / sc.sum(-1, keepdims=True)).reshape(KV, G * S, S)
    ctx = (p @ vh).reshape(H, S, HD).transpose(1, 0, 2).reshape(S, D)
    x1 = x0 + ctx @ W("wo")
    h2, r2 = rms(x1, W("mlp_norm"))
    gate, ga = lora(h2, "wg")
    up, ua = lora(h2, "wu")
    with np.errstate(over="ignore"):
        sig = 1 / (1 + np.exp(-gate))
    act = gate * sig
    gated = act * up
    down, da = lora(gated, "wd")
    x2 = x1 + down
    hf, rf = rms(x2, a["final_norm"])
    logits = hf @ embed.T
    m = logits.max(-1, keepdims=True)
    e = np.exp(logits - m)
    se = e.sum(-1, keepdims=True)
    lab = a["labels"][0]
    rows = np.arange(S)
    loss = np.mean(np.log(se[:, 0]) + m[:, 0] - logits[rows, lab], dtype=f32)

    # Backward, only what reaches a LoRA matrix.
    grads = {}

    def lora_grad(x, xa, dy, n):  # y = x·W + (x·A)·B·2: d(A), d(B), and d(x·A)
        dxab = dy * f32(LORA)
        dxa = dxab @ W(n + "_lora_b").T
        grads[n] = (x.T @ dxa, xa.T @ dxab)
        return dxa

    dlog = e / se
    dlog[rows, lab] -= 1
    dlog *= f32(1 / S)
    dx2 = rms_grad(x2, rf, a["final_norm"], dlog @ embed)
    dda = lora_grad(gated, da, dx2, "wd")
    dgated = dx2 @ W("wd").T + dda @ W("wd_lora_a").T
    dup = dgated * act
    dgate = dgated * up * (sig * (1 + gate * (1 - sig)))
    dua = lora_grad(h2, ua, dup, "wu")
    dga = lora_grad(h2, ga, dgate, "wg")
    dh2 = dup @ W("wu").T + dua @ W("wu_lora_a").T + dgate @ W("wg").T + dga @ W("wg_lora_a").T
    dx1 = dx2 + rms_grad(x1, r2, W("mlp_norm"), dh2)
    dctx = (dx1 @ W("wo").T).reshape(S, H, HD).transpose(1, 0, 2).reshape(KV, G * S, HD)
    dp = dctx @ vh.transpose(0, 2, 1)
    dv = p.transpose(0, 2, 1) @ dctx  # sums over the G query heads of each K/V head
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * f32(HD ** -0.5)
    dq = (ds @ kr).reshape(H, S, HD)
    dk = ds.transpose(0, 2, 1) @ qr
    rope_grad = lambda dy: dy * cos - rot_half(dy * sin)
    merge = lambda t, n: t.transpose(1, 0, 2).reshape(S, n * HD)
    lora_grad(h1, qa, merge(rope_grad(dq), H), "wq")
    lora_grad(h1, ka, merge(rope_grad(dk), KV), "wk")
    lora_grad(h1, va, merge(dv, KV), "wv")
    return [np.asarray(loss, f32)] + [g for n, _, _ in LORA_OF for g in grads[n]]


def check(fbc, S):
    from safetensors.numpy import load_file, save_file
    a = inputs(S, args.seed)
    with tempfile.TemporaryDirectory() as d:
        mod, i, o = f"{d}/l1.fbir", f"{d}/in.safetensors", f"{d}/out.safetensors"
        subprocess.run([fbc, "gen", "llama3.2-1b", "--layers", "1", "--seq", str(S), "--vocab",
                        str(V), "--lora-rank", str(R), "--training", "-o", mod], check=True)
        save_file(a, i)
        subprocess.run([fbc, "run", mod, "--entry", "loss_grad", "--target", args.target,
                        "--inputs", i, "--outputs", o], check=True, stdout=subprocess.DEVNULL)
        got = load_file(o)
    want = step(a)
    names = ["loss"] + [f"d_l0_{n}_lora_{ab}" for n, _, _ in LORA_OF for ab in "ab"]
    assert len(got) == len(want), (sorted(got), len(want))
    worst = 0.0
    for j, (nm, w) in enumerate(zip(names, want)):
        g = got[f"result{j}"]
        assert g.shape == w.shape, (nm, g.shape, w.shape)
        err = float(np.linalg.norm((g - w).astype(np.float64)) / np.linalg.norm(w.astype(np.float64)))
        worst = max(worst, err)
        print(f"  {nm:18} {str(w.shape):12} |ref| {np.linalg.norm(w):10.4g}  rel err {err:.2e}")
    ok = worst <= args.tol
    print(f"check seq {S} ({args.target}): max relative error {worst:.2e} "
          f"({'ok' if ok else 'FAIL'}, tolerance {args.tol:g})")
    return ok


def main():
    S = args.seq
    if args.check and not check(args.check, S):
        sys.exit(1)
    if args.repeat <= 0:
        return
    try:
        import threadpoolctl
        info = threadpoolctl.threadpool_info()
        blas = ", ".join(f"{i['internal_api']} {i.get('architecture')} {i['num_threads']} threads"
                         for i in info)
    except ImportError:
        blas = "threadpoolctl not installed"
    a = inputs(S, args.seed)
    step(a)
    ts = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        step(a)
        ts.append(time.perf_counter() - t)
    print("steps: " + " ".join(f"{t:.4f}" for t in ts))
    print(f"numpy seq {S} ({blas}): median {sorted(ts)[(len(ts) - 1) // 2]:.4f} s "
          f"min {min(ts):.4f} s over {len(ts)} steps")


if __name__ == "__main__":
    main()

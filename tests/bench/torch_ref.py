# Reference timings with PyTorch (cuBLAS) for the shapes fbc bench runs: the three MatMul-FB
# products (o = a·b, da = do·bᵀ, db = aᵀ·do), the MHA configurations (forward only) and MHA C1's
# two attention contractions, the skinny LoRA products of tests/bench/lora_products.fbir, and one
# Llama 3.2 layer's LoRA training step (forward and backward); f32, TF32 off.
import json, torch
from torch_time import t
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"
out = {}
M, K, N = 512, 2048, 8192
a = torch.randn(M, K, device=dev); b = torch.randn(K, N, device=dev); do = torch.randn(M, N, device=dev)
out["matmul_fb_ms"] = t(lambda: (a @ b, do @ b.t(), a.t() @ do))
out["matmul_fb_o_da_ms"] = t(lambda: (a @ b, do @ b.t()))
for nm, fn in [("o", lambda: a @ b), ("da", lambda: do @ b.t()), ("db", lambda: a.t() @ do)]:
    out[f"matmul_fb_{nm}_ms"] = t(fn)
# The LoRA products (rank 8): the same seven contractions as lora_products.fbir.
r = 8
x = torch.randn(512, 2048, device=dev); h = torch.randn(512, 8192, device=dev)
A = torch.randn(2048, r, device=dev); Ad = torch.randn(8192, r, device=dev)
dy = torch.randn(512, 2048, device=dev); dyu = torch.randn(512, 8192, device=dev)
B = torch.randn(r, 2048, device=dev); Bu = torch.randn(r, 8192, device=dev)
xa = torch.randn(512, r, device=dev); dxa = torch.randn(512, r, device=dev)
out["lora_products_ms"] = t(lambda: (x @ A, h @ Ad, dy @ B.t(), dyu @ Bu.t(), xa.t() @ dy,
                                     x.t() @ dxa, h.t() @ dxa))
# Each alone, named as the results of lora_products.fbir.
for nm, fn in [("xa_q", lambda: x @ A), ("xa_down", lambda: h @ Ad), ("dxa_q", lambda: dy @ B.t()),
               ("dxa_up", lambda: dyu @ Bu.t()), ("db_q", lambda: xa.t() @ dy),
               ("da_q", lambda: x.t() @ dxa), ("da_down", lambda: h.t() @ dxa)]:
    out[f"lora_{nm}_ms"] = t(fn)
# The device's copy bandwidth (bytes read + written per second) at the sizes the LoRA products
# read (4 and 16 MB) and large (256 MB): what their bandwidth goal (issue 10) is measured against.
for mb in [4, 16, 256]:
    src = torch.randn(mb * 2**18, device=dev); dst = torch.empty_like(src)
    out[f"copy_{mb}mb_gbps"] = 2 * mb * 2**20 / (t(lambda: dst.copy_(src)) * 1e-3) / 1e9
for name, S, H, D in [("c1", 512, 32, 2048), ("c2", 512, 16, 1024), ("c3", 512, 8, 1024)]:
    x = torch.randn(1, S, D, device=dev); w = [torch.randn(D, D, device=dev) for _ in range(4)]
    hd = D // H
    def mha():
        q, k, v = [(x @ wi).reshape(1, S, H, hd).transpose(1, 2) for wi in w[:3]]
        p = torch.softmax(q @ k.transpose(-1, -2) * hd ** -0.5, dim=-1)
        return (p @ v).transpose(1, 2).reshape(1, S, D) @ w[3]
    out[f"mha_{name}_ms"] = t(mha)
# MHA C1's attention contractions alone (32 heads x 512 x 64, batched): Q·Kᵀ and P·V.
q = torch.randn(32, 512, 64, device=dev); k = torch.randn(32, 512, 64, device=dev)
p = torch.randn(32, 512, 512, device=dev); v = torch.randn(32, 512, 64, device=dev)
out["attn_c1_qk_ms"] = t(lambda: q @ k.transpose(-1, -2))
out["attn_c1_pv_ms"] = t(lambda: p @ v)
# The attention of a 512-token Llama 3.2-1B prefill (32 query heads over 8 key heads, head 64),
# the work of fbc's fused attention launch (h200.sh part flat): RoPE on the queries (the keys
# are rotated where they enter the cache, in fbc as here), the key heads repeated for their 4
# query heads, causal scores, softmax and P·V; eager, and with SDPA on the same rotated inputs.
qh = torch.randn(1, 32, 512, 64, device=dev)
kh, vh = torch.randn(1, 8, 512, 64, device=dev), torch.randn(1, 8, 512, 64, device=dev)
ang = torch.outer(torch.arange(512, device=dev).float(), torch.rand(32, device=dev))
cs, sn = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
causal = torch.full((512, 512), float("-inf"), device=dev).triu(1)
def rot(x): return x * cs + torch.cat([-x[..., 32:], x[..., :32]], -1) * sn
def prefill_attn():
    kk, vv = kh.repeat_interleave(4, 1), vh.repeat_interleave(4, 1)
    s = rot(qh) @ kk.transpose(-1, -2) * 0.125 + causal
    return torch.softmax(s, -1) @ vv
def prefill_sdpa():
    kk, vv = kh.repeat_interleave(4, 1), vh.repeat_interleave(4, 1)
    return torch.nn.functional.scaled_dot_product_attention(rot(qh), kk, vv, is_causal=True)
out["attn_prefill_eager_ms"] = t(prefill_attn)
out["attn_prefill_sdpa_ms"] = t(prefill_sdpa)
# One Llama 3.2 1B layer's LoRA training step as `fbc gen llama3.2-1b --layers 1 --seq 512
# --vocab 512 --lora-rank 8 --training` builds it (docs/models.md): embedding, RMSNorm, Q/K/V with
# LoRA (scale 2), RoPE from tables, GQA 32/8, causal additive mask, softmax, O, residual,
# RMSNorm, SiLU-gated MLP with LoRA on gate/up/down, residual, final RMSNorm, tied head, mean
# cross-entropy; forward and backward to the LoRA matrices (eager, the frozen weights without
# gradients).
S, D, H, KV, HD, F, V, R = 512, 2048, 32, 8, 64, 8192, 512, 8
g = lambda *sh, s=0.02, grad=False: (torch.randn(*sh, device=dev) * s).requires_grad_(grad)
embed, tokens = g(V, D), torch.randint(0, V, (1, S), device=dev)
labels = torch.randint(0, V, (1, S), device=dev)
n1, n2, nf = g(D, s=1.0), g(D, s=1.0), g(D, s=1.0)
W = {n: g(i, o) for n, i, o in [("q", D, D), ("k", D, KV * HD), ("v", D, KV * HD), ("o", D, D),
                                   ("gate", D, F), ("up", D, F), ("down", F, D)]}
L = {n: (g(W[n].shape[0], R, grad=True), g(R, W[n].shape[1], grad=True))
     for n in ["q", "k", "v", "gate", "up", "down"]}
ang = torch.outer(torch.arange(S, device=dev).float(), torch.rand(HD // 2, device=dev))
cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
mask = torch.full((S, S), -1e9, device=dev).triu(1)
def rms(x, w): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w
def lin(x, n): return x @ W[n] + (x @ L[n][0]) @ L[n][1] * 2.0 if n in L else x @ W[n]
def rope(x):
    x1, x2 = x[..., :HD // 2], x[..., HD // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin
def step():
    x = embed[tokens]
    h = rms(x, n1)
    q = rope(lin(h, "q").view(1, S, H, HD).transpose(1, 2))
    k = rope(lin(h, "k").view(1, S, KV, HD).transpose(1, 2)).repeat_interleave(H // KV, 1)
    v = lin(h, "v").view(1, S, KV, HD).transpose(1, 2).repeat_interleave(H // KV, 1)
    p = torch.softmax(q @ k.transpose(-1, -2) * HD ** -0.5 + mask, -1)
    x = x + lin((p @ v).transpose(1, 2).reshape(1, S, D), "o")
    h = rms(x, n2)
    x = x + lin(torch.nn.functional.silu(lin(h, "gate")) * lin(h, "up"), "down")
    logits = rms(x, nf) @ embed.t()
    loss = torch.nn.functional.cross_entropy(logits.view(S, V), labels.view(S))
    return torch.autograd.grad(loss, [t for ab in L.values() for t in ab])
out["llama_step_ms"] = t(step)
out["device"] = torch.cuda.get_device_name(0)
print(json.dumps(out, indent=1))

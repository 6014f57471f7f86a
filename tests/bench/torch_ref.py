# Reference timings with PyTorch (cuBLAS) for the shapes fbc bench runs: the three MatMul-FB
# products (o = a·b, da = do·bᵀ, db = aᵀ·do), the MHA configurations (forward only), and the
# skinny LoRA products of tests/bench/lora_products.fbir; f32, TF32 off.
import json, torch
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"
def t(fn, reps=20):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(reps):
        s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    ts.sort(); return ts[len(ts)//2]
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
for name, S, H, D in [("c1", 512, 32, 2048), ("c2", 512, 16, 1024), ("c3", 512, 8, 1024)]:
    x = torch.randn(1, S, D, device=dev); w = [torch.randn(D, D, device=dev) for _ in range(4)]
    hd = D // H
    def mha():
        q, k, v = [(x @ wi).reshape(1, S, H, hd).transpose(1, 2) for wi in w[:3]]
        p = torch.softmax(q @ k.transpose(-1, -2) * hd ** -0.5, dim=-1)
        return (p @ v).transpose(1, 2).reshape(1, S, D) @ w[3]
    out[f"mha_{name}_ms"] = t(mha)
out["device"] = torch.cuda.get_device_name(0)
print(json.dumps(out, indent=1))

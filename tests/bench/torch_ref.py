# Reference timings with PyTorch (cuBLAS) for the shapes fbc bench runs: the Fig. 16 MatMul
# pair and the MHA configurations (forward only, f32, TF32 off).
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
out["matmul_fb_ms"] = t(lambda: (a @ b, do @ b.t()))
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

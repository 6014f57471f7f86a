# PyTorch reference for issue 14's decode goal: one Llama 3.2-1B decode step (16 layers, hidden
# 2048, 32 query heads and 8 key/value heads of 64, MLP 8192, vocabulary 128256, tied head) with a
# static KV cache of 2048 positions per layer written in place at the position, eager FP32 (TF32
# off), random weights; the step at each position of POSITIONS (argv, default 2047 127). Two forms
# of attention: matmul + softmax + matmul over the cache up to the position (what eager code
# writes), and torch's scaled_dot_product_attention over the same keys; and the copy bandwidth. Prints JSON.
import json, sys, torch
from torch_time import t
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"
L, D, H, KV, HD, F, V, M = 16, 2048, 32, 8, 64, 8192, 128256, 2048
G = H // KV
with torch.no_grad():
    r = lambda *sh, s=0.02: torch.randn(*sh, device=dev) * s
    embed = r(V, D)
    layers = [dict(n1=r(D, s=1.0), q=r(D, D), k=r(D, KV * HD), v=r(D, KV * HD), o=r(D, D),
                   n2=r(D, s=1.0), gate=r(D, F), up=r(D, F), down=r(F, D)) for _ in range(L)]
    nf = r(D, s=1.0)
    kc = [torch.zeros(1, KV, M, HD, device=dev) for _ in range(L)]
    vc = [torch.zeros(1, KV, M, HD, device=dev) for _ in range(L)]
    inv = 1.0 / (500000.0 ** (torch.arange(0, HD, 2, device=dev).float() / HD))
    def rms(x, w): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w
    def rope(x, pos):
        ang = pos * inv
        cos, sin = torch.cat([ang.cos()] * 2), torch.cat([ang.sin()] * 2)
        x1, x2 = x[..., :HD // 2], x[..., HD // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin
    def step(token, pos, sdpa):
        x = embed[token].view(1, 1, D)
        for i, w in enumerate(layers):
            h = rms(x, w["n1"])
            q = rope((h @ w["q"]).view(1, 1, H, HD).transpose(1, 2), pos)
            k = rope((h @ w["k"]).view(1, 1, KV, HD).transpose(1, 2), pos)
            v = (h @ w["v"]).view(1, 1, KV, HD).transpose(1, 2)
            kc[i][:, :, pos:pos + 1] = k
            vc[i][:, :, pos:pos + 1] = v
            keys, vals = kc[i][:, :, :pos + 1], vc[i][:, :, :pos + 1]
            if sdpa:
                ke = keys.repeat_interleave(G, 1); ve = vals.repeat_interleave(G, 1)
                a = torch.nn.functional.scaled_dot_product_attention(q, ke, ve)
            else:
                qg = q.reshape(1, KV, G, 1, HD)
                s = qg @ keys.unsqueeze(2).transpose(-1, -2) * HD ** -0.5
                a = (torch.softmax(s, -1) @ vals.unsqueeze(2)).reshape(1, H, 1, HD)
            x = x + a.transpose(1, 2).reshape(1, 1, D) @ w["o"]
            h = rms(x, w["n2"])
            x = x + (torch.nn.functional.silu(h @ w["gate"]) * (h @ w["up"])) @ w["down"]
        return rms(x, nf) @ embed.t()
    out = {"device": torch.cuda.get_device_name(0)}
    # The device's copy bandwidth (bytes read plus bytes written by a 1 GiB device-to-device
    # copy per second): the bound of issue 14's decode goal divides the bytes a step reads by it.
    src, dst = torch.empty(1 << 28, device=dev), torch.empty(1 << 28, device=dev)
    out["copy_gbps"] = 2 * src.numel() * 4 / t(lambda: dst.copy_(src)) / 1e6
    del src, dst
    for pos in [int(p) for p in (sys.argv[1:] or ["2047", "127"])]:
        out[f"llama_decode_pos{pos}_ms"] = t(lambda: step(3, pos, False))
        out[f"llama_decode_pos{pos}_sdpa_ms"] = t(lambda: step(3, pos, True))
    print(json.dumps(out, indent=1))

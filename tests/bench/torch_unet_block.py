# The PyTorch reference of `fbc gen sd1.5-down-block --training` (part `unet` of h200.sh): Stable
# Diffusion 1.5's first down block (a ResNet block and a transformer block with self- and
# cross-attention and a GEGLU feed-forward at 64x64x320, batch 2, LoRA rank 8 on q, k, v, out of
# both attentions), forward + backward of the same MSE loss, FP32 with TF32 off (cuDNN for the
# convolutions, cuBLAS for the products), eager mode. Prints one JSON object: ms per step, the
# median of 20 after warm-up (torch_time.t).
import json
import sys

import torch
import torch.nn.functional as F

from torch_time import t

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"
B, C, L, R = 2, 320, 64, 8
if len(sys.argv) > 1:
    B, C, L = (int(v) for v in sys.argv[1:4])
HEADS, TEXT, CTX = 8, 77, 768
g = torch.Generator(device=dev).manual_seed(0)


def w(*shape, scale=0.02):
    return (torch.randn(*shape, device=dev, generator=g) * scale)


def lora(din, dout):
    return (w(din, R).requires_grad_(), w(R, dout).requires_grad_())


class Linear:
    def __init__(self, din, dout, bias, adapter):
        self.w, self.b = w(dout, din), (w(dout) if bias else None)
        self.ab = lora(din, dout) if adapter else None

    def __call__(self, x):
        y = F.linear(x, self.w, self.b)
        if self.ab:
            a, b = self.ab
            y = y + (x @ a) @ b * 2.0
        return y


conv1, conv2 = (w(C, C, 3, 3), w(C)), (w(C, C, 3, 3), w(C))
time_proj = Linear(4 * C, C, True, False)
proj_in, proj_out = (w(C, C, 1, 1), w(C)), (w(C, C, 1, 1), w(C))
gn = [(w(C) + 1, w(C)) for _ in range(3)]
ln = [(w(C) + 1, w(C)) for _ in range(3)]
attn = [[Linear(C, C, False, True), Linear(k, C, False, True), Linear(k, C, False, True),
         Linear(C, C, True, True)] for k in (C, CTX)]
ff_proj, ff_out = Linear(C, 8 * C, True, False), Linear(4 * C, C, True, False)

x, temb = w(B, C, L, L, scale=1.0), w(B, 4 * C, scale=1.0)
text, target = w(B, TEXT, CTX, scale=1.0), w(B, C, L, L, scale=1.0)


def attention(q_, k_, v_, o_, x, ctx):
    q, k, v = q_(x), k_(ctx), v_(ctx)
    split = lambda t: t.view(B, -1, HEADS, C // HEADS).transpose(1, 2)
    q, k, v = split(q), split(k), split(v)
    p = torch.softmax(q @ k.transpose(-1, -2) * (C // HEADS) ** -0.5, dim=-1)
    return o_((p @ v).transpose(1, 2).reshape(B, -1, C))


def step():
    h = F.conv2d(F.silu(F.group_norm(x, 32, *gn[0], 1e-5)), *conv1, padding=1)
    h = h + time_proj(F.silu(temb))[:, :, None, None]
    h = F.conv2d(F.silu(F.group_norm(h, 32, *gn[1], 1e-5)), *conv2, padding=1)
    r = x + h
    h = F.conv2d(F.group_norm(r, 32, *gn[2], 1e-6), *proj_in)
    t = h.permute(0, 2, 3, 1).reshape(B, L * L, C)
    a = F.layer_norm(t, (C,), *ln[0], 1e-5)
    t = t + attention(*attn[0], a, a)
    a = F.layer_norm(t, (C,), *ln[1], 1e-5)
    t = t + attention(*attn[1], a, text)
    a = F.layer_norm(t, (C,), *ln[2], 1e-5)
    hid, gate = ff_proj(a).chunk(2, dim=-1)
    t = t + ff_out(hid * F.gelu(gate))
    y = F.conv2d(t.reshape(B, L, L, C).permute(0, 3, 1, 2), *proj_out) + r
    loss = ((y - target) ** 2).mean()
    loss.backward()


ms = t(step)
print(json.dumps({"workload": f"sd1.5-down-block B={B} C={C} L={L} rank={R}",
                  "torch_fwd_bwd_ms": ms, "device": torch.cuda.get_device_name()}))

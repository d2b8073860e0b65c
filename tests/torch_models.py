"""Small models built in PyTorch from a config, random weights (no download),
for the ration_torch bridge tests: GPT-2, Llama, and a DiT (a diffusion
transformer: patchified images, adaLN conditioning on the timestep), a
structure `ration model` has no family for. Plain torch ops only, so that
they run on Debian's torch 1.13 and on 2.x alike."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def _attention(q, k, v, causal):
    # q, k, v: [batch, heads, seq, head_dim]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        att = att.masked_fill(mask, float("-inf"))
    return att.softmax(-1) @ v


class GPT2Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(dim)
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.mlp_proj = nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = _attention(q, k, v, causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, vocab=128, seq=32, dim=64, heads=4, layers=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(seq, dim)
        self.h = nn.ModuleList(GPT2Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()   # tied lm head


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotary(x, cos, sin):
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class LlamaBlock(nn.Module):
    def __init__(self, dim, heads, kv_heads, ffn):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.attention_norm = RMSNorm(dim)
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.wv = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.ffn_norm = RMSNorm(dim)
        self.w1 = nn.Linear(dim, ffn, bias=False)
        self.w2 = nn.Linear(ffn, dim, bias=False)
        self.w3 = nn.Linear(dim, ffn, bias=False)

    def forward(self, x, cos, sin):
        b, t, c = x.shape
        h = self.attention_norm(x)
        q = self.wq(h).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.wk(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        v = self.wv(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        q, k = _rotary(q, cos, sin), _rotary(k, cos, sin)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        x = x + self.wo(_attention(q, k, v, causal=True).transpose(1, 2).reshape(b, t, c))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self, vocab=128, seq=32, dim=64, heads=4, kv_heads=2, ffn=160, layers=2, theta=10000.0):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(LlamaBlock(dim, heads, kv_heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        hd = dim // heads
        freqs = torch.outer(torch.arange(seq).float(), theta ** (-torch.arange(0, hd, 2).float() / hd))
        self.register_buffer("cos", freqs.cos())
        self.register_buffer("sin", freqs.sin())

    def forward(self, idx):
        x = self.tok_embeddings(idx)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        return self.output(self.norm(x))


class DiTBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.adaLN = nn.Linear(dim, 6 * dim)

    def forward(self, x, c):
        shift1, scale1, gate1, shift2, scale2, gate2 = self.adaLN(F.silu(c)).unsqueeze(1).chunk(6, dim=2)
        b, t, d = x.shape
        h = self.norm1(x) * (1 + scale1) + shift1
        q, k, v = self.qkv(h).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + gate1 * self.proj(_attention(q, k, v, causal=False).transpose(1, 2).reshape(b, t, d))
        h = self.norm2(x) * (1 + scale2) + shift2
        return x + gate2 * self.fc2(F.gelu(self.fc1(h)))


class DiT(nn.Module):
    """Noise prediction on [batch, channels, size, size] latents at timesteps t."""

    def __init__(self, channels=4, size=16, patch=2, dim=64, heads=4, layers=2):
        super().__init__()
        self.patch, self.channels = patch, channels
        self.x_embed = nn.Conv2d(channels, dim, patch, stride=patch)
        self.pos = nn.Parameter(torch.randn(1, (size // patch) ** 2, dim) * 0.02)
        self.t_mlp = nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.blocks = nn.ModuleList(DiTBlock(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim, elementwise_affine=False)
        self.out = nn.Linear(dim, patch * patch * channels)
        self.dim = dim

    def forward(self, x, t):
        b, ch, s, _ = x.shape
        p, g = self.patch, s // self.patch
        h = self.x_embed(x).flatten(2).transpose(1, 2) + self.pos
        half = self.dim // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=x.device).float() / half)
        args = t[:, None].float() * freqs[None]
        c = self.t_mlp(torch.cat([args.cos(), args.sin()], dim=-1))
        for block in self.blocks:
            h = block(h, c)
        y = self.out(self.norm(h)).view(b, g, g, p, p, ch)
        return y.permute(0, 5, 1, 3, 2, 4).reshape(b, ch, s, s)


def build(name, seed=0):
    """(model, inputs, loss_fn, targets) for one of gpt2, llama, dit; the
    same seed gives the same weights and batch. loss_fn reads targets."""
    torch.manual_seed(seed)
    if name in ("gpt2", "llama"):
        model = GPT2() if name == "gpt2" else Llama()
        tokens = torch.randint(0, 128, (2, 33))
        x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        return model, (x,), lambda logits: F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)), (y,)
    if name == "dit":
        model = DiT()
        x, t, noise = torch.randn(2, 4, 16, 16), torch.randint(0, 1000, (2,)), torch.randn(2, 4, 16, 16)
        return model, (x, t), lambda pred: F.mse_loss(pred, noise), (noise,)
    raise ValueError(name)

#!/usr/bin/python3
"""Train a tiny DeepSeek-V3-architecture byte-level model that uses distant context.

Offline tool (not part of the library, not run by CI). It writes an HF-style model directory
(config.json + model.safetensors with the DeepseekV3ForCausalLM tensor names) that vkh2o loads,
plus the training log, the held-out text and reference logits of this PyTorch forward, so the
library's GPU forward can be checked against it.

The architecture is written from the HF DeepseekV3 semantics the library follows (src/mla/,
ref/ref_mla.c): per layer input_layernorm -> MLA attention (q LoRA + RMSNorm, kv LoRA +
RMSNorm, interleaved RoPE on the rope part, softmax scale qk_head_dim^-0.5) ->
post_attention_layernorm -> SwiGLU MLP; then model.norm and lm_head. One token per byte.

Curriculum (what worked here; see the issue "quality evidence"):
  phase 1  repeated random segments (8-32 symbols of 64, tiled over 128-byte windows) until the
           loss on second occurrences collapses (an induction circuit forms): measured, not
           assumed; the phase ends once the running second-occurrence loss stays below
           --phase1-target bits/byte, plus --phase1-extra steps.
  phase 2  windows of --ctx bytes: natural text, text with a recurring passage, repeated
           segments and passkey windows, optionally natural passages tiled over the window
           (--mix), with periodic evaluation (held-out bits, recurring vs fresh, passkey).

Usage (Debian: apt install python3-torch python3-numpy libopenblas0-pthread):
  /usr/bin/python3 tools/train/train_tiny_mla.py --out models/tiny-mla [--threads 2] [--seed 1]
Resume: the same command with --resume (reads <out>/train_state.pt).
"""
import argparse
import json
import math
import os
import random
import shlex
import struct
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------- the model (HF semantics)

def default_config():
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": 256,
        "hidden_size": 128,
        "intermediate_size": 256,
        "moe_intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "q_lora_rank": 64,
        "kv_lora_rank": 64,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 16,
        "v_head_dim": 32,
        "n_routed_experts": None,
        "n_shared_experts": None,
        "first_k_dense_replace": 2,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "rope_interleave": True,
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "torch_dtype": "float32",
    }


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(var + self.eps))


def rope_tables(cfg, n, device=None):
    d = cfg["qk_rope_head_dim"]
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    pos = torch.arange(n, dtype=torch.float64)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().float(), emb.sin().float()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin, interleave):
    # x [b, h, s, d]; DeepSeek-V3 / Kimi rotate (x[2i], x[2i+1]) pairs: de-interleave first
    if interleave:
        b, h, s, d = x.shape
        x = x.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    return x * cos + rotate_half(x) * sin


class MLA(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        H, D = cfg["num_attention_heads"], cfg["hidden_size"]
        self.H = H
        self.nope, self.rope, self.v = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
        self.qk = self.nope + self.rope
        self.kv_lora = cfg["kv_lora_rank"]
        self.interleave = cfg["rope_interleave"]
        self.q_a_proj = nn.Linear(D, cfg["q_lora_rank"], bias=False)
        self.q_a_layernorm = RMSNorm(cfg["q_lora_rank"], 1e-6)
        self.q_b_proj = nn.Linear(cfg["q_lora_rank"], H * self.qk, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(D, self.kv_lora + self.rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.kv_lora, 1e-6)
        self.kv_b_proj = nn.Linear(self.kv_lora, H * (self.nope + self.v), bias=False)
        self.o_proj = nn.Linear(H * self.v, D, bias=False)
        self.scale = self.qk ** -0.5

    def forward(self, x, cos, sin, want_mass=False):
        b, s, _ = x.shape
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))).view(b, s, self.H, self.qk).transpose(1, 2)
        q_nope, q_pe = q.split([self.nope, self.rope], dim=-1)
        ckv = self.kv_a_proj_with_mqa(x)
        c, k_pe = ckv.split([self.kv_lora, self.rope], dim=-1)
        k_pe = k_pe.view(b, s, 1, self.rope).transpose(1, 2)
        kv = self.kv_b_proj(self.kv_a_layernorm(c)).view(b, s, self.H, self.nope + self.v).transpose(1, 2)
        k_nope, v = kv.split([self.nope, self.v], dim=-1)
        q_pe = apply_rope(q_pe, cos[:s], sin[:s], self.interleave)
        k_pe = apply_rope(k_pe, cos[:s], sin[:s], self.interleave)
        qf = torch.cat([q_nope, q_pe], dim=-1)
        kf = torch.cat([k_nope, k_pe.expand(b, self.H, s, self.rope)], dim=-1)
        scores = torch.matmul(qf, kf.transpose(-1, -2)) * self.scale
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        p = torch.softmax(scores.float(), dim=-1).to(qf.dtype)
        o = torch.matmul(p, v).transpose(1, 2).reshape(b, s, self.H * self.v)
        return self.o_proj(o), (p.sum(dim=(1, 2)) if want_mass else None)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, I = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(D, I, bias=False)
        self.up_proj = nn.Linear(D, I, bias=False)
        self.down_proj = nn.Linear(I, D, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.self_attn = MLA(cfg)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin):
        a, _ = self.self_attn(self.input_layernorm(x), cos, sin)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg["num_hidden_layers"])])
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class TinyDeepseekV3(nn.Module):
    """State-dict keys are exactly HF DeepseekV3ForCausalLM's (model.*, lm_head.weight)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Decoder(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        std = cfg["initializer_range"]
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=std)
        self.cos, self.sin = rope_tables(cfg, cfg["max_position_embeddings"])

    def forward(self, ids):
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, self.cos, self.sin)
        return self.lm_head(self.model.norm(x))


# ---------------------------------------------------------------- data

SYMBOLS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789. ", dtype=np.uint8)
assert len(SYMBOLS) == 64
FILLER = b"The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "


def passkey_prompt(key, depth, ctx, filler=FILLER):
    """The passkey test of vkh2o-eval --passkey (same format there): filler text with the key
    sentence planted at fraction `depth` of the filler, then the question. Returns (prompt
    bytes, answer bytes); len(prompt) + len(answer) == ctx."""
    key_s = b"The pass key is %s. Remember it. %s is the pass key. " % (key, key)
    question = b"What is the pass key? The pass key is "
    n_fill = ctx - len(key_s) - len(question) - len(key)
    if n_fill < 0:
        raise ValueError("context %d too short for the passkey test" % ctx)
    reps = filler * (n_fill // len(filler) + 2)
    before = int(round(depth * n_fill))
    prompt = reps[:before] + key_s + reps[before:n_fill] + question
    return prompt, key


def repeated_segments(rng, n):
    L = int(rng.integers(8, 33))
    seg = SYMBOLS[rng.integers(0, 64, L)]
    x = np.resize(seg, n)
    mask = np.zeros(n, dtype=bool)
    mask[L:] = True              # second and later occurrences
    return x, mask


def natural(rng, text, n):
    i = int(rng.integers(0, len(text) - n))
    return np.frombuffer(text[i:i + n], dtype=np.uint8).copy(), np.zeros(n, dtype=bool)


def recurring_passage(rng, text, n):
    x, mask = natural(rng, text, n)
    L = int(rng.integers(32, 97))
    i = int(rng.integers(0, n // 2 - L))
    j = int(rng.integers(i + L + 16, n - L))
    x[j:j + L] = x[i:i + L]
    mask[j + 1:j + L] = True     # predictable from the first occurrence
    return x, mask


def natural_segments(rng, text, n):
    """A natural-text passage of 16-128 bytes tiled over the window: repeated_segments on real
    text, which teaches the induction circuit to match on several bytes of context (one byte of
    English predicts little, one of 64 random symbols a lot)."""
    L = int(rng.integers(16, 129))
    i = int(rng.integers(0, len(text) - L))
    x = np.resize(np.frombuffer(text[i:i + L], dtype=np.uint8), n).copy()
    mask = np.zeros(n, dtype=bool)
    mask[L:] = True
    return x, mask


def passkey_window(rng, text, n):
    key = b"%05d" % int(rng.integers(0, 100000))
    depth = float(rng.uniform(0.0, 1.0))
    if rng.uniform() < 0.5:
        filler = FILLER
    else:
        i = int(rng.integers(0, len(text) - 4096))
        filler = text[i:i + 4096]
    prompt, ans = passkey_prompt(key, depth, n, filler)
    x = np.frombuffer(prompt + ans, dtype=np.uint8).copy()
    mask = np.zeros(n, dtype=bool)
    mask[n - len(ans):] = True
    return x, mask


def batch(rng, kind_probs, text, n, bsz):
    """Windows of n + 1 bytes (inputs x[:-1], targets x[1:]); mask marks targets of interest."""
    xs, ms = [], []
    kinds = ["natural", "recurring", "segments", "passkey", "natsegments"][:len(kind_probs)]
    for _ in range(bsz):
        k = kinds[int(rng.choice(len(kinds), p=kind_probs))]
        if k == "natural":
            x, m = natural(rng, text, n + 1)
        elif k == "recurring":
            x, m = recurring_passage(rng, text, n + 1)
        elif k == "segments":
            x, m = repeated_segments(rng, n + 1)
        elif k == "natsegments":
            x, m = natural_segments(rng, text, n + 1)
        else:
            x, m = passkey_window(rng, text, n + 1)
        xs.append(x)
        ms.append(m)
    x = torch.from_numpy(np.stack(xs).astype(np.int64))
    m = torch.from_numpy(np.stack(ms))
    return x[:, :-1], x[:, 1:], m[:, 1:]


# ---------------------------------------------------------------- evaluation

LN2 = math.log(2.0)


@torch.no_grad()
def bits_per_byte(model, data, ctx, max_windows=64):
    """Non-overlapping windows of ctx bytes; in each, byte t+1 is predicted from bytes <= t
    (the first byte is context only) -- the same definition as vkh2o-eval's full cache."""
    total, count = 0.0, 0
    for w in range(min(max_windows, (len(data) - 1) // ctx)):
        x = torch.tensor(list(data[w * ctx:(w + 1) * ctx]), dtype=torch.int64)[None]
        logits = model(x[:, :-1])
        total += F.cross_entropy(logits[0], x[0, 1:], reduction="sum").item()
        count += ctx - 1
    return total / max(count, 1) / LN2


@torch.no_grad()
def masked_bits(model, rng, text, ctx, kind, n=32):
    x, y, m = batch(rng, {"recurring": [0, 1, 0, 0], "segments": [0, 0, 1, 0]}[kind], text, ctx, n)
    logits = model(x)
    ce = F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1), reduction="none").view(y.shape)
    sel = ce[m].mean().item() / LN2
    fresh = ce[~m].mean().item() / LN2
    return sel, fresh


@torch.no_grad()
def repeat_bits(model, held, lengths=(64, 128, 255), trials=12, seed=5):
    """The plain induction measure: a held-out passage of L bytes followed by itself; bits/byte of
    the first occurrence against the second (a model that copies pays far less the second time).
    Returns {L: (first, second)}."""
    rng = np.random.default_rng(seed)
    out = {}
    for L in lengths:
        first, second = [], []
        for _ in range(trials):
            i = int(rng.integers(0, len(held) - L))
            p = held[i:i + L]
            x = torch.tensor(list(p + p), dtype=torch.int64)[None]
            ce = F.cross_entropy(model(x[:, :-1])[0], x[0, 1:], reduction="none") / LN2
            first.append(ce[:L - 1].mean().item())
            second.append(ce[L:].mean().item())
        out[L] = (float(np.mean(first)), float(np.mean(second)))
    return out


@torch.no_grad()
def passkey_accuracy(model, ctx, depths=(0.0, 0.2, 0.4, 0.6, 0.8, 1.0), trials=10, seed=1234):
    rng = np.random.default_rng(seed)
    hits = {d: 0 for d in depths}
    for d in depths:
        for _ in range(trials):
            key = b"%05d" % int(rng.integers(0, 100000))
            prompt, ans = passkey_prompt(key, d, ctx)
            ids = list(prompt)
            for _ in range(len(ans)):
                logits = model(torch.tensor(ids, dtype=torch.int64)[None])
                ids.append(int(logits[0, -1].argmax()))
            hits[d] += bytes(ids[len(prompt):]) == ans
    acc = {d: hits[d] / trials for d in depths}
    return sum(hits.values()) / (trials * len(depths)), acc


# ---------------------------------------------------------------- saving (safetensors, HF names)

def save_safetensors(path, tensors, metadata=None):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        a = t.detach().contiguous().cpu()
        if a.dtype == torch.float32:
            dt, b = "F32", a.numpy().astype("<f4").tobytes()
        elif a.dtype in (torch.int64,):
            dt, b = "I64", a.numpy().astype("<i8").tobytes()
        elif a.dtype == torch.uint8:
            dt, b = "U8", a.numpy().tobytes()
        else:
            raise ValueError("dtype %s" % a.dtype)
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def load_safetensors(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        a, e = v["data_offsets"]
        dt = {"F32": "<f4", "I64": "<i8", "U8": "u1"}[v["dtype"]]
        out[k] = torch.from_numpy(np.frombuffer(b[8 + n + a:8 + n + e], dtype=dt).copy().reshape(v["shape"]))
    return out


def write_reference(model, out, heldout):
    """The PyTorch side of the library's checks: logits and log-probabilities of the first 64
    held-out bytes (reference.safetensors), and bits per byte of the full cache over the first
    windows of the held-out text at a short context (reference.json; vkh2o-eval must agree)."""
    ids = torch.tensor(list(heldout[:64]), dtype=torch.int64)
    with torch.no_grad():
        logits = model(ids[None])[0]
        logp = F.log_softmax(logits.double(), dim=-1).float()
    save_safetensors(os.path.join(out, "reference.safetensors"),
                     {"input_ids": ids, "logits": logits.float(), "log_probs": logp},
                     {"what": "PyTorch forward of model.safetensors on the first 64 bytes of heldout.txt"})
    ref = {"what": "bits per byte of the full cache over the first windows of heldout.txt (PyTorch forward)",
           "rows": []}
    for ctx, windows in ((128, 4), (512, 4)):
        if len(heldout) >= ctx * windows:
            ref["rows"].append({"ctx": ctx, "windows": windows,
                                "bits_per_byte": bits_per_byte(model, heldout + b"\0", ctx, windows)})
    with open(os.path.join(out, "reference.json.tmp"), "w") as f:
        json.dump(ref, f, indent=2)
        f.write("\n")
    os.replace(os.path.join(out, "reference.json.tmp"), os.path.join(out, "reference.json"))


def export(model, out, heldout, note):
    cfg = model.cfg
    with open(os.path.join(out, "config.json.tmp"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    os.replace(os.path.join(out, "config.json.tmp"), os.path.join(out, "config.json"))
    save_safetensors(os.path.join(out, "model.safetensors"), model.state_dict(), {"format": "pt", "note": note})
    write_reference(model, out, heldout)


# ---------------------------------------------------------------- training

def load_text(heldout_name):
    base = "/usr/share/common-licenses"
    names = sorted(n for n in os.listdir(base) if not os.path.islink(os.path.join(base, n)))
    train, held = b"", b""
    for n in names:
        with open(os.path.join(base, n), "rb") as f:
            t = f.read()
        t = bytes(c for c in t if 32 <= c < 127 or c == 10)
        if n == heldout_name:
            held = t
        else:
            train += t + b"\n"
    return train, held


def git_commit():
    """The commit of the source tree this script is in, "+dirty" when it has uncommitted
    changes; "unknown" outside a git checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        head = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, check=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="model directory to write")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--phase1-batch", type=int, default=32)
    ap.add_argument("--phase1-ctx", type=int, default=128)
    ap.add_argument("--phase1-target", type=float, default=1.0, help="second-occurrence bits/byte that ends phase 1")
    ap.add_argument("--phase1-extra", type=int, default=200)
    ap.add_argument("--phase1-max", type=int, default=5000)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--phase2-steps", type=int, default=4000)
    ap.add_argument("--mix", default="0.3,0.2,0.2,0.3",
                    help="natural,recurring,segments,passkey[,natsegments] (a natural passage tiled over the window)")
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--heldout", default="GPL-3", help="common-licenses file held out")
    ap.add_argument("--export-when", choices=["passkey", "gate"], default="passkey",
                    help="passkey: export at the best passkey accuracy so far; gate: export when the passkey "
                         "accuracy is at least --gate-passkey and recurring passages save the most bits so far")
    ap.add_argument("--gate-passkey", type=float, default=0.9)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--export-reference", action="store_true",
                    help="only (re)write reference.safetensors / reference.json of the model in --out, and evaluate it")
    ap.add_argument("--eval-passkey", type=int, default=0, metavar="CTX",
                    help="with --export-reference: also report the full-cache passkey accuracy at CTX")
    ap.add_argument("--eval-repeat", action="store_true",
                    help="with --export-reference: also report the recurring-passage measures (the quality gate's second half)")
    a = ap.parse_args()
    if a.export_reference:
        torch.set_num_threads(a.threads)
        cfg = json.load(open(os.path.join(a.out, "config.json")))
        model = TinyDeepseekV3(cfg)
        model.load_state_dict(load_safetensors(os.path.join(a.out, "model.safetensors")))
        model.eval()
        held = open(os.path.join(a.out, "heldout.txt"), "rb").read()
        write_reference(model, a.out, held)
        print(open(os.path.join(a.out, "reference.json")).read())
        if a.eval_passkey:
            acc, by = passkey_accuracy(model, a.eval_passkey)
            print("passkey at %d: %.3f %s" % (a.eval_passkey, acc, by))
        if a.eval_repeat:
            ev = np.random.default_rng(999)
            rec, fresh = masked_bits(model, ev, held, 512, "recurring")
            print("recurring passages (training's measure, ctx 512): %.3f vs fresh %.3f bits/byte" % (rec, fresh))
            for L, (f1, f2) in repeat_bits(model, held).items():
                print("held-out passage of %d bytes repeated: first %.3f, second %.3f bits/byte (%.0f %% cheaper)"
                      % (L, f1, f2, 100.0 * (1.0 - f2 / f1)))
        return

    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    train_text, held = load_text(a.heldout)
    with open(os.path.join(a.out, "heldout.txt"), "wb") as f:
        f.write(held)
    log = open(os.path.join(a.out, "train.log"), "a")

    def say(msg):
        line = "%s %s" % (time.strftime("%H:%M:%S"), msg)
        print(line, flush=True)
        log.write(line + "\n")
        log.flush()

    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    cfg = default_config()
    model = TinyDeepseekV3(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.01)
    state = {"step": 0, "phase": 1, "phase1_end": None, "best_passkey": -1.0}
    sp = os.path.join(a.out, "train_state.pt")
    # every start, resumed or not, says how it was started and from which source, so that a
    # log of several runs (train.log is appended to) tells which code made each step
    say("start: %s; commit %s; %d parameters; seed %d; threads %d"
        % (" ".join(shlex.quote(v) for v in [sys.executable] + sys.argv), git_commit(),
           sum(p.numel() for p in model.parameters()), a.seed, a.threads))
    if a.resume and os.path.exists(sp):
        ck = torch.load(sp)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        state = ck["state"]
        rng = np.random.default_rng(a.seed + state["step"])
        say("resumed at step %d (phase %d)" % (state["step"], state["phase"]))
    elif a.resume:
        say("--resume: no %s, starting at step 0" % sp)
    mix = [float(v) for v in a.mix.split(",")]
    if len(mix) not in (4, 5) or min(mix) < 0 or sum(mix) <= 0:
        ap.error("--mix: 4 or 5 non-negative weights (natural,recurring,segments,passkey[,natsegments])")
    mix = [v / sum(mix) for v in mix]

    def checkpoint():
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "state": state}, sp + ".tmp")
        os.replace(sp + ".tmp", sp)

    run_sec, t0 = [], time.time()
    while True:
        step = state["step"]
        if state["phase"] == 1:
            lr = a.lr * min(1.0, (step + 1) / 100)
            x, y, m = batch(rng, [0, 0, 1, 0], train_text, a.phase1_ctx, a.phase1_batch)
        else:
            s2 = step - state["phase1_end"]
            if s2 >= a.phase2_steps:
                break
            lr = a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * s2 / a.phase2_steps)))
            x, y, m = batch(rng, mix, train_text, a.ctx, a.batch)
        for g in opt.param_groups:
            g["lr"] = lr
        logits = model(x)
        ce = F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1), reduction="none").view(y.shape)
        loss = ce.mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        state["step"] = step + 1
        sec = ce[m].mean().item() / LN2 if m.any() else float("nan")
        if state["phase"] == 1:
            run_sec.append(sec)
            run_sec = run_sec[-100:]
            avg = sum(run_sec) / len(run_sec)
            if step % 50 == 0:
                say("phase 1 step %d: loss %.3f bits/byte, second occurrences %.3f (running %.3f), %.2f s/step"
                    % (step, loss.item() / LN2, sec, avg, (time.time() - t0) / (step + 1)))
            if state.get("collapse") is None and len(run_sec) == 100 and avg < a.phase1_target:
                state["collapse"] = step
                say("phase change: second-occurrence loss %.3f bits/byte at step %d" % (avg, step))
            if (state.get("collapse") is not None and step >= state["collapse"] + a.phase1_extra) or step >= a.phase1_max:
                state["phase"], state["phase1_end"] = 2, step + 1
                say("phase 1 ends at step %d%s" % (step + 1, "" if state.get("collapse") is not None else " WITHOUT a phase change"))
                checkpoint()
        else:
            s2 = step - state["phase1_end"]
            if s2 % 50 == 0:
                say("phase 2 step %d (+%d): loss %.3f bits/byte, masked %.3f, lr %.2e" % (step, s2, loss.item() / LN2, sec, lr))
            if (s2 + 1) % a.eval_every == 0 or s2 + 1 == a.phase2_steps:
                model.eval()
                ev = np.random.default_rng(999)
                bpb = bits_per_byte(model, held, a.ctx, 16)
                rec, fresh = masked_bits(model, ev, held, a.ctx, "recurring")
                acc, by = passkey_accuracy(model, a.ctx)
                f1, f2 = repeat_bits(model, held, lengths=(128,))[128]
                model.train()
                say("eval at step %d: held-out %.3f bits/byte; recurring passages %.3f vs fresh %.3f; held-out passage "
                    "repeated %.3f -> %.3f; passkey %.3f %s"
                    % (step + 1, bpb, rec, fresh, f1, f2, acc, " ".join("%.1f:%.1f" % kv for kv in by.items())))
                gap = fresh - rec
                if a.export_when == "passkey":
                    better, why = acc >= state["best_passkey"], "best passkey so far"
                else:
                    better = acc >= a.gate_passkey and gap > state.get("best_gap", -1e9)
                    why = "passkey >= %.2f and the largest recurring-passage saving so far, %.3f bits" % (a.gate_passkey, gap)
                state["best_passkey"] = max(state["best_passkey"], acc)
                if better:
                    if a.export_when == "gate":
                        state["best_gap"] = gap
                    export(model, a.out, held, "step %d, passkey %.3f at ctx %d, recurring %.3f vs fresh %.3f bits/byte"
                           % (step + 1, acc, a.ctx, rec, fresh))
                    say("exported (%s)" % why)
                checkpoint()
    say("done at step %d; best passkey %.3f" % (state["step"], state["best_passkey"]))


if __name__ == "__main__":
    main()

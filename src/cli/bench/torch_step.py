"""The reference for `tpuemu bench host`: a model's training step in PyTorch CPU eager, float32.

The same step as the backend's workloads (backend/src/models/transformer.rs and mlp.rs), operator
for operator: the forward, the loss (log_softmax + nll_loss_forward), and the backward written
out with the same ATen backward operators (nll_loss_backward, _log_softmax_backward_data,
silu_backward, _softmax_backward_data, embedding_dense_backward, RMSNorm through its
decomposition). With --autograd the backward is PyTorch's autograd of the same forward instead.

float32 is the host's fastest path for this math (PyTorch CPU runs bfloat16 far slower); the
emulated step runs in bfloat16.

Protocol: argv[1] is a JSON object {"workload": ..., "config": {...}, "autograd": bool,
"threads": n} (threads: PyTorch's intra-op threads; absent or 0 keeps PyTorch's default). The
script builds the model, runs one warm-up step and prints one JSON line
{"ready": true, "torch": version, "threads": n}. Then for every line "N" on stdin it runs N steps,
each ending with `loss.item()` (the sync point of a training loop), and prints one JSON line
{"seconds": [per-step wall seconds], "loss": last loss}. An empty line or end of input ends it.
"""

import json
import math
import sys
import time

import torch
import torch.nn.functional as F

aten = torch.ops.aten


def rms_backward(dy, x, g, eps):
    ms = (x * x).mean(-1, keepdim=True)
    rstd = (ms + eps).rsqrt()
    xhat = x * rstd
    dg = (dy * xhat).sum(0)
    dxhat = dy * g
    proj = (dxhat * xhat).mean(-1, keepdim=True)
    dx = rstd * (dxhat - xhat * proj)
    return dx, dg


def transformer(c, autograd):
    b, s, d, h, f, v = c["batch"], c["seq"], c["d_model"], c["heads"], c["d_ff"], c["vocab"]
    n, dh = b * s, d // h
    eps, scale = 1e-6, 1.0 / math.sqrt(d // h)
    gen = torch.Generator().manual_seed(7)

    def w(out, inp):
        return torch.randn(out, inp, generator=gen) / math.sqrt(inp)

    p = {
        "embed": torch.randn(v, d, generator=gen),
        "g1": torch.ones(d),
        "g2": torch.ones(d),
        "g3": torch.ones(d),
        "wq": w(d, d),
        "wk": w(d, d),
        "wv": w(d, d),
        "wo": w(d, d),
        "w_gate": w(f, d),
        "w_up": w(f, d),
        "w_down": w(d, f),
        "w_out": w(v, d),
    }
    tokens = torch.randint(v, (n,), generator=gen)
    targets = torch.randint(v, (n,), generator=gen)
    mask = torch.ones(s, s, dtype=torch.bool).triu(1)

    def heads(x):
        return x.view(b, s, h, dh).permute(0, 2, 1, 3).reshape(b * h, s, dh)

    def merge(x):
        return x.view(b, h, s, dh).permute(0, 2, 1, 3).reshape(n, d)

    def forward(p):
        x0 = F.embedding(tokens, p["embed"])
        h1 = F.rms_norm(x0, [d], p["g1"], eps)
        q, k, vv = h1 @ p["wq"].t(), h1 @ p["wk"].t(), h1 @ p["wv"].t()
        qh, kh, vh = heads(q), heads(k), heads(vv)
        scores = torch.bmm(qh, kh.transpose(1, 2)) * scale
        scores = scores.masked_fill(mask, float("-inf"))
        pr = scores.softmax(-1)
        o2 = merge(torch.bmm(pr, vh))
        x1 = x0 + o2 @ p["wo"].t()
        h2 = F.rms_norm(x1, [d], p["g2"], eps)
        gate, up = h2 @ p["w_gate"].t(), h2 @ p["w_up"].t()
        sg = F.silu(gate)
        act = sg * up
        x2 = x1 + act @ p["w_down"].t()
        h3 = F.rms_norm(x2, [d], p["g3"], eps)
        logp = (h3 @ p["w_out"].t()).log_softmax(-1)
        loss, total = aten.nll_loss_forward(logp, targets, None, 1, -100)
        return loss, total, locals()

    def step_autograd():
        leaves = {k: t.detach().requires_grad_() for k, t in p.items()}
        loss, _, _ = forward(leaves)
        loss.backward()
        return loss.item()

    def step_manual():
        loss, total, a = forward(p)
        x0, x1, x2, h1, h2, h3 = a["x0"], a["x1"], a["x2"], a["h1"], a["h2"], a["h3"]
        qh, kh, vh, pr, o2 = a["qh"], a["kh"], a["vh"], a["pr"], a["o2"]
        gate, up, sg, act, logp = a["gate"], a["up"], a["sg"], a["act"], a["logp"]
        one = torch.tensor(1.0)
        g_logp = aten.nll_loss_backward(one, logp, targets, None, 1, -100, total)
        g_logits = aten._log_softmax_backward_data(g_logp, logp, -1, torch.float32)
        grads = [g_logits.t() @ h3]
        g_h3 = g_logits @ p["w_out"]
        g_x2, dg3 = rms_backward(g_h3, x2, p["g3"], eps)
        grads += [g_x2.t() @ act]
        g_act = g_x2 @ p["w_down"]
        g_up, g_sg = g_act * sg, g_act * up
        g_gate = aten.silu_backward(g_sg, gate)
        grads += [g_gate.t() @ h2, g_up.t() @ h2]
        g_h2 = g_gate @ p["w_gate"] + g_up @ p["w_up"]
        g_x1m, dg2 = rms_backward(g_h2, x1, p["g2"], eps)
        g_x1 = g_x2 + g_x1m
        grads += [g_x1.t() @ o2]
        g_o = heads(g_x1 @ p["wo"])
        g_p = torch.bmm(g_o, vh.transpose(1, 2))
        g_vh = torch.bmm(pr.transpose(1, 2), g_o)
        g_s = aten._softmax_backward_data(g_p, pr, -1, torch.float32) * scale
        g_qh = torch.bmm(g_s, kh)
        g_kh = torch.bmm(g_s.transpose(1, 2), qh)
        g_q, g_k, g_v = merge(g_qh), merge(g_kh), merge(g_vh)
        grads += [g_q.t() @ h1, g_k.t() @ h1, g_v.t() @ h1]
        g_h1 = g_q @ p["wq"] + g_k @ p["wk"] + g_v @ p["wv"]
        g_x0a, dg1 = rms_backward(g_h1, x0, p["g1"], eps)
        g_x0 = g_x1 + g_x0a
        grads += [aten.embedding_dense_backward(g_x0, tokens, v, -1, False), dg1, dg2, dg3]
        return loss.item()

    return step_autograd if autograd else step_manual


def mlp(c, autograd):
    b, di, hd, nc = c["batch"], c["d_in"], c["hidden"], c["classes"]
    gen = torch.Generator().manual_seed(3)
    p = {
        "w1": torch.randn(hd, di, generator=gen) / math.sqrt(di),
        "b1": torch.randn(hd, generator=gen) * 0.1,
        "w2": torch.randn(nc, hd, generator=gen) / math.sqrt(hd),
        "b2": torch.randn(nc, generator=gen) * 0.1,
    }
    x = torch.randn(b, di, generator=gen)
    targets = torch.randint(nc, (b,), generator=gen)

    def forward(p):
        h = torch.addmm(p["b1"], x, p["w1"].t())
        a = F.gelu(h)
        logp = torch.addmm(p["b2"], a, p["w2"].t()).log_softmax(-1)
        loss, total = aten.nll_loss_forward(logp, targets, None, 1, -100)
        return loss, total, h, a, logp

    def step_autograd():
        leaves = {k: t.detach().requires_grad_() for k, t in p.items()}
        loss = forward(leaves)[0]
        loss.backward()
        return loss.item()

    def step_manual():
        loss, total, h, a, logp = forward(p)
        one = torch.tensor(1.0)
        g = aten.nll_loss_backward(one, logp, targets, None, 1, -100, total)
        g_logits = aten._log_softmax_backward_data(g, logp, -1, torch.float32)
        g_logits.t() @ a
        g_logits.sum(0)
        g_h = aten.gelu_backward(g_logits @ p["w2"], h)
        g_h.t() @ x
        g_h.sum(0)
        return loss.item()

    return step_autograd if autograd else step_manual


def main():
    req = json.loads(sys.argv[1])
    if req.get("threads"):
        torch.set_num_threads(int(req["threads"]))
    build = {"transformer-block": transformer, "mlp": mlp}[req["workload"]]
    with torch.no_grad() if not req.get("autograd") else torch.enable_grad():
        step = build(req["config"], bool(req.get("autograd")))
        step()
        print(json.dumps({"ready": True, "torch": torch.__version__,
                          "threads": torch.get_num_threads()}), flush=True)
        for line in sys.stdin:
            if not line.strip():
                break
            secs, loss = [], 0.0
            for _ in range(int(line)):
                t0 = time.perf_counter()
                loss = step()
                secs.append(time.perf_counter() - t0)
            print(json.dumps({"seconds": secs, "loss": loss}), flush=True)


if __name__ == "__main__":
    main()

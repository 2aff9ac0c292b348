"""One model layer's linear attention served by a small scheduler (docs/SPEC.md 6d).

Sequences arrive; their prefills run in pieces that resume from pool slots
(state pools in prefill); prefix checkpoints are stored and a later sequence
that shares a prefix resumes from one; decode runs speculative drafts of K
tokens per call (verify), accepts a random number of them and rolls back the
rest by choosing the slot of the last accepted token. The gate and beta's
sigmoid run in the kernel. At the end every sequence's outputs and final
state are compared with one uninterrupted prefill of its tokens (SPEC 6:
relative error <= 2e-5 in f32).

Run: PYTHONPATH=build/python python3 examples/serving_loop.py
"""
import numpy as np

import cgdr

NK, NV, DK, DV = 2, 4, 16, 16
P = 64            # pool slots
PIECE = 32        # prefill piece length (a multiple of EVERY: checkpoints fall on absolute positions)
EVERY = 32        # checkpoint_every
K = 4             # draft tokens per verify call
PROMPT = 96       # tokens prefilled; the rest of each sequence is decoded
LENGTH = 120      # tokens per sequence


def tokens(rng, n):
    """n tokens of one layer's raw projections: q, k, v, raw beta logits b, raw gate a."""
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    return dict(q=f(n, NK, DK), k=f(n, NK, DK), v=f(n, NV, DV), b=f(n, NV), a=rng.uniform(-3, 0.5, (n, NV)).astype(np.float32))


def cut(x, lo, hi):
    return {n: np.ascontiguousarray(t[lo:hi]) for n, t in x.items()}


def cat(*xs):
    return {n: np.concatenate([x[n] for x in xs]) for n in xs[0]}


class Layer:
    def __init__(self, rng):
        self.A_log = rng.uniform(-1, 0.5, NV).astype(np.float32)
        self.dt_bias = rng.uniform(-1, 0, NV).astype(np.float32)
        self.common = dict(use_qk_l2norm_in_kernel=True, state_layout="kv", A_log=self.A_log, dt_bias=self.dt_bias,
                           use_beta_sigmoid=True)

    def prefill(self, x, lens, pool, slots, every=0):
        """Packed pieces of several sequences, each resuming from its pool slot, in place."""
        return cgdr.chunk_gated_delta_rule_tnd(x["q"], x["k"], x["v"], x["b"], pool, lens, a=x["a"],
                                               state_indices=slots, checkpoint_every=every, **self.common)

    def verify(self, x, pool, src, dst):
        """x [N, K, ...] draft tokens from slots src; the state after token j into slot dst[n][j]."""
        return cgdr.recurrent_step(x["q"], x["k"], x["v"], x["b"], pool, src, a=x["a"], dst_indices=dst,
                                   **self.common)


class Server:
    def __init__(self, layer):
        self.layer = layer
        self.pool = np.zeros((P, NV, DK, DV), np.float32)
        self.free = list(range(P))
        self.checkpoints = {}  # (prefix tokens as bytes) -> state after them
        self.seqs = []

    def arrive(self, x):
        """A new sequence: resume from the longest stored prefix checkpoint, if any."""
        slot = self.free.pop()
        start = 0
        for n in range(PROMPT // EVERY * EVERY, 0, -EVERY):
            state = self.checkpoints.get(self.key(x, n))
            if state is not None:
                self.pool[slot], start = state, n
                break
        if start == 0:
            self.pool[slot] = 0
        self.seqs.append(dict(x=x, slot=slot, pos=start, start=start, out=np.zeros((LENGTH, NV, DV), np.float32)))

    @staticmethod
    def key(x, n):
        return b"".join(x[t][:n].tobytes() for t in ("q", "k", "v", "b", "a"))

    def prefill_round(self):
        """One piece of every sequence still in its prompt, in one packed call."""
        live = [s for s in self.seqs if s["pos"] < PROMPT]
        if not live:
            return False
        pieces = [(s, s["pos"], min(PROMPT, s["pos"] + PIECE)) for s in live]
        x = cat(*(cut(s["x"], lo, hi) for s, lo, hi in pieces))
        out, _, ckpt = self.layer.prefill(x, [hi - lo for _, lo, hi in pieces], self.pool,
                                          [s["slot"] for s in live], every=EVERY)
        row, first = 0, 0
        for s, lo, hi in pieces:
            s["out"][lo:hi] = out[first:first + hi - lo]
            for i in range(1, (hi - lo) // EVERY + 1):  # pieces start on multiples of EVERY
                self.checkpoints[self.key(s["x"], lo + i * EVERY)] = ckpt[row].copy()
                row += 1
            first += hi - lo
            s["pos"] = hi
        return True

    def decode_round(self, rng):
        """One verify call for every decoding sequence: K drafts, a random number accepted."""
        live = [s for s in self.seqs if PROMPT <= s["pos"] < LENGTH]
        if not live:
            return False
        accept = [int(rng.integers(1, min(K, LENGTH - s["pos"]) + 1)) for s in live]
        drafts = []
        for s, n in zip(live, accept):
            d = cut(s["x"], s["pos"], s["pos"] + n)
            wrong = tokens(rng, K - n)  # drafts past the accepted ones: tokens the model rejects
            drafts.append(cat(d, wrong) if K > n else d)
        x = {t: np.stack([d[t] for d in drafts]) for t in drafts[0]}
        dst = [[self.free.pop() for _ in range(K)] for _ in live]
        out = self.layer.verify(x, self.pool, [s["slot"] for s in live], dst)
        for i, (s, n) in enumerate(zip(live, accept)):
            s["out"][s["pos"]:s["pos"] + n] = out[i, :n]
            keep = dst[i][n - 1]  # rollback: the state after the last accepted token
            self.free += [s["slot"]] + [d for d in dst[i] if d != keep]
            s["slot"] = keep
            s["pos"] += n
        return True


def run(seed=0):
    """Serves 4 sequences (the last shares a 64-token prefix with the first);
    returns the worst relative error of outputs and final states against one
    uninterrupted prefill per sequence, and how many prompt tokens were
    skipped thanks to checkpoints."""
    rng = np.random.default_rng(seed)
    layer = Layer(rng)
    server = Server(layer)
    seqs = [tokens(rng, LENGTH) for _ in range(3)]
    seqs.append(cat(cut(seqs[0], 0, 64), tokens(rng, LENGTH - 64)))
    for x in seqs[:3]:
        server.arrive(x)
    rounds = 0
    while server.prefill_round() | server.decode_round(rng):
        rounds += 1
        if rounds == 3:
            server.arrive(seqs[3])  # arrives late: the first sequence's prefix is checkpointed by then
    worst = 0.0
    for s in server.seqs:
        init = np.zeros((1, NV, DK, DV), np.float32)
        want_out, want_state = layer.prefill(s["x"], [LENGTH], init, [0])
        rel = lambda got, ref: float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
        worst = max(worst, rel(s["out"][s["start"]:], want_out[s["start"]:]), rel(server.pool[s["slot"]], want_state[0]))
    return worst, sum(s["start"] for s in server.seqs)


if __name__ == "__main__":
    err, skipped = run()
    print(f"serving loop: 4 sequences, {skipped} prompt tokens resumed from checkpoints, "
          f"worst relative error vs one prefill {err:.2e} (SPEC 6: <= 2e-5)")
    raise SystemExit(0 if err <= 2e-5 and skipped == 64 else 1)

# Desk check of the direct kernels in kernels/ops/conv2d.cu without a GPU: forward, the flipped
# backward_input and the weight gradient, with their shared-memory layouts, chunking and thread
# mappings transcribed into Python, against numpy references. Keep it in step with the .cu file.
#   python3 tests/sim/conv_direct_sim.py     (several minutes; not part of ctest)
import os
import sys
import numpy as np
src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'conv_igemm_sim.py')).read()
exec(src.split('rng = np.random.default_rng(1)')[0])

TK = 8
SMEM = 12288

def direct_tp(Q): return 7 if Q % 7 == 0 else 4

def direct_geom(N, Ci, H, W, Co, P, Q, pad, KS, sms):
    d = Geom(); d.N, d.Ci, d.H, d.W, d.Co, d.P, d.Q, d.pad = N, Ci, H, W, Co, P, Q, pad
    tp = direct_tp(Q); d.QG = (Q + tp - 1)//tp; d.Hp = P + KS - 1; d.Wpa = d.QG*tp + KS - 1
    items = lambda kb: (kb // TK) * P * d.QG
    d.KB = 0
    for kb in (32, 16, 8):
        if items(kb) <= 256: d.KB = kb; break
    if d.KB == 0: return d
    while d.KB > TK and N * ((Co + d.KB - 1)//d.KB) < sms: d.KB //= 2
    d.KB = min(d.KB, (Co + TK - 1)//TK*TK)
    d.items = items(d.KB)
    per = KS*KS*d.KB + d.Hp*d.Wpa
    d.CB = min(Ci, SMEM // per)
    if d.CB < 1: d.KB = 0
    return d

def run_direct(inp, w, bias, d, KS, TP, FLIP):
    # inp: flat NCHW [N, Ci, H, W]; w flat: forward [Co, Ci, KS, KS], flip [Ci, Co, KS, KS]
    out = np.full(d.N*d.Co*d.P*d.Q, np.nan); written = np.zeros_like(out, dtype=int)
    plane = d.Hp*d.Wpa
    assert d.CB*(KS*KS*d.KB + plane) <= SMEM
    threads = (d.items + 31)//32*32
    for n in range(d.N):
        for by in range((d.Co + d.KB - 1)//d.KB):
            k0 = by*d.KB
            acc = np.zeros((threads, TK, TP))
            for c0 in range(0, d.Ci, d.CB):
                cb = min(d.CB, d.Ci - c0)
                smem = np.full(SMEM, np.nan)
                ws_off, xs_off = 0, d.CB*KS*KS*d.KB
                for i in range(cb*KS*KS*d.KB):
                    kk = i % d.KB; t = i // d.KB; s = t % KS; t //= KS; r = t % KS; c = c0 + t // KS; k = k0 + kk
                    v = 0.0
                    if k < d.Co:
                        v = w[((c*d.Co + k)*KS + (KS-1-r))*KS + (KS-1-s)] if FLIP else w[((k*d.Ci + c)*KS + r)*KS + s]
                    smem[ws_off + i] = v
                for i in range(cb*plane):
                    c = i // plane; rem = i - c*plane; hh = rem // d.Wpa; ww = rem - hh*d.Wpa
                    h = hh - d.pad; wi = ww - d.pad
                    v = 0.0
                    if 0 <= h < d.H and 0 <= wi < d.W: v = inp[((n*d.Ci + c0 + c)*d.H + h)*d.W + wi]
                    smem[xs_off + i] = v
                for tid in range(threads):
                    if tid >= d.items: continue
                    qg = tid % d.QG; p = (tid // d.QG) % d.P; kg = tid // (d.QG*d.P); q0 = qg*TP
                    for c in range(cb):
                        xc = xs_off + c*plane + p*d.Wpa + q0
                        wc = ws_off + c*KS*KS*d.KB + kg*TK
                        assert (wc % 4) == 0
                        for r in range(KS):
                            row = [smem[xc + r*d.Wpa + i] for i in range(TP + KS - 1)]
                            assert not any(np.isnan(row))
                            for s in range(KS):
                                wv = smem[wc + (r*KS + s)*d.KB: wc + (r*KS + s)*d.KB + 8]
                                assert not np.isnan(wv).any()
                                for k in range(TK):
                                    for i in range(TP):
                                        acc[tid, k, i] += wv[k]*row[i + s]
            for tid in range(min(threads, d.items)):
                qg = tid % d.QG; p = (tid // d.QG) % d.P; kg = tid // (d.QG*d.P); q0 = qg*TP
                for k in range(TK):
                    kk = k0 + kg*TK + k
                    if kk >= d.Co: continue
                    bv = bias[kk] if bias is not None else 0.0
                    for i in range(TP):
                        if q0 + i < d.Q:
                            o = ((n*d.Co + kk)*d.P + p)*d.Q + q0 + i
                            out[o] = acc[tid, k, i] + bv; written[o] += 1
    assert (written == 1).all(), "coverage"
    return out

# direct weight gradient
WTK = {3: 4, 5: 2}
LIMIT = 160*1024

def wgrad_smem(d, KS):
    TK_ = WTK[KS]
    planes = 4*(d.CB*d.Hp*d.Wp + d.KB*d.P*d.Q)
    units = (d.KB // TK_)*d.CB*d.PS
    return max(planes, 4*units*TK_*KS*KS)

def wgrad_geom(g, sms):
    KS = g.R; TK_ = WTK[KS]
    d = Geom(); d.N, d.C, d.H, d.W, d.K, d.P, d.Q, d.pad = g.N, g.C, g.H, g.W, g.K, g.P, g.Q, g.ph
    d.Hp = d.P + KS - 1; d.Wp = d.Q + KS - 1
    d.KB = min(64, (d.K + TK_ - 1)//TK_*TK_); d.CB = min(8, d.C); d.PS = 1
    while wgrad_smem(d, KS) > LIMIT and d.KB > TK_: d.KB = max(TK_, d.KB//2//TK_*TK_)
    while wgrad_smem(d, KS) > LIMIT and d.CB > 1: d.CB //= 2
    pairs = (d.KB // TK_)*d.CB
    d.PS = max(1, min(d.P, 256 // pairs))
    while d.PS > 1 and wgrad_smem(d, KS) > LIMIT: d.PS -= 1
    slices = ((d.K + d.KB - 1)//d.KB)*((d.C + d.CB - 1)//d.CB)
    d.splits = max(1, min(d.N, (2*sms + slices - 1)//slices))
    d.ipb = max(1, (d.N + d.splits - 1)//d.splits)
    d.splits = max(1, (d.N + d.ipb - 1)//d.ipb)
    return d

def run_direct_wgrad(gy, x, d, KS):
    TK_ = WTK[KS]
    V = TK_*KS*KS
    ws = np.full((d.splits, d.K*d.C*KS*KS), np.nan)
    written = np.zeros_like(ws, dtype=int)
    kgroups = d.KB // TK_; units = kgroups*d.CB*d.PS
    assert units <= 256
    xplane = d.Hp*d.Wp; gplane = d.P*d.Q
    for split in range(d.splits):
        for by in range((d.K + d.KB - 1)//d.KB):
            for bz in range((d.C + d.CB - 1)//d.CB):
                k0, c0 = by*d.KB, bz*d.CB
                acc = np.zeros((units, TK_, KS, KS))
                for n in range(split*d.ipb, min(d.N, split*d.ipb + d.ipb)):
                    xs = np.zeros(d.CB*xplane); gs = np.zeros(d.KB*gplane)
                    for i in range(d.CB*xplane):
                        c = i // xplane; rem = i - c*xplane; hh = rem // d.Wp; w_ = rem - hh*d.Wp
                        h = hh - d.pad; wi = w_ - d.pad
                        if c0 + c < d.C and 0 <= h < d.H and 0 <= wi < d.W: xs[i] = x[((n*d.C + c0 + c)*d.H + h)*d.W + wi]
                    for i in range(d.KB*gplane):
                        k = i // gplane
                        gs[i] = gy[(n*d.K + k0 + k)*gplane + (i - k*gplane)] if k0 + k < d.K else 0.0
                    for tid in range(units):
                        kg = tid % kgroups; cc = (tid // kgroups) % d.CB; ps = tid // (kgroups*d.CB)
                        for p in range(ps, d.P, d.PS):
                            win = np.zeros((KS, KS))
                            for r in range(KS):
                                for s in range(KS - 1): win[r, s + 1] = xs[cc*xplane + (p + r)*d.Wp + s]
                            for q in range(d.Q):
                                for r in range(KS):
                                    for s in range(KS - 1): win[r, s] = win[r, s + 1]
                                    win[r, KS - 1] = xs[cc*xplane + (p + r)*d.Wp + q + KS - 1]
                                gv = [gs[kg*TK_*gplane + t*gplane + p*d.Q + q] for t in range(TK_)]
                                for t in range(TK_): acc[tid, t] += gv[t]*win
                red = acc.reshape(units, V)
                per_share = kgroups*d.CB
                for i in range(per_share*V):
                    u = i // V; v = i - u*V
                    s_ = sum(red[pp*per_share + u, v] for pp in range(d.PS))
                    ukg = u % kgroups; uc = u // kgroups; t = v // (KS*KS); rs = v - t*KS*KS
                    k = k0 + ukg*TK_ + t; c = c0 + uc
                    if k < d.K and c < d.C:
                        ws[split, (k*d.C + c)*KS*KS + rs] = s_; written[split, (k*d.C + c)*KS*KS + rs] += 1
    assert (written == 1).all(), "wgrad coverage"
    return ws.sum(axis=0)

rng = np.random.default_rng(3)
cases = [((2, 1, 28, 28), (32, 1, 3, 3), 1), ((2, 32, 14, 14), (64, 32, 3, 3), 1), ((1, 3, 7, 9), (10, 3, 5, 5), 2),
         ((3, 5, 6, 6), (12, 5, 3, 3), 0), ((2, 32, 14, 14), (64, 32, 5, 5), 2), ((1, 70, 5, 5), (9, 70, 3, 3), 1)]
for xs, wsh, pad in cases:
    g = geom(xs, wsh, (1, 1), (pad, pad), (1, 1), 1)
    KS = wsh[2]
    x = rng.uniform(-1, 1, xs); w = rng.uniform(-1, 1, wsh); b = rng.uniform(-1, 1, (wsh[0],))
    y = ref_fwd(x, w, (1, 1), (pad, pad), (1, 1), 1) + b[None, :, None, None]
    gy = rng.uniform(-1, 1, (g.N, g.K, g.P, g.Q))
    dx = ref_dgrad(gy, w, xs, (1, 1), (pad, pad), (1, 1), 1)
    dwr = ref_wgrad(gy, x, wsh, (1, 1), (pad, pad), (1, 1), 1)
    for sms in (1, 132):
        d = direct_geom(g.N, g.C, g.H, g.W, g.K, g.P, g.Q, pad, KS, sms)
        if d.KB:
            out = run_direct(x.reshape(-1), w.reshape(-1), b, d, KS, direct_tp(g.Q), False)
            check(f"direct fwd {xs}x{wsh} pad {pad} KB {d.KB} CB {d.CB}", out.reshape(y.shape), y)
        d = direct_geom(g.N, g.K, g.P, g.Q, g.C, g.H, g.W, KS - 1 - pad, KS, sms)
        if d.KB:
            out = run_direct(gy.reshape(-1), w.reshape(-1), None, d, KS, direct_tp(g.W), True)
            check(f"direct dgrad {xs}x{wsh} pad {pad} KB {d.KB} CB {d.CB}", out.reshape(dx.shape), dx)
        dw_ = wgrad_geom(g, sms)
        got = run_direct_wgrad(gy.reshape(-1), x.reshape(-1), dw_, KS)
        check(f"direct wgrad {xs}x{wsh} pad {pad} KB {dw_.KB} CB {dw_.CB} PS {dw_.PS} splits {dw_.splits}", got.reshape(wsh), dwr)
print("direct kernels match")

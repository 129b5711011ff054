# Desk check of the implicit-GEMM kernels in kernels/ops/conv2d_igemm.cu without a GPU: the
# kernels' index math (per-thread loads into the shared tiles, vector-load alignment, tile
# coverage, epilogue mapping, split-K partials) transcribed thread by thread into Python and
# compared with numpy reference convolutions. The tile products use numpy (ldmatrix + mma.sync
# fragment layouts are the standard m16n8k16 ones). Keep it in step with the .cu file.
#   python3 tests/sim/conv_igemm_sim.py [mma|simt]     (a few minutes; not part of ctest)
import itertools, math, random, sys
import numpy as np

def ref_fwd(x, w, stride, pad, dil, G):
    N, C, H, W = x.shape; K, Cg, R, S = w.shape
    sh, sw = stride; ph, pw = pad; dh, dw = dil
    P = (H + 2*ph - dh*(R-1) - 1)//sh + 1; Q = (W + 2*pw - dw*(S-1) - 1)//sw + 1
    y = np.zeros((N, K, P, Q))
    Kg = K//G
    for k in range(K):
        g = k // Kg
        for c in range(Cg):
            for r in range(R):
                for s in range(S):
                    for p in range(P):
                        h = p*sh - ph + r*dh
                        if h < 0 or h >= H: continue
                        for q in range(Q):
                            ww = q*sw - pw + s*dw
                            if ww < 0 or ww >= W: continue
                            y[:, k, p, q] += x[:, g*Cg + c, h, ww] * w[k, c, r, s]
    return y

def ref_dgrad(gy, w, xshape, stride, pad, dil, G):
    # adjoint of ref_fwd in x
    N, C, H, W = xshape; K, Cg, R, S = w.shape
    sh, sw = stride; ph, pw = pad; dh, dw = dil
    _, _, P, Q = gy.shape
    dx = np.zeros(xshape); Kg = K//G
    for k in range(K):
        g = k // Kg
        for c in range(Cg):
            for r in range(R):
                for s in range(S):
                    for p in range(P):
                        h = p*sh - ph + r*dh
                        if h < 0 or h >= H: continue
                        for q in range(Q):
                            ww = q*sw - pw + s*dw
                            if ww < 0 or ww >= W: continue
                            dx[:, g*Cg + c, h, ww] += gy[:, k, p, q] * w[k, c, r, s]
    return dx

def ref_wgrad(gy, x, wshape, stride, pad, dil, G):
    K, Cg, R, S = wshape; N, C, H, W = x.shape
    sh, sw = stride; ph, pw = pad; dh, dw = dil
    _, _, P, Q = gy.shape
    dwt = np.zeros(wshape); Kg = K//G
    for k in range(K):
        g = k // Kg
        for c in range(Cg):
            for r in range(R):
                for s in range(S):
                    acc = 0.0
                    for p in range(P):
                        h = p*sh - ph + r*dh
                        if h < 0 or h >= H: continue
                        for q in range(Q):
                            ww = q*sw - pw + s*dw
                            if ww < 0 or ww >= W: continue
                            acc += np.sum(gy[:, k, p, q] * x[:, g*Cg + c, h, ww])
                    dwt[k, c, r, s] = acc
    return dwt

def flat(t, cl):
    # memory of a logical NCHW tensor (or KCRS weight) in NCHW / NHWC (KRSC) order
    return (t.transpose(0, 2, 3, 1) if cl else t).reshape(-1).copy()

def unflat(v, shape, cl):
    N, C, H, W = shape
    return v.reshape(N, H, W, C).transpose(0, 3, 1, 2) if cl else v.reshape(shape)

class Geom: pass

def geom(xs, ws, stride, pad, dil, G):
    g = Geom()
    g.N, g.C, g.H, g.W = xs; g.K, g.Cg, g.R, g.S = ws
    g.sh, g.sw = stride; g.ph, g.pw = pad; g.dh, g.dw = dil; g.G = G
    g.Kg = g.K // G
    g.P = (g.H + 2*g.ph - g.dh*(g.R-1) - 1)//g.sh + 1
    g.Q = (g.W + 2*g.pw - g.dw*(g.S-1) - 1)//g.sw + 1
    return g

def data_gemm(g, dgrad):
    p = Geom()
    if not dgrad:
        p.Wo, p.HoWo, p.Ca, p.Ha, p.Wa, p.Co, p.red, p.ncol = g.Q, g.P*g.Q, g.C, g.H, g.W, g.K, g.Cg, g.Kg
    else:
        p.Wo, p.HoWo, p.Ca, p.Ha, p.Wa, p.Co, p.red, p.ncol = g.W, g.H*g.W, g.K, g.P, g.Q, g.C, g.Kg, g.Cg
    p.M = g.N * p.HoWo; p.img = p.Ca*p.Ha*p.Wa; p.Kg, p.Cg, p.RS, p.S = g.Kg, g.Cg, g.R*g.S, g.S
    p.sh, p.sw, p.ph, p.pw, p.dh, p.dw = g.sh, g.sw, g.ph, g.pw, g.dh, g.dw
    return p

def row_info(p, m, dgrad):
    ok = m < p.M
    if not ok: return (0, 0, 0, False)
    n = m // p.HoWo; rem = m - n*p.HoWo; oh = rem // p.Wo; ow = rem - oh*p.Wo
    base = n*p.img
    if not dgrad: return (base, oh*p.sh - p.ph, ow*p.sw - p.pw, True)
    return (base, oh + p.ph, ow + p.pw, True)

def cdiv(a, b):  # C++ int division (truncation) for non-negative only used
    assert a >= 0 and b > 0
    return a // b

def gather_offset(p, ri, r, s, dgrad, cl):
    base, h0, w0, ok = ri
    if not ok: return -1
    if not dgrad:
        ih = h0 + r*p.dh; iw = w0 + s*p.dw
        if not (0 <= ih < p.Ha and 0 <= iw < p.Wa): return -1
    else:
        th = h0 - r*p.dh; tw = w0 - s*p.dw
        if th < 0 or tw < 0: return -1
        ih = cdiv(th, p.sh); iw = cdiv(tw, p.sw)
        if ih*p.sh != th or iw*p.sw != tw or ih >= p.Ha or iw >= p.Wa: return -1
    return base + (ih*p.Wa + iw)*p.Ca if cl else base + ih*p.Wa + iw

def weight_index(p, g, c_red, col, rs, dgrad, cl):
    kidx = g*p.Kg + (c_red if dgrad else col)
    cidx = col if dgrad else c_red
    return (kidx*p.RS + rs)*p.Cg + cidx if cl else (kidx*p.Cg + cidx)*p.RS + rs

def out_index(p, m, oc, cl):
    if cl: return m*p.Co + oc
    n = m // p.HoWo
    return (n*p.Co + oc)*p.HoWo + (m - n*p.HoWo)

def run_data_mma(src, wt, bias, p, G, cfg, cl, dgrad, vec):
    BM, BN, WM, WN = cfg; BK = 32
    WARPS_M = BM // WM; NT = WARPS_M * (BN // WN) * 32
    MT, NT8 = WM // 16, WN // 8
    A_RUN, B_RUN = BM*BK // NT, BN*BK // NT
    A_TPR, B_TPR = BK // A_RUN, BK // B_RUN
    assert A_RUN % 8 == 0 and B_RUN % 8 == 0 and BK % A_RUN == 0 and BK % B_RUN == 0 and NT % BM == 0 and NT8 % 2 == 0
    B_VEC = vec and not dgrad
    out = np.full(G*0 + p.M*p.Co, np.nan)
    written = np.zeros(p.M*p.Co, dtype=int)
    CT = (p.red + BK - 1)//BK; tiles = p.RS*CT; chs = 1 if cl else p.Ha*p.Wa
    for gz in range(G):
        for bx in range((p.M + BM - 1)//BM):
            for by in range((p.ncol + BN - 1)//BN):
                m0, n0 = bx*BM, by*BN
                acc = np.zeros((BM, BN))
                for t in range(tiles):
                    As = np.full((BM, BK), np.nan); Bs = np.full((BN, BK), np.nan)
                    rs = t // CT; c0 = (t - rs*CT)*BK; r = rs // p.S; s = rs - r*p.S
                    for tid in range(NT):
                        a_row = tid // A_TPR if cl else tid % BM
                        a_kk0 = (tid % A_TPR)*A_RUN if cl else tid // BM
                        ri = row_info(p, m0 + a_row, dgrad)
                        off = gather_offset(p, ri, r, s, dgrad, cl)
                        if cl:
                            cb = c0 + a_kk0
                            for e in range(A_RUN):
                                c = cb + e
                                if vec:
                                    cv = cb + (e // 8)*8  # the vector's first channel decides
                                    okv = off >= 0 and cv < p.red
                                    if okv and e % 8 == 0: assert (off + gz*p.red + cv) % 8 == 0, "unaligned vector"
                                    v = src[off + gz*p.red + c] if okv else 0.0
                                else:
                                    v = src[off + gz*p.red + c] if (off >= 0 and c < p.red) else 0.0
                                assert np.isnan(As[a_row, a_kk0 + e]); As[a_row, a_kk0 + e] = v
                        else:
                            for i in range(A_RUN):
                                c = c0 + a_kk0 + i*(NT // BM)
                                v = src[off + (gz*p.red + c)*chs] if (off >= 0 and c < p.red) else 0.0
                                assert np.isnan(As[a_row, a_kk0 + i*(NT // BM)]); As[a_row, a_kk0 + i*(NT//BM)] = v
                        b_col = tid // B_TPR; b_kk0 = (tid % B_TPR)*B_RUN; colg = n0 + b_col
                        cb = c0 + b_kk0
                        for e in range(B_RUN):
                            c = cb + e
                            if B_VEC:
                                cv = cb + (e // 8)*8
                                okv = colg < p.ncol and cv < p.red
                                idx = weight_index(p, gz, cv, colg, rs, dgrad, cl) + (e % 8)
                                if okv and e % 8 == 0: assert idx % 8 == 0, "unaligned weight vector"
                                v = wt[idx] if okv else 0.0
                            else:
                                v = wt[weight_index(p, gz, c, colg, rs, dgrad, cl)] if (colg < p.ncol and c < p.red) else 0.0
                            assert np.isnan(Bs[b_col, b_kk0 + e]); Bs[b_col, b_kk0 + e] = v
                    assert not np.isnan(As).any() and not np.isnan(Bs).any(), "tile not fully loaded"
                    acc += As @ Bs.T
                # epilogue, warp by warp
                for warp in range(NT // 32):
                    wm0 = (warp % WARPS_M)*WM; wn0 = (warp // WARPS_M)*WN
                    for lane in range(32):
                        gid, tig = lane >> 2, lane & 3
                        for i in range(MT):
                            for e2 in range(2):
                                m = m0 + wm0 + i*16 + gid + e2*8
                                if m >= p.M: continue
                                for j in range(NT8):
                                    for e1 in range(2):
                                        c = n0 + wn0 + j*8 + tig*2 + e1
                                        if c >= p.ncol: continue
                                        oc = gz*p.ncol + c
                                        v = acc[m - m0, c - n0] + (bias[oc] if bias is not None else 0.0)
                                        o = out_index(p, m, oc, cl)
                                        out[o] = v; written[o] += 1
    assert (written == 1).all(), "epilogue coverage"
    return out

def run_data_simt(src, wt, bias, p, G, cfg, cl, dgrad):
    BM, BN, BK, TM, TN = cfg
    MBT, NBT = BM // TM, BN // TN; NT = MBT*NBT
    A_LD, B_LD = BM*BK // NT, BN*BK // NT
    assert NT % BK == 0 and NT % BM == 0
    out = np.full(p.M*p.Co, np.nan); written = np.zeros(p.M*p.Co, dtype=int)
    CT = (p.red + BK - 1)//BK; tiles = p.RS*CT; chs = 1 if cl else p.Ha*p.Wa
    for gz in range(G):
        for bx in range((p.M + BM - 1)//BM):
            for by in range((p.ncol + BN - 1)//BN):
                m0, n0 = bx*BM, by*BN
                acc = np.zeros((BM, BN))
                for t in range(tiles):
                    As = np.full((BK, BM), np.nan); Bs = np.full((BK, BN), np.nan)
                    rs = t // CT; c0 = (t - rs*CT)*BK; r = rs // p.S; s = rs - r*p.S
                    for tid in range(NT):
                        for i in range(A_LD):
                            if cl: a_row, a_kk = tid // BK + i*(NT // BK), tid % BK
                            else: a_row, a_kk = tid % BM, tid // BM + i*(NT // BM)
                            ri = row_info(p, m0 + a_row, dgrad)
                            o = gather_offset(p, ri, r, s, dgrad, cl); c = c0 + a_kk
                            v = src[o + (gz*p.red + c)*chs] if (o >= 0 and c < p.red) else 0.0
                            assert np.isnan(As[a_kk, a_row]); As[a_kk, a_row] = v
                        b_kk = tid % BK
                        for i in range(B_LD):
                            b_col = tid // BK + i*(NT // BK); c = c0 + b_kk; col = n0 + b_col
                            v = wt[weight_index(p, gz, c, col, rs, dgrad, cl)] if (c < p.red and col < p.ncol) else 0.0
                            assert np.isnan(Bs[b_kk, b_col]); Bs[b_kk, b_col] = v
                    assert not np.isnan(As).any() and not np.isnan(Bs).any()
                    acc += As.T @ Bs
                for tid in range(NT):
                    tm = tid // NBT if cl else tid % MBT
                    tn = tid % NBT if cl else tid // MBT
                    for i in range(TM):
                        m = m0 + tm + i*MBT
                        if m >= p.M: continue
                        for j in range(TN):
                            c = n0 + tn + j*NBT
                            if c >= p.ncol: continue
                            oc = gz*p.ncol + c
                            o = out_index(p, m, oc, cl)
                            out[o] = acc[m - m0, c - n0] + (bias[oc] if bias is not None else 0.0); written[o] += 1
    assert (written == 1).all()
    return out

# ---- weight gradient ----

def wgrad_gemm(g):
    p = Geom()
    p.Kg = g.Kg; p.ncol = g.Cg*g.R*g.S; p.J = g.N*g.P*g.Q; p.P, p.Q = g.P, g.Q; p.PQ = g.P*g.Q
    p.K, p.C, p.H, p.W = g.K, g.C, g.H, g.W; p.HW = g.H*g.W; p.Cg = g.Cg; p.RS = g.R*g.S; p.S = g.S
    p.sh, p.sw, p.ph, p.pw, p.dh, p.dw = g.sh, g.sw, g.ph, g.pw, g.dh, g.dw; p.G = g.G
    return p

def jpos(p, j):
    n = j // p.PQ; pq = j - n*p.PQ; pp = pq // p.Q
    return [j, n, pp, pq - pp*p.Q]

def jstep(p, a):
    a[0] += 1; a[3] += 1
    if a[3] == p.Q:
        a[3] = 0; a[2] += 1
        if a[2] == p.P: a[2] = 0; a[1] += 1

def col_info(p, g, col, cl):
    if col >= p.ncol: return (0, 0, 0, False)
    if cl: rs = col // p.Cg; c = col - rs*p.Cg
    else: c = col // p.RS; rs = col - c*p.RS
    r = rs // p.S; s = rs - r*p.S
    xc = g*p.Cg + c if cl else (g*p.Cg + c)*p.HW
    return (xc, r*p.dh - p.ph, s*p.dw - p.pw, True)

def wgrad_x_index(p, ci, a, cl):
    xc, hr, wr, ok = ci
    if not ok or a[0] >= p.J: return -1
    ih = a[2]*p.sh + hr; iw = a[3]*p.sw + wr
    if not (0 <= ih < p.H and 0 <= iw < p.W): return -1
    return (a[1]*p.HW + ih*p.W + iw)*p.C + xc if cl else a[1]*p.C*p.HW + xc + ih*p.W + iw

def wgrad_g_index(p, g, k, a, cl):
    if k >= p.Kg or a[0] >= p.J: return -1
    kk = g*p.Kg + k
    return a[0]*p.K + kk if cl else (a[1]*p.K + kk)*p.PQ + a[2]*p.Q + a[3]

def choose_splits(p, mn, bk, sms):
    total = -(-p.J // bk)
    splits = max(1, (2*sms + mn - 1) // max(mn, 1))
    splits = min(splits, max(1, total // 8)); splits = min(splits, 65535 // max(1, p.G)); splits = max(splits, 1)
    p.tiles_per_split = max(1, -(-total // splits)); p.splits = max(1, -(-total // p.tiles_per_split))

def run_wgrad(gy, x, p, cfg, cl, kind, sms=132):
    # kind 'mma': cfg (BM, BN, WM, WN), BK 32; 'simt': cfg (BM, BN, BK, TM, TN)
    if kind == 'mma':
        BM, BN, WM, WN = cfg; BK = 32; NT = (BM//WM)*(BN//WN)*32
    else:
        BM, BN, BK, TM, TN = cfg; NT = (BM//TM)*(BN//TN)
    A_RUN, B_RUN = BM*BK // NT, BN*BK // NT; A_TPR, B_TPR = BK // A_RUN, BK // B_RUN
    mn = (-(-p.ncol // BN)) * (-(-p.Kg // BM)) * p.G
    choose_splits(p, mn, BK, sms)
    nout = p.G*p.Kg*p.ncol
    ws = np.zeros((p.splits, nout)); written = np.zeros((p.splits, nout), dtype=int)
    total = -(-p.J // BK)
    for z in range(p.G*p.splits):
        g, sp = z // p.splits, z % p.splits
        for bx in range(-(-p.ncol // BN)):
            for by in range(-(-p.Kg // BM)):
                n0, m0 = bx*BN, by*BM
                t0 = sp*p.tiles_per_split; t1 = min(total, t0 + p.tiles_per_split)
                acc = np.zeros((BM, BN))
                for t in range(t0, t1):
                    As = np.full((BM, BK), np.nan); Bs = np.full((BN, BK), np.nan)
                    for tid in range(NT):
                        a_row, a_kk0 = tid // A_TPR, (tid % A_TPR)*A_RUN
                        b_col, b_kk0 = tid // B_TPR, (tid % B_TPR)*B_RUN
                        ci = col_info(p, g, n0 + b_col, cl)
                        a = jpos(p, t*BK + a_kk0)
                        for e in range(A_RUN):
                            o = wgrad_g_index(p, g, m0 + a_row, a, cl)
                            assert np.isnan(As[a_row, a_kk0 + e]); As[a_row, a_kk0 + e] = gy[o] if o >= 0 else 0.0
                            jstep(p, a)
                        b = jpos(p, t*BK + b_kk0)
                        for e in range(B_RUN):
                            o = wgrad_x_index(p, ci, b, cl)
                            assert np.isnan(Bs[b_col, b_kk0 + e]); Bs[b_col, b_kk0 + e] = x[o] if o >= 0 else 0.0
                            jstep(p, b)
                    assert not np.isnan(As).any() and not np.isnan(Bs).any()
                    acc += As @ Bs.T
                for k in range(m0, min(m0 + BM, p.Kg)):
                    for col in range(n0, min(n0 + BN, p.ncol)):
                        o = (g*p.Kg + k)*p.ncol + col
                        ws[sp, o] = acc[k - m0, col - n0]; written[sp, o] += 1
    assert (written == 1).all()
    return ws.sum(axis=0), p.splits

def check(name, got, want, tol=1e-9):
    err = np.max(np.abs(got - want)) if got.size else 0.0
    ok = err <= tol * max(1.0, np.max(np.abs(want)) if want.size else 1.0)
    print(("ok  " if ok else "FAIL"), name, "max err", err)
    if not ok: sys.exit(1)

rng = np.random.default_rng(1)
cases = [
    # (x shape, w shape, stride, pad, dil, groups)
    ((2, 3, 7, 5), (4, 3, 3, 3), (2, 2), (1, 1), (1, 1), 1),
    ((2, 9, 9, 9), (70, 9, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((2, 16, 6, 6), (24, 16, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((2, 4, 7, 5), (6, 2, 3, 3), (2, 2), (1, 1), (1, 1), 2),
    ((1, 2, 7, 7), (3, 2, 3, 3), (1, 1), (2, 2), (2, 2), 1),
    ((1, 3, 6, 8), (2, 3, 2, 4), (2, 1), (1, 0), (1, 1), 1),
    ((2, 40, 12, 12), (72, 40, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((1, 2, 8, 7), (2, 2, 2, 2), (3, 3), (0, 0), (1, 1), 1),
    ((2, 8, 4, 4), (8, 1, 3, 3), (1, 1), (1, 1), (1, 1), 8),
    ((2, 32, 5, 5), (16, 32, 1, 1), (2, 2), (0, 0), (1, 1), 1),
    ((8, 8, 12, 12), (16, 8, 3, 3), (1, 1), (1, 1), (1, 1), 1),  # split-K on the weight gradient
]
mma_cfgs = [(128, 128, 64, 32), (128, 64, 64, 32), (64, 64, 32, 32)]
simt_cfgs = [(128, 128, 8, 8, 8), (64, 64, 16, 4, 4)]
only = sys.argv[1] if len(sys.argv) > 1 else "all"
for ci_, (xs, wsh, st, pd, dl, G) in enumerate(cases):
    g = geom(xs, wsh, st, pd, dl, G)
    x = rng.uniform(-1, 1, xs); w = rng.uniform(-1, 1, wsh); b = rng.uniform(-1, 1, (wsh[0],))
    y = ref_fwd(x, w, st, pd, dl, G)
    gy = rng.uniform(-1, 1, y.shape)
    dx = ref_dgrad(gy, w, xs, st, pd, dl, G)
    dwr = ref_wgrad(gy, x, wsh, st, pd, dl, G)
    for cl in (False, True):
        tag = f"case {ci_} {xs}x{wsh} s{st} p{pd} d{dl} g{G} {'NHWC' if cl else 'NCHW'}"
        xf, wf, gyf = flat(x, cl), flat(w, cl), flat(gy, cl)
        if only in ("all", "mma"):
            for cfg in mma_cfgs:
                for dgrad in (False, True):
                    p = data_gemm(g, dgrad)
                    vecs = [False]
                    if cl and p.red % 8 == 0 and p.Ca % 8 == 0 and (dgrad or p.Cg % 8 == 0): vecs.append(True)
                    for vec in vecs:
                        if not dgrad:
                            out = run_data_mma(xf, wf, b, p, G, cfg, cl, False, vec)
                            check(f"{tag} mma fwd {cfg} vec={vec}", unflat(out, y.shape, cl), y + b[None, :, None, None])
                        else:
                            out = run_data_mma(gyf, wf, None, p, G, cfg, cl, True, vec)
                            check(f"{tag} mma dgrad {cfg} vec={vec}", unflat(out, xs, cl), dx)
                pw_ = wgrad_gemm(g)
                got, splits = run_wgrad(gyf, xf, pw_, cfg, cl, 'mma', sms=4)
                check(f"{tag} mma wgrad {cfg} splits={splits}", unflat(got, wsh, cl), dwr)
        if only in ("all", "simt"):
            for cfg in simt_cfgs:
                p = data_gemm(g, False)
                out = run_data_simt(xf, wf, b, p, G, cfg, cl, False)
                check(f"{tag} simt fwd {cfg}", unflat(out, y.shape, cl), y + b[None, :, None, None])
                p = data_gemm(g, True)
                out = run_data_simt(gyf, wf, None, p, G, cfg, cl, True)
                check(f"{tag} simt dgrad {cfg}", unflat(out, xs, cl), dx)
                pw_ = wgrad_gemm(g)
                got, splits = run_wgrad(gyf, xf, pw_, cfg, cl, 'simt', sms=4)
                check(f"{tag} simt wgrad {cfg} splits={splits}", unflat(got, wsh, cl), dwr)
print("all simulated kernels match")

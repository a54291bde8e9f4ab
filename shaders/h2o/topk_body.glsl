// The body of the top-k shaders (topk.comp reads the scores from a storage buffer,
// topk_tex.comp through a uniform texel buffer); the including file declares binding 0 and
// float score_at(uint i) before including this. See topk.comp for the algorithm.
#ifndef VKH2O_TOPK_BODY_GLSL
#define VKH2O_TOPK_BODY_GLSL

layout(constant_id = 1) const uint PER = 16;
layout(constant_id = 2) const uint PHASE = 0;
layout(constant_id = 3) const uint POLICY = 0;
layout(constant_id = 4) const uint MODE = 0;

const uint WG = gl_WorkGroupSize.x;
const uint NB = 2048u;
const uint W_HIST = 0u;            // 3 x 2048 histograms
const uint W_PREFIX = 6144u;       // resolved key bits so far
const uint W_KREM = 6145u;         // keys still to take among those matching the prefix
const uint W_FLAG = 6146u;         // 0 select, 1 keep none, 2 keep all candidates
const uint W_COUNT = 6147u;        // total kept (written by SCATTER)
const uint W_CHUNK = 6160u;        // per chunk: n_gt, n_eq

layout(set = 0, binding = 1) buffer Work { uint ws[]; };
layout(set = 0, binding = 2) writeonly buffer Out { uint out_idx[]; };

layout(push_constant) uniform Push {
    uint n, begin, end, k;
    uint score_off;     // floats: index i reads scores[score_off + i]
    uint out_off;       // u32s
    uint pos_base;      // position of index 0
    uint cur;           // position of the latest query (mean mode, random policy)
    uint seed, layer;
} p;

shared uint sh_hist[NB];
shared uint sh_a[WG];
shared uint sh_b[WG];
shared uint sh_base[2];

uint key_of(uint i)
{
    return select_key(POLICY, MODE, score_at(p.score_off + i), p.pos_base + i, p.cur, p.seed, p.layer);
}

// keys above T and equal to T among candidates [i0, i1)
uvec2 count_gt_eq(uint i0, uint i1, uint T)
{
    uint gt = 0u, eq = 0u;
    for (uint i = i0; i < i1; i++) {
        uint key = key_of(i);
        gt += key > T ? 1u : 0u;
        eq += key == T ? 1u : 0u;
    }
    return uvec2(gt, eq);
}

uint digit_shift(uint pass) { return pass == 0u ? 21u : (pass == 1u ? 10u : 0u); }
uint digit_mask(uint pass) { return pass == 2u ? 0x3ffu : 0x7ffu; }

void main()
{
    const uint tid = gl_LocalInvocationID.x;
    const uint m = p.end - p.begin;
    const uint c = gl_WorkGroupID.x;
    const uint i0 = p.begin + c * WG * PER + tid * PER;        // first candidate of this invocation
    const uint i1 = min(i0 + PER, p.end);

    if (PHASE <= 2u) {
        const uint pass = PHASE;
        if (pass > 0u && ws[W_FLAG] != 0u) return;
        for (uint b = tid; b < NB; b += WG) sh_hist[b] = 0u;
        barrier();
        const uint sh = digit_shift(pass), mk = digit_mask(pass);
        const uint hs = sh + (pass == 2u ? 10u : 11u);          // bits above this digit
        const uint prefix = ws[W_PREFIX];
        for (uint i = i0; i < i1; i++) {
            uint key = key_of(i);
            bool take = pass == 0u || (key >> hs) == (prefix >> hs);
            // a loop, not an if: llvmpipe leaves a loop at once when no lane is active but
            // runs its lane-by-lane atomic emulation inside an if whatever the mask (passes 1
            // and 2 take few keys)
            while (take) {
                atomicAdd(sh_hist[(key >> sh) & mk], 1u);
                take = false;
            }
        }
        barrier();
        for (uint b = tid; b < NB; b += WG) {
            const uint h = sh_hist[b];
            bool add = h != 0u;
            while (add) {   // a loop, not an if (see above)
                atomicAdd(ws[W_HIST + pass * NB + b], h);
                add = false;
            }
        }
        return;
    }

    if (PHASE <= 5u) {
        const uint pass = PHASE - 3u;
        if (tid != 0u) return;
        uint krem;
        if (pass == 0u) {
            krem = p.k;
            if (krem == 0u) { ws[W_FLAG] = 1u; return; }
            if (krem >= m) { ws[W_FLAG] = 2u; return; }
            ws[W_PREFIX] = 0u;
        } else {
            if (ws[W_FLAG] != 0u) return;
            krem = ws[W_KREM];
        }
        const uint nb = digit_mask(pass) + 1u;
        uint cum = 0u, d = 0u;
        for (uint b = nb; b-- > 0u;) {
            uint h = ws[W_HIST + pass * NB + b];
            if (cum + h >= krem) { d = b; break; }
            cum += h;
        }
        ws[W_PREFIX] = ws[W_PREFIX] | (d << digit_shift(pass));
        ws[W_KREM] = krem - cum;
        return;
    }

    const uint flag = ws[W_FLAG];
    const uint T = ws[W_PREFIX];
    const uint need = ws[W_KREM];

    if (PHASE == 6u) {
        uvec2 ge = flag == 0u ? count_gt_eq(i0, i1, T) : uvec2(0u);
        sh_a[tid] = ge.x;
        sh_b[tid] = ge.y;
        barrier();
        if (tid == 0u) {
            uint sg = 0u, se = 0u;
            for (uint t = 0u; t < WG; t++) { sg += sh_a[t]; se += sh_b[t]; }
            ws[W_CHUNK + 2u * c] = sg;
            ws[W_CHUNK + 2u * c + 1u] = se;
        }
        return;
    }

    // PHASE 7: scatter
    const uint kk = flag == 1u ? 0u : (flag == 2u ? m : p.k);
    if (c == 0u) {
        for (uint j = tid; j < p.begin; j += WG) out_idx[p.out_off + j] = j;
        for (uint j = tid; j < p.n - p.end; j += WG) out_idx[p.out_off + p.begin + kk + j] = p.end + j;
        if (tid == 0u) ws[W_COUNT] = p.begin + kk + (p.n - p.end);
    }
    if (flag == 1u) return;
    if (flag == 2u) {
        for (uint i = i0; i < i1; i++) out_idx[p.out_off + i] = i;
        return;
    }
    uvec2 ge = count_gt_eq(i0, i1, T);
    sh_a[tid] = ge.x;
    sh_b[tid] = ge.y;
    if (tid == 0u) {
        uint sg = 0u, se = 0u;
        for (uint cc = 0u; cc < c; cc++) { sg += ws[W_CHUNK + 2u * cc]; se += ws[W_CHUNK + 2u * cc + 1u]; }
        sh_base[0] = sg;
        sh_base[1] = se;
    }
    barrier();
    uint gb = sh_base[0], eb = sh_base[1];
    for (uint t = 0u; t < tid; t++) { gb += sh_a[t]; eb += sh_b[t]; }
    for (uint i = i0; i < i1; i++) {
        uint key = key_of(i);
        const bool gt = key > T, eq = key == T;
        bool wr = gt || (eq && eb < need);
        const uint dst = p.out_off + p.begin + gb + (gt ? min(eb, need) : eb);
        while (wr) {   // a loop, not an if: see the histogram passes (few keys are kept)
            out_idx[dst] = i;
            wr = false;
        }
        gb += gt ? 1u : 0u;
        eb += eq ? 1u : 0u;
    }
}

#endif

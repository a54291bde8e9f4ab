/*
 * Stage 3 of a decode step (one small workgroup): the step's bookkeeping and, with SELECTS, room
 * for the next token. Counts the appended token (kvc_attend wrote it at the top tier's slot
 * `count`), folds the step's non-finite flags into the statistics, then:
 *   pools: while a tier is full (the top tier from the first), its first victim (victim order:
 *     kvc_bindings.glsl goes_before) is chained to the tier below; the chain's last victim is
 *     evicted or moves into a tier with room; then, bottom up, each victim moves down into the
 *     tier below, requantised on the device from the values its tier holds (SHADOW: from its
 *     top-tier row, which moves with it);
 *   tiers by bytes (BYBYTES): while the held tokens and one more top-tier token exceed p.budget
 *     bytes, the first victim of the highest tier that has a middle token moves down one tier;
 *     in the lowest tier in use it is evicted.
 * Victims come from kvc_combine's candidate lists (each score workgroup's KC first victims per
 * tier) merged on demand, and from the tokens moved into a tier this step; only when a tier has
 * given KC victims from the lists, or its moved-in list is full, is the tier scanned whole
 * (ST_SCANS counts those scans). A token leaving a tier leaves no hole: the tier's last token
 * moves into its slot. With DYN the tiers' chunk tables follow their counts: a tier takes a chunk
 * from the free stack when it grows into one and gives it back when it empties it, and the top
 * tier always has the next append's slot mapped.
 * Spec constants and bindings: kvc_common.glsl, kvc_bindings.glsl.
 *
 * Three kernels are built from this file, KVC_SELECT_VARIANT set by their .comp: kvc_count (0:
 * the bookkeeping only, for a cache that never selects), kvc_select (1: pools) and
 * kvc_select_bytes (2: tiers by bytes). Each module holds only its own path: lavapipe's pipeline
 * creation works on every function a module reaches before the specialisation constants prune
 * it (0.42-0.78 s for the module with both paths, 0.006 s for kvc_count, 0.23-0.30 s for one path).
 */
#extension GL_GOOGLE_include_directive : require
#define KVC_ROWS_QUAL coherent   // one workgroup reads back what its other invocations wrote
#include "kvc_common.glsl"
#include "kvc_bindings.glsl"

const uint SCAN = 0xfffffffeu;
const uint NINS = 16u;

shared uint sh_head[4u * MAX_NMW];   // next entry of each list, per tier
shared uint sh_cons[4];            // list entries taken, per tier
shared uint sh_scan[4];            // 1: the tier's victims come from scans
shared uint sh_ins[4u * NINS * 3u];  // tokens moved into the tier this step: key, position, slot
shared uint sh_nins[4];
shared uint sh_v;
shared uint sh_key[WG], sh_slot[WG], sh_pos[WG];
shared uint sh_chain[4];
shared uint sh_last, sh_room;

uint count_of(uint k) { return state[g_st() + ST_COUNT + k]; }

// DYN: chunks tier k needs for n tokens (the top tier: and the next append's slot)
uint need(uint k, uint n) { return min(((n + (k == 0u ? 1u : 0u)) * tier_tw(k) + CW - 1u) >> CS, tier_vchunks(k)); }
void ensure(uint k, uint n)
{
    const uint st = g_st();
    uint m = state[st + ST_MAPPED + k];
    const uint nd = need(k, n);
    while (m < nd) {
        uint f = state[st + ST_FREE];
        if (f == 0u) { state[st + ST_FAULT] += 1u; break; }
        f--;
        tabs[tab0() + tab_off(k) + m] = tabs[tab0() + tab_off(4u) + f];
        state[st + ST_FREE] = f;
        m++;
    }
    state[st + ST_MAPPED + k] = m;
}
void shrink(uint k, uint n)
{
    const uint st = g_st();
    uint m = state[st + ST_MAPPED + k];
    const uint nd = need(k, n);
    while (m > nd) {
        m--;
        const uint f = state[st + ST_FREE];
        tabs[tab0() + tab_off(4u) + f] = tabs[tab0() + tab_off(k) + m];
        state[st + ST_FREE] = f + 1u;
    }
    state[st + ST_MAPPED + k] = m;
}

void sync()
{
    memoryBarrierBuffer();
    memoryBarrierShared();
    barrier();
}

// invocation 0: tier k's first victim from the lists and the moved-in tokens; SCAN when the lists
// cannot tell; EMPTY when the tier has no middle token
uint list_pick(uint k, uint cur)
{
    if (sh_scan[k] != 0u) return SCAN;
    // While fewer than KC list entries were taken, every original token of the tier not yet
    // taken goes after the head of its part's list, so the first of the heads and the moved-in
    // tokens is the tier's first victim. Past KC (with originals left unseen), scan.
    uint total = 0u;
    for (uint w = 0u; w < p.nmw; w++) total += work[cand_base(w, k)];
    if (sh_cons[k] >= KC && sh_cons[k] < total) { sh_scan[k] = 1u; return SCAN; }
    uint bk = 0u, bp = 0u, bs = EMPTY, bw = EMPTY, bi = EMPTY;
    for (uint w = 0u; w < p.nmw; w++) {
        const uint h = sh_head[k * MAX_NMW + w];
        if (h >= KC) continue;
        const uint b = cand_base(w, k) + 1u + h * 3u;
        if (work[b + 2u] == EMPTY) continue;
        if (bs == EMPTY || goes_before(k, work[b], work[b + 1u], bk, bp, cur)) {
            bk = work[b]; bp = work[b + 1u]; bs = work[b + 2u]; bw = w; bi = EMPTY;
        }
    }
    for (uint i = 0u; i < sh_nins[k]; i++) {
        const uint b = (k * NINS + i) * 3u;
        if (bs == EMPTY || goes_before(k, sh_ins[b], sh_ins[b + 1u], bk, bp, cur)) {
            bk = sh_ins[b]; bp = sh_ins[b + 1u]; bs = sh_ins[b + 2u]; bw = EMPTY; bi = i;
        }
    }
    if (bs == EMPTY) {
        // no head and nothing moved in: no middle token, unless a part had more than its list
        if (sh_cons[k] < total) { sh_scan[k] = 1u; return SCAN; }
        return EMPTY;
    }
    if (bw != EMPTY) {
        sh_cons[k] += 1u;
        sh_head[k * MAX_NMW + bw] += 1u;
    } else {
        const uint last = (k * NINS + sh_nins[k] - 1u) * 3u, b = (k * NINS + bi) * 3u;
        for (uint w = 0u; w < 3u; w++) sh_ins[b + w] = sh_ins[last + w];
        sh_nins[k] -= 1u;
    }
    return bs;
}

// every invocation: tier k's first victim by a scan of its tokens (EMPTY: none)
uint scan_pick(uint k, uint cur)
{
    const uint tid = gl_LocalInvocationID.x, n = count_of(k);
    uint bk = 0u, bs = EMPTY, bp = 0u;
    for (uint t = tid; t < n; t += WG) {
        const Tok r = tok_at(k, t);
        const uint pos = tok_pos(k, r);
        if (!is_middle(pos, cur)) continue;
        const uint key = select_key(POLICY, MODE, tok_score(k, r), pos, cur, p.seed, lay());
        if (bs == EMPTY || goes_before(k, key, pos, bk, bp, cur)) { bk = key; bs = t; bp = pos; }
    }
    sh_key[tid] = bk;
    sh_slot[tid] = bs;
    sh_pos[tid] = bp;
    sync();
    if (tid == 0u) {
        uint ck = 0u, cs = EMPTY, cp = 0u;
        for (uint i = 0u; i < WG; i++) {
            if (sh_slot[i] == EMPTY) continue;
            if (cs == EMPTY || goes_before(k, sh_key[i], sh_pos[i], ck, cp, cur)) { ck = sh_key[i]; cs = sh_slot[i]; cp = sh_pos[i]; }
        }
        sh_v = cs;
        state[g_st() + ST_SCANS] += 1u;
    }
    sync();
    return sh_v;
}

uint victim(uint k, uint cur)
{
    sync();
    if (gl_LocalInvocationID.x == 0u) sh_v = list_pick(k, cur);
    sync();
    const uint v = sh_v;
    return v == SCAN ? scan_pick(k, cur) : v;
}

// slot v of tier k leaves: the tier's last token moves into it (its shadow too), and the lists
// follow it
void remove_slot(uint k, uint v)
{
    const uint tid = gl_LocalInvocationID.x, n = count_of(k), last = n - 1u;
    if (v != last) {
        const Tok src = tok_at(k, last), dst = tok_at(k, v);
        for (uint w = tid; w < tier_tw(k); w += WG) rows[tok_w(dst, w)] = rows[tok_w(src, w)];
        if (SHADOW != 0u && k != 0u) {
            const uint sb = shadow_base(k, last), db = shadow_base(k, v);
            for (uint w = tid; w < tier_row_words(0u); w += WG) shadow[db + w] = shadow[sb + w];
        }
        if (tid == 0u) {
            for (uint w = 0u; w < p.nmw; w++)
                for (uint h = 0u; h < KC; h++) {
                    const uint b = cand_base(w, k) + 1u + h * 3u + 2u;
                    if (work[b] == last) work[b] = v;
                }
            for (uint i = 0u; i < sh_nins[k]; i++)
                if (sh_ins[(k * NINS + i) * 3u + 2u] == last) sh_ins[(k * NINS + i) * 3u + 2u] = v;
        }
    }
    sync();
    if (tid == 0u) {
        state[g_st() + ST_COUNT + k] = last;
        if (DYN != 0u) shrink(k, last);
    }
    sync();
}

void evict(uint k, uint v)
{
    remove_slot(k, v);
    if (gl_LocalInvocationID.x == 0u) state[g_st() + ST_EVICTED] += 1u;
}

// the source's number e: tier kf's row at slot v, or (SHADOW, below the top tier) its shadow
float src_x(uint kf, uint v, Tok r, uint e)
{
    if (SHADOW != 0u && kf != 0u) return deq_shadow(0u, tok_direct(shadow_base(kf, v)), e);
    return deq(kf, r, e);
}

// the token at slot v of tier kf moves down to tier kt, requantised, at kt's end
void move_down(uint kf, uint v, uint kt, uint cur)
{
    const uint tid = gl_LocalInvocationID.x, t = count_of(kt);
    if (tid == 0u && DYN != 0u) ensure(kt, t + 1u);
    sync();
    const Tok src = tok_at(kf, v), dst = tok_at(kt, t);
    const uint b = tier_bits(kt), ng = tier_groups(kt), dw = tier_data_words(kt), per = 32u / b;
    if (SHADOW != 0u) {
        const uint db = shadow_base(kt, t);
        if (kf == 0u)
            for (uint w = tid; w < tier_data_words(0u); w += WG) shadow[db + w] = rows[tok_w(src, w)];
        else
            for (uint w = tid; w < tier_data_words(0u); w += WG) shadow[db + w] = shadow[shadow_base(kf, v) + w];
    }
    for (uint gi = tid; gi < ng; gi += WG) {
        const uvec2 r = group_range(kt, gi);
        float lo = src_x(kf, v, src, r.x), hi = lo;
        for (uint e = r.x + 1u; e < r.x + r.y; e++) {
            const float x = src_x(kf, v, src, e);
            lo = min(lo, x);
            hi = max(hi, x);
        }
        rows[tok_w(dst, dw + gi)] = group_word(lo, hi, b);
    }
    sync();
    for (uint w = tid; w < dw; w += WG) {
        uint word = 0u;
        for (uint i = 0u; i < per; i++) {
            const uint e = w * per + i;
            if (e < W) word |= quant_code(src_x(kf, v, src, e), rows[tok_w(dst, dw + group_of(kt, e))], b) << (i * b);
        }
        rows[tok_w(dst, w)] = word;
    }
    if (tid == 0u) {
        const uint st = g_st(), pos = tok_pos(kf, src), sc = rows[tok_w(src, tier_row_words(kf) + 1u)];
        rows[tok_w(dst, tier_row_words(kt))] = pos;
        rows[tok_w(dst, tier_row_words(kt) + 1u)] = sc;
        state[st + ST_COUNT + kt] = t + 1u;
        state[st + ST_DEMOTED + kf] += 1u;
        if (sh_nins[kt] < NINS) {
            const uint ib = (kt * NINS + sh_nins[kt]) * 3u;
            sh_ins[ib] = select_key(POLICY, MODE, uintBitsToFloat(sc), pos, cur, p.seed, lay());
            sh_ins[ib + 1u] = pos;
            sh_ins[ib + 2u] = t;
            sh_nins[kt] += 1u;
        } else {
            sh_scan[kt] = 1u;
        }
    }
    sync();
    remove_slot(kf, v);
}

uint held_bytes()
{
    uint b = 0u;
    for (uint k = 0u; k < 4u; k++) b += count_of(k) * tier_token_bytes(k);
    return b;
}

void by_bytes(uint cur)
{
    const uint bound = 4u * (p.slots[0] + p.slots[1] + p.slots[2] + p.slots[3]);
    for (uint it = 0u; it < bound; it++) {
        sync();
        if (held_bytes() + tier_token_bytes(0u) <= p.budget) break;
        bool moved = false;
        for (uint k = 0u; k < 4u; k++) {
            if (!tier_used(k) || count_of(k) == 0u) continue;
            const uint nk = next_tier(k);
            if (nk != 4u && count_of(nk) >= tier_slots(nk)) continue;
            const uint v = victim(k, cur);
            if (v == EMPTY) continue;
            if (nk == 4u) evict(k, v);
            else move_down(k, v, nk, cur);
            moved = true;
            break;
        }
        if (!moved) break;
    }
}

void pools(uint cur)
{
    const uint tid = gl_LocalInvocationID.x;
    if (tid == 0u) {
        for (uint k = 0u; k < 4u; k++) sh_chain[k] = EMPTY;
        sh_last = 4u;
        sh_room = 0u;
    }
    sync();
    // the chain, top down: stop at a tier with room
    uint k = 0u;
    while (k < 4u && count_of(k) >= tier_slots(k)) {
        const uint v = victim(k, cur);
        if (v == EMPTY) break;             // only sinks and recents: nothing may move (resolve prevents it)
        if (tid == 0u) { sh_chain[k] = v; sh_last = k; }
        const uint nk = next_tier(k);
        if (nk == 4u) break;               // the lowest tier: its victim is evicted
        if (count_of(nk) < tier_slots(nk)) {
            if (tid == 0u) sh_room = 1u;
            break;
        }
        k = nk;
    }
    sync();
    const uint last = sh_last;
    if (last == 4u) return;
    int from = int(last);
    if (next_tier(last) == 4u || sh_room == 0u) {
        evict(last, sh_chain[last]);
        from = int(last) - 1;
    }
    for (int j = from; j >= 0; j--) {
        const uint kk = uint(j);
        sync();
        if (sh_chain[kk] == EMPTY) continue;
        move_down(kk, sh_chain[kk], next_tier(kk), cur);
    }
}

void main()
{
    g_l = gl_WorkGroupID.y;   // (1, the step's layers)
    const uint tid = gl_LocalInvocationID.x, st = g_st();
    const uint pos = state[st + ST_POS];
    sync();
    if (pos >= p.max_tokens) {
        if (tid == 0u) state[st + ST_OVERFLOW] += 1u;
        return;
    }
    if (tid == 0u) {
        state[st + ST_COUNT] += 1u;
        state[st + ST_CUR] = pos;
        const uint nf = state[st + ST_NF_STEP];
        if (CHECKFIN == 1u && nf != 0u) {
            state[st + ST_NF_COUNT] += 1u;
            state[st + ST_NF_LAST] = pos + 1u;
            if (state[st + ST_NF_FIRST] == 0u) state[st + ST_NF_FIRST] = ~((pos << 4) | nf);
        }
        state[st + ST_NF_STEP] = 0u;
    }
#if KVC_SELECT_VARIANT != 0
    if (SELECTS == 1u) {
        for (uint i = tid; i < 4u * MAX_NMW; i += WG) sh_head[i] = 0u;
        if (tid < 4u) { sh_cons[tid] = 0u; sh_scan[tid] = 0u; sh_nins[tid] = 0u; }
        sync();
#if KVC_SELECT_VARIANT == 2
        by_bytes(pos);
#else
        pools(pos);
#endif
    }
#endif
    sync();
    if (tid == 0u) {
        if (DYN != 0u) ensure(0u, count_of(0u));
        for (uint k = 0u; k < 4u; k++) state[st + ST_EXT + k] = count_of(k);
        state[st + ST_POS] = pos + 1u;
    }
}

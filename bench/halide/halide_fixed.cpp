// Halide 14 (JIT) block-sparse fused attention for the Sparse Transformer
// "fixed" pattern (l = 128, c = 8, causal), compared against attnc's
// hand-written fused CPU kernel. See README.md in this folder.
//
// Pattern: query i attends key j iff j <= i && (j/128 == i/128 || j%128 >= 120).
// O_i = sum_j softmax_j(q_i . k_j * scale) v_j, scale = 1/sqrt(d), float32,
// Q/K/V/O row-major [n, d] per head (Halide layout (d, n, head)).
//
// Algorithm (same for every schedule):
//   rows in blocks of R (R divides 128, so a block lies in one l-block);
//   for row block b the host builds a compacted key list: the stripe columns
//   (j%128 >= 120) of all earlier l-blocks, then the block's own l-block from
//   its first column up to the block's last row; padded with the sentinel n to
//   a multiple of the key chunk KC. Inside Halide:
//     Qs(r, d)   = Q(d, b*R + r) * scale              (transposed, per block)
//     S(r, k)    = sum_d Qs(r, d) * K(d, key(k))       (gathered K rows)
//     Sm(r, k)   = mask(i, key(k)) ? S : -inf          (exact pattern mask)
//     m(r)       = max_k Sm;  P(r, k) = exp(Sm - m);  l(r) = sum_k P
//     O(d, i)    = sum_k P(r, k) * V(d, key(k)) / l(r)  (gathered V rows)
//   The reductions over k run over chunks c < nch(b) only (RDom::where).

#include "Halide.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace Halide;

static const char *kTarget = "x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41";
static const int kL = 128, kC = 8;

static inline bool in_pattern(long i, long j) {
    return j <= i && (j / kL == i / kL || j % kL >= kL - kC);
}

// ---------------------------------------------------------------------------
// Scratch allocator: Halide allocates the per-block scratch (S, P, ...) with
// halide_malloc inside the parallel loop; their sizes depend on the block, so
// they go to the heap, and glibc serves the ~100+ KiB ones with mmap/munmap.
// This pool keeps the blocks of each thread and reuses them.
struct PoolBlock {
    void *base;
    size_t size;
    std::atomic<bool> used;
};
static std::atomic<long> g_sys_allocs{0}, g_pool_allocs{0};
static thread_local std::vector<PoolBlock *> t_pool;
static const size_t kHeader = 64;

static void *pool_malloc(JITUserContext *, size_t size) {
    g_pool_allocs++;
    for (PoolBlock *blk : t_pool) {
        if (!blk->used.load(std::memory_order_relaxed) && blk->size >= size) {
            blk->used = true;
            return (char *)blk->base + kHeader;
        }
    }
    g_sys_allocs++;
    size_t cap = std::max<size_t>(size, 4096);
    cap = (cap + kHeader + 64 + 63) & ~size_t(63);  // header + slack for overreads
    void *base = std::aligned_alloc(64, cap);
    PoolBlock *blk = new PoolBlock{base, cap - kHeader - 64, {true}};
    *(PoolBlock **)base = blk;
    t_pool.push_back(blk);
    return (char *)base + kHeader;
}
static void pool_free(JITUserContext *, void *p) {
    if (!p) return;
    PoolBlock *blk = *(PoolBlock **)((char *)p - kHeader);
    blk->used = false;
}

// ---------------------------------------------------------------------------
struct KeyLists {
    int n = 0, R = 0, KC = 0, nblocks = 0, maxK = 0;
    Buffer<int32_t> keys;  // (maxK, nblocks), padded with n
    Buffer<int32_t> nch;   // (nblocks)
    long executed_pairs = 0;  // R * padded keys, summed over blocks (per head)
};

static KeyLists build_keys(int n, int R, int KC) {
    KeyLists kl;
    kl.n = n; kl.R = R; kl.KC = KC;
    kl.nblocks = (n + R - 1) / R;
    std::vector<std::vector<int>> lists(kl.nblocks);
    for (int b = 0; b < kl.nblocks; b++) {
        int r0 = b * R, last = std::min(r0 + R, n) - 1;
        int L = r0 / kL;
        auto &v = lists[b];
        for (int Lp = 0; Lp < L; Lp++)
            for (int j = Lp * kL + kL - kC; j < (Lp + 1) * kL; j++) v.push_back(j);
        for (int j = L * kL; j <= last; j++) v.push_back(j);
        int padded = (int)((v.size() + KC - 1) / KC * KC);
        kl.maxK = std::max(kl.maxK, padded);
        kl.executed_pairs += (long)R * padded;
    }
    kl.keys = Buffer<int32_t>(kl.maxK, kl.nblocks);
    kl.nch = Buffer<int32_t>(kl.nblocks);
    kl.keys.fill(n);
    for (int b = 0; b < kl.nblocks; b++) {
        for (size_t k = 0; k < lists[b].size(); k++) kl.keys(k, b) = lists[b][k];
        kl.nch(b) = (int)((lists[b].size() + KC - 1) / KC);
    }
    return kl;
}

static long count_nnz(int n) {
    long nnz = 0;
    for (long i = 0; i < n; i++) {
        long L = i / kL;
        // own l-block columns L*128..i, plus stripes of earlier l-blocks
        nnz += (i - L * kL + 1) + L * kC;
    }
    return nnz;
}

// ---------------------------------------------------------------------------
struct Variant {
    std::string name;
    int R = 32;        // rows per block (divides 128, multiple of 16 * s_rv)
    int KC = 16;       // key chunk (padding granule, RDom inner extent)
    int s_rv = 2;      // S tile: 16-lane row vectors
    int s_tk = 8;      // S tile: keys
    int o_tr = 4;      // O tile: rows (d = 64 is 4 vectors of 16)
    bool fast = true;  // Halide::fast_exp instead of exp
    bool pool = true;  // custom pooled malloc
    std::string autosched;  // "" = hand schedule; else autoscheduler name
};

static const int D = 64;

struct Built {
    Pipeline pipe;
    ImageParam Q{Float(32), 3, "Q"}, K{Float(32), 3, "K"}, V{Float(32), 3, "V"};
    ImageParam keys{Int(32), 2, "keys"}, nch{Int(32), 1, "nch"};
    Param<int> n{"n"}, maxC{"maxC"};
    Param<float> scale{"scale"};
};

static void build(Built &B, const Variant &v) {
    const int R = v.R, KC = v.KC;
    Var d("d"), r("r"), k("k"), b("b"), h("h"), i("i");
    Expr nn = B.n;

    Func key("key");
    key(k, b) = B.keys(k, b);
    Func Qs("Qs");
    Qs(r, d, b, h) = B.Q(d, clamp(b * R + r, 0, nn - 1), h) * B.scale;

    RDom rd(0, D, "rd");
    Func S("S");
    S(r, k, b, h) = 0.0f;
    S(r, k, b, h) += Qs(r, rd, b, h) * B.K(rd, clamp(key(k, b), 0, nn - 1), h);

    RDom rk(0, KC, 0, B.maxC, "rk");
    rk.where(rk.y < B.nch(b));
    Expr kk = rk.y * KC + rk.x;

    // Sm and P are defined only on the block's own chunks (update over rk),
    // so that they are computed over nch(b) chunks, not the padded maximum.
    Func Sm("Sm");
    Sm(r, k, b, h) = undef<float>();
    {
        Expr ii = b * R + r, jj = key(kk, b);
        Expr mask = jj <= ii && (jj / kL == ii / kL || jj % kL >= kL - kC);
        Sm(r, kk, b, h) = select(mask, S(r, kk, b, h), Float(32).min());
    }

    Func m("m");
    m(r, b, h) = Float(32).min();
    m(r, b, h) = max(m(r, b, h), Sm(r, kk, b, h));

    Func P("P");
    P(r, k, b, h) = undef<float>();
    Expr e = Sm(r, kk, b, h) - m(r, b, h);
    P(r, kk, b, h) = v.fast ? fast_exp(e) : exp(e);

    Func lsum("lsum");
    lsum(r, b, h) = 0.0f;
    lsum(r, b, h) += P(r, kk, b, h);

    Func Oacc("Oacc");
    Oacc(d, r, b, h) = 0.0f;
    Oacc(d, r, b, h) += P(r, kk, b, h) * B.V(d, clamp(key(kk, b), 0, nn - 1), h);

    // The output is the row-major [rows, d] array of each head viewed as
    // (d, r, b, h) with row = b*R + r (same memory; the host pads rows to a
    // multiple of R). Indexing it as (d, i) with i % R, i / R would defeat
    // Halide's bounds inference (the mod's interval is the whole block).
    Func out("out");
    out(d, r, b, h) = Oacc(d, r, b, h) / lsum(r, b, h);

    out.output_buffer().dim(0).set_bounds(0, D);
    out.output_buffer().dim(1).set_bounds(0, R).set_stride(D);
    out.output_buffer().dim(2).set_min(0).set_stride(D * R);
    for (ImageParam *p : {&B.Q, &B.K, &B.V}) {
        p->dim(0).set_bounds(0, D);
        p->dim(1).set_stride(D);
    }
    B.keys.dim(0).set_min(0);
    B.keys.dim(1).set_min(0);
    B.nch.dim(0).set_min(0);

    B.pipe = Pipeline(out);

    if (!v.autosched.empty()) {
        // Estimates for the autoscheduler (n = 16384, 8 heads, R = 32).
        int n = 16384, H = 8;
        B.n.set_estimate(n);
        B.maxC.set_estimate((127 * 8 + 128) / KC);
        B.scale.set_estimate(0.125f);
        for (ImageParam *p : {&B.Q, &B.K, &B.V}) p->set_estimates({{0, D}, {0, n}, {0, H}});
        B.keys.set_estimates({{0, 1152}, {0, n / R}});
        B.nch.set_estimates({{0, n / R}});
        out.set_estimates({{0, D}, {0, R}, {0, n / R}, {0, H}});
        std::string lib = "/usr/lib/x86_64-linux-gnu/halide14/libautoschedule_" +
                          std::string(v.autosched == "Mullapudi2016" ? "mullapudi2016" : "adams2019") + ".so";
        load_plugin(lib);
        B.pipe.auto_schedule(v.autosched, Target(kTarget), MachineParams(2, 32 * 1024 * 1024, 40));
        return;
    }

    // ------------------------------------------------------------------
    // attnc's hand schedule. Parallel over (row block, head); all per-block
    // intermediates computed per row block.
    Var ro("ro"), ri("ri"), rii("rii"), ko("ko"), ki("ki"), bh("bh"), di("di");
    out.split(r, ro, ri, v.o_tr)
        .split(d, d, di, 16)
        .reorder(di, d, ri, ro, b, h)
        .vectorize(di)
        .unroll(d)
        .unroll(ri)
        .fuse(b, h, bh)
        .parallel(bh);

    // O register tile: (64 x o_tr) accumulators, reduction over k outside.
    Oacc.compute_at(out, ro)
        .split(d, d, di, 16).vectorize(di).unroll(d).unroll(r);
    Oacc.update()
        .split(d, d, di, 16)
        .reorder(di, d, r, rk.x, rk.y)
        .vectorize(di)
        .unroll(d)
        .unroll(r);

    Qs.compute_at(out, bh).vectorize(r, 16);

    // S register tile: (16*s_rv rows x s_tk keys), reduction over d inside.
    // s_tk must divide KC.
    const int SR = 16 * v.s_rv;
    RVar kxo("kxo"), kxi("kxi");
    Sm.compute_at(out, bh);
    Sm.update()
        .split(r, ro, ri, SR)
        .split(rk.x, kxo, kxi, v.s_tk)
        .reorder(ri, kxi, ro, kxo, rk.y)
        .vectorize(ri, 16)
        .unroll(ri)
        .unroll(kxi);
    S.compute_at(Sm, ro).vectorize(r, 16).unroll(r).unroll(k);
    S.update()
        .reorder(r, k, rd)
        .vectorize(r, 16)
        .unroll(r)
        .unroll(k);

    m.compute_at(out, bh).vectorize(r, 16);
    m.update().reorder(r, rk.x, rk.y).vectorize(r, 16);
    P.compute_at(out, bh);
    P.update().reorder(r, rk.x, rk.y).vectorize(r, 16);
    lsum.compute_at(out, bh).vectorize(r, 16);
    lsum.update().reorder(r, rk.x, rk.y).vectorize(r, 16);
}

// ---------------------------------------------------------------------------
struct Problem {
    int n, H;
    Buffer<float> Q, K, V;
};

static Problem make_problem(int n, int H, unsigned seed) {
    Problem p{n, H, Buffer<float>(D, n, H), Buffer<float>(D, n, H), Buffer<float>(D, n, H)};
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (Buffer<float> *buf : {&p.Q, &p.K, &p.V})
        buf->for_each_value([&](float &x) { x = u(rng); });
    return p;
}

// Double-precision reference on rows i with i % row_step == 0 or i == n-1
// (row_step = 1: every row).
static double reference_error(const Problem &p, const Buffer<float> &O, int R, int row_step = 1) {
    double maxerr = 0;
    std::vector<double> s;
    double scale = 1.0 / std::sqrt((double)D);
    for (int h = 0; h < p.H; h++)
        for (int i = 0; i < p.n; i++) {
            if (i % row_step != 0 && i != p.n - 1) continue;
            s.clear();
            double mx = -1e300;
            std::vector<int> js;
            for (int j = 0; j <= i; j++)
                if (in_pattern(i, j)) {
                    double acc = 0;
                    for (int t = 0; t < D; t++) acc += (double)p.Q(t, i, h) * p.K(t, j, h);
                    acc *= scale;
                    s.push_back(acc);
                    js.push_back(j);
                    mx = std::max(mx, acc);
                }
            double sum = 0;
            for (double &x : s) { x = std::exp(x - mx); sum += x; }
            for (int t = 0; t < D; t++) {
                double o = 0;
                for (size_t q = 0; q < js.size(); q++) o += s[q] * p.V(t, js[q], h);
                o /= sum;
                maxerr = std::max(maxerr, std::fabs(o - (double)O(t, i % R, i / R, h)));
            }
        }
    return maxerr;
}

struct Runner {
    Built B;
    Variant v;
    Target target{kTarget};
    void compile() {
        build(B, v);
        if (v.pool) {
            B.pipe.jit_handlers().custom_malloc = pool_malloc;
            B.pipe.jit_handlers().custom_free = pool_free;
        }
        B.pipe.compile_jit(target);
    }
    // (d, r, b, h) view of a row-major [nb*R, d] array per head.
    Buffer<float> alloc_out(int n, int H) {
        return Buffer<float>(D, v.R, (n + v.R - 1) / v.R, H);
    }
    void bind(const Problem &p, const KeyLists &kl) {
        B.Q.set(p.Q); B.K.set(p.K); B.V.set(p.V);
        B.keys.set(kl.keys); B.nch.set(kl.nch);
        B.n.set(p.n);
        B.maxC.set(kl.maxK / v.KC);
        B.scale.set(1.0f / std::sqrt((float)D));
    }
    void run(Buffer<float> &O) { B.pipe.realize(O, target); }
};

static double now_ms() {
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
}

static std::vector<Variant> all_variants() {
    std::vector<Variant> vs;
    auto add = [&](std::string name, int R, int KC, int rv, int tk, int tr, bool fast, bool pool) {
        Variant v; v.name = name; v.R = R; v.KC = KC; v.s_rv = rv; v.s_tk = tk; v.o_tr = tr;
        v.fast = fast; v.pool = pool; vs.push_back(v);
    };
    add("r32_kc16_s2x8_o4", 32, 16, 2, 8, 4, true, true);
    add("r32_kc16_s2x8_o4_exp", 32, 16, 2, 8, 4, false, true);
    add("r32_kc16_s2x8_o4_nopool", 32, 16, 2, 8, 4, true, false);
    add("r32_kc16_s1x16_o6", 32, 16, 1, 16, 6, true, true);
    add("r32_kc24_s2x12_o6", 32, 24, 2, 12, 6, true, true);
    add("r64_kc16_s2x8_o4", 64, 16, 2, 8, 4, true, true);
    add("r64_kc24_s4x6_o6", 64, 24, 4, 6, 6, true, true);
    add("r64_kc32_s2x8_o4", 64, 32, 2, 8, 4, true, true);
    add("r64_kc24_s4x6_o4", 64, 24, 4, 6, 4, true, true);
    add("r64_kc24_s2x12_o6", 64, 24, 2, 12, 6, true, true);
    add("r64_kc24_s4x6_o6_exp", 64, 24, 4, 6, 6, false, true);
    add("r128_kc24_s4x6_o6", 128, 24, 4, 6, 6, true, true);
    add("r16_kc16_s1x16_o4", 16, 16, 1, 16, 4, true, true);
    {
        Variant v; v.name = "auto_mullapudi2016"; v.autosched = "Mullapudi2016"; vs.push_back(v);
    }
    {
        Variant v; v.name = "auto_adams2019"; v.autosched = "Adams2019"; vs.push_back(v);
    }
    return vs;
}

int main(int argc, char **argv) {
    setenv("HL_NUM_THREADS", "2", 0);
    std::string which = "r32_kc16_s2x8_o4";
    bool check = true, bench = true, list = false, stmt = false;
    int n_bench = 16384, H = 8, reps = 5;
    for (int a = 1; a < argc; a++) {
        std::string s = argv[a];
        if (s == "--variant" && a + 1 < argc) which = argv[++a];
        else if (s == "--no-check") check = false;
        else if (s == "--no-bench") bench = false;
        else if (s == "--list") list = true;
        else if (s == "--stmt") stmt = true;
        else if (s == "--n" && a + 1 < argc) n_bench = atoi(argv[++a]);
        else if (s == "--heads" && a + 1 < argc) H = atoi(argv[++a]);
        else if (s == "--repeat" && a + 1 < argc) reps = atoi(argv[++a]);
        else { fprintf(stderr, "unknown argument %s\n", s.c_str()); return 2; }
    }
    std::vector<Variant> vs = all_variants();
    if (list) { for (auto &v : vs) printf("%s\n", v.name.c_str()); return 0; }
    auto it = std::find_if(vs.begin(), vs.end(), [&](const Variant &v) { return v.name == which; });
    if (it == vs.end()) { fprintf(stderr, "no variant %s (see --list)\n", which.c_str()); return 2; }

    Runner run;
    run.v = *it;
    double t0 = now_ms();
    try {
        run.compile();
    } catch (const Halide::Error &e) {
        printf("variant=%s COMPILE FAILED: %s\n", run.v.name.c_str(), e.what());
        return 1;
    }
    double tc = now_ms() - t0;
    printf("variant=%s R=%d KC=%d S-tile=%dx%d O-tile=64x%d exp=%s pool=%d target=%s jit_compile_ms=%.0f\n",
           run.v.name.c_str(), run.v.R, run.v.KC, 16 * run.v.s_rv, run.v.s_tk, run.v.o_tr,
           run.v.fast ? "fast_exp" : "exp", (int)run.v.pool, kTarget, tc);
    if (stmt) {
        run.B.pipe.compile_to_lowered_stmt("/tmp/halide_fixed_" + run.v.name + ".stmt", run.B.pipe.infer_arguments(),
                                           Text, run.target);
        printf("lowered stmt in /tmp/halide_fixed_%s.stmt\n", run.v.name.c_str());
    }

    double worst = 0;
    if (check) {
        for (int n : {1000, 4096}) {
            Problem p = make_problem(n, 2, 1234 + n);
            KeyLists kl = build_keys(n, run.v.R, run.v.KC);
            run.bind(p, kl);
            Buffer<float> O = run.alloc_out(n, p.H);
            run.run(O);
            double err = reference_error(p, O, run.v.R);
            worst = std::max(worst, err);
            printf("  check n=%d heads=%d max_abs_err=%.3g %s\n", n, p.H, err, err < 1e-4 ? "OK" : "FAIL");
        }
    }
    if (bench) {
        int n = n_bench;
        Problem p = make_problem(n, H, 42);
        double tk = now_ms();
        KeyLists kl = build_keys(n, run.v.R, run.v.KC);
        tk = now_ms() - tk;  // host key lists (shared by all heads; not in the timed loop)
        run.bind(p, kl);
        Buffer<float> O = run.alloc_out(n, H);
        run.run(O);  // warm-up (thread pool, pages, pool allocator)
        long sys0 = g_sys_allocs.load(), pool0 = g_pool_allocs.load();
        std::vector<double> ts;
        for (int r = 0; r < reps; r++) {
            double t = now_ms();
            run.run(O);
            ts.push_back(now_ms() - t);
        }
        std::sort(ts.begin(), ts.end());
        double med = ts[ts.size() / 2];
        long nnz = count_nnz(n);
        // Spot-check the timed output against the reference on sampled rows.
        double berr = reference_error(p, O, run.v.R, 257);
        worst = std::max(worst, berr);
        printf("  check n=%d heads=%d rows i%%257==0 and n-1: max_abs_err=%.3g %s\n", n, H, berr,
               berr < 1e-4 ? "OK" : "FAIL");
        double gflops = 4.0 * nnz * D * H / (med * 1e-3) / 1e9;
        printf("  bench n=%d d=%d heads=%d threads=%s nnz/head=%ld executed/useful=%.3f "
               "median_ms=%.2f (min %.2f max %.2f) eff_GFLOP/s=%.1f",
               n, D, H, getenv("HL_NUM_THREADS"), nnz, (double)kl.executed_pairs / nnz, med, ts.front(),
               ts.back(), gflops);
        if (run.v.pool)
            printf(" mallocs/run=%.0f (system %.0f)", double(g_pool_allocs - pool0) / reps,
                   double(g_sys_allocs - sys0) / reps);
        printf("\n");
        printf("  host key lists: %.2f ms once (maxK=%d); with them in every run: %.1f GFLOP/s\n", tk, kl.maxK,
               4.0 * nnz * D * H / ((med + tk) * 1e-3) / 1e9);
        if (check)
            printf("RESULT %s ms=%.2f gflops=%.1f err=%.3g exec_useful=%.3f keylists_ms=%.2f\n", run.v.name.c_str(),
                   med, gflops, worst, (double)kl.executed_pairs / nnz, tk);
    }
    return (check && worst >= 1e-4) ? 1 : 0;
}

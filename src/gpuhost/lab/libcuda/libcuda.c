/*
 * libcuda.so.1 for the lab's simulated GPU hosts (issue 38, "Prove it").
 *
 * It answers the CUDA driver API calls gpuhost's measurement makes
 * (plugins/module_utils/cudadrv.py SIGNATURES), by the names libcuda.so.1 exports them
 * (cuda.h's _v2 defines) and with cuda.h's error codes for bad calls, so that the same
 * Python code runs in the lab as on a real host. It copies no data and runs no kernel:
 * every operation gets a duration from the lab's model of the host
 * (/run/gpuhost-lab/cuda-model, which the lab machine computes from the host's state at each
 * read: link, payload size, NUMA placement, P2P status, CPU driver and idle states) and the
 * driver's events report those modelled times. Only what the CPU itself spends (a launch,
 * a wait for completion) passes as real time, spun on the calling thread, because the
 * measurement times those with the wall clock.
 *
 * Operations on streams are resolved when something waits for them: all pending ones at
 * once, in virtual time, each at its own modelled rate, and copies on GPUs that share an
 * upstream link (a switch, a root complex) splitting that link's rate while they overlap.
 *
 * The extra symbol gpuhost_lab_model says what this library is: every figure measured
 * through it is "modelled". gpuhost_lab_set_cpu tells it which (lab) CPU the calling thread
 * runs on, since the lab's CPUs are not the machine's; the lab's Python site hook calls it
 * from os.sched_setaffinity.
 */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

const char gpuhost_lab_model[] = "gpuhost lab: figures are modelled, not measured";

/* cuda.h CUresult values */
enum {
    CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3, CUDA_ERROR_NO_DEVICE = 100, CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200, CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217, CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_INVALID_HANDLE = 400, CUDA_ERROR_NOT_FOUND = 500, CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
    CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705, CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_UNKNOWN = 999,
};

static const struct { int code; const char *name; } ERRORS[] = {
    {0, "CUDA_SUCCESS"}, {1, "CUDA_ERROR_INVALID_VALUE"}, {2, "CUDA_ERROR_OUT_OF_MEMORY"},
    {3, "CUDA_ERROR_NOT_INITIALIZED"}, {4, "CUDA_ERROR_DEINITIALIZED"}, {100, "CUDA_ERROR_NO_DEVICE"},
    {101, "CUDA_ERROR_INVALID_DEVICE"}, {200, "CUDA_ERROR_INVALID_IMAGE"}, {201, "CUDA_ERROR_INVALID_CONTEXT"},
    {217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"}, {218, "CUDA_ERROR_INVALID_PTX"},
    {400, "CUDA_ERROR_INVALID_HANDLE"}, {500, "CUDA_ERROR_NOT_FOUND"}, {600, "CUDA_ERROR_NOT_READY"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS"}, {704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"},
    {705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED"}, {719, "CUDA_ERROR_LAUNCH_FAILED"},
    {999, "CUDA_ERROR_UNKNOWN"},
};

#define MAXGPU 64
#define MAXNODE 64
#define MAXCPU 8192

typedef struct { int ok; double gbs, lat_us, host_gbs, host_lat_us; int drops; } Peer;
typedef struct {
    char bus[64], name[128];
    long mem_mib;
    int node, share;
    double h2d[2], d2h[2], mem, launch[2], sync[2];   /* [0] local CPU, [1] remote */
    char fail_call[64]; int fail_code;
} Gpu;

static struct {
    int loaded, initialized, ngpu, driver;
    double noise, share_gbs[MAXGPU];
    unsigned seed;
    Gpu gpu[MAXGPU];
    Peer peer[MAXGPU][MAXGPU];
    short cpu_node[MAXCPU];
} M;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int thread_cpu = -1;           /* the lab CPU this thread runs on, -1 unpinned */

/* ---- handles: everything handed out is registered, so a stale or foreign one is refused ---- */
typedef struct Ctx { int dev; int retained; int peers[MAXGPU]; long used; } Ctx;
typedef struct Op Op;
typedef struct Stream { Ctx *ctx; Op *head, *tail; double done; } Stream;
typedef struct Event { Ctx *ctx; int recorded; Op *op; double t; } Event;
struct Op {
    Op *next; Stream *s; Event *ev;
    double bytes, rate;                /* a copy: bytes at up to rate GB/s; else a fixed time */
    double fixed_us, submit, start, end, left;
    int share, started;
};
typedef struct Module { Ctx *ctx; char names[16][64]; int n; } Module;
typedef struct Alloc { Ctx *ctx; uint64_t addr; size_t size; char *mem; } Alloc;
typedef struct Host { void *p; size_t size; int node; } Host;

static Ctx ctxs[MAXGPU];
static __thread Ctx *current;
static double host_now;                 /* virtual microseconds: what the host has waited for */

#define REG(type, name) static type *name[4096]; static int n_##name;
REG(Stream, streams) REG(Event, events) REG(Module, modules) REG(Alloc, allocs) REG(Host, hosts)
#define ADD(arr, x) do { if (n_##arr < 4096) arr[n_##arr++] = (x); } while (0)
#define FIND(arr, x, found) do { found = -1; for (int _i = 0; _i < n_##arr; _i++) if ((void *)arr[_i] == (void *)(x)) { found = _i; break; } } while (0)
#define DROP(arr, i) do { arr[i] = arr[--n_##arr]; } while (0)

/* ---- the model ------------------------------------------------------------------------------ */
static const char *model_path(void) {
    const char *p = getenv("GPUHOST_LAB_CUDA_MODEL");
    return p && *p ? p : "/run/gpuhost-lab/cuda-model";
}

static void parse_cpulist(const char *s, int node) {
    while (*s) {
        char *end; long lo = strtol(s, &end, 10), hi = lo;
        if (end == s) break;
        if (*end == '-') hi = strtol(end + 1, &end, 10);
        for (long c = lo; c <= hi && c < MAXCPU; c++) if (c >= 0) M.cpu_node[c] = (short)node;
        s = *end == ',' ? end + 1 : end;
        if (*s == '\n' || *s == ' ') break;
    }
}

/* a rate or a time the model gives: never 0 or below, which would stall virtual time */
static double positive(double x) { return isfinite(x) && x > 1e-3 ? x : 1e-3; }

static double kv(const char *line, const char *key, double dflt) {
    char pat[48]; snprintf(pat, sizeof pat, " %s=", key);
    const char *p = strstr(line, pat);
    return p ? strtod(p + strlen(pat), NULL) : dflt;
}

static int load_model(void) {
    FILE *f = fopen(model_path(), "r");
    if (!f) return 0;
    memset(&M, 0, sizeof M);
    for (int c = 0; c < MAXCPU; c++) M.cpu_node[c] = -1;
    M.driver = 12080; M.noise = 0.01; M.seed = 1;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        int i, j, n;
        char word[64];
        if (sscanf(line, "driver %d", &M.driver) == 1) continue;
        if (sscanf(line, "seed %u", &M.seed) == 1) continue;
        if (sscanf(line, "noise %lf", &M.noise) == 1) continue;
        if (sscanf(line, "node %d %n", &i, &n) == 1) { parse_cpulist(line + n, i); continue; }
        double gbs;
        if (sscanf(line, "share %d %lf", &i, &gbs) == 2) {
            if (i >= 0 && i < MAXGPU) M.share_gbs[i] = gbs;
            continue;
        }
        if (sscanf(line, "name %d %n", &i, &n) == 1 && i >= 0 && i < MAXGPU) {
            snprintf(M.gpu[i].name, sizeof M.gpu[i].name, "%s", line + n);
            M.gpu[i].name[strcspn(M.gpu[i].name, "\n")] = 0;
            continue;
        }
        if (sscanf(line, "gpu %d %15s", &i, word) == 2 && i >= 0 && i < MAXGPU) {
            Gpu *g = &M.gpu[i];
            snprintf(g->bus, sizeof g->bus, "%s", word);
            g->node = (int)kv(line, "node", -1); g->share = (int)kv(line, "share", -1);
            if (g->share >= MAXGPU) g->share = -1;
            g->mem_mib = (long)kv(line, "mem_mib", 1024);
            g->h2d[0] = positive(kv(line, "h2d_local", 1)); g->h2d[1] = positive(kv(line, "h2d_remote", 1));
            g->d2h[0] = positive(kv(line, "d2h_local", 1)); g->d2h[1] = positive(kv(line, "d2h_remote", 1));
            g->mem = positive(kv(line, "mem", 1));
            g->launch[0] = kv(line, "launch_local", 5); g->launch[1] = kv(line, "launch_remote", 5);
            g->sync[0] = kv(line, "sync_local", 10); g->sync[1] = kv(line, "sync_remote", 10);
            if (i + 1 > M.ngpu) M.ngpu = i + 1;
            continue;
        }
        double a, b, c, d; int ok, drops = 0;
        if (sscanf(line, "peer %d %d %d %lf %lf %lf %lf %d", &i, &j, &ok, &a, &b, &c, &d, &drops) >= 7
            && i >= 0 && j >= 0 && i < MAXGPU && j < MAXGPU) {
            M.peer[i][j] = (Peer){ok, positive(a), positive(b), positive(c), positive(d), drops};
            continue;
        }
        if (sscanf(line, "fail %d %63s %d", &i, word, &ok) == 3 && i >= 0 && i < MAXGPU) {
            snprintf(M.gpu[i].fail_call, sizeof M.gpu[i].fail_call, "%s", word);
            M.gpu[i].fail_code = ok;
        }
    }
    fclose(f);
    /* seeded per host by the model, and per process: two runs on one host differ as two
       measurements do, so a before and an after are never the same samples */
    M.seed ^= (unsigned)getpid() * 2654435761u;
    return 1;
}

/* small seeded noise: the same run of calls gives the same figures */
static double noisy(double x) {
    M.seed = M.seed * 1103515245u + 12345u;
    double u = ((M.seed >> 8) & 0xFFFF) / 65535.0 * 2.0 - 1.0;       /* -1 .. 1 */
    return x * (1.0 + M.noise * u);
}

/* the node of the lab CPU the site hook placed this thread on; else of the CPU it runs on
   (a test that pins a thread to a real CPU its model names); -1 where the model has none */
static int thread_node(void) {
    int cpu = thread_cpu >= 0 ? thread_cpu : sched_getcpu();
    return cpu < 0 || cpu >= MAXCPU ? -1 : M.cpu_node[cpu];
}

/* whether the calling CPU is on another node than the GPU (launches and waits) */
static int remote_cpu(const Gpu *g) {
    int n = thread_node();
    return g->node >= 0 && n >= 0 && n != g->node;
}

static void spin_us(double us) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1e6 + (t.tv_nsec - t0.tv_nsec) / 1e3 < us);
}

int gpuhost_lab_set_cpu(int cpu) { thread_cpu = cpu; return 0; }

/* ---- virtual time: resolve every pending operation --------------------------------------------- */
static void resolve(void) {
    double now = -INFINITY;             /* where the simulation stands within this call */
    for (;;) {
        /* the head of each stream: running, or ready once submitted and its stream is free */
        Op *act[4096]; int na = 0, pending = 0;
        double next_ready = INFINITY, t = INFINITY;
        for (int i = 0; i < n_streams; i++) {
            Op *o = streams[i]->head;
            if (!o) continue;
            pending = 1;
            double ready = o->started ? now : fmax(o->submit, streams[i]->done);
            if (ready < t) t = ready;
        }
        if (!pending) return;
        for (int i = 0; i < n_streams; i++) {
            Op *o = streams[i]->head;
            if (!o) continue;
            double ready = o->started ? now : fmax(o->submit, streams[i]->done);
            if (ready <= t + 1e-9) {
                if (!o->started) { o->started = 1; o->start = t; }
                if (na < 4096) act[na++] = o;
            } else if (ready < next_ready) next_ready = ready;
        }
        /* copies through one shared upstream link, per direction, split its rate */
        int count[2 * MAXGPU] = {0};
        for (int k = 0; k < na; k++) if (act[k]->share >= 0 && act[k]->bytes > 0) count[act[k]->share]++;
        double step = next_ready - t;
        double rate[4096];
        for (int k = 0; k < na; k++) {
            Op *o = act[k];
            if (o->bytes > 0) {
                double r = o->rate, link = o->share >= 0 ? M.share_gbs[o->share / 2] : 0;
                if (link > 0) r = fmin(r, link / count[o->share]);
                rate[k] = r * 1e3;                             /* bytes per microsecond */
                double need = o->left / rate[k];
                if (need < step) step = need;
            } else {
                rate[k] = 0;
                if (o->left < step) step = o->left;
            }
        }
        if (!isfinite(step)) return;          /* nothing can finish: never spin on it */
        if (step < 0) step = 0;
        now = t + step;
        for (int k = 0; k < na; k++) {
            Op *o = act[k];
            o->left -= o->bytes > 0 ? rate[k] * step : step;
            if (o->left <= 1e-6 * (o->bytes > 0 ? o->bytes : 1)) {
                o->end = now;
                Stream *s = o->s;
                s->done = o->end;
                if (o->ev) { o->ev->t = o->end; o->ev->op = NULL; }
                s->head = o->next;
                if (!s->head) s->tail = NULL;
                free(o);
            }
        }
    }
}

static void enqueue(Stream *s, double bytes, double rate, double fixed_us, int share, Event *ev) {
    Op *o = calloc(1, sizeof *o);
    o->s = s; o->bytes = bytes; o->rate = rate; o->fixed_us = fixed_us; o->share = share; o->ev = ev;
    o->submit = host_now;
    o->left = bytes > 0 ? bytes : fixed_us;
    if (ev) ev->op = o;
    if (s->tail) s->tail->next = o; else s->head = o;
    s->tail = o;
}

/* ---- the calls --------------------------------------------------------------------------------- */
#define CHECK_INIT() do { if (!M.initialized) return CUDA_ERROR_NOT_INITIALIZED; } while (0)

static int failing(const char *call) {
    if (!current) return 0;
    Gpu *g = &M.gpu[current->dev];
    return g->fail_code && !strcmp(g->fail_call, call) ? g->fail_code : 0;
}
#define FAIL(call) do { int _c = failing(call); if (_c) return _c; } while (0)

int cuGetErrorName(int code, const char **out) {
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof ERRORS / sizeof *ERRORS; i++)
        if (ERRORS[i].code == code) { *out = ERRORS[i].name; return CUDA_SUCCESS; }
    *out = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

int cuInit(unsigned flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (!M.loaded) M.loaded = load_model();
    int ok = M.loaded && M.ngpu > 0;
    if (ok) M.initialized = 1;
    pthread_mutex_unlock(&lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

int cuDriverGetVersion(int *v) {
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    if (!M.loaded) M.loaded = load_model();
    *v = M.driver ? M.driver : 12080;
    return CUDA_SUCCESS;
}

int cuDeviceGetCount(int *n) { CHECK_INIT(); if (!n) return CUDA_ERROR_INVALID_VALUE; *n = M.ngpu; return CUDA_SUCCESS; }

int cuDeviceGet(int *dev, int ordinal) {
    CHECK_INIT();
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= M.ngpu) return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

#define CHECK_DEV(d) do { if ((d) < 0 || (d) >= M.ngpu) return CUDA_ERROR_INVALID_DEVICE; } while (0)

int cuDeviceGetName(char *name, int len, int dev) {
    CHECK_INIT(); CHECK_DEV(dev);
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", M.gpu[dev].name);
    return CUDA_SUCCESS;
}

int cuDeviceGetPCIBusId(char *bus, int len, int dev) {
    CHECK_INIT(); CHECK_DEV(dev);
    if (!bus || len < 13) return CUDA_ERROR_INVALID_VALUE;
    snprintf(bus, (size_t)len, "%s", M.gpu[dev].bus);
    for (char *p = bus; *p; p++) if (*p >= 'a' && *p <= 'f') *p -= 32;      /* the driver prints upper case */
    return CUDA_SUCCESS;
}

int cuDeviceCanAccessPeer(int *can, int dev, int peer) {
    CHECK_INIT(); CHECK_DEV(dev); CHECK_DEV(peer);
    if (!can) return CUDA_ERROR_INVALID_VALUE;
    *can = dev != peer && M.peer[dev][peer].ok;
    return CUDA_SUCCESS;
}

int cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    CHECK_INIT(); CHECK_DEV(dev);
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    ctxs[dev].dev = dev;
    ctxs[dev].retained++;
    *ctx = &ctxs[dev];
    return CUDA_SUCCESS;
}

static int valid_ctx(void *c) {
    for (int i = 0; i < M.ngpu; i++) if (c == &ctxs[i] && ctxs[i].retained > 0) return 1;
    return 0;
}

int cuDevicePrimaryCtxRelease_v2(int dev) {
    CHECK_INIT(); CHECK_DEV(dev);
    if (ctxs[dev].retained <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--ctxs[dev].retained == 0) {
        if (current == &ctxs[dev]) current = NULL;
        memset(ctxs[dev].peers, 0, sizeof ctxs[dev].peers);
    }
    return CUDA_SUCCESS;
}

int cuCtxSetCurrent(void *ctx) {
    CHECK_INIT();
    if (ctx && !valid_ctx(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    current = ctx;
    return CUDA_SUCCESS;
}

#define NEED_CTX() do { CHECK_INIT(); if (!current) return CUDA_ERROR_INVALID_CONTEXT; } while (0)

int cuCtxSynchronize(void) {
    NEED_CTX();
    pthread_mutex_lock(&lock);
    resolve();
    for (int i = 0; i < n_streams; i++) if (streams[i]->ctx == current) host_now = fmax(host_now, streams[i]->done);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

int cuCtxEnablePeerAccess(void *peer, unsigned flags) {
    NEED_CTX();
    if (flags) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ctx(peer) || peer == current) return CUDA_ERROR_INVALID_CONTEXT;
    int p = ((Ctx *)peer)->dev;
    if (!M.peer[current->dev][p].ok) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    if (current->peers[p]) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    current->peers[p] = 1;
    return CUDA_SUCCESS;
}

int cuCtxDisablePeerAccess(void *peer) {
    NEED_CTX();
    if (!valid_ctx(peer)) return CUDA_ERROR_INVALID_CONTEXT;
    int p = ((Ctx *)peer)->dev;
    if (!current->peers[p]) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    current->peers[p] = 0;
    return CUDA_SUCCESS;
}

int cuMemAlloc_v2(uint64_t *dptr, size_t size) {
    NEED_CTX(); FAIL("cuMemAlloc_v2");
    if (!dptr || !size) return CUDA_ERROR_INVALID_VALUE;
    if (current->used + (long)(size >> 20) > M.gpu[current->dev].mem_mib) return CUDA_ERROR_OUT_OF_MEMORY;
    static uint64_t next = 0x7f0000000000ull;
    /* backed by reserved memory that only the small copies touch (see move) */
    void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    Alloc *a = calloc(1, sizeof *a);
    a->ctx = current; a->size = size; a->addr = next; a->mem = mem;
    next += (size + 0xFFFFF) & ~0xFFFFFull;
    current->used += (long)(size >> 20);
    ADD(allocs, a);
    *dptr = a->addr;
    return CUDA_SUCCESS;
}

/* Copies of up to 1 MiB move their bytes, so that a caller can check what arrived; larger ones
   only take their modelled time (their buffers stay untouched, and cost no memory). */
#define MOVED_BYTES (1u << 20)
static void move(void *dst, const void *src, size_t n) {
    if (n <= MOVED_BYTES) memmove(dst, src, n);
}

static Alloc *find_alloc(uint64_t addr, size_t size) {
    for (int i = 0; i < n_allocs; i++)
        if (addr >= allocs[i]->addr && addr + size <= allocs[i]->addr + allocs[i]->size) return allocs[i];
    return NULL;
}

static char *device_mem(const Alloc *a, uint64_t addr) { return a->mem + (addr - a->addr); }

int cuMemFree_v2(uint64_t dptr) {
    NEED_CTX();
    for (int i = 0; i < n_allocs; i++)
        if (allocs[i]->addr == dptr) {
            allocs[i]->ctx->used -= (long)(allocs[i]->size >> 20);
            munmap(allocs[i]->mem, allocs[i]->size);
            free(allocs[i]); DROP(allocs, i);
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

int cuMemHostAlloc(void **p, size_t size, unsigned flags) {
    NEED_CTX();
    if (!p || !size || flags > 0x7) return CUDA_ERROR_INVALID_VALUE;
    /* reserved, never touched: the model copies no data */
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    Host *h = calloc(1, sizeof *h);
    /* the pages come from the allocating thread's node (the kernel's default policy: local
       allocation, Documentation/admin-guide/mm/numa_memory_policy.rst), which is where a
       copy's DMA then reads or writes them */
    h->p = m; h->size = size; h->node = thread_node();
    ADD(hosts, h);
    *p = m;
    return CUDA_SUCCESS;
}

static Host *find_host(const void *p, size_t size) {
    for (int i = 0; i < n_hosts; i++)
        if ((const char *)p >= (char *)hosts[i]->p && (const char *)p + size <= (char *)hosts[i]->p + hosts[i]->size)
            return hosts[i];
    return NULL;
}

int cuMemFreeHost(void *p) {
    CHECK_INIT();
    for (int i = 0; i < n_hosts; i++)
        if (hosts[i]->p == p) {
            munmap(p, hosts[i]->size);
            free(hosts[i]); DROP(hosts, i);
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

int cuStreamCreate(void **s, unsigned flags) {
    NEED_CTX();
    if (!s || flags > 1) return CUDA_ERROR_INVALID_VALUE;
    Stream *x = calloc(1, sizeof *x);
    x->ctx = current;
    x->done = host_now;
    pthread_mutex_lock(&lock); ADD(streams, x); pthread_mutex_unlock(&lock);
    *s = x;
    return CUDA_SUCCESS;
}

static Stream *stream_of(void *s) {
    int i; FIND(streams, s, i);
    return i < 0 ? NULL : streams[i];
}

int cuStreamDestroy_v2(void *s) {
    CHECK_INIT();
    pthread_mutex_lock(&lock);
    int i; FIND(streams, s, i);
    if (i < 0) { pthread_mutex_unlock(&lock); return CUDA_ERROR_INVALID_HANDLE; }
    resolve();
    free(streams[i]); DROP(streams, i);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

static double wait_cost(Stream *s) {
    Gpu *g = &M.gpu[s->ctx->dev];
    return g->sync[remote_cpu(g)];
}

int cuStreamSynchronize(void *s) {
    CHECK_INIT();
    Stream *x = stream_of(s);
    if (!x) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    int had = x->head != NULL;
    resolve();
    host_now = fmax(host_now, x->done);
    pthread_mutex_unlock(&lock);
    if (had) spin_us(wait_cost(x));
    return CUDA_SUCCESS;
}

int cuEventCreate(void **e, unsigned flags) {
    NEED_CTX();
    if (!e || flags > 0xF) return CUDA_ERROR_INVALID_VALUE;
    Event *x = calloc(1, sizeof *x);
    x->ctx = current;
    ADD(events, x);
    *e = x;
    return CUDA_SUCCESS;
}

static Event *event_of(void *e) {
    int i; FIND(events, e, i);
    return i < 0 ? NULL : events[i];
}

int cuEventDestroy_v2(void *e) {
    CHECK_INIT();
    int i; FIND(events, e, i);
    if (i < 0) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    if (events[i]->op) events[i]->op->ev = NULL;
    free(events[i]); DROP(events, i);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

int cuEventRecord(void *e, void *s) {
    CHECK_INIT();
    Event *x = event_of(e);
    Stream *st = stream_of(s);
    if (!x || !st) return CUDA_ERROR_INVALID_HANDLE;
    if (x->ctx != st->ctx) return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    x->recorded = 1;
    if (x->op) x->op->ev = NULL;
    x->op = NULL;
    if (st->head) enqueue(st, 0, 0, 0, -1, x);
    else x->t = fmax(host_now, st->done);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

int cuEventSynchronize(void *e) {
    CHECK_INIT();
    Event *x = event_of(e);
    if (!x) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    int had = x->op != NULL;
    resolve();
    if (x->recorded) host_now = fmax(host_now, x->t);
    pthread_mutex_unlock(&lock);
    if (had) spin_us(M.gpu[x->ctx->dev].sync[remote_cpu(&M.gpu[x->ctx->dev])]);
    return CUDA_SUCCESS;
}

int cuEventElapsedTime(float *ms, void *a, void *b) {
    CHECK_INIT();
    Event *x = event_of(a), *y = event_of(b);
    if (!ms) return CUDA_ERROR_INVALID_VALUE;
    if (!x || !y || !x->recorded || !y->recorded) return CUDA_ERROR_INVALID_HANDLE;
    if (x->ctx != y->ctx) return CUDA_ERROR_INVALID_HANDLE;
    if (x->op || y->op) return CUDA_ERROR_NOT_READY;
    *ms = (float)((y->t - x->t) / 1000.0);
    return CUDA_SUCCESS;
}

static int copy(Stream *x, double bytes, double rate, int share) {
    pthread_mutex_lock(&lock);
    enqueue(x, bytes, noisy(rate), 0, share, NULL);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

static int copy_checks(void *s, Stream **x) {
    NEED_CTX();
    *x = stream_of(s);
    if (!*x) return CUDA_ERROR_INVALID_HANDLE;
    if ((*x)->ctx != current) return CUDA_ERROR_INVALID_CONTEXT;
    return CUDA_SUCCESS;
}

/* whether a pinned buffer lives on another node than the GPU: its copies cross the sockets */
static int remote_memory(const Gpu *g, const Host *h) {
    return g->node >= 0 && h->node >= 0 && h->node != g->node;
}

int cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t n, void *s) {
    Stream *x; int r = copy_checks(s, &x); if (r) return r;
    FAIL("cuMemcpyHtoDAsync_v2");
    Host *h = find_host(src, n);
    Alloc *d = find_alloc(dst, n);
    if (!d || !h) return CUDA_ERROR_INVALID_VALUE;
    Gpu *g = &M.gpu[current->dev];
    move(device_mem(d, dst), src, n);
    return copy(x, (double)n, g->h2d[remote_memory(g, h)], g->share >= 0 ? 2 * g->share : -1);
}

int cuMemcpyDtoHAsync_v2(void *dst, uint64_t src, size_t n, void *s) {
    Stream *x; int r = copy_checks(s, &x); if (r) return r;
    FAIL("cuMemcpyDtoHAsync_v2");
    Host *h = find_host(dst, n);
    Alloc *a = find_alloc(src, n);
    if (!a || !h) return CUDA_ERROR_INVALID_VALUE;
    Gpu *g = &M.gpu[current->dev];
    move(dst, device_mem(a, src), n);
    return copy(x, (double)n, g->d2h[remote_memory(g, h)], g->share >= 0 ? 2 * g->share + 1 : -1);
}

int cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t n, void *s) {
    Stream *x; int r = copy_checks(s, &x); if (r) return r;
    FAIL("cuMemcpyDtoDAsync_v2");
    Alloc *d = find_alloc(dst, n), *a = find_alloc(src, n);
    if (!d || !a || d->ctx != current || a->ctx != current) return CUDA_ERROR_INVALID_VALUE;
    move(device_mem(d, dst), device_mem(a, src), n);
    /* the model's rate counts bytes read plus bytes written */
    return copy(x, (double)n, M.gpu[current->dev].mem / 2.0, -1);
}

int cuMemcpyPeerAsync(uint64_t dst, void *dctx, uint64_t src, void *sctx, size_t n, void *s) {
    Stream *x; int r = copy_checks(s, &x); if (r) return r;
    FAIL("cuMemcpyPeerAsync");
    if (!valid_ctx(dctx) || !valid_ctx(sctx)) return CUDA_ERROR_INVALID_CONTEXT;
    Ctx *dc = dctx, *sc = sctx;
    Alloc *d = find_alloc(dst, n), *a = find_alloc(src, n);
    if (!d || !a || d->ctx != dc || a->ctx != sc) return CUDA_ERROR_INVALID_VALUE;
    Peer *p = &M.peer[sc->dev][dc->dev];
    int direct = p->ok && (sc->peers[dc->dev] || dc->peers[sc->dev]);
    /* a direct write the platform drops (a translating IOMMU faults it: the CUDA Programming
       Guide, "IOMMU on Linux") completes on time and leaves the destination as it was */
    if (!(direct && p->drops)) move(device_mem(d, dst), device_mem(a, src), n);
    double gbs = direct ? p->gbs : p->host_gbs, lat = direct ? p->lat_us : p->host_lat_us;
    /* latency first, then the bytes at the path's rate */
    pthread_mutex_lock(&lock);
    enqueue(x, 0, 0, noisy(lat), -1, NULL);
    enqueue(x, (double)n, noisy(gbs), 0, -1, NULL);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

int cuModuleLoadData(void **mod, const void *image) {
    NEED_CTX();
    if (!mod || !image) return CUDA_ERROR_INVALID_VALUE;
    const char *text = image;
    /* PTX text: the driver compiles it; anything else here is not a module it can load */
    if (!strstr(text, ".version") || !strstr(text, ".target")) return CUDA_ERROR_INVALID_IMAGE;
    Module *m = calloc(1, sizeof *m);
    m->ctx = current;
    for (const char *p = strstr(text, ".entry"); p && m->n < 16; p = strstr(p + 6, ".entry")) {
        const char *q = p + 6;
        while (*q == ' ' || *q == '\t') q++;
        size_t len = strcspn(q, " \t(\n{");
        if (!len || len >= 64) { free(m); return CUDA_ERROR_INVALID_PTX; }
        memcpy(m->names[m->n], q, len);
        m->names[m->n++][len] = 0;
    }
    if (!strchr(text, '{') || !strchr(text, '}')) { free(m); return CUDA_ERROR_INVALID_PTX; }
    ADD(modules, m);
    *mod = m;
    return CUDA_SUCCESS;
}

int cuModuleUnload(void *mod) {
    CHECK_INIT();
    int i; FIND(modules, mod, i);
    if (i < 0) return CUDA_ERROR_INVALID_HANDLE;
    free(modules[i]); DROP(modules, i);
    return CUDA_SUCCESS;
}

/* a function handle: the module and the entry's index */
typedef struct Func { Module *m; int k; } Func;
static Func funcs[256]; static int n_funcs;

int cuModuleGetFunction(void **fn, void *mod, const char *name) {
    CHECK_INIT();
    if (!fn || !name) return CUDA_ERROR_INVALID_VALUE;
    int i; FIND(modules, mod, i);
    if (i < 0) return CUDA_ERROR_INVALID_HANDLE;
    for (int k = 0; k < modules[i]->n; k++)
        if (!strcmp(modules[i]->names[k], name)) {
            if (n_funcs >= 256) return CUDA_ERROR_OUT_OF_MEMORY;
            funcs[n_funcs] = (Func){modules[i], k};
            *fn = &funcs[n_funcs++];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}

int cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shmem, void *s, void **params, void **extra) {
    (void)params; (void)extra; (void)shmem;
    NEED_CTX();
    FAIL("cuLaunchKernel");
    Func *f = fn;
    if (!f || f < funcs || f >= funcs + n_funcs) return CUDA_ERROR_INVALID_HANDLE;
    int i; FIND(modules, f->m, i);
    if (i < 0) return CUDA_ERROR_INVALID_HANDLE;
    if (f->m->ctx != current) return CUDA_ERROR_INVALID_CONTEXT;
    if (!gx || !gy || !gz || !bx || !by || !bz || (unsigned long)bx * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
    Stream *x = stream_of(s);
    if (!x) return CUDA_ERROR_INVALID_HANDLE;
    Gpu *g = &M.gpu[current->dev];
    spin_us(noisy(g->launch[remote_cpu(g)]));          /* the CPU's side of a launch */
    pthread_mutex_lock(&lock);
    enqueue(x, 0, 0, 2.0, -1, NULL);                    /* an empty kernel's time on the GPU */
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* CUDA 12.8 added cuEventElapsedTime_v2 and 13.0's cuda.h maps the name to it; the same call */
int cuEventElapsedTime_v2(float *ms, void *a, void *b) { return cuEventElapsedTime(ms, a, b); }

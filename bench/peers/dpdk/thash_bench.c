/*
 * DPDK Toeplitz peers for `rsskit bench toeplitz`: rte_softrss,
 * rte_softrss_be and (where it builds) rte_thash_gfni / rte_thash_gfni_bulk,
 * on the same inputs and key as rsskit.
 *
 * Usage: thash_bench COUNT SEED ITERS ROUNDS KEYHEX
 *
 * Inputs: COUNT tuples of 12 (IPv4 4-tuple) and 36 (IPv6 4-tuple) bytes
 * from splitmix64(SEED), bytes taken little-endian from each 64-bit output
 * in order -- the generator of crates/rsskit/src/cmd/bench.rs. Each figure
 * is the median over ROUNDS rounds of ITERS hashes (rounds interleaved).
 * Prints one JSON object: {"results": [...], "check": {...}}; "check" holds
 * the XOR of all hashes per input kind and the spec vector, for the caller
 * to compare with rsskit's.
 *
 * rte_softrss wants the tuple as host-order 32-bit words and
 * rte_softrss_be a key converted by rte_convert_rss_key(); both conversions
 * are done once, before timing (which favours DPDK: a caller converting
 * each packet's tuple pays for it).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>

#include <rte_thash.h>

/* -DNO_GFNI: build without the GFNI peers (where they do not compile). */
#if defined(RTE_THASH_GFNI_DEFINED) && !defined(NO_GFNI)
#define HAVE_GFNI 1
#else
#define HAVE_GFNI 0
#endif

static uint64_t sm_state;
static uint64_t splitmix64(void)
{
	uint64_t z = (sm_state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* count * n bytes, little-endian bytes of successive splitmix64 outputs. */
static uint8_t *gen(size_t count, size_t n, uint64_t seed)
{
	size_t len = count * n, i;
	uint8_t *b = malloc(len);
	uint64_t w = 0;
	sm_state = seed;
	for (i = 0; i < len; i++) {
		if (i % 8 == 0)
			w = splitmix64();
		b[i] = (uint8_t)(w >> (8 * (i % 8)));
	}
	return b;
}

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, n, sizeof(double), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Hide a pointer's value from the optimiser (like Rust's black_box). */
#define HIDE(p) __asm__ volatile("" : "+r"(p))
#define SINK(x) __asm__ volatile("" : : "r"(x))

struct input {
	size_t n;          /* bytes per tuple */
	uint8_t *bytes;    /* count * n, network order */
	uint32_t *words;   /* count * n/4, host order, for rte_softrss */
	uint8_t **ptrs;    /* count pointers into bytes, for the bulk API */
	uint32_t *out;
};

static uint8_t key[64];
static uint32_t key_be[16];
static int key_len;
#if HAVE_GFNI
static uint64_t mtrx[64];
#endif
static size_t count, mask;

static uint32_t run_softrss(struct input *in, uint64_t iters)
{
	uint32_t acc = 0, nw = in->n / 4;
	for (uint64_t i = 0; i < iters; i++) {
		uint32_t *w = in->words + (i & mask) * nw;
		HIDE(w);
		acc ^= rte_softrss(w, nw, key);
	}
	return acc;
}

static uint32_t run_softrss_be(struct input *in, uint64_t iters)
{
	uint32_t acc = 0, nw = in->n / 4;
	for (uint64_t i = 0; i < iters; i++) {
		uint32_t *w = in->words + (i & mask) * nw;
		HIDE(w);
		acc ^= rte_softrss_be(w, nw, (const uint8_t *)key_be);
	}
	return acc;
}

#if HAVE_GFNI
static uint32_t run_gfni_single(struct input *in, uint64_t iters)
{
	uint32_t acc = 0;
	for (uint64_t i = 0; i < iters; i++) {
		const uint8_t *b = in->bytes + (i & mask) * in->n;
		HIDE(b);
		acc ^= rte_thash_gfni(mtrx, b, in->n);
	}
	return acc;
}

static uint32_t run_gfni_bulk(struct input *in, uint64_t iters)
{
	uint32_t acc = 0;
	for (uint64_t done = 0; done < iters; done += count) {
		uint8_t **p = in->ptrs;
		HIDE(p);
		rte_thash_gfni_bulk(mtrx, in->n, p, in->out, count);
		acc ^= in->out[done & mask];
	}
	return acc;
}
#endif

struct bench {
	const char *impl;
	const char *input;
	uint32_t (*fn)(struct input *, uint64_t);
	struct input *in;
	int bulk;
	double *samples;
};

static int parse_hex(const char *s)
{
	int n = 0;
	while (s[0] && s[1] && n < 64) {
		unsigned v;
		if (sscanf(s, "%2x", &v) != 1)
			return -1;
		key[n++] = v;
		s += 2;
		if (*s == ':')
			s++;
	}
	return n;
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: %s COUNT SEED ITERS ROUNDS KEYHEX\n", argv[0]);
		return 2;
	}
	count = strtoull(argv[1], NULL, 0);
	uint64_t seed = strtoull(argv[2], NULL, 0);
	uint64_t iters = strtoull(argv[3], NULL, 0);
	int rounds = atoi(argv[4]);
	key_len = parse_hex(argv[5]);
	if (count < 16 || (count & (count - 1)) || rounds < 1 || key_len < 40 || key_len % 4) {
		fprintf(stderr, "bad arguments (COUNT a power of two >= 16, key >= 40 bytes, multiple of 4)\n");
		return 2;
	}
	mask = count - 1;
	rte_convert_rss_key((const uint32_t *)key, key_be, key_len);
	/*
	 * rte_thash_gfni_supported() reports how librte_hash itself was built
	 * (Debian builds it for a generic x86-64: 0); the inline GFNI functions
	 * used here are compiled into this harness with -march=native, so ask
	 * the CPU instead. The check below compares them with rte_softrss.
	 */
	int gfni = 0, lib_gfni = rte_thash_gfni_supported();
#if HAVE_GFNI
	__builtin_cpu_init();
	gfni = __builtin_cpu_supports("gfni") && __builtin_cpu_supports("avx512f") &&
	       __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi");
	if (gfni)
		rte_thash_complete_matrix(mtrx, key, key_len);
#endif

	struct input in[2] = {{.n = 12}, {.n = 36}};
	for (int k = 0; k < 2; k++) {
		struct input *x = &in[k];
		x->bytes = gen(count, x->n, seed);
		x->words = malloc(count * x->n);
		x->ptrs = malloc(count * sizeof(uint8_t *));
		x->out = malloc(count * sizeof(uint32_t));
		for (size_t i = 0; i < count * x->n / 4; i++) {
			uint32_t be;
			memcpy(&be, x->bytes + 4 * i, 4);
			x->words[i] = ntohl(be);
		}
		for (size_t i = 0; i < count; i++)
			x->ptrs[i] = x->bytes + i * x->n;
	}

	/* Honesty check: the spec vector, and agreement of all DPDK paths. */
	uint32_t spec_words[3] = {0x420995bb, 0xa18e6450, (2794u << 16) | 1766u};
	uint32_t spec = rte_softrss(spec_words, 3, key);
	uint32_t xor4 = 0, xor6 = 0;
	long mismatches = 0;
	for (int k = 0; k < 2; k++) {
		struct input *x = &in[k];
		uint32_t nw = x->n / 4, xr = 0;
#if HAVE_GFNI
		if (gfni)
			rte_thash_gfni_bulk(mtrx, x->n, x->ptrs, x->out, count);
#endif
		for (size_t i = 0; i < count; i++) {
			uint32_t h = rte_softrss(x->words + i * nw, nw, key);
			if (rte_softrss_be(x->words + i * nw, nw, (const uint8_t *)key_be) != h)
				mismatches++;
#if HAVE_GFNI
			if (gfni && (x->out[i] != h || rte_thash_gfni(mtrx, x->ptrs[i], x->n) != h))
				mismatches++;
#endif
			xr ^= h;
		}
		if (k == 0)
			xor4 = xr;
		else
			xor6 = xr;
	}

	struct bench b[8];
	int nb = 0;
	for (int k = 0; k < 2; k++) {
		const char *name = k ? "ipv6-4tuple" : "ipv4-4tuple";
		b[nb++] = (struct bench){"dpdk_softrss", name, run_softrss, &in[k], 0, NULL};
		b[nb++] = (struct bench){"dpdk_softrss_be", name, run_softrss_be, &in[k], 0, NULL};
#if HAVE_GFNI
		if (gfni) {
			b[nb++] = (struct bench){"dpdk_gfni_single", name, run_gfni_single, &in[k], 0, NULL};
			b[nb++] = (struct bench){"dpdk_gfni", name, run_gfni_bulk, &in[k], 1, NULL};
		}
#endif
	}
	for (int i = 0; i < nb; i++) {
		b[i].samples = calloc(rounds, sizeof(double));
		SINK(b[i].fn(b[i].in, iters / 8));
	}
	for (int r = 0; r < rounds; r++) {
		for (int i = 0; i < nb; i++) {
			double t0 = now_ns();
			uint32_t v = b[i].fn(b[i].in, iters);
			double dt = now_ns() - t0;
			SINK(v);
			uint64_t n = b[i].bulk ? (iters + count - 1) / count * count : iters;
			b[i].samples[r] = dt / n;
		}
	}
	printf("{\"results\": [");
	for (int i = 0; i < nb; i++) {
		double med = median(b[i].samples, rounds); /* sorts: [0] is the fastest round */
		printf("%s{\"impl\": \"%s\", \"input\": \"%s\", \"ns_per_hash\": %.4f, \"ns_min\": %.4f}",
		       i ? ", " : "", b[i].impl, b[i].input, med, b[i].samples[0]);
	}
	printf("], \"check\": {\"spec_vector_tcp_ipv4\": %" PRIu32 ", \"xor_ipv4-4tuple\": %" PRIu32
	       ", \"xor_ipv6-4tuple\": %" PRIu32 ", \"dpdk_paths_disagree\": %ld, \"gfni\": %s, \"librte_hash_gfni_supported\": %d}}\n",
	       spec, xor4, xor6, mismatches, gfni ? "true" : "false", lib_gfni);
	return mismatches ? 1 : 0;
}

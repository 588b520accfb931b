/* The machine's scaling ceiling for the data plane's own kind of work: N
   pinned threads, each doing what one `rsskit pipeline --in gen:64
   --gen-owned --out null` worker does per frame, with nothing shared:
   take a buffer from a private LIFO pool (1,920-byte stride), copy a 64-byte
   frame into it from a private set of 4,096 separately allocated frames,
   check Ethernet/IPv4/UDP, hash the IPv4 4-tuple with a byte-table Toeplitz
   (the Microsoft key), count the bucket, and in batches of 32 "send" to a
   null sink (a checksum over each frame) and give the buffers back.

   bench/peers/scaling-ceiling.c is a latency-bound loop (one dependent chain),
   which scales ~2x even when the two vCPUs share a physical core; this loop
   has the pipeline's instruction-level parallelism, so it shows what the
   machine can give that work at the moment it runs.

   Build and run: gcc -O2 -pthread bench/peers/pipeline-ceiling.c -o /tmp/pc
                  /tmp/pc 1 && /tmp/pc 2            [THREADS [FRAMES_PER_THREAD]] */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { FLOWS = 4096, FRAME = 64, STRIDE = 1920, POOL = 1024, BATCH = 32, BUCKETS = 128 };

static const uint8_t KEY[40] = {0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67,
                                0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb,
                                0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
                                0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};
static uint32_t TABLE[12][256]; /* read-only after main() fills it */

static uint32_t key_window(int bit) { /* the 32 key bits starting at `bit` */
  uint32_t w = 0;
  for (int i = 0; i < 32; i++) w = (w << 1) | ((KEY[(bit + i) / 8] >> (7 - (bit + i) % 8)) & 1);
  return w;
}

static void fill_table(void) {
  for (int pos = 0; pos < 12; pos++)
    for (int b = 0; b < 256; b++) {
      uint32_t h = 0;
      for (int j = 0; j < 8; j++)
        if (b & (0x80 >> j)) h ^= key_window(pos * 8 + j);
      TABLE[pos][b] = h;
    }
}

struct job { int cpu; long frames; uint64_t sum; };

static void *worker(void *arg) {
  struct job *job = arg;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(job->cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  /* Private frames, allocated one by one as the Rust generator's Vec<Vec<u8>>. */
  uint8_t **frames = malloc(FLOWS * sizeof *frames);
  for (int f = 0; f < FLOWS; f++) {
    uint8_t *p = frames[f] = calloc(1, FRAME);
    p[12] = 0x08; p[13] = 0x00;                          /* IPv4 */
    p[14] = 0x45; p[16] = 0; p[17] = FRAME - 14; p[22] = 64; p[23] = 17; /* UDP */
    uint32_t src = 0x0a000000u | (uint32_t)(job->cpu << 16) | (uint32_t)f;
    p[26] = src >> 24; p[27] = src >> 16; p[28] = src >> 8; p[29] = src;
    p[30] = 10; p[31] = 1; p[32] = 0; p[33] = 1;         /* dst 10.1.0.1 */
    p[34] = 0x30 | (f & 0xf); p[35] = f; p[36] = 0x23; p[37] = 0x28; /* ports */
  }
  uint8_t *mem = aligned_alloc(4096, (size_t)POOL * STRIDE);
  memset(mem, 0, (size_t)POOL * STRIDE);
  uint32_t free_list[POOL], top = POOL;
  for (uint32_t i = 0; i < POOL; i++) free_list[i] = POOL - 1 - i;
  uint64_t buckets[BUCKETS] = {0}, sum = 0, bad = 0;
  uint32_t batch[BATCH];
  long left = job->frames, next = 0;
  while (left > 0) {
    int n = left < BATCH ? (int)left : BATCH;
    for (int k = 0; k < n; k++) {
      uint32_t b = free_list[--top];
      uint8_t *buf = mem + (size_t)b * STRIDE;
      memcpy(buf, frames[next], FRAME);
      if (++next == FLOWS) next = 0;
      if (buf[12] != 0x08 || buf[13] != 0x00 || (buf[14] >> 4) != 4 || buf[23] != 17) {
        bad++;
        free_list[top++] = b;
        k--, n--;
        continue;
      }
      const uint8_t *t = buf + 26; /* saddr, daddr, sport, dport: 12 bytes */
      uint32_t h = 0;
      for (int i = 0; i < 12; i++) h ^= TABLE[i][t[i]];
      buckets[h & (BUCKETS - 1)]++;
      batch[k] = b;
    }
    for (int k = 0; k < n; k++) { /* the null sink: touch each frame, free it */
      const uint8_t *buf = mem + (size_t)batch[k] * STRIDE;
      uint64_t w;
      memcpy(&w, buf + 26, 8);
      sum += w;
      free_list[top++] = batch[k];
    }
    left -= n;
  }
  for (int i = 0; i < BUCKETS; i++) sum += buckets[i];
  job->sum = sum + bad;
  return NULL;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 1;
  long frames = argc > 2 ? atol(argv[2]) : 10000000L;
  if (n < 1 || n > 64 || frames < 1) {
    fprintf(stderr, "usage: %s [THREADS 1-64] [FRAMES_PER_THREAD]\n", argv[0]);
    return 2;
  }
  fill_table();
  pthread_t th[64];
  struct job jobs[64];
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < n; i++) {
    jobs[i] = (struct job){.cpu = i, .frames = frames};
    pthread_create(&th[i], 0, worker, &jobs[i]);
  }
  uint64_t s = 0;
  for (int i = 0; i < n; i++) pthread_join(th[i], 0), s += jobs[i].sum;
  clock_gettime(CLOCK_MONOTONIC, &b);
  double secs = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
  printf("%d threads: %.3f s, %.2f Mpps total (checksum %llu)\n", n, secs, n * frames / secs / 1e6,
         (unsigned long long)s);
  return 0;
}

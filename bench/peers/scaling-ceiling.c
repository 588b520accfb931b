/* The scaling ceiling of this machine: N threads of shared-nothing work.
   Build and run: gcc -O2 -pthread bench/peers/scaling-ceiling.c -o /tmp/ceiling && /tmp/ceiling 1 && /tmp/ceiling 2 */
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <time.h>
#include <stdint.h>
/* Embarrassingly parallel integer work + a private 1 MiB table walk: the
   scaling ceiling of this VM (no shared data). */
static void *work(void *arg) {
  uint32_t *t = malloc(1 << 20); for (int i = 0; i < (1 << 18); i++) t[i] = i * 2654435761u;
  uint64_t h = (uintptr_t)arg, s = 0;
  for (long i = 0; i < 400000000L; i++) { h ^= h << 13; h ^= h >> 7; h ^= h << 17; s += t[h & ((1 << 18) - 1)]; }
  return (void *)(uintptr_t)s;
}
int main(int argc, char **argv) {
  int n = atoi(argv[1]); pthread_t th[8]; struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < n; i++) pthread_create(&th[i], 0, work, (void *)(uintptr_t)(i + 1));
  for (int i = 0; i < n; i++) pthread_join(th[i], 0);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
  printf("%d threads: %.3f s, %.1f M iter/s total\n", n, s, n * 400.0 / s);
}

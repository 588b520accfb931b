/*
 * The headers and UDP offload constants the bench's C programs share
 * (udp-echo-floor.h beside it, bench/peers/gso-selfecho.c): UDP_SEGMENT (GSO) and UDP_GRO,
 * defined here when the libc headers predate them.
 */
#ifndef UDP_OFFLOAD_H
#define UDP_OFFLOAD_H

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef SOL_UDP
#define SOL_UDP 17
#endif

#endif

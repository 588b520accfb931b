/* The C API refuses what the command line refuses (issue 22, item 5).
 * Each case prints "FAIL: ..." and counts a failure; the exit status is
 * the number of failures (0: every case refused as it should be). */
#define _POSIX_C_SOURCE 200809L
#include "rsskit.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static int failures;

static void expect(const char *what, int got, int want, const char *in_message) {
    const char *msg = rss_last_error();
    if (got != want) {
        printf("FAIL: %s: returned %d (%s), want %d (%s)\n", what, got, rss_strerror(got), want,
               rss_strerror(want));
        failures++;
    } else if (in_message && !strstr(msg, in_message)) {
        printf("FAIL: %s: message \"%s\" does not say \"%s\"\n", what, msg, in_message);
        failures++;
    } else {
        printf("ok: %s: %s\n", what, want == RSS_OK ? "accepted" : msg);
    }
}

static int new_config(const uint8_t *key, size_t key_len, struct RssConfig **c) {
    const uint32_t cpus[] = {0, 0};
    *c = NULL;
    return rss_config_new(cpus, 2, -1, key, key_len, 0, c);
}

int main(void) {
    /* Microsoft's key, repeated to fill longer buffers. */
    static const uint8_t ms[40] = {0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67,
                                   0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb,
                                   0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
                                   0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};
    static uint8_t big[1000];
    for (size_t i = 0; i < sizeof big; i++) big[i] = ms[i % sizeof ms];
    static const uint8_t zero[40];
    struct RssConfig *c;

    /* Keys. */
    expect("all-zero key", new_config(zero, sizeof zero, &c), RSS_E_INVAL, "weak RSS key");
    rss_config_free(c);
    expect("64-byte key", new_config(big, 64, &c), RSS_E_INVAL, "64-byte key");
    rss_config_free(c);
    expect("1000-byte key", new_config(big, 1000, &c), RSS_E_INVAL, "1000-byte key");
    rss_config_free(c);
    expect("39-byte key", new_config(big, 39, &c), RSS_E_INVAL, NULL);
    rss_config_free(c);
    expect("52-byte key (the longest allowed)", new_config(big, RSS_KEY_MAX_LEN, &c), RSS_OK, NULL);
    rss_config_free(c);
    if (new_config(ms, sizeof ms, &c) != RSS_OK) {
        printf("FAIL: the Microsoft key is refused: %s\n", rss_last_error());
        return 100;
    }

    /* Source port ranges. */
    struct sockaddr_in local = {.sin_family = AF_INET, .sin_port = 0};
    struct sockaddr_in remote = {.sin_family = AF_INET, .sin_port = htons(9)};
    inet_pton(AF_INET, "127.0.0.1", &local.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr);
    const struct sockaddr *l = (const struct sockaddr *)&local, *r = (const struct sockaddr *)&remote;
    uint16_t port = 0;
    expect("reversed port range 2000-1000",
           rss_pick_source_port(c, 0, IPPROTO_UDP, l, sizeof local, r, sizeof remote, 2000, 1000, &port),
           RSS_E_INVAL, "2000-1000");
    expect("port range 0-0",
           rss_pick_source_port(c, 0, IPPROTO_UDP, l, sizeof local, r, sizeof remote, 0, 0, &port),
           RSS_E_INVAL, "0-0");
    expect("port range 1024-65535",
           rss_pick_source_port(c, 0, IPPROTO_UDP, l, sizeof local, r, sizeof remote, 1024, 65535, &port),
           RSS_OK, NULL);
    int fd = -1;
    expect("rss_connect, reversed port range",
           rss_connect(c, 0, SOCK_DGRAM, r, sizeof remote, 2000, 1000, &fd), RSS_E_INVAL, "2000-1000");
    if (fd >= 0) close(fd);

    /* from without from_len: refused before anything is received. */
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct timeval tv = {.tv_sec = 2};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    socklen_t sl = sizeof local;
    if (s < 0 || bind(s, l, sizeof local) != 0 || getsockname(s, (struct sockaddr *)&local, &sl) != 0 ||
        sendto(s, "ping", 4, 0, l, sizeof local) != 4) {
        perror("socket setup");
        return 100;
    }
    uint8_t buf[16];
    struct sockaddr_storage from;
    socklen_t from_len = sizeof from;
    expect("from without from_len", (int)rss_recvfrom(c, s, 0, buf, sizeof buf, &from, NULL, NULL), RSS_E_NULL,
           "from_len");
    expect("from_len without from", (int)rss_recvfrom(c, s, 0, buf, sizeof buf, NULL, &from_len, NULL),
           RSS_E_NULL, "from_len");
    /* The datagram is still there. */
    expect("the datagram, received properly", (int)rss_recvfrom(c, s, 0, buf, sizeof buf, &from, &from_len, NULL),
           4, NULL);
    close(s);
    rss_config_free(c);
    printf("%d failure(s)\n", failures);
    return failures;
}

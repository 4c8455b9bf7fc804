/* Preloaded (LD_PRELOAD) into the processes Open MPI starts on this machine: a listening
 * socket bound to every interface (0.0.0.0 or ::) is bound to DISTCOMP_LISTEN_ADDR instead.
 * Open MPI 5's daemons and TCP transport bind to every interface whatever interfaces they are
 * told to use; this keeps them (and the ranks' own servers) on the address the ranks use.
 * An IPv6 socket gets the IPv4-mapped form of that address (it still accepts IPv4 peers), or
 * ::1 where the socket is IPv6-only; a bind that fails fails as it would without the shim (a
 * dual-stack listener is never moved to ::1, where IPv4 peers could not reach it). Built by
 * jupyter_distcomp.machine.shim on first use.
 *
 * An emulated node of a multi-node layout has its own loopback address (DISTCOMP_NODE_ADDR,
 * 127.0.0.N) and is "localhost" to itself on the layout's rendezvous ports
 * (DISTCOMP_NODE_PORTS, e.g. MASTER_PORT): on those ports a bind to every interface or to
 * loopback goes to the node's address, and a connect to localhost (127.0.0.1, ::1) goes to
 * the node itself, as on Azure ML, where node 1 does not find node 0 at localhost. Such a
 * connect from a node other than node 0 says so once on stderr, and in DISTCOMP_NOTICE_FILE
 * where set (the kernel adds it to its report of the rank's cell). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <stdio.h>
#include <unistd.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

/* The emulated node's address when ``port`` (network order) is one of its rendezvous ports
 * (DISTCOMP_NODE_PORTS, comma-separated); 0 otherwise. */
static int node_port(in_port_t port, struct in_addr *node) {
    const char *addr = getenv("DISTCOMP_NODE_ADDR");
    const char *ports = getenv("DISTCOMP_NODE_PORTS");
    if (addr == NULL || ports == NULL || inet_pton(AF_INET, addr, node) != 1) return 0;
    unsigned wanted = ntohs(port);
    while (*ports) {
        char *end;
        unsigned long value = strtoul(ports, &end, 10);
        if (end == ports) return 0;
        if (value == wanted) return 1;
        ports = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0') return 0;
    }
    return 0;
}

/* localhost: 127.0.0.1, ::1 or ::ffff:127.0.0.1 */
static int is_localhost_v6(const struct in6_addr *a) {
    static const unsigned char v4[4] = {127, 0, 0, 1};
    if (memcmp(a, &in6addr_loopback, sizeof *a) == 0) return 1;
    return IN6_IS_ADDR_V4MAPPED(a) && memcmp(&a->s6_addr[12], v4, 4) == 0;
}

static void mapped(struct in6_addr *out, struct in_addr v4) {
    memset(out, 0, sizeof *out);
    out->s6_addr[10] = 0xff;
    out->s6_addr[11] = 0xff;
    memcpy(&out->s6_addr[12], &v4, 4);
}

/* Said once per process: node N looked for node 0 at localhost. */
static void say_localhost(unsigned port) {
    static int said = 0;
    const char *node = getenv("DISTCOMP_NODE");
    const char *master = getenv("DISTCOMP_MASTER_ADDR");
    if (said || node == NULL || strcmp(node, "0") == 0) return;
    said = 1;
    char text[512];
    int n = snprintf(text, sizeof text,
                     "distcomp: node %s looked for node 0 at localhost:%u, which is node %s "
                     "itself, here as on Azure ML; node 0 is at MASTER_ADDR (%s). Fix: connect "
                     "to MASTER_ADDR, e.g. init_process_group(init_method=\"env://\").\n",
                     node, port, node, master ? master : "?");
    if (n <= 0) return;
    size_t size = (size_t)n < sizeof text ? (size_t)n : sizeof text - 1;
    (void)!write(2, text, size);
    const char *notice = getenv("DISTCOMP_NOTICE_FILE");
    if (notice != NULL) {
        int fd = open(notice, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd >= 0) {
            (void)!write(fd, text, size);
            close(fd);
        }
    }
}

typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    static connect_fn real_connect = NULL;
    if (real_connect == NULL) real_connect = (connect_fn)dlsym(RTLD_NEXT, "connect");
    struct in_addr node;
    if (addr != NULL && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in to;
        memcpy(&to, addr, sizeof to);
        if (ntohl(to.sin_addr.s_addr) == INADDR_LOOPBACK && node_port(to.sin_port, &node)) {
            say_localhost(ntohs(to.sin_port));
            to.sin_addr = node;
            return real_connect(fd, (const struct sockaddr *)&to, sizeof to);
        }
    }
    if (addr != NULL && addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 to;
        memcpy(&to, addr, sizeof to);
        if (is_localhost_v6(&to.sin6_addr) && node_port(to.sin6_port, &node)) {
            say_localhost(ntohs(to.sin6_port));
            int v6only = 0;
            socklen_t size = sizeof v6only;
            if (getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &size) == 0 && v6only) {
                errno = ECONNREFUSED; /* the node's IPv4 address is out of this socket's reach */
                return -1;
            }
            mapped(&to.sin6_addr, node);
            return real_connect(fd, (const struct sockaddr *)&to, sizeof to);
        }
    }
    return real_connect(fd, addr, len);
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_fn real_bind = NULL;
    if (real_bind == NULL) real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    struct in_addr node;
    if (addr != NULL && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in own;
        memcpy(&own, addr, sizeof own);
        int anywhere = own.sin_addr.s_addr == htonl(INADDR_ANY) ||
                       own.sin_addr.s_addr == htonl(INADDR_LOOPBACK);
        if (anywhere && node_port(own.sin_port, &node)) { /* a rendezvous port: the node's */
            own.sin_addr = node;
            return real_bind(fd, (const struct sockaddr *)&own, sizeof own);
        }
    }
    if (addr != NULL && addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 own;
        memcpy(&own, addr, sizeof own);
        int anywhere = memcmp(&own.sin6_addr, &in6addr_any, sizeof own.sin6_addr) == 0 ||
                       is_localhost_v6(&own.sin6_addr);
        int v6only = 0;
        socklen_t size = sizeof v6only;
        int dual = !(getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &size) == 0 && v6only);
        if (anywhere && dual && node_port(own.sin6_port, &node)) {
            mapped(&own.sin6_addr, node);
            return real_bind(fd, (const struct sockaddr *)&own, sizeof own);
        }
    }
    const char *listen = getenv("DISTCOMP_LISTEN_ADDR");
    struct in_addr v4;
    if (addr == NULL || listen == NULL || inet_pton(AF_INET, listen, &v4) != 1)
        return real_bind(fd, addr, len);
    if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in any;
        memcpy(&any, addr, sizeof any);
        if (any.sin_addr.s_addr != htonl(INADDR_ANY)) return real_bind(fd, addr, len);
        any.sin_addr = v4;
        return real_bind(fd, (const struct sockaddr *)&any, sizeof any);
    }
    if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 any;
        memcpy(&any, addr, sizeof any);
        if (memcmp(&any.sin6_addr, &in6addr_any, sizeof any.sin6_addr) != 0)
            return real_bind(fd, addr, len);
        int v6only = 0;
        socklen_t size = sizeof v6only;
        if (getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &size) == 0 && v6only) {
            any.sin6_addr = in6addr_loopback;
        } else { /* reachable over IPv4 as on every interface; its error (a port taken) as is */
            memset(&any.sin6_addr, 0, sizeof any.sin6_addr);
            any.sin6_addr.s6_addr[10] = 0xff;
            any.sin6_addr.s6_addr[11] = 0xff;
            memcpy(&any.sin6_addr.s6_addr[12], &v4, 4);
        }
        return real_bind(fd, (const struct sockaddr *)&any, sizeof any);
    }
    return real_bind(fd, addr, len);
}

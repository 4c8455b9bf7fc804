/* Preloaded (LD_PRELOAD) into the processes we start on this machine: where their sockets
 * listen, and where their connections come from. Built with host_shim.c by
 * jupyter_distcomp.machine.shim on first use; the variables it reads are in shim.h.
 *
 * On this machine (no emulated node): a listening socket bound to every interface (0.0.0.0
 * or ::), or listening without a bind, listens on DISTCOMP_LISTEN_ADDR instead, and an
 * unbound UDP socket that sends to a loopback address is bound there first (it would
 * receive from every interface). Open MPI 5's daemons and TCP transport bind to every
 * interface whatever interfaces they are told to use; this keeps them (and the ranks' own
 * servers) on the address the ranks use. An IPv6 socket gets the IPv4-mapped form of that
 * address (it still accepts IPv4 peers), or ::1 where the socket is IPv6-only; a bind that
 * fails fails as it would without the shim (a dual-stack listener is never moved to ::1,
 * where IPv4 peers could not reach it).
 *
 * On an emulated node of a multi-node layout (DISTCOMP_NODE_ADDR, 127.0.0.N), the node binds
 * as a host does: a bind to every interface, a listen without a bind and an unbound UDP
 * sender take the node's address, so such a listener is reachable at the node's address (as
 * on Azure ML, where a wildcard bind on node i is reachable at node i's address) and each
 * node has its own ports (two nodes bind the same port, as two hosts do). A connection to a
 * loopback address leaves from the node's address. On the layout's rendezvous ports
 * (DISTCOMP_NODE_PORTS, e.g. MASTER_PORT) the node is also "localhost" to itself: a bind to
 * loopback goes to the node's address, and a connect to localhost (127.0.0.1, ::1) goes to
 * the node itself, as on Azure ML, where node 1 does not find node 0 at localhost. Such a
 * connect from a node other than node 0 says so once on stderr, and in DISTCOMP_NOTICE_FILE
 * where set (the kernel adds it to its report of the rank's cell). */
#include "shim.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);
typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);
typedef int (*listen_fn)(int, int);
typedef ssize_t (*sendto_fn)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
typedef ssize_t (*sendmsg_fn)(int, const struct msghdr *, int);

static int real_bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_fn real = NULL;
    if (real == NULL) real = (bind_fn)dlsym(RTLD_NEXT, "bind");
    return real(fd, addr, len);
}

/* The emulated node's address when ``port`` (network order) is one of its rendezvous ports
 * (DISTCOMP_NODE_PORTS, comma-separated); 0 otherwise. */
static int node_port(in_port_t port, struct in_addr *node) {
    const char *ports = getenv("DISTCOMP_NODE_PORTS");
    if (ports == NULL || !node_address(node)) return 0;
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

static int v6only(int fd) {
    int only = 0;
    socklen_t size = sizeof only;
    return getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &only, &size) == 0 && only;
}

/* Where this process's sockets listen: its node's address on an emulated node, else
 * DISTCOMP_LISTEN_ADDR; 0 when neither is set (the shim then changes nothing). */
static int own_address(struct in_addr *out) {
    return node_address(out) || shim_address("DISTCOMP_LISTEN_ADDR", out);
}

/* The family of an internet socket that is bound to nothing yet (no port); 0 otherwise. */
static int unbound(int fd) {
    struct sockaddr_storage here;
    socklen_t size = sizeof here;
    if (getsockname(fd, (struct sockaddr *)&here, &size) != 0) return 0;
    if (here.ss_family == AF_INET && ((struct sockaddr_in *)&here)->sin_port == 0)
        return AF_INET;
    if (here.ss_family == AF_INET6 && ((struct sockaddr_in6 *)&here)->sin6_port == 0)
        return AF_INET6;
    return 0;
}

/* Binds an unbound socket of ``family`` to ``own`` (an IPv6 one: its mapped form, or ::1
 * where IPv6-only), port 0; ``outgoing``: for a connection, whose port the connect picks. */
static void bind_own(int fd, int family, struct in_addr own, int outgoing) {
    if (outgoing) {
        int yes = 1;
        (void)setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &yes, sizeof yes);
    }
    if (family == AF_INET) {
        struct sockaddr_in at = {.sin_family = AF_INET, .sin_addr = own};
        (void)real_bind(fd, (const struct sockaddr *)&at, sizeof at);
    } else if (family == AF_INET6) {
        struct sockaddr_in6 at = {.sin6_family = AF_INET6};
        if (v6only(fd)) {
            if (outgoing) return; /* an IPv6 connection: its own source */
            at.sin6_addr = in6addr_loopback;
        } else {
            mapped(&at.sin6_addr, own);
        }
        (void)real_bind(fd, (const struct sockaddr *)&at, sizeof at);
    }
}

/* Whether ``addr`` is a loopback address (IPv4, or IPv4-mapped IPv6). */
static int to_loopback(const struct sockaddr *addr, socklen_t len) {
    if (addr == NULL) return 0;
    if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in))
        return is_loopback_v4(((const struct sockaddr_in *)addr)->sin_addr);
    if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)addr)->sin6_addr;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return 0;
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

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    static connect_fn real_connect = NULL;
    if (real_connect == NULL) real_connect = (connect_fn)dlsym(RTLD_NEXT, "connect");
    struct in_addr node;
    if (!to_loopback(addr, len) && !(addr != NULL && addr->sa_family == AF_INET6 &&
                                     len >= (socklen_t)sizeof(struct sockaddr_in6)))
        return real_connect(fd, addr, len);
    if (!node_address(&node)) return real_connect(fd, addr, len);
    if (addr->sa_family == AF_INET) {
        struct sockaddr_in to;
        memcpy(&to, addr, sizeof to);
        if (ntohl(to.sin_addr.s_addr) == INADDR_LOOPBACK && node_port(to.sin_port, &node)) {
            say_localhost(ntohs(to.sin_port));
            to.sin_addr = node;
        }
        int family = unbound(fd);
        if (family) bind_own(fd, family, node, 1); /* leaves from the node's address */
        return real_connect(fd, (const struct sockaddr *)&to, sizeof to);
    }
    struct sockaddr_in6 to;
    memcpy(&to, addr, sizeof to);
    if (is_localhost_v6(&to.sin6_addr) && node_port(to.sin6_port, &node)) {
        say_localhost(ntohs(to.sin6_port));
        if (v6only(fd)) {
            errno = ECONNREFUSED; /* the node's IPv4 address is out of this socket's reach */
            return -1;
        }
        mapped(&to.sin6_addr, node);
    }
    if (IN6_IS_ADDR_V4MAPPED(&to.sin6_addr) && to.sin6_addr.s6_addr[12] == 127) {
        int family = unbound(fd);
        if (family) bind_own(fd, family, node, 1);
    }
    return real_connect(fd, (const struct sockaddr *)&to, sizeof to);
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    struct in_addr own;
    int node = node_address(&own);
    if (!node && !shim_address("DISTCOMP_LISTEN_ADDR", &own)) return real_bind(fd, addr, len);
    if (addr != NULL && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in at;
        memcpy(&at, addr, sizeof at);
        struct in_addr rendezvous;
        int anywhere = at.sin_addr.s_addr == htonl(INADDR_ANY);
        int localhost = at.sin_addr.s_addr == htonl(INADDR_LOOPBACK);
        if (anywhere || (node && localhost && node_port(at.sin_port, &rendezvous))) {
            at.sin_addr = own;
            return real_bind(fd, (const struct sockaddr *)&at, sizeof at);
        }
    } else if (addr != NULL && addr->sa_family == AF_INET6 &&
               len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 at;
        memcpy(&at, addr, sizeof at);
        struct in_addr rendezvous;
        int anywhere = memcmp(&at.sin6_addr, &in6addr_any, sizeof at.sin6_addr) == 0;
        int localhost = node && is_localhost_v6(&at.sin6_addr);
        int only = v6only(fd);
        if (anywhere && only) {
            at.sin6_addr = in6addr_loopback;
            return real_bind(fd, (const struct sockaddr *)&at, sizeof at);
        }
        /* reachable over IPv4 as on every interface; its error (a port taken) as is */
        if (!only && (anywhere || (localhost && node_port(at.sin6_port, &rendezvous)))) {
            mapped(&at.sin6_addr, own);
            return real_bind(fd, (const struct sockaddr *)&at, sizeof at);
        }
    }
    return real_bind(fd, addr, len);
}

int listen(int fd, int backlog) {
    static listen_fn real_listen = NULL;
    if (real_listen == NULL) real_listen = (listen_fn)dlsym(RTLD_NEXT, "listen");
    struct in_addr own;
    int family;
    if (own_address(&own) && (family = unbound(fd)) != 0) bind_own(fd, family, own, 0);
    return real_listen(fd, backlog);
}

/* An unbound socket that sends a datagram to a loopback address: bound to this process's own
 * address first (else the system binds it to every interface). */
static void before_send(int fd, const struct sockaddr *to, socklen_t len) {
    struct in_addr own;
    int family;
    if (to_loopback(to, len) && own_address(&own) && (family = unbound(fd)) != 0)
        bind_own(fd, family, own, 0);
}

ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *to,
               socklen_t len) {
    static sendto_fn real_sendto = NULL;
    if (real_sendto == NULL) real_sendto = (sendto_fn)dlsym(RTLD_NEXT, "sendto");
    before_send(fd, to, len);
    return real_sendto(fd, buf, n, flags, to, len);
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags) {
    static sendmsg_fn real_sendmsg = NULL;
    if (real_sendmsg == NULL) real_sendmsg = (sendmsg_fn)dlsym(RTLD_NEXT, "sendmsg");
    if (msg != NULL) before_send(fd, (const struct sockaddr *)msg->msg_name, msg->msg_namelen);
    return real_sendmsg(fd, msg, flags);
}

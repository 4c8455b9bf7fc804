/* Preloaded (LD_PRELOAD) into the processes Open MPI starts on this machine: a listening
 * socket bound to every interface (0.0.0.0 or ::) is bound to DISTCOMP_LISTEN_ADDR instead.
 * Open MPI 5's daemons and TCP transport bind to every interface whatever interfaces they are
 * told to use; this keeps them (and the ranks' own servers) on the address the ranks use.
 * An IPv6 socket gets the IPv4-mapped form of that address (it still accepts IPv4 peers), or
 * ::1 where the socket is IPv6-only; a bind that fails fails as it would without the shim (a
 * dual-stack listener is never moved to ::1, where IPv4 peers could not reach it). Built by
 * jupyter_distcomp.machine.shim on first use. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_fn real_bind = NULL;
    if (real_bind == NULL) real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
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

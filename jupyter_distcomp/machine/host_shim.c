/* Preloaded with listen_shim.c (see shim.h for the variables): on an emulated node of a
 * multi-node layout, the host the programs there see is the node, as on Azure ML, where
 * every node is a machine of its own.
 *
 * - its name: gethostname() and uname() give DISTCOMP_NODE_NAME (Python's
 *   socket.gethostname() and platform.node(), MPI_Get_processor_name, Open MPI's daemons);
 * - name look-ups: each node's name (DISTCOMP_NODE_HOSTS) resolves to that node's address
 *   (getaddrinfo, gethostbyname and its _r and 2 forms), so gethostbyname(gethostname()) is
 *   the node's own address, as a cluster's DNS answers;
 * - its network interface: the loopback interface shows DISTCOMP_NIC_ADDR (the node's
 *   address) where it held 127.0.0.1, and is not flagged loopback (getifaddrs, and the
 *   SIOCGIFCONF, SIOCGIFADDR and SIOCGIFFLAGS ioctls Open MPI and PMIx read): Open MPI's
 *   daemons of the nodes and their TCP transport then talk over it, each from its node's
 *   address, as over a cluster's network;
 * - setpgid(pid, pgid) of a child that has set that group itself succeeds (Open MPI's
 *   launcher of the node daemons otherwise warns that the child won the race). */
#include "shim.h"

#include <dlfcn.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdint.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/utsname.h>
#include <unistd.h>

static const char *node_name(void) {
    const char *name = getenv("DISTCOMP_NODE_NAME");
    return name != NULL && *name ? name : NULL;
}

int gethostname(char *name, size_t len) {
    static int (*real)(char *, size_t) = NULL;
    if (real == NULL) real = (int (*)(char *, size_t))dlsym(RTLD_NEXT, "gethostname");
    const char *own = node_name();
    if (own == NULL) return real(name, len);
    size_t size = strlen(own) + 1;
    if (size > len) { /* as glibc: as much as fits, and ENAMETOOLONG */
        if (len) memcpy(name, own, len);
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(name, own, size);
    return 0;
}

int uname(struct utsname *buf) {
    static int (*real)(struct utsname *) = NULL;
    if (real == NULL) real = (int (*)(struct utsname *))dlsym(RTLD_NEXT, "uname");
    int done = real(buf);
    const char *own = node_name();
    if (done == 0 && own != NULL) {
        strncpy(buf->nodename, own, sizeof buf->nodename - 1);
        buf->nodename[sizeof buf->nodename - 1] = '\0';
    }
    return done;
}

/* The address of the emulated node called ``name`` (DISTCOMP_NODE_HOSTS): 1 if it is one. */
static int node_host(const char *name, struct in_addr *out) {
    const char *hosts = getenv("DISTCOMP_NODE_HOSTS");
    if (name == NULL || hosts == NULL) return 0;
    size_t size = strlen(name);
    if (size && name[size - 1] == '.') size--; /* a fully qualified form of the name */
    while (*hosts) {
        const char *equals = strchr(hosts, '=');
        if (equals == NULL) return 0;
        const char *end = strchr(equals, ',');
        size_t addr_size = end ? (size_t)(end - equals - 1) : strlen(equals + 1);
        if ((size_t)(equals - hosts) == size && strncasecmp(hosts, name, size) == 0) {
            char addr[INET_ADDRSTRLEN];
            if (addr_size >= sizeof addr) return 0;
            memcpy(addr, equals + 1, addr_size);
            addr[addr_size] = '\0';
            return inet_pton(AF_INET, addr, out) == 1;
        }
        if (end == NULL) return 0;
        hosts = end + 1;
    }
    return 0;
}

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res) {
    typedef int (*fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
    static fn real = NULL;
    if (real == NULL) real = (fn)dlsym(RTLD_NEXT, "getaddrinfo");
    struct in_addr at;
    if (!node_host(node, &at)) return real(node, service, hints, res);
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &at, text, sizeof text);
    struct addrinfo numeric = {.ai_flags = AI_V4MAPPED | AI_ADDRCONFIG};
    if (hints != NULL) numeric = *hints;
    numeric.ai_flags |= AI_NUMERICHOST;
    numeric.ai_flags &= ~AI_ADDRCONFIG;
    int done = real(text, service, &numeric, res);
    if (done == 0 && (numeric.ai_flags & AI_CANONNAME) && *res != NULL) {
        char *name = strdup(node);
        if (name != NULL) {
            free((*res)->ai_canonname);
            (*res)->ai_canonname = name;
        }
    }
    return done;
}

/* ``name`` at ``at`` as a hostent in ``buf`` (``size`` bytes): 0, or ERANGE. */
static int fill_host(const char *name, struct in_addr at, struct hostent *host, char *buf,
                     size_t size) {
    uintptr_t start = ((uintptr_t)buf + sizeof(char *) - 1) & ~(uintptr_t)(sizeof(char *) - 1);
    size_t need = (start - (uintptr_t)buf) + 3 * sizeof(char *) + sizeof at + strlen(name) + 1;
    if (need > size) return ERANGE;
    char **addrs = (char **)start;
    char **aliases = addrs + 2;
    char *addr = (char *)(aliases + 1);
    char *own = addr + sizeof at;
    memcpy(addr, &at, sizeof at);
    strcpy(own, name);
    addrs[0] = addr;
    addrs[1] = NULL;
    aliases[0] = NULL;
    host->h_name = own;
    host->h_aliases = aliases;
    host->h_addrtype = AF_INET;
    host->h_length = sizeof at;
    host->h_addr_list = addrs;
    return 0;
}

int gethostbyname_r(const char *name, struct hostent *ret, char *buf, size_t buflen,
                    struct hostent **result, int *h_errnop) {
    typedef int (*fn)(const char *, struct hostent *, char *, size_t, struct hostent **, int *);
    static fn real = NULL;
    if (real == NULL) real = (fn)dlsym(RTLD_NEXT, "gethostbyname_r");
    struct in_addr at;
    if (!node_host(name, &at)) return real(name, ret, buf, buflen, result, h_errnop);
    int failed = fill_host(name, at, ret, buf, buflen);
    *result = failed ? NULL : ret;
    if (failed && h_errnop != NULL) *h_errnop = NETDB_INTERNAL;
    return failed;
}

int gethostbyname2_r(const char *name, int af, struct hostent *ret, char *buf, size_t buflen,
                     struct hostent **result, int *h_errnop) {
    typedef int (*fn)(const char *, int, struct hostent *, char *, size_t, struct hostent **,
                      int *);
    static fn real = NULL;
    if (real == NULL) real = (fn)dlsym(RTLD_NEXT, "gethostbyname2_r");
    struct in_addr at;
    if (af != AF_INET || !node_host(name, &at))
        return real(name, af, ret, buf, buflen, result, h_errnop);
    return gethostbyname_r(name, ret, buf, buflen, result, h_errnop);
}

struct hostent *gethostbyname(const char *name) {
    static struct hostent *(*real)(const char *) = NULL;
    if (real == NULL) real = (struct hostent * (*)(const char *)) dlsym(RTLD_NEXT, "gethostbyname");
    static struct hostent host;
    static char buf[512];
    struct in_addr at;
    if (!node_host(name, &at)) return real(name);
    if (fill_host(name, at, &host, buf, sizeof buf) != 0) {
        h_errno = NO_RECOVERY;
        return NULL;
    }
    return &host;
}

struct hostent *gethostbyname2(const char *name, int af) {
    static struct hostent *(*real)(const char *, int) = NULL;
    if (real == NULL) real = (struct hostent * (*)(const char *, int)) dlsym(RTLD_NEXT, "gethostbyname2");
    struct in_addr at;
    if (af != AF_INET || !node_host(name, &at)) return real(name, af);
    return gethostbyname(name);
}

/* The loopback interface as this process's network interface: ``addr`` where it shows
 * 127.0.0.1. */
static void as_nic(struct sockaddr *addr, struct in_addr nic) {
    if (addr != NULL && addr->sa_family == AF_INET) {
        struct sockaddr_in *v4 = (struct sockaddr_in *)addr;
        if (v4->sin_addr.s_addr == htonl(INADDR_LOOPBACK)) v4->sin_addr = nic;
    }
}

int getifaddrs(struct ifaddrs **ifap) {
    static int (*real)(struct ifaddrs **) = NULL;
    if (real == NULL) real = (int (*)(struct ifaddrs **))dlsym(RTLD_NEXT, "getifaddrs");
    int done = real(ifap);
    struct in_addr nic;
    if (done != 0 || !shim_address("DISTCOMP_NIC_ADDR", &nic)) return done;
    for (struct ifaddrs *each = *ifap; each != NULL; each = each->ifa_next) {
        if (each->ifa_flags & IFF_LOOPBACK) {
            each->ifa_flags &= ~IFF_LOOPBACK;
            as_nic(each->ifa_addr, nic);
        }
    }
    return done;
}

int ioctl(int fd, unsigned long request, ...) {
    static int (*real)(int, unsigned long, ...) = NULL;
    if (real == NULL) real = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
    va_list args;
    va_start(args, request);
    void *arg = va_arg(args, void *);
    va_end(args);
    int done = real(fd, request, arg);
    struct in_addr nic;
    if (done != 0 || arg == NULL ||
        (request != SIOCGIFCONF && request != SIOCGIFADDR && request != SIOCGIFFLAGS) ||
        !shim_address("DISTCOMP_NIC_ADDR", &nic))
        return done;
    if (request == SIOCGIFCONF) {
        struct ifconf *conf = arg;
        if (conf->ifc_req == NULL) return done;
        size_t count = (size_t)conf->ifc_len / sizeof(struct ifreq);
        for (size_t i = 0; i < count; i++) as_nic(&conf->ifc_req[i].ifr_addr, nic);
    } else if (request == SIOCGIFADDR) {
        as_nic(&((struct ifreq *)arg)->ifr_addr, nic);
    } else {
        ((struct ifreq *)arg)->ifr_flags &= ~IFF_LOOPBACK;
    }
    return done;
}

int setpgid(pid_t pid, pid_t pgid) {
    static int (*real)(pid_t, pid_t) = NULL;
    if (real == NULL) real = (int (*)(pid_t, pid_t))dlsym(RTLD_NEXT, "setpgid");
    int done = real(pid, pgid);
    if (done != 0 && errno == EACCES && pid > 0 && getpgid(pid) == (pgid ? pgid : pid)) {
        return 0; /* the child, already running its program, is in that group */
    }
    return done;
}

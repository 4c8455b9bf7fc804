/* What the preloaded shim's sources (listen_shim.c, host_shim.c) share: the variables that
 * say where this process runs, read at each call (a rank sets some of them after its start).
 *
 * DISTCOMP_LISTEN_ADDR  this machine's listen address (a process that is on no emulated node)
 * DISTCOMP_NODE_ADDR    the emulated node's address (127.0.0.N): set on a node's processes
 * DISTCOMP_NODE_NAME    the emulated node's host name
 * DISTCOMP_NODE_HOSTS   every emulated node, name=address,... (the layout's host names)
 * DISTCOMP_NIC_ADDR     the address the loopback interface shows, as a network interface
 *                       (not flagged loopback): the node's address on a node, 127.0.0.1 in
 *                       the mpiexec of emulated nodes (Open MPI's daemons talk over it) */
#ifndef DISTCOMP_SHIM_H
#define DISTCOMP_SHIM_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

/* The IPv4 address in variable ``name``: 1 when it holds one. */
static inline int shim_address(const char *name, struct in_addr *out) {
    const char *value = getenv(name);
    return value != NULL && inet_pton(AF_INET, value, out) == 1;
}

/* The emulated node's address: 1 in a process of an emulated node. */
static inline int node_address(struct in_addr *out) {
    return shim_address("DISTCOMP_NODE_ADDR", out);
}

static inline int is_loopback_v4(struct in_addr a) {
    return (ntohl(a.s_addr) >> 24) == 127;
}

#endif

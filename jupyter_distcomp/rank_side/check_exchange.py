"""Check mode's exchanges of signatures (see ledger_hooks.py), apart from the user's own
channels, and interruptible.

torch.distributed: :class:`TorchStore` gives check mode a TCPStore of its own, served by one
rank of the world and connected by the others, so that the user's store (the one
``init_process_group`` made) never shows our keys to ``num_keys``, ``get`` or ``wait``. Its
address passes once through the user's store, under two keys that the last rank to connect
deletes. A default store that is not a TCPStore (a FileStore, say) is used itself, as is
the user's TCPStore where the serving rank could not start one.

mpi4py: :class:`MpiExchange` sends each rank's signature to the other members of the
communicator, point to point, on a duplicate of COMM_WORLD made when MPI is wrapped (so no
user's receive, not even ``ANY_TAG``, sees them), and polls for theirs: a SIGINT (the
notebook's interrupt) raises KeyboardInterrupt there, where a blocking collective would
hold the rank in MPI's own loop. Each message names its exchange ``(group, epoch, round)``:
one from an exchange an interrupt left half done belongs to an older epoch, and is dropped.

Standard library only at import; loaded by path on a rank, as ledger_hooks.py's sibling.
"""

from __future__ import annotations

import datetime
import socket
import time
from typing import Any

#: the user's store holds these only until every rank of the world has connected
ELECT, ADDRESS = "distcomp-check/elect", "distcomp-check/address"
JOINED = "distcomp-check/joined"
STEP = datetime.timedelta(seconds=1)  # a store wait's step: a SIGINT gets through between
CONNECT = datetime.timedelta(seconds=60)
TAG = 1
#: seconds between looks once an exchange has waited a while (first it polls without pause)
POLL = 0.0005


def wait_keys(store, keys: list[str]) -> None:
    """``store.wait(keys)`` in steps, so that an interrupt (SIGINT) gets through."""
    while True:
        try:
            store.wait(keys, STEP)
            return
        except RuntimeError as exc:
            text = str(exc).lower()
            if "timeout" not in text and "timed out" not in text:
                raise


def _tcp_store(dist, store) -> Any:
    """The TCPStore under ``store``'s prefixes, or None."""
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    return store if isinstance(store, dist.TCPStore) else None


def _own_address(host: str) -> str:
    """This host's address on the way to ``host`` (where the world's store is served), so
    reachable by the ranks that reach that store: on an emulated node, the node's own (the
    preloaded shim gives a connection to a loopback address its node's address), as on a
    cluster the route gives the node's."""
    family, _, _, _, where = socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)[0]
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((str(where[0]), 9))  # no packet is sent: the route picks the address
        return str(probe.getsockname()[0])


class TorchStore:
    """Check mode's own store for one process's torch.distributed world."""

    def __init__(self) -> None:
        self.store: Any = None

    def get(self, dist) -> Any:
        if self.store is None:
            self.store = self._connect(dist)
        return self.store

    def _connect(self, dist) -> Any:
        user = dist.distributed_c10d._get_default_store()
        tcp = _tcp_store(dist, user)
        if tcp is None:
            return user
        if user.add(ELECT, 1) == 1:  # the first rank to need it serves it
            try:
                host = _own_address(tcp.host)
                store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False)
                address = f"{host}\n{store.port}"
            except Exception:  # no store of its own: the user's, as it is said to all
                store, address = user, ""
            user.set(ADDRESS, address)
        else:
            wait_keys(user, [ADDRESS])
            address = user.get(ADDRESS).decode()
            if address:
                host, port = address.split("\n")
                store = dist.TCPStore(host, int(port), is_master=False, timeout=CONNECT)
            else:
                store = user
        if store.add(JOINED, 1) == dist.get_world_size():  # nobody reads them any more
            user.delete_key(ADDRESS)
            user.delete_key(ELECT)
        return store


class MpiExchange:
    """Check mode's exchanges for mpi4py, on ``shadow`` (a duplicate of COMM_WORLD)."""

    def __init__(self, MPI, shadow, isend, improbe) -> None:
        self.MPI = MPI
        self.shadow = shadow
        self.isend, self.improbe = isend, improbe  # mpi4py's own (never recorded)
        self.me = shadow.Get_rank()
        self.early: dict[tuple, tuple] = {}  # (source, exchange) -> a signature sent ahead
        self.sends: list = []  # our messages not yet received
        self.epoch = 0

    def run(self, members: tuple[int, ...], exchange: tuple, sig: tuple) -> dict[int, tuple]:
        """Send ``sig`` to ``members`` (COMM_WORLD ranks), and their signatures of
        ``exchange`` (``(group, epoch, round)``), by rank."""
        __tracebackhide__ = True
        me, epoch = self.me, exchange[1]
        if epoch != self.epoch:  # what an interrupted exchange left is void
            self.epoch = epoch
            self.early = {k: v for k, v in self.early.items() if k[1][1] >= epoch}
        self.sends = [r for r in self.sends if not r.Test()]
        for member in members:
            if member != me:
                self.sends.append(self.isend(self.shadow, (exchange, sig), member, TAG))
        got = {me: sig}
        want = set(members) - {me}
        for member in list(want):
            early = self.early.pop((member, exchange), None)
            if early is not None:
                got[member] = early
                want.discard(member)
        status = self.MPI.Status()
        looks = 0
        while want:
            message = self.improbe(self.shadow, self.MPI.ANY_SOURCE, TAG, status)
            if message is None:
                looks += 1
                if looks > 200:
                    time.sleep(POLL)
                continue
            source = status.Get_source()
            request = message.irecv()
            while True:
                done, posted = request.test()
                if done:
                    break
                time.sleep(POLL)
            key, their = posted
            if key == exchange and source in want:
                got[source] = their
                want.discard(source)
            elif key[1] >= epoch:  # an exchange this rank has not reached yet
                self.early[(source, key)] = their
        return got

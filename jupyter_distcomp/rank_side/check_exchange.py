"""Check mode's exchanges of signatures (see ledger_hooks.py), apart from the user's own
channels, and interruptible.

torch.distributed: :class:`TorchStore` gives check mode a TCPStore of its own, served by one
rank of the world and connected by the others, so that the user's store (the one
``init_process_group`` made) never shows our keys to ``num_keys``, ``get`` or ``wait``. Its
address passes once through the user's store, under two keys that the last rank to connect
deletes. A default store that is not a TCPStore (a FileStore, say) is used itself, as is
the user's TCPStore where the serving rank could not start one.

A TCPStore lets anyone who reaches its port list, read and write its keys, and our ranks
listen where every local user reaches them. So each value check mode writes (that address
too) carries an HMAC of its key and its text under a key that only the world's ranks hold
(:data:`KEY_VARIABLE`, in their environment, which other users cannot read): a value
another process wrote, or moved to another key, is refused with what happened instead of
being compared. Others can still read the signatures (the calls' names, shapes and call
sites) and flood the port (docs/own-cluster.md, "what stays open").

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
import hashlib
import hmac
import os
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
#: the variable that gives a world's ranks the key that signs check mode's values
KEY_VARIABLE = "DISTCOMP_CHECK_KEY"
TAG_CHARS = 32  # hex digits of a value's HMAC-SHA256 kept in front of it


class ForgedValue(RuntimeError):
    """A value in check mode's store that no rank of this world wrote."""


class Signer:
    """Signs and checks the values check mode writes, with the world's key (none: values
    as they are, as on a cluster of the user's own without our key)."""

    def __init__(self, key: str | None = None) -> None:
        key = os.environ.get(KEY_VARIABLE, "") if key is None else key
        self.key = key.encode()

    def _tag(self, name: str, text: str) -> str:
        message = f"{name}\n{text}".encode("utf-8", "surrogateescape")
        return hmac.new(self.key, message, hashlib.sha256).hexdigest()[:TAG_CHARS]

    def sign(self, name: str, text: str) -> str:
        """``text`` as written under ``name``."""
        return self._tag(name, text) + text if self.key else text

    def open(self, name: str, signed: str, where: str = "") -> str:
        """The text of a value read under ``name``; ForgedValue when its HMAC is not ours."""
        if not self.key:
            return signed
        tag, text = signed[:TAG_CHARS], signed[TAG_CHARS:]
        if not hmac.compare_digest(tag, self._tag(name, text)):
            raise ForgedValue(
                f"check_collectives: the value under {name!r} in check mode's store{where} "
                "was not written by a rank of this world: another process on this machine "
                "wrote to the store, so this call's check is void. Fix: `%distcomp restart` "
                "the ranks; on a machine shared with people you do not trust, run them in a "
                "container or VM of your own."
            )
        return text


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
        self.signer = Signer()

    def get(self, dist) -> Any:
        if self.store is None:
            self.store = self._connect(dist)
        return self.store

    def post(self, name: str, text: str) -> None:
        """``text`` under ``name`` in the store, signed."""
        self.store.set(name, self.signer.sign(name, text))

    def read(self, name: str) -> str:
        """The text under ``name``; ForgedValue when no rank of this world wrote it."""
        return self.signer.open(name, self.store.get(name).decode("utf-8", "surrogateescape"))

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
            user.set(ADDRESS, self.signer.sign(ADDRESS, address))
        else:
            wait_keys(user, [ADDRESS])
            address = self.signer.open(ADDRESS, user.get(ADDRESS).decode(), " (its address)")
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

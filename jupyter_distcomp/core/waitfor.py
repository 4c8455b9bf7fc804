"""The wait-for graph of hung ranks, from their ledgers' pending calls: which rank waits for
which, and the deadlocks it holds, named with their chain.

A rank waits in its newest blocked call (``Entry.blocked``). That call needs *pieces*,
all of them (AND); a piece is met by any one of its candidate ranks (OR): a send to rank 1
needs rank 1; a receive from any rank needs one of the communicator's other ranks; an
exchange (``Sendrecv``) needs its destination and its source; a collective needs every
member that has not reached it. A piece is met already when the peer holds the matching
call (a running receive for a send, a running send for a receive, on the same
communicator with a tag that fits): the two ranks are exchanging, nobody waits. A rank is
deadlocked when some piece's candidates are all deadlocked, ended their cell, or exited:
the largest such set (``deadlocked``) is what can never move again.

Point-to-point peers are communicator ranks in mpi4py (mapped to COMM_WORLD by the label's
``(ranks ...)``), global ranks in torch.distributed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..rank_side.ledger_words import COLLECTIVE, Entry, by_group, call_text, format_ranks

SEND, RECV, COLL = "send", "recv", "collective"
#: a rank that will not call anything any more, and the words for it
ENDED, EXITED = "whose cell has ended", "which has exited"


@dataclass
class Piece:
    """What a waiting call needs from one of ``candidates``."""

    kind: str  # SEND, RECV or COLL
    candidates: tuple[int, ...]
    tag: int | None = None  # None: any tag
    any_source: bool = False


@dataclass
class Wait:
    """A rank blocked in ``entry``, and what it needs."""

    rank: int
    entry: Entry
    pieces: list[Piece] = field(default_factory=list)


def _is_torch(group: str) -> bool:
    return group == "default group" or group.startswith("group ")


def _world_rank(entry: Entry, peer: int) -> int:
    members = entry.members
    if _is_torch(entry.group) or not members:
        return peer
    return members[peer] if 0 <= peer < len(members) else peer


def peers(entry: Entry) -> list[tuple[str, int | None, int | None]]:
    """A point-to-point call's ``(SEND or RECV, world rank or None for any, tag or None)``
    from its description ``to rank 1, tag 5, from any rank``."""
    found: list[tuple[str, int | None, int | None]] = []
    for part in entry.root.split(", "):
        words = part.split()
        if words[:2] == ["to", "rank"] and len(words) == 3 and words[2].isdigit():
            found.append((SEND, _world_rank(entry, int(words[2])), 0))
        elif words[:2] == ["from", "rank"] and len(words) == 3 and words[2].isdigit():
            found.append((RECV, _world_rank(entry, int(words[2])), None))
        elif part == "from any rank":
            found.append((RECV, None, None))
        elif words[:1] == ["tag"] and found and words[-1].isdigit():
            found[-1] = (found[-1][0], found[-1][1], int(words[-1]))
    return found


def _fits(send_tag: int | None, recv_tag: int | None) -> bool:
    return recv_tag is None or send_tag is None or send_tag == recv_tag


def _matched(rank: int, kind: str, peer: int, tag: int | None, group: str, pending) -> bool:
    """``peer`` holds a running call (``pending``: each rank's running point-to-point
    calls) that meets ``rank``'s piece on ``group``."""
    want = RECV if kind == SEND else SEND
    for other in pending.get(peer, ()):
        if other.group != group:
            continue
        for side, who, their_tag in peers(other):
            if side != want or who not in (rank, None):
                continue
            if _fits(tag, their_tag) if kind == SEND else _fits(their_tag, tag):
                return True
    return False


def waits(
    ledgers: dict[int, list[Entry]],
    world_size: int,
    groups: dict[str, dict[int, dict[int, Entry]]] | None = None,
) -> dict[int, Wait]:
    """Each blocked rank's wait, its met pieces left out (``groups``: the ledgers'
    ``by_group``, when known)."""
    current: dict[int, Entry] = {}
    for rank, entries in ledgers.items():
        for entry in reversed(entries):
            if entry.blocked:
                current[rank] = entry
                break
    found: dict[int, Wait] = {}
    pending = {
        rank: [e for e in entries if e.finished <= 0.0 and e.kind != COLLECTIVE]
        for rank, entries in ledgers.items()
    }
    for rank, entry in current.items():
        wait = found[rank] = Wait(rank, entry)
        members = entry.members or tuple(range(world_size))
        if entry.kind == COLLECTIVE:
            if groups is None:
                groups = by_group(ledgers)
            reached = groups.get(entry.group, {}).get(entry.seq, {})
            wait.pieces = [Piece(COLL, (r,)) for r in members if r not in reached]
            continue
        for kind, peer, tag in peers(entry):
            if peer is None:
                others = tuple(r for r in members if r != rank)
                wait.pieces.append(Piece(kind, others, tag, any_source=True))
            elif not _matched(rank, kind, peer, tag, entry.group, pending):
                wait.pieces.append(Piece(kind, (peer,), tag))
        if any(p.any_source for p in wait.pieces):
            sending = [
                p
                for p in wait.pieces
                if p.any_source
                and any(_matched(rank, RECV, r, p.tag, entry.group, pending) for r in p.candidates)
            ]
            wait.pieces = [p for p in wait.pieces if p not in sending]
    return found


def deadlocked(found: dict[int, Wait], gone: dict[int, str]) -> set[int]:
    """The waiting ranks that can never move: the largest set in which each rank has a piece
    whose candidates are all in the set or ``gone`` (rank -> ENDED or EXITED)."""
    stuck = set(found)
    changed = True
    while changed:
        changed = False
        for rank in sorted(stuck):
            blocked = any(
                all(c in stuck or c in gone for c in piece.candidates)
                for piece in found[rank].pieces
            )
            if not blocked:
                stuck.discard(rank)
                changed = True
    return stuck


def _piece(wait: Wait, stuck: set[int], gone: dict[int, str]) -> Piece | None:
    for piece in wait.pieces:
        if all(c in stuck or c in gone for c in piece.candidates):
            return piece
    return None


def _words(wait: Wait, piece: Piece, target: int | None) -> str:
    """``waits to send to rank 1``."""
    who = "any rank" if piece.any_source else format_ranks([target] if target is not None else [])
    tag = f" (tag {piece.tag})" if piece.tag else ""
    if piece.kind == COLL:
        return f"waits in {call_text(wait.entry, group=False)} for {who}"
    if wait.entry.op.lower().endswith("probe"):
        return f"waits for a message from {who}{tag}"
    verb = "to send to" if piece.kind == SEND else "to receive from"
    return f"waits {verb} {who}{tag}"


@dataclass
class Chain:
    """A deadlock's ranks in wait order (``cycle``: the last waits for the first), or a
    chain that ends at a rank that ended its cell or exited."""

    links: list[tuple[Wait, Piece, int | None]]
    cycle: bool
    end: str = ""  # ENDED or EXITED, for a chain that is no cycle


def chains(found: dict[int, Wait], gone: dict[int, str]) -> list[Chain]:
    """The deadlocks' cycles (each once) and the point-to-point waits on a rank that will
    not come; collectives that wait on such a rank are the collective verdicts' to name."""
    stuck = deadlocked(found, gone)
    named: set[int] = set()
    result = []
    for start in sorted(stuck):
        if start in named:
            continue
        path: list[int] = []
        links: list[tuple[Wait, Piece, int | None]] = []
        rank: int | None = start
        while rank is not None and rank in stuck and rank not in path and rank not in named:
            wait = found[rank]
            piece = _piece(wait, stuck, gone)
            if piece is None:
                break
            inside = [c for c in piece.candidates if c in stuck]
            target = min(inside) if inside else min(piece.candidates)
            path.append(rank)
            links.append((wait, piece, None if piece.any_source else target))
            rank = target if inside else None
            if not inside:
                end = gone[target]
                if piece.kind != COLL:
                    result.append(Chain(links[-1:], False, end))
                    named.add(path[-1])
        if rank is not None and rank in path:
            at = path.index(rank)
            result.append(Chain(links[at:], True))
            named.update(path[at:])
    return result


def _sites(links: list[tuple[Wait, Piece, int | None]]) -> str:
    """``ranks 0-1 in Send ([4000000] float64) at In [4], line 3``: the calls, alike ones once."""
    alike: dict[str, list[int]] = {}
    for wait, _, _ in links:
        e = wait.entry
        what = f"{e.op} ({e.data})" if e.data else e.op
        alike.setdefault(f"{what} at {e.site()}", []).append(wait.rank)
    return ", ".join(f"{format_ranks(ranks)} in {what}" for what, ranks in alike.items())


def _fix(chain: Chain) -> str:
    kinds = {piece.kind for _, piece, _ in chain.links}
    torch = all(_is_torch(w.entry.group) for w, _, _ in chain.links)
    if COLL in kinds:
        return (
            "a rank inside a collective serves no point-to-point call: let every send meet "
            "its receive before any rank enters the collective"
        )
    if torch:
        pair = "dist.batch_isend_irecv, or isend/irecv and wait"
    else:
        pair = "comm.Sendrecv, or Isend/Irecv and Waitall"
    if kinds == {RECV}:
        return (
            "every receive waits for a send that comes after a receive: let one rank send "
            f"first, or post both with {pair}"
        )
    return (
        "let one side receive first (e.g. even ranks send while odd ranks receive), or use "
        f"{pair}; small messages pass eagerly, large ones (and Ssend) wait for their receive"
    )


def chain_text(chain: Chain, now: float) -> str:
    """``deadlock: rank 0 waits to send to rank 1, which waits to send to rank 0
    (COMM_WORLD)``, the calls and their sites, how long, and the fix."""
    first, *rest = chain.links
    text = f"{format_ranks([first[0].rank])} {_words(*first)}"
    for wait, piece, target in rest:
        text += f", which {_words(wait, piece, target)}"
    if chain.cycle:
        groups = {w.entry.group for w, _, _ in chain.links}
        text = "deadlock: " + text
        text += f" ({groups.pop()})" if len(groups) == 1 else ""
    else:
        text += f", {chain.end} ({first[0].entry.group})"
    since = now - max(w.entry.started for w, _, _ in chain.links)
    text += f"; {_sites(chain.links)}, since {since:.0f} s"
    if chain.cycle:
        text += f". Fix: {_fix(chain)}"
    elif chain.end == ENDED:
        text += ". Fix: the peer's code must make the matching call before its cell ends"
    return text


def deadlock_lines(
    ledgers: dict[int, list[Entry]], world_size: int, gone: dict[int, str], now: float
) -> tuple[list[int], list[str]]:
    """The point-to-point deadlocks alone (their ranks, and their lines): what a few of
    each rank's newest calls tell, as no collective's wait is judged on them."""
    found = waits(ledgers, world_size, {})
    cycles = [
        chain
        for chain in chains(found, gone)
        if chain.cycle and all(piece.kind != COLL for _, piece, _ in chain.links)
    ]
    ranks = sorted({wait.rank for chain in cycles for wait, _, _ in chain.links})
    return ranks, [chain_text(chain, now) for chain in cycles]


def wait_lines(
    ledgers: dict[int, list[Entry]],
    world_size: int,
    gone: dict[int, str],
    now: float | None = None,
    groups: dict[str, dict[int, dict[int, Entry]]] | None = None,
) -> list[str]:
    """The deadlocks and the waits on a rank that will not come, one line each."""
    now = time.time() if now is None else now
    found = waits(ledgers, world_size, groups)
    return [chain_text(chain, now) for chain in chains(found, gone)]

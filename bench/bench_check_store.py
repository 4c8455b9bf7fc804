"""What signing check mode's store values costs, against the store round trip it rides on.

Run: .venv/bin/python bench/bench_check_store.py   (not a test; prints its figures)

Check mode (``--check-collectives``) writes each rank's signature of a collective to a
TCPStore and reads the other ranks' (rank_side/check_exchange.py). Each value carries an
HMAC under the world's key, so a value another local process wrote is refused: per value,
one ``sign`` by its writer and one ``open`` by a reader. The figure: a ``sign`` and an
``open`` of a typical signature, as a ratio to one ``set`` and one ``get`` of it on a
TCPStore on loopback (what the exchange pays per value already); the median of alternating
pairs of 200-call blocks (target < 0.2x).
"""

from __future__ import annotations

from datetime import timedelta

from common import alternated, figure, load

BLOCK = 200
NAME = "distcomp_check/3/17/0"
TEXT = "\x1f".join(["all_reduce", "[4] float32", "sum", "0", "/home/u/train.py", "12", "f"])


def main() -> None:
    import torch.distributed as dist

    from jupyter_distcomp.rank_side.check_exchange import Signer

    signer = Signer("0123456789abcdef0123456789abcdef")
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=30))
    assert signer.open(NAME, signer.sign(NAME, TEXT)) == TEXT

    def signed() -> None:
        for _ in range(BLOCK):
            signer.open(NAME, signer.sign(NAME, TEXT))

    def round_trips() -> None:
        for _ in range(BLOCK):
            store.set(NAME, TEXT)
            store.get(NAME)

    ratio, ours, theirs = alternated(signed, round_trips, 30)
    print(f"jupyter-distcomp check mode's signed store values; {load()}\n")
    print(
        figure(
            "sign + open / store set + get",
            ratio,
            "a store round trip",
            "< 0.2x",
            f"sign + open {ours / BLOCK * 1e6:.1f} us, set + get {theirs / BLOCK * 1e6:.1f} us",
        )
    )


if __name__ == "__main__":
    main()

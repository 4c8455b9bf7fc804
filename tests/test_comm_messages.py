"""Every message of the ranks panel's comm against its one definition, contracts.json's comm
schema (the extension's TypeScript types are generated from the same schema, and its jest
tests check the same definitions): what the channel sends for each state and action, and
what it refuses to read. A world here is a real World of the rank backend, not started."""

from __future__ import annotations

import jsonschema
import pytest

from jupyter_distcomp.contracts import COMM_ACTIONS, COMM_MESSAGES, COMM_SCHEMA, RankState
from jupyter_distcomp.local.ranks.backend import RankBackend
from jupyter_distcomp.local.ranks.world import World
from jupyter_distcomp.notebook.comm import RanksChannel, validator


class Recorder:
    """Stands in for ipykernel's Comm, the transport: keeps what the channel sends."""

    comm_id = "recorder"

    def __init__(self) -> None:
        self.sent: list[dict] = []

    def send(self, data: dict) -> None:
        self.sent.append(data)

    def on_msg(self, callback) -> None:
        pass

    def on_close(self, callback) -> None:
        pass


def reference(definition: str):
    """jsonschema's validator of one definition: a second, independent reading of the schema."""
    return jsonschema.Draft7Validator({**COMM_SCHEMA, "$ref": f"#/definitions/{definition}"})


@pytest.fixture
def channel():
    backend = RankBackend()
    world = World(
        "train",
        [{"AZUREML_CR_NODE_RANK": "0"}, {"AZUREML_CR_NODE_RANK": "1"}],
        launcher="mpi",
        instance_count=2,
        process_count_per_node=1,
    )
    backend.worlds["train"] = world
    channel = RanksChannel(backend)
    recorder = Recorder()
    channel._adopt(recorder)
    yield channel, world, recorder.sent
    world.stop()


def request(channel: RanksChannel, data) -> None:
    channel.on_message({"content": {"data": data}})


def test_the_schema_is_valid_and_names_what_both_sides_use():
    jsonschema.Draft7Validator.check_schema(COMM_SCHEMA)
    assert COMM_ACTIONS == ("interrupt", "restart", "stop", "refresh", "where")
    assert COMM_MESSAGES == ("snapshot", "world", "result")


def test_every_message_the_channel_sends_matches_its_definition(channel):
    channel, world, sent = channel
    sent.append(channel.snapshot())
    for state in RankState:  # every state a rank can be in reaches the panel
        world.ranks[1].state = state
        channel.on_rank_event(channel.backend.event(world))
    channel.on_rank_event(channel.backend.event(world, stopped=True))
    request(channel, {"action": "refresh", "name": ""})
    request(channel, {"action": "where", "name": "train"})  # no started ranks: a result
    request(channel, {"action": "interrupt", "name": "nope"})
    request(channel, {"action": "dance", "name": "train"})
    request(channel, ["not", "an", "object"])
    kinds = [message["type"] for message in sent]
    assert set(kinds) == set(COMM_MESSAGES) and len(sent) == 12
    for message in sent:
        validator("KernelMessage")(message)
        reference("KernelMessage").validate(message)
    states = [m["world"]["ranks"][1]["state"] for m in sent if m["type"] == "world"]
    assert states == [*RankState, RankState.DEAD]


def test_a_request_the_kernel_cannot_read_is_answered_not_acted_on(channel):
    channel, world, sent = channel
    request(channel, {"action": "stop", "name": "train", "extra": 1})
    request(channel, {"action": "dance", "name": "train"})
    request(channel, {"name": "train"})
    assert [m["ok"] for m in sent] == [False, False, False]
    assert all(m["message"].startswith("unknown request") for m in sent)
    assert sent[0]["action"] == "stop" and sent[2]["action"] is None
    assert channel.backend.world("train") is world and not world.stopped


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        ("RankRequest", {"action": "stop"}),
        ("RankRequest", {"action": "dance", "name": "x"}),
        ("KernelMessage", {"type": "snapshot"}),
        ("KernelMessage", {"type": "news", "worlds": []}),
        (
            "KernelMessage",
            {
                "type": "world",
                "world": {
                    "name": "x",
                    "instance_count": 1,
                    "process_count_per_node": 1,
                    "stopped": False,
                    "background": False,
                    "hang": None,
                    "ranks": [
                        {"rank": 0, "node": 0, "local_rank": 0, "state": "asleep", "pid": None}
                    ],
                },
            },
        ),
        ("KernelMessage", {"type": "result", "action": "stop", "name": "x", "ok": "yes"}),
    ],
)
def test_a_message_off_its_definition_is_refused(definition, message):
    with pytest.raises(ValueError):
        validator(definition)(message)
    assert not reference(definition).is_valid(message)

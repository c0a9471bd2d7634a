"""KV-cache events of the real daemon (docs/server.md, "KV-cache events").

builtin:tiny with a small pool (evictions), a shared-prefix multi-turn
workload through gRPC (token ids, so every prompt token is known), a cache
reset through POST /reset_prefix_cache, a pyzmq SUB subscriber and the replay
ROUTER. Payloads are decoded with msgspec typed structs written here from vLLM's
event schema (vLLM's own classes would need its 239 MB wheel: not installed).

Checked:
- replaying every batch rebuilds exactly the daemon's cached set (its size is
  kvserve_kv_cache_cached_blocks), with no removal of an unknown block and no
  block stored twice;
- each stored block's parent is cached when the block is stored;
- sequence numbers: no gap that kvserve_kv_events_dropped_batches_total does
  not explain, and published + dropped = last sequence number + 1;
- the tokens of each stored block, with its ancestors', are a prefix of some
  request's prompt + output;
- llm-d's block keys (FNV-64a over canonical CBOR of [parent, tokens, extra],
  root FNV-64a of the empty hash seed), computed through the events' parent
  links, equal the keys computed from the request's own tokens: the chain
  links up;
- the live PUB messages are the replayed ones, byte for byte.
"""
from __future__ import annotations

import re
import struct
import time
import urllib.error
import urllib.request

import msgspec
import pytest
import zmq

import kvserve_fixtures as kf

BLOCK_SIZE = 4
END_SEQ = b"\xff" * 8


# --- vLLM's event schema (map encoding: tagged structs under "type") -------

class BlockStored(msgspec.Struct, tag=True, omit_defaults=True):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[list[str] | None] | None = None
    group_idx: int | None = None


class BlockRemoved(msgspec.Struct, tag=True, omit_defaults=True):
    block_hashes: list[int]
    medium: str | None
    group_idx: int | None = None


class AllBlocksCleared(msgspec.Struct, tag=True, omit_defaults=True):
    pass


class KVEventBatch(msgspec.Struct, array_like=True, omit_defaults=True):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int | None = None


# The older positional encoding (--kv_events_encoding=array).
class ArrayBlockStored(msgspec.Struct, tag="BlockStored", array_like=True):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[list[str] | None] | None
    group_idx: int | None


class ArrayBlockRemoved(msgspec.Struct, tag="BlockRemoved", array_like=True):
    block_hashes: list[int]
    medium: str | None
    group_idx: int | None


class ArrayAllBlocksCleared(msgspec.Struct, tag="AllBlocksCleared", array_like=True):
    pass


class ArrayKVEventBatch(msgspec.Struct, array_like=True):
    ts: float
    events: list[ArrayBlockStored | ArrayBlockRemoved | ArrayAllBlocksCleared]
    data_parallel_rank: int | None


# --- llm-d's block keys, from its published description --------------------

def _cbor_head(major: int, n: int) -> bytes:
    """Canonical (shortest) CBOR head of major type `major` with argument n."""
    if n < 24:
        return bytes([major << 5 | n])
    for info, fmt in ((24, ">B"), (25, ">H"), (26, ">I"), (27, ">Q")):
        if n < 1 << (8 * struct.calcsize(fmt)):
            return bytes([major << 5 | info]) + struct.pack(fmt, n)
    raise ValueError(n)


def _cbor(value) -> bytes:
    """Canonical CBOR of None, non-negative ints and lists of them."""
    if value is None:
        return b"\xf6"
    if isinstance(value, int):
        assert value >= 0
        return _cbor_head(0, value)
    return _cbor_head(4, len(value)) + b"".join(_cbor(v) for v in value)


def fnv64a(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


LLMD_ROOT = fnv64a(b"")  # the indexer's hash seed "" (PYTHONHASHSEED unset)


def llmd_key(parent: int, tokens: list[int]) -> int:
    return fnv64a(_cbor([parent, tokens, None]))


def test_cbor_and_fnv_reference_values():
    # RFC 8949 appendix A examples, and FNV-1a's published 64-bit test vector.
    assert _cbor([1, [2, 3], [4, 5]]) == bytes.fromhex("8301820203820405")
    assert _cbor(1000000) == bytes.fromhex("1a000f4240")
    assert _cbor(18446744073709551615) == bytes.fromhex("1bffffffffffffffff")
    assert fnv64a(b"a") == 0xAF63DC4C8601EC8C
    assert LLMD_ROOT == 0xCBF29CE484222325


# --- the daemon and its sockets ---------------------------------------------

def endpoints(daemon: kf.Daemon) -> tuple[str, str]:
    line = daemon.stdout_text()
    events = re.search(r" kv_events=(\S+)", line)
    replay = re.search(r" kv_events_replay=(\S+)", line)
    assert events and replay, line
    return events.group(1), replay.group(1)


def replay_all(ctx: zmq.Context, replay_endpoint: str, start: int = 0) -> list[tuple[bytes, int, bytes]]:
    """(topic, seq, payload) of every buffered batch from `start`, via the ROUTER."""
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(replay_endpoint)
    dealer.send_multipart([b"", start.to_bytes(8, "big")])
    out = []
    try:
        while True:
            assert dealer.poll(10_000), "replay: no answer"
            frames = dealer.recv_multipart()
            assert frames[0] == b"" and len(frames) == 4, frames
            if frames[2] == END_SEQ:
                assert frames[1] == b"" and frames[3] == b""
                return out
            out.append((frames[1], int.from_bytes(frames[2], "big"), frames[3]))
    finally:
        dealer.close(linger=0)


def drain(sub: zmq.Socket, live: dict[int, tuple[bytes, bytes]], quiet_s: float = 0.5) -> None:
    """Receives until no message came for quiet_s."""
    while sub.poll(int(quiet_s * 1000)):
        topic, seq, payload = sub.recv_multipart()
        assert len(seq) == 8
        live[int.from_bytes(seq, "big")] = (topic, payload)


class Replica:
    """A router's view of one replica, rebuilt from its events."""

    def __init__(self):
        self.cached: set[int] = set()
        self.blocks: dict[int, tuple[int | None, list[int], object]] = {}  # id -> parent, tokens, extra
        self.num_stored = self.num_removed = self.num_cleared = 0

    def apply(self, batch: KVEventBatch) -> None:
        for e in batch.events:
            if isinstance(e, BlockStored):
                assert e.block_size == BLOCK_SIZE and e.medium == "CPU"
                assert e.lora_id is None and e.lora_name is None and e.group_idx == 0
                assert len(e.token_ids) == BLOCK_SIZE * len(e.block_hashes)
                assert e.extra_keys is not None and len(e.extra_keys) == len(e.block_hashes)
                parent = e.parent_block_hash
                for i, block in enumerate(e.block_hashes):
                    assert parent is None or parent in self.cached, \
                        f"block {block} stored while its parent {parent} is not cached"
                    assert block not in self.cached, f"block {block} stored twice"
                    tokens = e.token_ids[i * BLOCK_SIZE:(i + 1) * BLOCK_SIZE]
                    known = self.blocks.get(block)
                    assert known is None or known == (parent, tokens, e.extra_keys[i]), block
                    self.blocks[block] = (parent, tokens, e.extra_keys[i])
                    self.cached.add(block)
                    self.num_stored += 1
                    parent = block
            elif isinstance(e, BlockRemoved):
                assert e.medium == "CPU"
                for block in e.block_hashes:
                    assert block in self.cached, f"removed {block}, which is not cached"
                    self.cached.remove(block)
                    self.num_removed += 1
            else:
                self.cached.clear()
                self.num_cleared += 1

    def prefix_tokens(self, block: int) -> list[list[int]]:
        """The token blocks from the root to `block`, through parent links."""
        chain = []
        while block is not None:
            parent, tokens, _ = self.blocks[block]
            chain.append(tokens)
            block = parent
        return chain[::-1]


def run_workload(daemon: kf.Daemon, prompts: list[list[int]], salt: str | None = None,
                 max_tokens: int = 5) -> list[list[int]]:
    """Runs the prompts (4 at a time); returns each request's prompt + output."""
    fields = {"cache_salt": salt} if salt else {}

    def one(p):
        r = kf.stream(daemon.stub, kf.ids_request(p, max_tokens, ignore_eos=True, **fields))
        r.check_ok()
        return p + r.token_ids

    out = []
    for i in range(0, len(prompts), 4):
        out += kf.run_concurrently([lambda p=p: one(p) for p in prompts[i:i + 4]])
    return out


def shared_prefix_prompts(seed: int) -> list[list[int]]:
    """Multi-turn conversations over three system prefixes (5, 3 and 6 blocks)."""
    import random
    rng = random.Random(seed)
    systems = [[rng.randrange(1, 250) for _ in range(n * BLOCK_SIZE)] for n in (5, 3, 6)]
    prompts = []
    for turn in range(3):
        for s, system in enumerate(systems):
            history = list(system)
            for t in range(turn + 1):
                history += [rng.randrange(1, 250) for _ in range(3 + (s + t) % 5)]
            prompts.append(history)
    return prompts


def post_reset(daemon: kf.Daemon) -> int:
    request = urllib.request.Request(daemon.http_url + "/reset_prefix_cache", data=b"",
                                     method="POST")
    try:
        with kf._HTTP.open(request, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


def wait_idle_and_drained(daemon: kf.Daemon, sub, live) -> dict:
    samples = daemon.wait_metrics(lambda s: kf.metric(s, "kvserve_engine_busy") == 0, timeout=30)
    assert kf.metric(samples, "kvserve_engine_busy") == 0
    drain(sub, live)
    return daemon.metrics()


def test_events_rebuild_the_daemons_cache_view(kvserve_factory):
    daemon = kvserve_factory(
        "--http_port=-1", f"--block_size={BLOCK_SIZE}", "--num_kv_blocks=40",
        "--max_num_seqs=4", "--kv_events_endpoint=tcp://127.0.0.1:0",
        "--kv_events_replay_endpoint=tcp://127.0.0.1:0")
    events_endpoint, replay_endpoint = endpoints(daemon)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    sub.connect(events_endpoint)
    live: dict[int, tuple[bytes, bytes]] = {}
    try:
        sequences = run_workload(daemon, shared_prefix_prompts(1))
        sequences += run_workload(daemon, shared_prefix_prompts(1)[:3], salt="tenant-a")
        wait_idle_and_drained(daemon, sub, live)
        assert post_reset(daemon) == 200
        sequences += run_workload(daemon, shared_prefix_prompts(2)[:5])
        samples = wait_idle_and_drained(daemon, sub, live)

        batches = replay_all(ctx, replay_endpoint)
        topics = {t for t, _, _ in batches}
        assert topics == {f"kv@127.0.0.1:{daemon.http_url.rsplit(':', 1)[1]}@builtin:tiny".encode()}
        seqs = [s for _, s, _ in batches]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        dropped = kf.metric(samples, "kvserve_kv_events_dropped_batches_total")
        published = kf.metric(samples, "kvserve_kv_events_published_batches_total")
        assert seqs[-1] + 1 - len(seqs) == dropped, "a sequence gap the drop counter misses"
        assert published + dropped == seqs[-1] + 1
        # What the subscriber got live is what the buffer replays, byte for byte.
        assert live, "the SUB socket received nothing"
        by_seq = {s: (t, p) for t, s, p in batches}
        for s, msg in live.items():
            assert by_seq[s] == msg, f"live batch {s} differs from its replay"

        decoder = msgspec.msgpack.Decoder(KVEventBatch)
        replica = Replica()
        for _, _, payload in batches:
            batch = decoder.decode(payload)
            assert batch.data_parallel_rank == 0 and batch.ts > 1.6e9
            replica.apply(batch)
        assert replica.num_removed > 0, "the pool was meant to evict"
        assert replica.num_cleared == 1
        assert len(replica.cached) == kf.metric(samples, "kvserve_kv_cache_cached_blocks")
        assert replica.cached, "nothing cached at the end"

        full = [[tuple(seq[i:i + BLOCK_SIZE]) for i in range(0, len(seq) - BLOCK_SIZE + 1,
                                                            BLOCK_SIZE)] for seq in sequences]
        for block in replica.blocks:
            chain = [tuple(t) for t in replica.prefix_tokens(block)]
            assert any(c[:len(chain)] == chain for c in full), \
                f"block {block}: its tokens are no request's prefix"
            # llm-d's key through the events' parent links (as its indexer
            # chains it) equals the key from the tokens alone (as its router
            # computes it for a prompt).
            key_direct = LLMD_ROOT
            for tokens in chain:
                key_direct = llmd_key(key_direct, list(tokens))
            parent, tokens, _ = replica.blocks[block]
            parent_key = LLMD_ROOT
            if parent is not None:
                for t in replica.prefix_tokens(parent):
                    parent_key = llmd_key(parent_key, t)
            assert llmd_key(parent_key, tokens) == key_direct
        extras = {repr(extra) for _, _, extra in replica.blocks.values()}
        assert extras == {"None", "['tenant-a']"}, extras
    finally:
        sub.close(linger=0)
        ctx.term()


def test_reset_is_refused_while_blocks_are_held(kvserve_factory):
    daemon = kvserve_factory("--http_port=-1", "--num_kv_blocks=200", "--block_size=16",
                             "--kv_events_endpoint=tcp://127.0.0.1:0")
    answers = []
    # The reset is asked at the first token of a 2000-token generation.
    r = kf.stream(daemon.stub, kf.ids_request(list(range(1, 21)), 2000, ignore_eos=True),
                  on_message=lambda m, call: answers or answers.append(post_reset(daemon)))
    r.check_ok()
    assert answers == [409]
    assert post_reset(daemon) == 200  # nothing held any more


def test_array_encoding_decodes_positionally(kvserve_factory):
    daemon = kvserve_factory(
        "--http_port=-1", f"--block_size={BLOCK_SIZE}", "--num_kv_blocks=40",
        "--kv_events_endpoint=tcp://127.0.0.1:0", "--kv_events_replay_endpoint=tcp://127.0.0.1:0",
        "--kv_events_encoding=array", "--kv_events_topic=kv@pod-a@tiny")
    _, replay_endpoint = endpoints(daemon)
    prompt = list(range(10, 10 + 3 * BLOCK_SIZE + 2))
    run_workload(daemon, [prompt], max_tokens=1)
    published = "kvserve_kv_events_published_batches_total"
    daemon.wait_metrics(lambda s: kf.metric(s, "kvserve_engine_busy") == 0
                        and kf.metric(s, published) >= 1, timeout=30)
    ctx = zmq.Context()
    try:
        batches = replay_all(ctx, replay_endpoint)
    finally:
        ctx.term()
    assert {t for t, _, _ in batches} == {b"kv@pod-a@tiny"}
    decoder = msgspec.msgpack.Decoder(ArrayKVEventBatch)
    stored = [e for _, _, p in batches for e in decoder.decode(p).events]
    assert [type(e) for e in stored] == [ArrayBlockStored]
    assert stored[0].token_ids == prompt[:3 * BLOCK_SIZE]
    assert stored[0].parent_block_hash is None and len(stored[0].block_hashes) == 3
    # The map decoder refuses positional events: the two encodings differ.
    with pytest.raises(msgspec.ValidationError):
        msgspec.msgpack.Decoder(KVEventBatch).decode(batches[0][2])

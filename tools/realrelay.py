"""Dynamo's own KV DC relay on loopback, fed by a worker, recorded by ``cbi1kit record``.

Run inside a private network namespace (``unshare -n``: the runtime's ZMQ event plane binds
every address whatever it is told; this brings the namespace's loopback up), as
``tests/test_real_relay.py`` and ``make real-sample`` do:

    unshare -n python -m tools.realrelay OUT.kvrcap [--expected-blocks N] [--chains N]
        [--evict N] [--seed S] [--seconds S]
        [--shutdown-after S | --restart-after S | --reregister-after S]

It needs ``ai-dynamo-runtime`` (the ``oracle`` extra): an in-memory runtime, a worker serving a
tiny offline model, ``KvDcRelay`` on loopback, then ``cbi1kit record --list`` and ``cbi1kit
record`` against it while seeded chains are stored and some evicted whole, leaf first. Beside
the capture: ``OUT.workload.json`` (each chain's tokens, evicted or not) and ``OUT.list.txt``.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import random
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BLOCK = 16
NAMESPACE = "cbi1kit"
MODEL = "cbi1kit-tiny"
DC = "dc-a"
VOCAB = 64


def write_model(folder: Path) -> None:
    """A model folder the runtime reads offline: a config and a WordLevel tokenizer."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "max_position_embeddings": 4096,
        "vocab_size": VOCAB,
        "bos_token_id": 0,
        "eos_token_id": 1,
    }
    (folder / "config.json").write_text(json.dumps(config))
    vocab = {f"t{i}": i for i in range(VOCAB - 1)} | {"[UNK]": VOCAB - 1}
    tokenizer: dict[str, Any] = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"},
    }
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))


def chains(seed: int, count: int, evict: int) -> list[dict[str, Any]]:
    """``count`` chains of 1-8 blocks of seeded random tokens; the first ``evict`` are evicted."""
    rng = random.Random(seed)
    out = []
    for k in range(count):
        blocks = rng.randint(1, 8)
        tokens = [rng.randrange(2, VOCAB - 1) for _ in range(BLOCK * blocks)]
        out.append({"tokens": tokens, "blocks": blocks, "evicted": k < evict})
    return out


async def _publish(publisher: Any, workload: list[dict[str, Any]]) -> None:
    """Every chain stored (its block ids noted in it), then the evicted ones removed."""
    block_id = 1
    for chain in workload:
        ids = list(range(block_id, block_id + chain["blocks"]))
        block_id += chain["blocks"]
        chain["block_ids"] = ids
        publisher.publish_stored(chain["tokens"], [BLOCK] * chain["blocks"], ids)
        await asyncio.sleep(0.01)
    for chain in workload:
        if chain["evicted"]:
            publisher.publish_removed(list(reversed(chain["block_ids"])))  # leaf first
            await asyncio.sleep(0.01)


async def _serve(spec: dict[str, Any]) -> int:
    import dynamo._core as dyn

    out = Path(spec["output"])
    model = Path(tempfile.mkdtemp(prefix="cbi1kit-model-"))
    write_model(model)
    runtime = dyn.DistributedRuntime(asyncio.get_running_loop(), "mem", "tcp", event_plane="zmq")
    endpoint = runtime.endpoint(f"{NAMESPACE}.backend.generate")

    async def generate(request: Any, context: Any = None) -> Any:
        yield {"token_ids": [1]}

    serving = asyncio.ensure_future(endpoint.serve_endpoint(generate))
    await _register(dyn, endpoint, model)
    target = f"127.0.0.1:{spec['port']}"
    relay = await _start_relay(dyn, runtime, target, spec["expected_unique_blocks"])
    publisher = dyn.KvEventPublisher(endpoint, kv_block_size=BLOCK, enable_local_indexer=True)
    await asyncio.sleep(1.0)  # the worker's registration reaches the relay's catalog
    cli = [sys.executable, "-m", "cbi1kit", "record", target]
    listed = subprocess.run(
        [*cli, "--list"], check=False, capture_output=True, text=True, timeout=30
    )
    Path(f"{out}.list.txt").write_text(listed.stdout + listed.stderr)
    recording = [*cli, "-o", str(out), "--duration", str(spec["seconds"]), "--quiet"]
    recording += ["--dc", DC]  # its only DC, by the name the capture then shows beside its id
    if spec["shutdown_after"] is not None:
        recording += ["--give-up-after", "2"]  # the relay goes: the recorder stops trying
    recorder = subprocess.Popen(recording)
    await asyncio.sleep(2.0)  # subscribed, the snapshot in
    workload = chains(spec["seed"], spec["chains"], spec["evict"])
    await _publish(publisher, workload)
    Path(f"{out}.workload.json").write_text(json.dumps(workload))
    if spec["shutdown_after"] is not None:
        await asyncio.sleep(spec["shutdown_after"])
        await _stop_relay(relay)
    if spec["reregister_after"] is not None:  # the worker leaves the catalog, then comes back
        await asyncio.sleep(spec["reregister_after"])
        await _awaited(dyn.unregister_model(endpoint))
        await asyncio.sleep(2.0)
        await _register(dyn, endpoint, model)
    if spec["restart_after"] is not None:  # a new relay on the same address: the recorder
        await asyncio.sleep(spec["restart_after"])  # resubscribes to its new generation
        await _stop_relay(relay)
        relay = await _start_relay(dyn, runtime, target, spec["expected_unique_blocks"])
    try:
        code = await asyncio.to_thread(recorder.wait, spec["seconds"] + 30)
    except subprocess.TimeoutExpired:
        recorder.kill()
        code = -9
    serving.cancel()
    return int(code)


async def _register(dyn: Any, endpoint: Any, model: Path) -> None:
    """The worker's model card: a tiny offline model, 16-token blocks, KV routing."""
    await dyn.register_model(
        dyn.ModelInput.Tokens,
        dyn.ModelType.Chat | dyn.ModelType.Completions,
        endpoint,
        str(model),
        MODEL,
        kv_cache_block_size=BLOCK,
        router_config=dyn.RouterConfig(dyn.RouterMode.KV),
        worker_type=dyn.WorkerType.Aggregated,
    )


async def _awaited(value: Any) -> Any:
    """``value``, awaited where the binding handed back a future or coroutine."""
    if asyncio.isfuture(value) or asyncio.iscoroutine(value):
        return await value
    return value


async def _start_relay(dyn: Any, runtime: Any, target: str, expected_blocks: int) -> Any:
    relay = dyn.KvDcRelay(
        runtime.endpoint(f"{NAMESPACE}.kv_dc_relay.control"),
        DC,
        NAMESPACE,
        None,
        bind=target,
        expected_unique_blocks=expected_blocks,
    )
    await relay.start()
    return relay


async def _stop_relay(relay: Any) -> None:
    await _awaited(relay.shutdown())


def loopback_up() -> None:
    """``ip link set lo up`` without iproute2: a new network namespace's loopback starts down."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh14x", b"lo", 0)
        flags = struct.unpack("16sh14x", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sh14x", b"lo", flags | iff_up))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", help="the capture to write")
    parser.add_argument("--expected-blocks", type=int, default=4_096, dest="expected_unique_blocks")
    parser.add_argument("--chains", type=int, default=60, help="chains stored")
    parser.add_argument("--evict", type=int, default=20, help="of them, evicted whole")
    parser.add_argument("--seed", type=int, default=11, help="the workload's seed")
    parser.add_argument("--seconds", type=float, default=8.0, help="how long to record")
    parser.add_argument("--port", type=int, default=50051, help="the relay's port on loopback")
    parser.add_argument(
        "--shutdown-after", type=float, default=None, help="shut the relay down this long after"
    )
    parser.add_argument(
        "--restart-after", type=float, default=None, help="restart the relay this long after"
    )
    parser.add_argument(
        "--reregister-after",
        type=float,
        default=None,
        help="unregister the worker's model this long after, and register it again",
    )
    spec = vars(parser.parse_args())
    loopback_up()
    for name in ("DYN_TCP_RPC_HOST", "DYN_TCP_RESPONSE_STREAM_HOST", "DYN_EVENT_PLANE_HOST"):
        os.environ[name] = "127.0.0.1"
    code = asyncio.run(_serve(spec))
    sys.stdout.flush()
    os._exit(code)  # the runtime's threads would hold the interpreter's exit


if __name__ == "__main__":
    main()

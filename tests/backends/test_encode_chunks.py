"""`encode_prompts` tokenizes in chunks of ENCODE_CHUNK prompts (issue 37 §2): the same ids and mask as one
call over the whole batch, and a huge batch never holds off SIGTERM in one native tokenizer call."""

import os
import subprocess
import sys

import torch

from zoo.backends.generate import hf
from zoo.models.tiny import tiny_tokenizer


def test_chunks_give_the_ids_and_mask_of_one_call(monkeypatch):
    tok = tiny_tokenizer()
    prompts = [[{"role": "user", "content": "x" * (i % 7) + f"{i} + {i}?"}] for i in range(11)]
    whole_ids, whole_mask = hf.encode_prompts(tok, prompts)  # [11, P] in one call (11 < 1024)
    sizes = []
    real = type(tok).__call__
    monkeypatch.setattr(
        type(tok), "__call__", lambda self, texts, **k: sizes.append(len(texts)) or real(self, texts, **k)
    )
    monkeypatch.setattr(hf, "ENCODE_CHUNK", 4)
    ids, mask = hf.encode_prompts(tok, prompts)
    assert sizes == [4, 4, 3]
    assert torch.equal(ids, whole_ids) and torch.equal(mask, whole_mask)
    assert mask[:, 0].sum() < 11 and mask[:, -1].all()  # left padding: some rows start with pads, all end real


HUGE = """
import os, signal, sys, threading, time
from zoo.backends.generate.hf import encode_prompts
from zoo.models.tiny import tiny_tokenizer
at = {}
def stop(signum, frame):
    at["acted"] = time.monotonic()
    raise KeyboardInterrupt
signal.signal(signal.SIGTERM, stop)  # as zoo.cli.stopping does
def send():
    at["sent"] = time.monotonic()
    os.kill(os.getpid(), signal.SIGTERM)
tok = tiny_tokenizer()
prompts = [f"What is {i % 97} + {i % 89}? Answer with a number." for i in range(300_000)]
threading.Timer(1.0, send).start()  # 1 s into encode_prompts
try:
    encode_prompts(tok, prompts)  # one call over all 300,000 held the signal ~30 s on a 2-core CPU
except KeyboardInterrupt:
    print(f"interrupted {at['acted'] - at['sent']:.3f}", flush=True)
"""


def test_sigterm_stops_the_encoding_of_a_huge_batch_within_a_second():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", HUGE], capture_output=True, text=True, env=env, timeout=300)
    word, latency = out.stdout.split()
    assert word == "interrupted", (out.stdout, out.stderr)
    assert float(latency) < 1.0  # one chunk of 1024 prompts: ~0.1-0.25 s here

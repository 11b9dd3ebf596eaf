"""`zoo rm train` (Bradley-Terry reward-model training) and `zoo rm pairs` (pairs from a task), on tiny
models built in code."""

import json
import random
import string

import pytest
import torch

from zoo.rm.config import PairData, PairsConfig, RMTrainConfig
from zoo.rm.pairs import choose_pairs, make_pairs
from zoo.rm.train import bradley_terry_loss, train_reward_model


def _marker_pairs(n, seed):
    """Pairs whose chosen text holds the marker '#' and whose rejected text has a letter in its place
    (same length, so only the marker tells them apart)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        base = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(6, 12)))
        k = rng.randint(0, len(base))
        out.append(
            {
                "prompt": "Pick one.",
                "chosen": base[:k] + "#" + base[k:],
                "rejected": base[:k] + rng.choice(string.ascii_lowercase) + base[k:],
            }
        )
    return out


def test_bradley_terry_loss_by_hand():
    # r_c - r_r = 1 and 0 with margin 0: mean(-log sigmoid(1), -log sigmoid(0)) = (0.313262 + 0.693147) / 2
    loss = bradley_terry_loss(torch.tensor([1.0, 0.5]), torch.tensor([0.0, 0.5]), torch.zeros(2))
    assert float(loss) == pytest.approx((0.3132617 + 0.6931472) / 2, abs=1e-6)
    # a margin of 1 moves the first pair to sigmoid(0): both terms log 2
    loss = bradley_terry_loss(torch.tensor([1.0, 0.5]), torch.tensor([0.0, 0.5]), torch.tensor([1.0, 0.0]))
    assert float(loss) == pytest.approx(0.6931472, abs=1e-6)


def test_rm_train_learns_the_marker_and_the_checkpoint_loads_as_the_reward(tiny_model_dir, tmp_path):
    from zoo.rewards.reward_model import RewardModelSession

    pairs = _marker_pairs(48, seed=0)  # 32 trained, 16 held out
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    cfg = RMTrainConfig(
        model=str(tiny_model_dir),
        data=PairData(path=str(tmp_path / "pairs.jsonl"), eval_size=16),
        epochs=8,
        batch_size=8,
        lr=1e-3,
        output_dir=str(tmp_path / "rm"),
        tracking={"wandb": False},
    )
    s = train_reward_model(cfg, progress=False)
    assert s["pairs/train"] == 32 and s["pairs/eval"] == 16 and s["steps"] == 8 * 4
    assert s["eval/accuracy/after"] >= 0.9
    # the checkpoint, loaded by the reward as is, prefers every held-out-sized batch of fresh marker texts
    rm = RewardModelSession(model=s["model"], batch_size=4)
    rm.setup(torch.device("cpu"))
    fresh = _marker_pairs(16, seed=99)
    rows = [{"prompt": p["prompt"]} for p in fresh]
    rc, rr = rm([p["chosen"] for p in fresh], rows), rm([p["rejected"] for p in fresh], rows)
    assert sum(c > r for c, r in zip(rc, rr)) >= 14  # >= 0.9 of 16 unseen pairs
    assert (tmp_path / "rm" / "metrics.jsonl").is_file()
    with pytest.raises(FileExistsError, match="already there"):
        train_reward_model(cfg, progress=False)


def test_a_bad_pair_names_the_file_and_line(tmp_path):
    from zoo.rm.data import read_jsonl_pairs

    (tmp_path / "p.jsonl").write_text(
        '{"prompt": "a", "chosen": "b", "rejected": "c"}\n{"prompt": "a", "chosen": "b"}\n'
    )
    with pytest.raises(ValueError, match=r"p.jsonl:2: missing 'rejected'"):
        read_jsonl_pairs(tmp_path / "p.jsonl")


def test_chat_list_pairs_append_to_the_prompt():
    from zoo.rm.data import parse_pair

    p = parse_pair(
        {
            "chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
            "rejected": "b",
            "prompt": None,
        },
        "x",
    )
    assert p.chosen[-1] == {"role": "assistant", "content": "a"} and len(p.chosen) == 2
    assert p.rejected == ({"role": "assistant", "content": "b"},)


def test_choose_pairs_hits_the_length_bias_exactly_when_the_prompts_allow_it():
    """200 prompts, each with a correct and an incorrect completion of random lengths 1..20 (3 of each):
    most prompts can give either kind of pair, so the quota round(0.8 x usable) is met exactly."""
    rng = random.Random(0)
    correct = [["x" * rng.randint(1, 20) for _ in range(3)] for _ in range(200)]
    wrong = [["y" * rng.randint(1, 20) for _ in range(3)] for _ in range(200)]
    got = [x for x in choose_pairs(correct, wrong, length_bias=0.8, label_noise=0.0, rng=random.Random(1)) if x]
    longer = sum(len(c) > len(r) for _, c, r, _ in got)
    assert longer == round(0.8 * len(got))
    assert all(cc for *_, cc in got)  # no noise: chosen is always the correct one


def test_label_noise_flips_about_q_of_the_chosen_shorter_pairs():
    """length_bias 0 makes every pair chosen-shorter (the incorrect one longer), so noise q = 0.3 flips
    each with probability 0.3: over n = 400 pairs the flipped count is Binomial(400, 0.3), mean 120,
    sd sqrt(400 x 0.3 x 0.7) = 9.2; 4 sd is +-37."""
    correct = [["x" * 2] for _ in range(400)]
    wrong = [["y" * 5] for _ in range(400)]
    got = choose_pairs(correct, wrong, length_bias=0.0, label_noise=0.3, rng=random.Random(0))
    flipped = sum(not cc for _, _, _, cc in got)
    assert abs(flipped - 120) <= 37
    assert all((len(c) > len(r)) == (not cc) for _, c, r, cc in got)  # a flipped pair prefers the longer wrong one


def test_rm_pairs_samples_the_policy_with_the_stated_length_bias():
    """A tiny random policy with an EOS bias (so completion lengths vary), judged by a format pattern
    ("correct": contains a letter a-m). 96 prompts x 8 samples. The fraction of longer-chosen pairs is
    round(0.8 x n) / n when every prompt has both kinds of pair; prompts with only one kind can move it,
    so the test allows +-0.1 (2 sd of a Bernoulli(0.8) mean over n ~ 64: sqrt(0.16/64) = 0.05)."""
    from zoo.models.tiny import tiny_model_and_tokenizer

    policy, tok = tiny_model_and_tokenizer(seed=0)
    eos = tok.eos_token_id
    head = torch.nn.Linear(policy.config.hidden_size, policy.config.vocab_size, bias=True)
    with torch.no_grad():
        head.weight.copy_(policy.lm_head.weight)
        head.bias.zero_()
        head.bias[eos] = 3.0  # EOS now likely enough that lengths spread over 1..24 tokens
    policy.lm_head = head
    policy.eval()
    rows = [{"prompt": [{"role": "user", "content": f"q{i}"}], "question": f"q{i}", "answer": "0"} for i in range(96)]
    cfg = PairsConfig(
        task={"name": "none"},
        judge={"name": "format", "pattern": "[a-m]"},
        prompts=96,
        samples=8,
        max_new_tokens=24,
        length_bias=0.8,
        seed=0,
    )
    records, s = make_pairs(cfg, policy, tok, rows)
    assert s["pairs"] >= 40, s  # enough pairs for the fraction to mean something
    frac = sum(len(r["chosen"]) > len(r["rejected"]) for r in records) / len(records)
    assert frac == pytest.approx(0.8, abs=0.1)
    assert frac == s["chosen_longer_frac"]
    assert all(r["chosen_correct"] for r in records)
    again, _ = make_pairs(cfg, policy, tok, rows)
    assert again == records  # seeded


def test_cli_errors_name_the_file_and_the_key(tmp_path):
    from typer.testing import CliRunner

    from zoo.cli import app

    f = tmp_path / "rm.yaml"
    f.write_text("model: x\ndata: {path: p.jsonl}\nlrr: 0.1\n")
    r = CliRunner().invoke(app, ["rm", "train", str(f)])
    assert r.exit_code != 0 and "rm.yaml" in str(r.exception or r.output) and "lrr" in str(r.exception or r.output)
    f.write_text("task: {name: reasoning_gym}\nlength_bias: 1.5\n")
    r = CliRunner().invoke(app, ["rm", "pairs", str(f)])
    assert r.exit_code != 0 and "length_bias" in str(r.exception or r.output)


def test_a_datasets_source_reads_the_same_pairs_as_the_jsonl(tmp_path, monkeypatch):
    """`data.dataset` goes through `datasets.load_dataset`; a local folder holding train.jsonl loads
    offline (the packaged json builder, no Hub) and gives exactly the pairs the JSONL reader gives.
    A source that does not load is one ValueError naming it."""
    from zoo.rm.data import read_dataset_pairs, read_jsonl_pairs

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "prefs"
    src.mkdir()
    rows = [{"prompt": f"q{i}", "chosen": f"good {i}", "rejected": f"bad {i}", "margin": float(i)} for i in range(3)]
    (src / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = read_dataset_pairs(str(src), None, "train")
    assert got == read_jsonl_pairs(str(src / "train.jsonl")) and len(got) == 3
    assert got[2].margin == 2.0 and got[0].chosen[-1] == {"role": "assistant", "content": "good 0"}
    with pytest.raises(ValueError, match=r"data.dataset '.*missing' \(split 'train'\): could not load it"):
        read_dataset_pairs(str(tmp_path / "missing"), None, "train")


@pytest.mark.parametrize(
    "line, match",
    [
        (
            {"prompt": "p", "chosen": "x", "rejected": "x"},
            "chosen and rejected are identical: the pair carries no preference",
        ),
        # the same text after formatting: a string response is the assistant turn a message list states
        (
            {"prompt": "p", "chosen": "x", "rejected": [{"role": "assistant", "content": "x"}]},
            "chosen and rejected are identical",
        ),
        ({"prompt": "p", "chosen": "", "rejected": "y"}, "'chosen' is empty"),
        ({"prompt": "p", "chosen": "x", "rejected": "  "}, "'rejected' is empty"),
        (
            {"prompt": "p", "chosen": "x", "rejected": "y", "extra": 1},
            "unknown key 'extra'; allowed: prompt, chosen, rejected, margin",
        ),
    ],
)
def test_useless_pairs_are_errors_naming_the_file_and_line(tmp_path, line, match):
    from zoo.rm.data import read_jsonl_pairs

    ok = {"prompt": "p", "chosen": "a", "rejected": "b"}
    (tmp_path / "p.jsonl").write_text(json.dumps(ok) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(ValueError, match=r"p.jsonl:2: " + match):
        read_jsonl_pairs(tmp_path / "p.jsonl")


def test_the_keys_rm_pairs_writes_are_accepted(tmp_path):
    from zoo.rm.data import read_jsonl_pairs

    rec = {
        "prompt": [{"role": "user", "content": "1+1"}],
        "chosen": "2",
        "rejected": "3",
        "chosen_correct": True,
        "chosen_longer": False,
        "question": "1+1",
        "answer": "2",
        "margin": 0.5,
    }  # make_pairs' record + margin
    (tmp_path / "p.jsonl").write_text(json.dumps(rec) + "\n")
    assert read_jsonl_pairs(tmp_path / "p.jsonl")[0].margin == 0.5


def test_held_out_pairs_seen_in_training_are_counted_in_a_warning(tmp_path, caplog):
    from zoo.rm.data import load_pairs

    train = [{"prompt": "p", "chosen": f"c{i}", "rejected": f"r{i}"} for i in range(4)]
    held = [train[0], train[2], {"prompt": "p", "chosen": "new", "rejected": "other"}]  # 2 of 3 also trained on
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(p) + "\n" for p in train))
    (tmp_path / "e.jsonl").write_text("".join(json.dumps(p) + "\n" for p in held))
    with caplog.at_level("WARNING", logger="zoo.rm.data"):
        pairs, ev = load_pairs(PairData(path=str(tmp_path / "t.jsonl"), eval_path=str(tmp_path / "e.jsonl")), seed=0)
    assert (len(pairs), len(ev)) == (4, 3)
    assert (
        "2 of 3 held-out pairs also appear in the training pairs: the held-out accuracy is not held out" in caplog.text
    )
    caplog.clear()
    (tmp_path / "e.jsonl").write_text(json.dumps(held[2]) + "\n")  # disjoint: no warning
    with caplog.at_level("WARNING", logger="zoo.rm.data"):
        load_pairs(PairData(path=str(tmp_path / "t.jsonl"), eval_path=str(tmp_path / "e.jsonl")), seed=0)
    assert "held-out pairs also appear" not in caplog.text

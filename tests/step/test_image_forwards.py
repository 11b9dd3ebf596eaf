"""Images in prompts through the forwards (issue 32 §1) on the tiny Qwen2-VL (3-D M-RoPE, needs
mm_token_type_ids) and LLaVA built in code: a batch's log-probs equal its rows' one at a time, a row's
images never reach another row, the critic and the rollout carry them, text is unchanged."""

import pytest
import torch
from PIL import Image

from zoo.backends.generate.hf import generate_rollout
from zoo.core.batch import Batch
from zoo.models.critic import make_critic
from zoo.models.tiny_vlm import tiny_llava_and_processor, tiny_qwen2vl_and_processor
from zoo.step.forwards import critic_values
from zoo.step.logprobs import token_logprobs
from zoo.step.types import StepSettings

BUILDERS = {"qwen2vl": tiny_qwen2vl_and_processor, "llava": tiny_llava_and_processor}
PROMPTS = [
    [{"role": "user", "content": "What colour?"}],
    [{"role": "user", "content": "Count them, please."}],
    [{"role": "user", "content": "Hi"}],
]


def _images(colour=(0, 0, 255)):
    """Row 0: one 40 x 30 image; row 1: two (32 x 32 and 20 x 48: different patch counts in Qwen2-VL);
    row 2: one 24 x 40 image of `colour`."""
    return [
        [Image.new("RGB", (40, 30), (255, 0, 0))],
        [Image.new("RGB", (32, 32), (0, 200, 0)), Image.new("RGB", (20, 48), (90, 90, 90))],
        [Image.new("RGB", (24, 40), colour)],
    ]


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def vlm(request):
    model, proc = BUILDERS[request.param]()
    model.eval()
    return request.param, model, proc


def _rollout(model, proc, images, seed=0, G=2) -> Batch:
    torch.manual_seed(seed)
    return generate_rollout(
        model, proc.tokenizer, PROMPTS, group_size=G, max_new_tokens=5, images=images, processor=proc
    )


def _logp(model, b: Batch, **kw) -> torch.Tensor:
    with torch.no_grad():
        return token_logprobs(model, b.input_ids(), b.attention_mask(), b.completion_ids.shape[1], media=b.media, **kw)[
            0
        ]


def test_the_rollout_carries_each_groups_images_shared_not_copied(vlm):
    name, model, proc = vlm
    b = _rollout(model, proc, _images())
    assert b.size == 6 and len(b.media) == 6
    assert all(b.media[2 * p] is b.media[2 * p + 1] for p in range(3))  # the G rows of a group share one
    n_images = [m.items["image_grid_thw" if name == "qwen2vl" else "pixel_values"].shape[0] for m in b.media]
    assert n_images == [1, 1, 2, 2, 1, 1]
    image_id = proc.image_token_id
    assert not (b.completion_ids == image_id).any()  # placeholders are never sampled


def test_batch_log_probs_equal_the_rows_one_at_a_time(vlm):
    _, model, proc = vlm
    b = _rollout(model, proc, _images())
    batched = _logp(model, b)
    micro = _logp(model, b, micro_batch=4)
    one = torch.cat([_logp(model, b.select([i]).trimmed())[:, : b.completion_ids.shape[1]] for i in range(b.size)])
    m = b.loss_mask
    torch.testing.assert_close(batched[m], one[m], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(micro[m], batched[m], rtol=1e-5, atol=1e-6)
    # a permuted batch gives each row the same values: its images moved with it
    perm = torch.tensor([5, 2, 0, 4, 1, 3])
    torch.testing.assert_close(_logp(model, b.select(perm))[m[perm]], batched[perm][m[perm]], rtol=1e-5, atol=1e-6)


def test_a_rows_images_never_reach_another_row(vlm):
    _, model, proc = vlm
    b = _rollout(model, proc, _images())
    other = _rollout(model, proc, _images(colour=(255, 255, 0)))  # only row 2's image differs
    assert torch.equal(b.completion_ids[:4], other.completion_ids[:4])  # same seed: rows 0..3 drew the same
    swapped = Batch(**{**b.__dict__, "media": b.media[:4] + other.media[4:]})  # row 2's group: other image
    before, after = _logp(model, b), _logp(model, swapped)
    m = b.loss_mask
    torch.testing.assert_close(after[:4][m[:4]], before[:4][m[:4]], rtol=1e-6, atol=0)  # rows 0..3 unchanged
    assert not torch.allclose(after[4:][m[4:]], before[4:][m[4:]])  # the changed image changed its own rows


def test_the_critic_sees_the_images_and_batches_like_one_row_at_a_time(vlm):
    _, model, proc = vlm
    b = _rollout(model, proc, _images())
    yellow = _rollout(model, proc, _images(colour=(255, 255, 0))).media[4:]  # row 2's group, another image
    critic = make_critic(model, head_std=1.0).eval()
    s = StepSettings(1.0, 8, 5, 1, 1, "none", None)
    with torch.no_grad():
        batched = critic_values(critic, b, s)
        one = torch.cat([critic_values(critic, b.select([i]), s) for i in range(b.size)])
        other = critic_values(critic, Batch(**{**b.__dict__, "media": b.media[:4] + yellow}), s)
    torch.testing.assert_close(batched, one, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(other[:4], batched[:4], rtol=1e-6, atol=0)  # rows 0..3: their own images
    assert not torch.allclose(other[4:], batched[4:])  # the changed image changed its own rows' values


def test_a_text_batch_calls_the_model_as_before(tiny_model_dir):
    """Text (media None): position ids from the mask and the shared prompt, no image keys."""
    from zoo.models import load_policy

    model, tok = load_policy(str(tiny_model_dir))
    calls = []
    model.register_forward_pre_hook(lambda mod, args, kw: calls.append(set(kw)), with_kwargs=True)
    torch.manual_seed(0)
    b = generate_rollout(model, tok, [PROMPTS[0]], group_size=2, max_new_tokens=4)
    assert b.media is None
    calls.clear()
    with torch.no_grad():
        token_logprobs(model, b.input_ids(), b.attention_mask(), b.completion_ids.shape[1])
    assert calls and all("position_ids" in c and not c & {"pixel_values", "mm_token_type_ids"} for c in calls)
    assert any("cache" in c or "past_key_values" in c for c in calls)  # the group's prompt ran once

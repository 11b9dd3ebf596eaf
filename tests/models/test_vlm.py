"""Vision-language policies (zoo.models.vlm, zoo.models.tiny_vlm): the `tiny-vlm:` sources build a
checkpoint once, load through AutoModelForImageTextToText and the processor (no torchvision), and
the loaded model gives the built one's numbers."""

import pytest
import torch
from PIL import Image

from zoo.backends.generate.images import encode_image_prompts, open_image, with_image_parts
from zoo.core.media import media_inputs
from zoo.models import load_policy, resolve_model
from zoo.models.tiny_vlm import tiny_llava_and_processor, tiny_qwen2vl_and_processor
from zoo.models.vlm import is_image_text, load_processor

BUILT = {"qwen2vl": tiny_qwen2vl_and_processor, "llava": tiny_llava_and_processor}


@pytest.mark.parametrize("kind", sorted(BUILT))
def test_a_tiny_vlm_source_loads_as_an_image_text_model_with_its_processor(kind, tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path))
    src = resolve_model(f"tiny-vlm:{kind}")
    assert src.kind == "local" and src.path.startswith(str(tmp_path)) and src.content_hash.startswith("sha256:")
    assert resolve_model(f"tiny-vlm:{kind}").content_hash == src.content_hash  # built once, then read
    model, tok = load_policy(src)
    proc = load_processor(src.path)
    built, built_proc = BUILT[kind]()
    assert is_image_text(model.config) and type(model) is type(built)
    assert type(proc).__name__ == type(built_proc).__name__ and tok.padding_side == "left"
    prompts = [[{"role": "user", "content": "Colour?"}]]
    images = [[Image.new("RGB", (40, 24), (10, 200, 30))]]
    ids, mask, media = encode_image_prompts(proc, prompts, images)
    ids2, mask2, _ = encode_image_prompts(built_proc, prompts, images)
    assert torch.equal(ids, ids2)  # the saved processor tokenizes and expands placeholders as the built one
    kw = media_inputs(media, mask, ids.shape[1], "cpu")
    with torch.no_grad():
        a = model.eval()(input_ids=ids, attention_mask=mask, **kw).logits
        b = built.eval()(input_ids=ids, attention_mask=mask, **kw).logits
    torch.testing.assert_close(a, b)


def test_unknown_tiny_vlm_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown tiny VLM 'gpt'; known: tiny-vlm:qwen2vl, tiny-vlm:llava"):
        resolve_model("tiny-vlm:gpt", cache_dir=tmp_path)


def test_images_go_before_the_first_user_text_and_bytes_decode():
    import io

    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "How many?"}]
    out = with_image_parts(msgs, 2)
    assert out[0] == msgs[0] and out[1]["content"] == [
        {"type": "image"},
        {"type": "image"},
        {"type": "text", "text": "How many?"},
    ]
    assert msgs[1]["content"] == "How many?"  # the row's prompt is not edited
    placed = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"}]}]
    assert with_image_parts(placed, 1) == placed  # placeholders the prompt places itself stay
    buf = io.BytesIO()
    Image.new("L", (3, 2), 7).save(buf, format="PNG")
    img = open_image(buf.getvalue())
    assert img.mode == "RGB" and img.size == (3, 2) and img.getpixel((0, 0)) == (7, 7, 7)
    with pytest.raises(ValueError, match="PIL image or encoded bytes, got str"):
        open_image("cat.png")

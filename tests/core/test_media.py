"""zoo.core.media: per-row processor outputs, collated for the rows a forward runs (issue 32 §1)."""

import pytest
import torch

from zoo.core.batch import Batch, concat
from zoo.core.media import RowMedia, media_inputs, split_processor_output


def _row(patches: int, grid: list[int], types: list[int]) -> RowMedia:
    return RowMedia(
        items={"pixel_values": torch.full((patches, 2), float(patches)), "image_grid_thw": torch.tensor([grid])},
        tokens={"mm_token_type_ids": torch.tensor(types)},
    )


def test_items_concatenate_in_row_order_and_tokens_sit_on_the_real_prompt_tokens():
    a, b = _row(4, [1, 2, 2], [0, 1, 0]), _row(8, [1, 2, 4], [1, 1])
    mask = torch.tensor([[0, 1, 1, 1], [0, 0, 1, 1]])  # [2, P=4] left-padded
    out = media_inputs([a, b], mask, width=6, device="cpu")  # prompt 4 + completion 2
    assert out["pixel_values"].shape == (12, 2)
    assert out["pixel_values"][:4].eq(4).all() and out["pixel_values"][4:].eq(8).all()
    assert out["image_grid_thw"].tolist() == [[1, 2, 2], [1, 2, 4]]
    # row 0: its 3 real tokens are columns 1..3; row 1: columns 2..3; padding and completion 0
    assert out["mm_token_type_ids"].tolist() == [[0, 0, 1, 0, 0, 0], [0, 0, 1, 1, 0, 0]]
    # permuting the rows permutes their images with them
    swapped = media_inputs([b, a], mask.flip(0), width=6, device="cpu")
    assert swapped["image_grid_thw"].tolist() == [[1, 2, 4], [1, 2, 2]]
    assert swapped["pixel_values"][:8].eq(8).all()


def test_a_row_without_images_adds_nothing_and_a_field_no_row_has_is_left_out():
    text_only = RowMedia(tokens={"mm_token_type_ids": torch.tensor([0, 0])})
    out = media_inputs([text_only], torch.tensor([[1, 1]]), width=3, device="cpu")
    assert set(out) == {"mm_token_type_ids"} and out["mm_token_type_ids"].tolist() == [[0, 0, 0]]


def test_misaligned_token_fields_and_row_counts_are_refused():
    with pytest.raises(ValueError, match="covers 3 tokens, the prompt has 2"):
        media_inputs([_row(4, [1, 2, 2], [0, 1, 0])], torch.tensor([[0, 1, 1]]), width=4, device="cpu")
    with pytest.raises(ValueError, match="1 rows of media for 2 rows"):
        media_inputs([RowMedia()], torch.ones(2, 2), width=3, device="cpu")


def test_split_processor_output_sorts_fields_by_shape():
    enc = {
        "input_ids": torch.ones(1, 5, dtype=torch.long),
        "attention_mask": torch.ones(1, 5, dtype=torch.long),
        "mm_token_type_ids": torch.tensor([[0, 1, 1, 0, 0]]),
        "pixel_values": torch.zeros(16, 3),
        "image_grid_thw": torch.tensor([[1, 4, 4]]),
    }
    m = split_processor_output(enc, 5)
    assert set(m.tokens) == {"mm_token_type_ids"} and m.tokens["mm_token_type_ids"].tolist() == [0, 1, 1, 0, 0]
    assert set(m.items) == {"pixel_values", "image_grid_thw"}


def _batch(n: int, media):
    return Batch(
        prompt_ids=torch.arange(n)[:, None].repeat(1, 2),
        prompt_mask=torch.ones(n, 2, dtype=torch.bool),
        completion_ids=torch.zeros(n, 1, dtype=torch.long),
        loss_mask=torch.ones(n, 1, dtype=torch.bool),
        group_ids=torch.arange(n),
        truncated=torch.zeros(n, dtype=torch.bool),
        lengths=torch.ones(n, dtype=torch.long),
        media=media,
    )


def test_batch_select_and_concat_carry_each_rows_media():
    rows = [_row(k + 1, [1, 1, k + 1], [1, 1]) for k in range(3)]
    b = _batch(3, rows)
    assert [m is rows[i] for i, m in zip([2, 0], b.select([2, 0]).media)] == [True, True]
    assert b.select(torch.tensor([False, True, False])).media == [rows[1]]
    both = concat([b.select([0]), b.select([2, 1])], pad_id=0)
    assert both.media == [rows[0], rows[2], rows[1]]
    assert b.trimmed().media is rows and b.to("cpu").media is rows
    assert _batch(2, None).select([1]).media is None  # text: stays None


def test_image_digest_tells_pictures_apart_and_eval_ids_of_text_rows_are_unchanged():
    from PIL import Image

    from zoo.core.media import image_digest
    from zoo.run.eval_record import prompt_id

    red, blue = Image.new("RGB", (4, 4), (255, 0, 0)), Image.new("RGB", (4, 4), (0, 0, 255))
    assert image_digest(red) == image_digest(red.copy()) != image_digest(blue)
    assert image_digest(b"\x89PNG") == image_digest({"bytes": b"\x89PNG"})
    row = {"prompt": [{"role": "user", "content": "How many?"}], "answer": "2"}
    assert prompt_id(row) == "22486c5f6ff3"  # the id a text row had before images existed (main at b0f5b41)
    assert prompt_id({**row, "images": [red]}) != prompt_id({**row, "images": [blue]})

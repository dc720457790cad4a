"""Lesson 11's model, corpus and broken runs: each broken run gives its named finding, each fixed run `healthy` only."""

import functools

import pytest
import torch

from ampcourse import own_model as om
from ampcourse.recorder import AmpRecorder


@pytest.fixture(scope="module")
def base():
    return om.pretrain(om.TINY, om.TINY_SIZE).model


def test_the_corpus_is_the_same_text_twice_and_in_the_alphabet():
    first, second = om.corpus(), om.corpus()
    assert first.sha256 == second.sha256
    assert torch.equal(first.ids, second.ids)
    assert set(first.text) <= set(om.ALPHABET)
    assert first.files[0].startswith("00_") and all(name[:2] < "11" for name in first.files)


def test_the_corpus_round_trips_through_encode_and_decode():
    text = om.corpus().text[:500]
    assert om.decode(om.encode(text)) == text


def test_clean_folds_arrows_and_accents_into_ascii():
    assert om.clean("bf16 → fp16 · “naïve”") == 'bf16 -> fp16 - "naive"'


def test_encode_refuses_a_character_outside_the_alphabet():
    with pytest.raises(ValueError, match="clean"):
        om.encode("π")


def test_batches_are_seeded_and_targets_are_the_next_characters():
    ids = om.corpus().ids
    x1, y1 = next(om.batches(ids, batch=3, block=8, steps=1, seed=5))
    x2, _ = next(om.batches(ids, batch=3, block=8, steps=1, seed=5))
    assert torch.equal(x1, x2)
    assert torch.equal(x1[:, 1:], y1[:, :-1])


def test_the_lesson_model_has_a_few_hundred_thousand_parameters():
    count = sum(p.numel() for p in om.TinyGPT(om.LESSON).parameters())
    assert 150_000 <= count <= 500_000


def test_the_attention_module_has_no_parameters_and_no_children():
    block = om.TinyGPT(om.TINY).blocks[0]
    assert list(block.attn.children()) == [] and list(block.attn.parameters()) == []


@pytest.mark.parametrize("attention", ["sdpa", "scale_after"])
def test_every_attention_computes_what_the_manual_one_computes_in_fp32(attention):
    model = om.TinyGPT(om.TINY)
    ids = torch.randint(0, len(om.ALPHABET), (2, om.TINY.block), generator=torch.Generator().manual_seed(0))
    reference = model(ids)
    assert torch.allclose(model.set_attention(attention)(ids), reference, atol=1e-5)


def test_the_mask_keeps_the_future_out():
    model = om.TinyGPT(om.TINY)
    ids = torch.randint(0, len(om.ALPHABET), (1, om.TINY.block), generator=torch.Generator().manual_seed(0))
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] + 1) % len(om.ALPHABET)
    assert torch.allclose(model(ids)[0, :-1], model(changed)[0, :-1])


def test_a_minus_1e9_mask_raises_in_float16():
    model = om.TinyGPT(om.GPTConfig(block=8, width=32, heads=2, layers=1, mask_value=-1e9))
    with pytest.raises(RuntimeError, match="overflow"), torch.autocast("cpu", dtype=torch.float16):
        model(torch.zeros(1, 8, dtype=torch.int64))


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="attention"):
        om.GPTConfig(attention="flash")
    with pytest.raises(ValueError, match="multiple of heads"):
        om.GPTConfig(width=30, heads=4)


def test_grown_weights_reach_the_asked_peak(base):
    model = om.TinyGPT(om.TINY)
    model.load_state_dict(base.state_dict())
    ids = next(om.batches(om.corpus().ids, batch=2, block=om.TINY.block, steps=1))[0]
    om.grow_attention_logits(model, ids, factor=4.0)
    om.grow_mlp_output(model, ids, factor=4.0)
    assert om.largest_score(model, ids) == pytest.approx(4 * 65504, rel=1e-3)
    assert om.peak_output(model, ids, "blocks.1.mlp.out") == pytest.approx(4 * 65504, rel=1e-3)


RUNS = {"attention": om.run_attention, "unsafe_constant": om.run_unsafe_constant,
        "bf16_checkpoint": om.run_bf16_checkpoint, "scheduler": om.run_scheduler}


@pytest.fixture(scope="module")
def runs(base):
    """Each run (broken or fixed) trained once for the whole module: the tests below only read its findings."""
    done = {}

    def run(name, fixed=False):
        if (name, fixed) not in done:
            done[name, fixed] = RUNS[name](AmpRecorder, base, fixed=fixed, size=om.TINY_SIZE)
        return done[name, fixed]
    return run


@pytest.mark.parametrize("name", sorted(RUNS))
def test_each_broken_run_gives_its_named_finding_where_the_table_says(name, runs):
    row = om.BROKEN_RUNS[name]
    run = runs(name)
    found = [f for f in run.findings() if f.kind == row.kind]
    assert found, run.findings()
    if row.where is not None:
        assert found[0].where == row.where


@pytest.mark.parametrize("name", sorted(RUNS))
def test_each_fixed_run_is_healthy_only(name, runs):
    run = runs(name, fixed=True)
    assert run.kinds() == ["healthy"], run.findings()


def test_the_bf16_checkpoint_is_healthy_in_bf16_with_the_same_weights(base):
    run = om.run_bf16_checkpoint(AmpRecorder, base, size=om.TINY_SIZE, dtype=torch.bfloat16)
    assert run.kinds() == ["healthy"]


def test_sampling_every_5_steps_finds_the_same_kinds(base):
    record = functools.partial(AmpRecorder, every=5)
    assert "overflow" in om.run_attention(record, base, size=om.TINY_SIZE).kinds()
    assert "scale_collapse" in om.run_unsafe_constant(record, base, size=om.TINY_SIZE).kinds()


def test_the_skipped_scheduler_steps_are_counted_by_the_fixed_loop():
    model = om.TinyGPT(om.TINY)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**40)  # the first steps overflow
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    data = list(om.batches(om.corpus().ids, batch=2, block=om.TINY.block, steps=3))
    run = om.train_steps(model, optimizer, data, dtype=torch.float16, scaler=scaler, scheduler=scheduler)
    applied = sum(1 for before, after in zip([2.0**40] + run.scales[:-1], run.scales, strict=True) if after >= before)
    assert scheduler.last_epoch == applied


def test_what_to_do_has_one_line_for_each_kind_of_the_recorder():
    from ampcourse.recorder import KINDS

    assert tuple(om.WHAT_TO_DO) == KINDS


def test_at_the_attention_growth_only_sdpa_stays_finite(base):
    model = om.TinyGPT(om.TINY)
    model.load_state_dict(base.state_dict())
    ids = next(om.batches(om.corpus().ids, batch=2, block=om.TINY.block, steps=1))[0]
    om.grow_attention_logits(model, ids)
    assert om.largest_score(model, ids) == pytest.approx(om.ATTENTION_GROWTH * 65504, rel=1e-3)
    finite = {}
    for attention in om.ATTENTIONS:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
            finite[attention] = bool(torch.isfinite(model.set_attention(attention)(ids)).all())
    assert finite == {"manual": False, "scale_after": False, "sdpa": True}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_reports_agrees_with_the_table(name, runs):
    assert om.reports(runs(name), name)
    assert not om.reports(runs(name, fixed=True), name)

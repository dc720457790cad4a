"""Tests for ampcourse.autocast_lists: autocast's op lists read from the installed torch (2.13)."""

import collections
import re
from pathlib import Path

import pytest
import torch

from ampcourse.autocast_lists import (
    DOCUMENTED_LISTS,
    EXAMPLES,
    as_table,
    autocast_device_types,
    check_documented,
    compare_lists,
    demo_three_behaviours,
    differences,
    documented_ops,
    observe,
    probe,
    registered_ops,
    registrations,
)

LOW, FP32, PROMOTE = "lower_precision_fp", "fp32", "promote"


def _by_policy(device_type):
    groups = collections.defaultdict(set)
    for op, policy in registered_ops(device_type).items():
        groups[policy].add(op)
    return groups


def test_cpu_registrations(figures):
    ops = registered_ops("cpu")
    assert len(ops) == len(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCPU"))
    for op in ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul", "aten::conv2d"):
        assert ops[op] == LOW, op
    for op in ("aten::mse_loss", "aten::nll_loss", "aten::cross_entropy_loss", "aten::l1_loss", "aten::kl_div"):
        assert ops[op] == FP32, op
    groups = _by_policy("cpu")
    assert groups[PROMOTE] == {"aten::cat", "aten::stack", "aten::index_copy"}
    assert set(groups) == {LOW, FP32, PROMOTE}  # every registration probed to one of the three
    # not on any CPU list: they run in whatever dtype they get
    for op in ("aten::layer_norm", "aten::softmax.int", "aten::log_softmax.int", "aten::sum", "aten::relu"):
        assert op not in ops, op
    for device_type in autocast_device_types():
        counts = collections.Counter(registered_ops(device_type).values())
        figures(
            f"Autocast{device_type.upper()}: {sum(counts.values())} registrations probed: "
            + ", ".join(f"{n} {policy}" for policy, n in counts.most_common())
        )


def test_cuda_lists_are_in_the_cpu_build_and_differ_from_cpu():
    cuda, cpu = registered_ops("cuda"), registered_ops("cpu")
    assert len(cuda) > 100  # autocast_mode.cpp registers every device's kernels, even in a CPU-only build
    for op in ("aten::layer_norm", "aten::native_layer_norm", "aten::group_norm", "aten::softmax.int", "aten::sum"):
        assert cuda[op] == FP32 and op not in cpu, op
    for op in ("aten::addcmul", "aten::dot", "aten::index_put"):
        assert cuda[op] == PROMOTE and op not in cpu, op
    assert cpu["aten::cat"] == PROMOTE and "aten::cat" not in cuda  # cat promotes by itself on CUDA
    assert (cpu["aten::binary_cross_entropy"], cuda["aten::binary_cross_entropy"]) == (FP32, "banned")
    assert (cpu["aten::grid_sampler"], cuda["aten::grid_sampler"]) == (FP32, PROMOTE)
    assert cuda["aten::bmm"] == cpu["aten::bmm"] == LOW
    assert probe("aten::softmax.int", "cuda").evidence == "calls aten._softmax.default with half_to_float=True"
    assert probe("aten::sum", "cuda").evidence == "calls aten.sum.default with dtype=float32"
    assert probe("aten::layer_norm", "cpu").policy == "fallthrough"


def _header_lists():
    """The CUDA lists as the installed header ``ATen/autocast_mode.h`` spells them (AT_FORALL_* macros)."""
    header = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    if not header.exists():
        pytest.skip("this torch ships no C++ headers")
    text = header.read_text()
    lists = {}
    for macro in ("LOWER_PRECISION_FP", "FP32", "FP32_SET_OPT_DTYPE", "PROMOTE"):
        body = re.search(rf"#define AT_FORALL_{macro}\(_\)((?:.*\\\n)*.*\n)", text).group(1)
        lists[macro] = {
            f"aten::{name}" + (f".{overload}" if overload else "")
            for name, overload in re.findall(r"_\((\w+)(?:,\s*(\w+))?\)", body)
        }
    return lists


def test_cuda_probe_matches_the_installed_header():
    header = _header_lists()
    groups = _by_policy("cuda")
    # autocast_mode.cpp adds two cuDNN convolutions to the shared low list, and two overloads of norm
    # (policy fp32_append_dtype) and the banned binary_cross_entropy outside the macros.
    cudnn = {"aten::cudnn_convolution", "aten::cudnn_convolution_transpose"}
    norms = {"aten::norm.Scalar", "aten::norm.ScalarOpt_dim"}
    assert groups[LOW] == header["LOWER_PRECISION_FP"] | cudnn
    assert groups[FP32] == header["FP32"] | header["FP32_SET_OPT_DTYPE"] | norms
    assert groups[PROMOTE] == header["PROMOTE"]
    assert groups["banned"] == {"aten::binary_cross_entropy"}
    assert "other" not in groups


def test_compare_lists_and_differences(figures):
    rows = compare_lists()
    assert [r.op for r in rows] == sorted(r.op for r in rows)
    assert {r.op for r in rows} == set(registered_ops("cpu")) | set(registered_ops("cuda"))
    by_op = {r.op: r for r in rows}
    assert by_op["aten::mm"].policies == {"cpu": LOW, "cuda": LOW} and not by_op["aten::mm"].differs
    assert by_op["aten::layer_norm"].policies == {"cpu": "fallthrough", "cuda": FP32}
    assert by_op["aten::layer_norm"].only_on == ("cuda",)
    diff = differences()
    assert all(r.differs for r in diff) and len(diff) == sum(r.differs for r in rows)
    diff_ops = {r.op for r in diff}
    assert {"aten::layer_norm", "aten::softmax.int", "aten::log_softmax.int", "aten::cat"} <= diff_ops
    assert not {"aten::mm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::mse_loss"} & diff_ops
    both = [r for r in diff if not r.only_on]
    assert {r.op for r in both} == {"aten::binary_cross_entropy", "aten::grid_sampler"}
    cpu_only = sum(r.only_on == ("cpu",) for r in diff)
    cuda_only = sum(r.only_on == ("cuda",) for r in diff)
    figures(
        f"CPU vs CUDA lists: {len(rows)} ops on either, {len(rows) - len(diff)} with the same policy, "
        f"{cpu_only} on CPU's only, {cuda_only} on CUDA's only, {len(both)} on both with another policy "
        f"({', '.join(r.op for r in both)})"
    )
    assert "layer_norm" in str(as_table(diff))
    mps = {r.op: r for r in compare_lists(("cpu", "cuda", "mps"))}
    assert mps["aten::batch_norm"].policies == {"cpu": "fallthrough", "cuda": "fallthrough", "mps": FP32}


def test_demo_three_behaviours_on_cpu():
    low, fp32, promote = demo_three_behaviours()
    assert (low.op, low.policy, low.inputs) == ("aten::linear", LOW, "fp32")
    assert low.output_dtype == torch.bfloat16
    assert low.casts and all(c.startswith("f32->bf16") for c in low.casts)
    assert (fp32.op, fp32.policy) == ("aten::mse_loss", FP32)
    assert set(fp32.input_dtypes) == {torch.bfloat16} and fp32.output_dtype == torch.float32
    assert fp32.casts == ("bf16->f32 [2,3]", "bf16->f32 [2,3]")
    assert (promote.op, promote.policy) == ("aten::cat", PROMOTE)
    assert promote.input_dtypes == (torch.float32, torch.bfloat16)
    assert promote.output_dtype == torch.float32  # the widest input dtype
    assert promote.casts == ("bf16->f32 [2,3]",)
    assert not any(r.simulated or r.error for r in (low, fp32, promote))
    assert "aten::linear" in str(as_table([low, fp32, promote]))


def test_demo_three_behaviours_fp16_and_simulated_cuda():
    low, fp32, promote = demo_three_behaviours("cpu", torch.float16)
    assert (low.output_dtype, fp32.output_dtype, promote.output_dtype) == (torch.float16, torch.float32, torch.float32)
    rows = demo_three_behaviours("cuda", torch.float16)
    assert [r.op for r in rows] == ["aten::linear", "aten::mse_loss", "aten::addcmul"]  # cat is on no CUDA list
    assert [r.output_dtype for r in rows] == [torch.float16, torch.float32, torch.float32]
    assert all(r.simulated == (not torch.cuda.is_available()) for r in rows)
    assert rows[2].casts == ("f16->f32 [2,3]", "f16->f32 [2,3]")


def test_observed_cpu_behaviour_agrees_with_the_registrations(figures):
    cpu = registered_ops("cpu")
    registered, composite = [], []
    for op in EXAMPLES:
        seen = observe(op, "cpu")
        assert not any(run.simulated for run in seen.runs)
        if op in cpu:
            assert seen.agrees, (op, seen.registered, seen.observed, seen.runs)
            registered.append(op)
        elif seen.observed != "fallthrough":
            composite.append(f"{op.removeprefix('aten::')}->{seen.observed}")
    # unregistered composites reach registered ops: einsum/tensordot/multi_dot call bmm/mm
    assert sorted(composite) == [
        "einsum->lower_precision_fp",
        "linalg_multi_dot->lower_precision_fp",
        "tensordot->lower_precision_fp",
    ]
    assert observe("aten::layer_norm").observed == "fallthrough"
    dot = observe("aten::dot")  # not promoted on CPU: mixed dtypes raise
    assert dot.runs[2].output_dtype is None and "same dtype" in dot.runs[2].error
    figures(
        f"real CPU calls: {len(registered)} registered ops run under autocast, all behave as probed; "
        f"{len(EXAMPLES) - len(registered)} unregistered ones ran as given, except {', '.join(sorted(composite))}"
    )


def test_simulated_cuda_shows_where_cuda_differs():
    norm = observe("aten::layer_norm", "cuda")
    assert (norm.registered, norm.observed) == (FP32, FP32)
    assert norm.runs[1].output_dtype == torch.float32 and norm.runs[1].casts
    # cross_entropy: not registered on CUDA; its nll_loss is fp32, but it hands log_softmax an explicit
    # dtype, so log_softmax runs in low precision and only its output is cast up.
    ce = observe("aten::cross_entropy_loss", "cuda")
    assert (ce.registered, ce.observed) == ("fallthrough", FP32)
    assert ce.runs[1].casts == ("bf16->f32 [2,3]",)
    assert observe("aten::grid_sampler", "cuda").observed in ("unknown", PROMOTE)  # cuDNN check needs a GPU


def test_documented_lists_against_the_registrations(figures):
    for device_type in ("cpu", "cuda"):
        checks = check_documented(device_type)
        documented = documented_ops(device_type)
        assert [c.name for c in checks if c.status != "undocumented"] == list(documented)
        status = collections.Counter(c.status for c in checks)
        undocumented = sorted(c.name for c in checks if c.status == "undocumented")
        mismatched = sorted(f"{c.name} ({c.status})" for c in checks if c.status in ("differs", "not registered"))
        lists = DOCUMENTED_LISTS[device_type]
        figures(
            f"documented {device_type.upper()} lists: {len(lists[LOW])} low, {len(lists[FP32])} fp32, "
            f"{len(lists[PROMOTE])} promote; {status['agrees']} agree with the probe, "
            f"{len(mismatched)} do not{': ' + ', '.join(mismatched) if mismatched else ''}; "
            f"{len(undocumented)} registered but undocumented: {', '.join(undocumented)}"
        )
    by_name = {c.name: c for c in check_documented("cuda")}
    for name in ("layer_norm", "softmax", "mse_loss", "addcmul", "__matmul__", "GRUCell"):
        assert by_name[name].status == "agrees", by_name[name]
    by_name = {c.name: c for c in check_documented("cpu")}
    for name in ("mm", "conv2d", "mse_loss", "cross_entropy_loss", "cat"):
        assert by_name[name].status == "agrees", by_name[name]
    assert "layer_norm" not in documented_ops("cpu")


def test_probing_leaves_autocast_state_alone():
    before = [(torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")]
    with torch.autocast("cpu", dtype=torch.float16):
        assert probe("aten::mm", "cpu", torch.bfloat16).policy == LOW
        assert probe("aten::layer_norm", "cuda").policy == FP32
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.float16
    assert before == [(torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")]
    assert registrations("cpu") is registrations("cpu")  # cached


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown device type"):
        registered_ops("tpu")
    with pytest.raises(ValueError, match="op: no example call for 'aten::nonexistent'"):
        observe("aten::nonexistent")
    with pytest.raises(ValueError, match="docs have lists"):
        documented_ops("mps")


def _classifier_head(device):
    logits = torch.randn(2, 3, device=device) @ torch.randn(3, 3, device=device)
    return {
        "logits": logits,
        "softmax": torch.nn.functional.softmax(logits, -1),
        "loss": torch.nn.functional.cross_entropy(logits, torch.tensor([0, 2], device=device)),
    }


def test_device_trace_simulates_cuda_autocast_on_a_cpu_machine():
    from ampcourse.autocast_lists import device_trace

    t = device_trace(_classifier_head, "cuda", torch.float16)
    out = {name: value.dtype for name, value in t.result.items()}
    assert out == {"logits": torch.float16, "softmax": torch.float32, "loss": torch.float32}
    ops = {row.op: row for row in t.rows}
    # cross_entropy is not on CUDA's list: its log-softmax keeps the fp16 input, only nll_loss upcasts
    assert ops["aten._log_softmax.default"].output_dtypes == (torch.float16,)
    assert ops["aten.nll_loss_forward.default"].input_dtypes[0] == torch.float32
    assert not any(row.op.startswith("prim.") for row in t.rows)


def test_device_trace_runs_the_cpu_for_real():
    from ampcourse.autocast_lists import device_trace

    t = device_trace(_classifier_head, "cpu", torch.bfloat16)
    out = {name: value.dtype for name, value in t.result.items()}
    assert out == {"logits": torch.bfloat16, "softmax": torch.bfloat16, "loss": torch.float32}
    assert not isinstance(t.result["loss"], torch._subclasses.fake_tensor.FakeTensor)


def test_device_trace_names_bad_arguments():
    from ampcourse.autocast_lists import device_trace

    with pytest.raises(TypeError, match="fn must be callable"):
        device_trace(3)
    with pytest.raises(ValueError, match="dtype must be torch.float16 or torch.bfloat16"):
        device_trace(_classifier_head, "cpu", torch.float32)
    with pytest.raises(ValueError):
        device_trace(_classifier_head, "tpu")


def test_the_fp32_rule_names_what_the_review_found():
    # B8: on CUDA sum, the norms, layer/group/rms_norm are FP32; mean, var, std, max, batch_norm are on no list.
    from ampcourse.autocast_lists import fp32_rule, fp32_split, loss_exceptions, policy_of

    on, off = fp32_split("cuda", ("sum", "prod", "cumsum", "logsumexp", "vector_norm", "layer_norm", "group_norm",
                                  "rms_norm", "mean", "var", "std", "max", "batch_norm"))
    assert on == ("sum", "prod", "cumsum", "logsumexp", "vector_norm", "layer_norm", "group_norm", "rms_norm")
    assert off == ("mean", "var", "std", "max", "batch_norm")
    assert policy_of("batch_norm", "mps") == "fp32" and policy_of("linalg_inv", "cpu") == "fp32"
    assert "mean" in fp32_rule("cuda").split("on no CUDA list")[1]
    assert "sum" in fp32_rule("cuda").split("on no CUDA list")[0]
    # B13: the losses that are not FP32 everywhere
    assert loss_exceptions() == {
        "binary_cross_entropy": {"cpu": "fp32", "cuda": "banned", "mps": "fallthrough"},
        "ctc_loss": {"cpu": "fp32", "cuda": "fallthrough", "mps": "fallthrough"}}
    with pytest.raises(ValueError, match="name must be one of"):
        policy_of("summ", "cuda")
    with pytest.raises(TypeError, match="name must be a str"):
        policy_of(3, "cuda")


def test_lesson03_prose_agrees_with_the_rule():
    # The recap and the CUDA section name examples of the rule; each must be what fp32_split says.
    import json

    from ampcourse.autocast_lists import fp32_split
    from ampcourse.course import ROOT

    cells = json.loads((ROOT / "notebooks" / "03_autocast.ipynb").read_text(encoding="utf-8"))["cells"]
    prose = " ".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert "not `mean`, `var`, `max`,\n  `batch_norm`" in prose
    on, off = fp32_split("cuda", ("sum", "exp", "layer_norm", "mean", "var", "max", "batch_norm"))
    assert on == ("sum", "exp", "layer_norm") and off == ("mean", "var", "max", "batch_norm")
    assert "reductions come back in FP32" not in prose and "losses everywhere" not in prose

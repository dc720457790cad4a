"""A check cell runs in torch's default global state, whatever earlier cells left behind, and gives it back."""

import types

import torch

from ampcourse.checks import state


def _leave_a_mess():
    torch.set_default_dtype(torch.float16)
    torch.set_grad_enabled(False)
    torch.set_autocast_enabled("cpu", True)
    torch.set_autocast_dtype("cpu", torch.float16)
    torch.set_default_device("meta")


def _defaults():
    return (torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled()
            and not torch.is_autocast_enabled("cpu") and torch.empty(1).device.type == "cpu")


def test_clean_torch_state_sets_the_defaults_and_restores_the_callers_state():
    before = state.snapshot()
    try:
        _leave_a_mess()
        messy = state.snapshot()
        with state.clean_torch_state():
            assert _defaults()
        assert state.snapshot() == messy
    finally:
        state.restore(before)
    assert _defaults()


def test_the_cell_hook_guards_check_cells_only():
    guard = state._CellGuard()
    before = state.snapshot()
    try:
        _leave_a_mess()
        guard.pre_run_cell(types.SimpleNamespace(raw_cell="x = 1"))
        assert not _defaults()  # an ordinary cell is left alone
        guard.post_run_cell(None)
        guard.pre_run_cell(types.SimpleNamespace(raw_cell="from ampcourse.checks import lesson05 as check\n"
                                                           "check.train_epoch(train_epoch)"))
        assert _defaults()
        guard.post_run_cell(None)
        assert torch.get_default_dtype() == torch.float16 and not torch.is_grad_enabled()
    finally:
        state.restore(before)
    assert _defaults()

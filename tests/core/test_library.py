import dataclasses
import json

import pytest

from dspy_adaptive import INACTIVE, Library, Slot


def test_new_library_is_all_inactive():
    lib = Library.empty(4)
    assert lib.max_specialists == 4
    assert lib.active_ids() == ()
    assert all(s.description == INACTIVE and not s.active for s in lib.slots)


def test_json_round_trip_is_lossless_and_hash_stable():
    lib = Library.empty(3).with_slot(2, Slot().activated("math word problems", "class A(dspy.Module): ...", "deep"))
    again = Library.from_json(lib.to_json())
    assert again == lib
    assert again.content_hash == lib.content_hash
    assert lib.content_hash != Library.empty(3).content_hash
    # stable across processes: the hash is of canonical JSON, not Python's randomized hash()
    assert len(lib.content_hash) == 64 and int(lib.content_hash, 16) >= 0


def test_frozen_and_hashable():
    lib = Library.empty(2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        lib.router = "x"  # type: ignore[misc]
    assert {lib: 1}[Library.empty(2)] == 1


def test_deactivate_keeps_program_text():
    s = Slot().activated("retrieval", "SRC", "fast").deactivated()
    assert not s.active and s.description == INACTIVE and s.program_source == "SRC"


def test_invalid_slot_data_is_refused():
    with pytest.raises(ValueError):
        Slot(profile="medium")
    with pytest.raises(ValueError):
        Slot(description="something", active=False)
    with pytest.raises(ValueError):
        Library.empty(0)
    with pytest.raises(IndexError):
        Library.empty(2).slot(0)
    with pytest.raises(ValueError):
        Library.from_dict({"router": "r", "slots": [], "extra": 1})
    with pytest.raises(ValueError):
        Slot.from_dict(json.loads('{"description": "INACTIVE", "program_source": "", "active": false, '
                                  '"profile": "fast", "bogus": 1}'))

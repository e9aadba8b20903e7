"""Every float model in ../shared/models, compiled and linked into a C program built with
-Wall -Werror, reproduces test_data_set_0 within the project's tolerance, through both the
static and the dynamic header API. Each model is compiled for every x86 vector level the host
executes (tests/vector_levels.py: SSE2 and AVX2 everywhere, AVX-512 where the host has it),
so the narrower kernels are checked on every machine; the dynamic API on the host's own CPU
(what model-compiler builds by default)."""
import pytest

from util import FLOAT_MODELS, assert_close_to_reference, is_tflite_reference, model_path, \
    reference_data
import glowpy
from glowpy.runtime import Bundle
from vector_levels import HOST, RUNNABLE

BUILDS = [pytest.param(lv, "static", id=f"{lv}-static") for lv in RUNNABLE] + \
    [pytest.param(HOST, "dynamic", id="host-dynamic")]


@pytest.mark.parametrize("level, api", BUILDS)
@pytest.mark.parametrize("name", FLOAT_MODELS)
def test_model_matches_reference(name, level, api, tmp_path):
    info = glowpy.compile(model_path(name), str(tmp_path), bundle_api=api, **level.options)
    inputs, outputs = reference_data(name)
    assert len(inputs) == len(info.inputs) and len(outputs) == len(info.outputs)
    got = Bundle(str(tmp_path), info.name).run({p["name"]: x for p, x in zip(info.inputs, inputs)})
    for p, ref in zip(info.outputs, outputs):
        assert_close_to_reference(got[p["name"]], ref, is_tflite_reference(name), f"{name}:{p['name']}")
